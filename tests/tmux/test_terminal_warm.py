"""The warm server in a real terminal: ./amacs's server forked from it, the first answer at once.

Each test gives the warm server a folder of its own (AMACS_WARM_DIR) and stops it at the end;
the other terminal tests start every server afresh (AMACS_WARM=0, terminal.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fake_anthropic import FakeAnthropic, Reply, agent_json
from tests.tmux.terminal import ROOT, Terminal

pytestmark = pytest.mark.tmux


@pytest.fixture
def warm_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="amw-"))  # short: a socket's path is at most ~108 bytes
    yield directory
    for lock in directory.glob("*.lock"):
        pid = lock.read_text().strip()
        if pid.isdigit() and "amacs_server.warm" in _cmdline(int(pid)):
            os.kill(int(pid), signal.SIGTERM)
    shutil.rmtree(directory, ignore_errors=True)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _warm_server(warm_dir: Path) -> int:
    """The pid of the warm server the first start left in WARM_DIR, once it listens."""
    deadline = time.monotonic() + 120
    while not list(warm_dir.glob("*.sock")):
        assert time.monotonic() < deadline, "the first start left no warm server"
        time.sleep(0.1)
    return int(next(warm_dir.glob("*.lock")).read_text())


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()[1])


def _started(pid: int) -> int:
    """When process PID started, in clock ticks since boot."""
    return int(Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()[19])


def _child(pid: int, command: str) -> int:
    """The child of process PID whose command line holds COMMAND."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return next(int(child) for child in children if command in _cmdline(int(child)))


def test_the_second_launch_is_served_by_a_warm_fork_and_answers(
        terminal: Callable[..., Terminal], fake: FakeAnthropic, warm_dir: Path) -> None:
    """A person starts ./amacs, quits, starts it again and asks at once: the second server is a fork
    of the warm server the first start left running (no SDK import before the first request);
    with AMACS_EARLY_START=1, asked for by ./amacs as it started Emacs: it is older than the
    launcher Emacs started."""
    env = {"AMACS_WARM": "1", "AMACS_WARM_DIR": str(warm_dir), "AMACS_WARM_DELAY": "0"}
    first = terminal(**env)
    warm = _warm_server(warm_dir)
    first_server = json.loads((first.amacs_home / "server.json").read_text())["pid"]
    assert _parent(first_server) != warm  # started afresh: there was none to fork it
    first.close()
    fake.script(Reply(agent_json("Four, from a warm fork.")))
    # A person's shell, not the tests': ./amacs sets this for Emacs (its early request must too).
    second = terminal(**env, AMACS_EARLY_START="1", EMACS_INHIBIT_AUTOMATIC_NATIVE_COMPILATION=None)
    server = json.loads((second.amacs_home / "server.json").read_text())["pid"]
    assert _parent(server) == warm
    assert second._pane_pid is not None
    launcher = _child(_child(second._pane_pid, "emacs"), "warm_launch.py")
    assert _started(server) < _started(launcher)
    second.type("what is 2+2?")
    second.press("Enter")
    second.wait_for("Four, from a warm fork.", timeout=30)
    assert "what is 2+2?" in fake.user_texts()[-1]


def test_the_first_start_says_in_its_shell_that_the_warm_server_stays_and_how_to_stop_it(
        terminal: Callable[..., Terminal], warm_dir: Path) -> None:
    """A newcomer found the warm server running after quitting Emacs; only the docs said it would.
    The next newcomer's window closed with ./amacs, so the note it printed after Emacs went unread.
    The start that leaves the warm server says so in its shell, once; no quit says it again."""
    env = {"AMACS_WARM": "1", "AMACS_WARM_DIR": str(warm_dir), "AMACS_WARM_DELAY": "0"}
    first = terminal(**env)
    warm = _warm_server(warm_dir)
    screen = first.wait_for("This start left a warm server running", timeout=30, what="the note in the first shell")
    assert "./amacs --stop-warm stops it" in screen.replace("\n;; ", " "), screen
    first.press("C-x C-c")
    assert "warm server" not in first.wait_exited() + first.history()
    again = terminal(**env)  # said once
    assert "warm server" not in again.screen()
    again.press("C-x C-c")
    assert "warm server" not in again.wait_exited() + again.history()

    environment = {k: v for k, v in os.environ.items() if not k.startswith("AMACS_")}
    stopped = subprocess.run([str(ROOT / "amacs"), "--stop-warm"], capture_output=True, text=True, timeout=30,
                             env={**environment, "AMACS_WARM_DIR": str(warm_dir)}, check=True)
    assert stopped.stdout == f"AMACS: stopped the warm server of {ROOT} (pid {warm}).\n"
    deadline = time.monotonic() + 10
    while "amacs_server.warm" in _cmdline(warm):
        assert time.monotonic() < deadline, "the warm server still runs"
        time.sleep(0.1)


