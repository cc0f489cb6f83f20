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

# Seconds from ./amacs --demo to an interrupted reply, as the issue asks.  Measured on 2 cores
# at a load of 3-8 (the machine shared): 5-8 s; the time goes to the server importing the
# anthropic SDK (1.3 s of CPU, 2.6 s at load 4) before the first request, then the demo's own
# pace (the help reply streams 0.6 s, the slow one reaches word3 in 1.1 s).
LAUNCH_TO_INTERRUPT = 10.0


def test_amacs_demo_streams_evaluates_and_is_interrupted_within_seconds(terminal):
    began = time.monotonic()
    # As a newcomer's shell: Emacs's automatic native compilation left to ./amacs (which turns it off).
    term = terminal(width=120, height=45, args=("--demo",), ANTHROPIC_API_KEY="", ANTHROPIC_BASE_URL="",
                    EMACS_INHIBIT_AUTOMATIC_NATIVE_COMPILATION=None)
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
    screen = term.wait_for(";; (the agent keeps none of the text above: interrupted)", timeout=8, what="the interrupt")
    took = time.monotonic() - began
    assert took < LAUNCH_TO_INTERRUPT, f"{took:.1f} s from launch to the interrupt (load {os.getloadavg()[0]:.1f})"
    assert "word59" not in screen, screen
    # No native compiler at work beside the first turn (it took a core from a fresh HOME's start).
    assert term.elisp('(and (get-buffer "*Async-native-compile-log*") t)') == "nil"

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


def test_eval_lines_keep_to_one_line_when_the_window_narrows(terminal):
    """A newcomer's fork split the frame: the first shell's eval lines, cut for 100 columns,
    wrapped over two or three rows in its half.  Refitted to the half, each keeps one row."""
    term = terminal(width=100, height=32, args=("--demo",), ANTHROPIC_API_KEY="", ANTHROPIC_BASE_URL="")
    term.type("help")
    term.press("Enter")
    term.wait_for("▸ eval (condition-case nil (agent-create-thread", timeout=30, what="the tour's eval line")
    term.wait_for_elisp("(not (amacs-shell-busy-p))", timeout=30, what="the end of the turn")
    assert len(next(r for r in term.lines() if r.startswith("▸ eval"))) > 60
    term.press("C-x 3")  # as a fork's shell opens beside this one
    screen = term.wait_for(lambda s: s.count("▸ eval (condition-case") == 2, what="the shell in both halves")
    for row in screen.splitlines():
        if "▸ eval" in row:  # Emacs ends a row that wraps with a backslash, in each half
            left, _, right = row.partition("|")
            assert not left.rstrip().endswith("\\") and not right.rstrip().endswith("\\"), screen


def test_m_x_amacs_demo_names_the_demo_not_anthropic(terminal):
    """A newcomer with no key typed M-x amacs-demo and read "AMACS server restarted: demo on
    anthropic.": they were told they talked to Anthropic.  The line and the header name the demo."""
    term = terminal(width=120, height=30, ANTHROPIC_API_KEY="", ANTHROPIC_BASE_URL="")
    term.wait_for("No API key", what="the no-key note")
    term.press("M-x")
    term.type("amacs-demo")
    term.press("Enter")
    screen = term.wait_for("AMACS server restarted:", timeout=60, what="the restart's line")
    said = next(line for line in screen.splitlines() if "AMACS server restarted:" in line)
    assert "restarted: the scripted demo model on this machine" in said, said
    assert "anthropic" not in said.lower(), said
    assert term.lines()[1].startswith(" demo model — "), screen


