"""Connecting ``./amacs`` to a server it did not start, in a real terminal.

A home may be served by ``python -m amacs_server --headless``; ``./amacs`` on
that home opens the shell connected to that server, as M-x amacs-shell does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_anthropic import FakeAnthropic, Reply, agent_json
from tests.tmux.terminal import ROOT, TEST_KEY

pytestmark = pytest.mark.tmux


@pytest.fixture
def headless(fake: FakeAnthropic, tmp_path: Path) -> Iterator[tuple[Path, int, int]]:
    """A headless server serving a home of its own: (home, port, pid)."""
    home = tmp_path / "served-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMACS_", "ANTHROPIC_"))}
    env.update(AMACS_HOME=str(home), ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY=TEST_KEY)
    server = subprocess.Popen([sys.executable, "-m", "amacs_server", "--headless"], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    port = int(server.stdout.readline())
    try:
        yield home, port, server.pid
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_amacs_on_a_home_a_headless_server_serves_opens_the_shell_connected_to_it(terminal, fake, headless):
    home, port, pid = headless
    term = terminal(AMACS_HOME=str(home))
    term.wait_for(f"Connected to the headless AMACS server on port {port} (pid {pid}).", timeout=10)
    assert "Cannot open load file" not in term.screen(), term.screen()
    assert "*amacs-shell*" in term.mode_line()
    fake.script(Reply(agent_json("Hello from the headless server.")))
    term.type("hello")
    term.press("Enter")
    term.wait_for("Hello from the headless server.")
    # Emacs started no server of its own: the headless one serves this shell.
    assert term.elisp("(and (amacs-server-process) t)") == "nil"