def test_a_warm_server_no_shell_named_is_named_at_the_next_start(
        terminal: Callable[..., Terminal], warm_dir: Path) -> None:
    """A warm server left by a launch that greeted no shell (here one that printed its usage) was
    never named: the next start's shell names it (once), with its pid, and its quit says no more."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AMACS_", "ANTHROPIC_"))}
    subprocess.run([sys.executable, "-S", str(ROOT / "amacs_server" / "warm_launch.py"), "--help"],
                   env={**environment, "AMACS_WARM_DIR": str(warm_dir), "AMACS_WARM_DELAY": "0"}, cwd=ROOT,
                   capture_output=True, timeout=60, check=True)
    warm = _warm_server(warm_dir)
    env = {"AMACS_WARM": "1", "AMACS_WARM_DIR": str(warm_dir), "AMACS_WARM_DELAY": "0"}
    second = terminal(**env)
    second.wait_for(f"Your warm server (pid {warm}) stays after Emacs quits", timeout=30)
    assert "./amacs --stop-warm stops it" in second.screen()
    # Served by a fork Emacs asked the warm server for itself: no launcher process in between.
    assert _parent(json.loads((second.amacs_home / "server.json").read_text())["pid"]) == warm
    assert second._pane_pid is not None
    emacs = _child(second._pane_pid, "emacs")
    children = Path(f"/proc/{emacs}/task/{emacs}/children").read_text().split()
    assert not [child for child in children if "python" in _cmdline(int(child))], children
    second.press("C-x C-c")  # quit: nothing more is said in the terminal either
    assert "warm server" not in second.wait_exited() + second.history()
    third = terminal(**env)
    assert "stays after Emacs quits" not in third.screen()


def test_the_warm_server_note_is_never_said_in_a_forks_shell(
        terminal: Callable[..., Terminal], fake: FakeAnthropic, warm_dir: Path, tmp_path: Path) -> None:
    """A newcomer's first start ran afresh and left the warm server; the first server it forked was
    their fork's, whose shell said "Your warm server ... stays after Emacs quits" in a window beside
    the shell they worked in.  The first start's shell says it; a fork's never does."""
    env = {"AMACS_WARM": "1", "AMACS_WARM_DIR": str(warm_dir), "AMACS_WARM_DELAY": "0"}
    fake.script(Reply(agent_json("Noted.")))
    first = terminal(**env)
    warm = _warm_server(warm_dir)
    first.wait_for("This start left a warm server running", timeout=30, what="the note in the first shell")
    first.type("note this")
    first.press("Enter")
    first.wait_for("Noted.", timeout=30)
    first.wait_for_elisp("(not (amacs-shell-busy-p))", what="the end of the turn")
    fork = tmp_path / "forked"
    first.fork_now(fork)
    server = json.loads((fork / "server.json").read_text())["pid"]
    assert _parent(server) == warm  # the fork's server is the warm server's first fork
    shell = f'(with-current-buffer (amacs-ui-shell (amacs-connection-ui (amacs-connection-for "{fork}"))) (buffer-string))'
    # Greeted: the hello's notes are said right after the resumed exchanges (amacs-shell--greet).
    first.wait_for_elisp(f'(string-match-p ";; Resumed:" {shell})', what="the fork's shell greeted")
    assert "warm server" not in first.elisp_string(shell)
    first.press("C-x C-c")
    assert "warm server" not in first.wait_exited() + first.history()
