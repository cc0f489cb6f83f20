"""Keys echo at once in the first seconds after start-up, while org is preloaded.

A newcomer's finding in tmux: after "waiting for you" (0.45 s), a person who paused
and began typing at 1.0 s saw nothing until 2.45 s: org was loaded in one blocking
``require`` (and its first ``org-mode`` loaded its modules, gnus among them) on idle
timers.  Org is now loaded a file at each idle moment, and only while no key is pending.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.tmux.terminal import PROMPT, Terminal

pytestmark = pytest.mark.tmux

# A key echoes within this; the old preload held keys 1-2 s (more on a loaded machine).
ECHO_BOUND = float(os.environ.get("AMACS_ECHO_BOUND", "0.35"))


def echo_delays(term: Terminal, text: str, interval: float) -> list[float]:
    """Type TEXT a key every INTERVAL seconds; for each, the seconds until the prompt line shows it."""
    delays: list[float] = []
    for i, char in enumerate(text):
        sent = time.monotonic()
        term.type(char)
        expected = PROMPT + text[: i + 1]
        while not term.line_at_cursor().startswith(expected):
            if time.monotonic() - sent > 10:
                raise AssertionError(f"{char!r} not shown in 10 s: {term.line_at_cursor()!r}")
            time.sleep(0.01)
        delays.append(time.monotonic() - sent)
        time.sleep(max(0.0, interval - (time.monotonic() - sent)))
    return delays


@pytest.mark.parametrize(("pause", "interval", "text"), [
    pytest.param(0.5, 0.1, "abcdefghijklmnopqrstuvwxy", id="after-a-pause"),
    pytest.param(0.0, 0.1, "abcdefghijklmnopqrstuvwxy", id="at-once"),
    # Slower than the preload's idle threshold (0.5 s): each key arrives while a piece loads.
    pytest.param(0.0, 0.55, "abcdefghij", id="between-pieces"),
])
def test_keys_echo_at_once_while_org_is_preloaded(terminal, pause: float, interval: float, text: str) -> None:
    term = terminal()
    term.wait_for("waiting for you", timeout=20)
    term.wait_idle(timeout=5)
    time.sleep(pause)  # the pause in which the old preload began to load org
    delays = echo_delays(term, text, interval)
    print(f"echo delays (s): max {max(delays):.3f}, " + " ".join(f"{d:.3f}" for d in delays))
    assert max(delays) < ECHO_BOUND, delays
    # What the preload is for still happens once the person stops typing:
    # org loaded and warmed up, so the first reply is rendered without a stall.
    term.wait_for_elisp('(get-buffer " *org-src-fontification:emacs-lisp-mode*")', timeout=30,
                        what="org preloaded at idle")
    term.press("C-a", "C-k")
