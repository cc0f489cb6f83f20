"""Fixtures for terminal tests: the fake model API and a factory of ./amacs terminals."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fake_anthropic import FakeAnthropic
from tests.tmux.terminal import ROOT, Terminal


@pytest.fixture(scope="session")
def amacs_installed() -> None:
    """tmux is there, and ./amacs's setup step has run once, so no test's first screen waits for pip."""
    if not shutil.which("tmux"):
        pytest.skip("tmux is not installed (scripts/setup.sh --test installs it)")
    subprocess.run([str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, check=True, capture_output=True, timeout=600)


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture
def terminal(amacs_installed: None, fake: FakeAnthropic, tmp_path: Path) -> Iterator[Callable[..., Terminal]]:
    """Open ``./amacs`` in tmux: ``terminal()``, ``terminal(80, 24)``, ``terminal(AMACS_MODEL="...")``.

    Extra keyword arguments are environment variables (None: unset).  Every terminal is closed after the test,
    and the test errs if a process Emacs started outlives it (the server must exit with its Emacs).
    """
    opened: list[Terminal] = []

    def open_terminal(width: int = 120, height: int = 40, args: tuple[str, ...] = (), connected: bool = True,
                      **env: str | None) -> Terminal:
        term = Terminal(tmp_path / f"terminal-{len(opened)}", fake.url, width, height, env, args)
        opened.append(term)
        return term.start(connected=connected)

    yield open_terminal
    stragglers = [process for term in opened for process in term.close()]
    assert not stragglers, f"still running 10 s after their Emacs was hung up on: {stragglers}"