def test_a_question_asked_with_no_key_is_told_what_to_do_and_the_demo_answers_it(terminal):
    """The welcome says to ask "what can you do?"; a newcomer with no key did, and got the no-key
    note printed again under the same note.  The question is told in one row what to do: M-x
    amacs-demo, then M-p RET (a newcomer read "M-x amacs-demo answers this now" and waited for an
    answer that the demo does not give by itself); doing just that, the demo answers it."""
    term = terminal(width=120, height=30, ANTHROPIC_API_KEY="", ANTHROPIC_BASE_URL="")
    term.wait_for("No API key: try M-x amacs-demo", what="the no-key note")
    term.type("what can you do?")
    term.press("Enter")
    screen = term.wait_for("no answer: M-x", what="the answer to a question with no key")
    after = screen.split("amacs> what can you do?", 1)[1]
    assert (";; No API key, no answer: M-x amacs-demo starts a demo model, then M-p RET sends this again; "
            "or set ANTHROPIC_API_KEY.\n") in after, screen  # one row of 120 columns
    assert screen.count("No API key: try") == 1, screen  # the note is not printed again
    term.wait_idle()
    term.press("M-x")
    term.type("amacs-demo")
    term.press("Enter")
    term.wait_for(lambda _s: term.lines()[1].startswith(" demo model — "), timeout=60, what="the demo's header")
    term.press("M-p")
    term.wait_for(lambda _s: term.line_at_cursor().startswith("amacs> what can you do?"), what="the question back")
    term.press("Enter")
    term.wait_for("I am AMACS's demo model", timeout=30, what="the demo's answer")


def test_a_home_left_on_the_demo_reopens_on_it_with_still_no_key(terminal):
    """A newcomer talked to the demo, quit (C-x C-c) and ran ./amacs again, still with no key: the
    home reopened on Claude, the no-key note printed again and RET answered "No API key".  It
    reopens on the demo, says so in one line, and answers."""
    nokey = {"ANTHROPIC_API_KEY": "", "ANTHROPIC_BASE_URL": ""}
    term = terminal(width=120, height=40, args=("--demo",), **nokey)
    term.type("help")
    term.press("Enter")
    term.wait_for("▸ eval (condition-case nil (agent-create-thread", timeout=30, what="the tour's eval line")
    term.wait_for_elisp("(not (amacs-shell-busy-p))", timeout=30, what="the end of the turn")
    home = term.amacs_home
    # The turn's tick state is on disk once its commit is made: quit after it, as the person did.
    term.wait_for(lambda _s: (home / "tick-state.json").exists(), timeout=20, what="the tick's state")
    term.press("C-x C-c")
    term.wait_for(lambda _s: term._tmux("display", "-p", "-t", "amacs", "#{pane_dead}").strip() == "1",
                  timeout=20, what="Emacs to exit")
    assert not term.close()
    term = terminal(width=120, height=40, AMACS_HOME=str(home), **nokey)
    screen = term.wait_for("On the demo model again", timeout=30, what="the one line that says the demo is back")
    assert term.lines()[1].startswith(" demo model — "), screen
    assert "No API key" not in screen, screen
    term.type("2+2")
    term.press("Enter")
    term.wait_for(lambda _s: term.elisp("(not (amacs-shell-busy-p))") == "t"
                  and "No API key" not in term.screen().split("amacs> 2+2", 1)[-1],
                  timeout=30, what="the demo's answer")
    assert "No API key" not in term.screen(), term.screen()
    assert "▸ eval" in term.screen().split("amacs> 2+2", 1)[1], term.screen()


def test_a_mistyped_m_colon_says_its_error_and_opens_no_backtrace(terminal):
    """A newcomer's first failing M-: in ./amacs opened *Backtrace* and a recursive edit
    (eval-expression binds debug-on-error to t in a stock Emacs).  The error is one line."""
    term = terminal(width=120, height=30, args=("--demo",), ANTHROPIC_API_KEY="", ANTHROPIC_BASE_URL="")
    term.press("M-:")
    term.type("(car 1)")
    term.press("Enter")
    term.wait_for("Wrong type argument: listp, 1", what="the error in the echo area")
    assert term.elisp("(get-buffer \"*Backtrace*\")") == "nil"
    assert term.elisp("(recursion-depth)") == "0"
