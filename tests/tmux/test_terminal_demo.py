"""``./amacs --demo`` as a newcomer with no key and a fresh HOME: the AMACS server serves the
scripted demo model itself (amacs_server/demo_model.py), and in seconds the shell shows a
streamed reply, an eval line and an interrupt, under a header that names the demo; in the
first minute a thread and subagents too.  The terminal fixture fails the test when a process
outlives its Emacs: the demo model stops with the server.
"""

from __future__ import annotations

import os
import time

import pytest

pytestmark = pytest.mark.tmux

# Seconds from ./amacs --demo to an interrupted reply: the bound, on a machine whose cores
# are not over-subscribed.  Measured here: 10.8 s at a load of 10 on 2 cores, 6 s of it the
# server importing the anthropic SDK (about 1 s when quiet); so the bound grows with the load
# per core beyond 1, and the failure says by how much it grew.
LAUNCH_TO_INTERRUPT = 10.0


def contention() -> float:
    """How many times over the machine's cores are asked for (1.0 when not over-subscribed)."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def test_amacs_demo_streams_evaluates_and_is_interrupted_within_seconds(terminal):
    began, load = time.monotonic(), contention()
    term = terminal(width=120, height=45, args=("--demo",), ANTHROPIC_API_KEY="", ANTHROPIC_BASE_URL="")
    screen = term.screen()
    assert screen.splitlines()[1].startswith(" demo model — "), screen  # the header names the demo
    assert "No API key" not in screen and "Demo model:" in screen, screen

    term.type("help")
    term.press("Enter")
    streaming = term.wait_for(lambda s: "writing…" in s and "I am AMACS's demo model" in s,
                              timeout=8, what="the reply while it streams")
    assert "▸ eval" not in streaming.split("amacs> help", 1)[1], streaming  # seen before it was whole
    term.wait_for("▸ eval (condition-case nil (agent-create-thread \"demo-tour\"", timeout=8,
                  what="the eval line that opens the tour's thread")
    term.wait_for_elisp("(not (amacs-shell-busy-p))", timeout=8, what="the end of the first turn")

    term.type("slow")
    term.press("Enter")
    term.wait_for("word3 ", timeout=8, what="the slow reply streaming")
    term.press("C-c C-c")
    screen = term.wait_for(";; (the text above was discarded: interrupted)", timeout=8, what="the interrupt")
    took, load = time.monotonic() - began, max(load, contention())
    assert took < LAUNCH_TO_INTERRUPT * load, f"{took:.1f} s from launch to the interrupt (load per core {load:.1f})"
    assert "word59" not in screen, screen

    # The rest of the first minute: the thread the tour opened, and two subagents at work.
    term.press("C-c C-v")
    term.wait_for("demo-tour", timeout=8, what="the tour's thread in the hub")
    term.press("q")
    term.wait_idle()
    term.type("task")
    term.press("Enter")
    term.wait_for("⟳ task-1 (researcher)", timeout=15, what="a subagent's line while it works")
    term.wait_for("✓ task-2 (researcher) done", timeout=20, what="the subagents done")
    assert time.monotonic() - began < 60
