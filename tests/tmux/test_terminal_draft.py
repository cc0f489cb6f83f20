"""What the person typed and did not send survives the end of Emacs, in a real terminal: ``./amacs`` in
tmux against the fake model.  Typed, then C-x C-c (or Emacs killed outright): the next ``./amacs`` on
that home has the text at its prompt, a note says it was restored and not sent, RET sends it, and
sent it does not come back.  The file that keeps it (shell-draft) is never committed to the home's git."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.fake_anthropic import Reply, agent_json
from tests.tmux.terminal import PROMPT, Terminal

pytestmark = pytest.mark.tmux

RESTORED = "Restored at the prompt: your input from last time, not answered yet"


def ended(term: Terminal) -> bool:
    """Emacs has exited: its tmux pane is dead (the pane stays: remain-on-exit)."""
    return term._tmux("display", "-p", "-t", "amacs", "#{pane_dead}").strip() == "1"


def reopen(terminal, term: Terminal) -> Terminal:
    """Close TERM's tmux and run ./amacs again on the same AMACS home."""
    assert not term.close(), "a process outlived its Emacs"
    again: Terminal = terminal(AMACS_HOME=str(term.amacs_home))
    return again


def restored(term: Terminal, text: str) -> None:
    term.wait_for(RESTORED, timeout=30, what="the note that the unsent input was restored")
    term.wait_for(lambda _s: term.line_at_cursor() == PROMPT + text, timeout=10,
                  what=f"{text!r} at the prompt, the cursor after it")


def test_unsent_input_comes_back_after_c_x_c_c(terminal, fake):
    fake.script(Reply(agent_json("First answer.")), Reply(agent_json("Second answer.")))
    term = terminal()
    term.type("a first question")
    term.press("Enter")
    term.wait_for("First answer.", timeout=30)
    term.wait_for_elisp("(not (amacs-shell-busy-p))", what="the end of the turn")
    term.type("an idea I have not sent")
    term.wait_for(lambda _s: term.line_at_cursor() == PROMPT + "an idea I have not sent", what="the typed text")
    term.press("C-x C-c")
    deadline = time.monotonic() + 20
    while not ended(term):
        assert "yes or no" not in term.screen() and "(y or n)" not in term.screen(), term.screen()
        assert time.monotonic() < deadline, f"Emacs did not exit on C-x C-c:\n{term.screen()}"
        time.sleep(0.1)
    home = term.amacs_home
    term = reopen(terminal, term)
    restored(term, "an idea I have not sent")
    screen = term.screen()
    # The note is by the prompt, below the resumed exchanges, not above them.
    assert screen.index("First answer.") < screen.index(RESTORED), screen
    # The .git folder is there before git has finished making it: wait for the first tick's commit.
    term.wait_for(lambda _s: subprocess.run(["git", "rev-parse", "-q", "--verify", "HEAD"], cwd=home,
                                            capture_output=True, check=False).returncode == 0,
                  timeout=20, what="the home's git (its first tick's commit)")
    ignored = subprocess.run(["git", "check-ignore", "-q", "shell-draft"], cwd=home, check=False)
    assert ignored.returncode == 0, (home / ".gitignore").read_text()
    term.press("Enter")
    term.wait_for("Second answer.", timeout=30)
    assert "an idea I have not sent" in fake.user_texts()[-1]
    assert not (home / "shell-draft").exists(), "sent, the input must not come back"


def test_unsent_input_survives_an_emacs_that_is_killed(terminal, fake):
    """Saved every couple of seconds while it changes: a killed Emacs loses at most that much."""
    term = terminal()
    term.type("typed before the kill")
    term.wait_for(lambda _s: term.line_at_cursor() == PROMPT + "typed before the kill", what="the typed text")
    interval = float(term.elisp("amacs-shell-draft-save-interval"))
    time.sleep(interval + 1.5)
    os.kill(int(term.elisp("(emacs-pid)")), signal.SIGKILL)  # no hook runs
    term.wait_for(lambda _s: ended(term), timeout=10, what="Emacs to die")
    term = reopen(terminal, term)
    restored(term, "typed before the kill")


def test_what_is_typed_while_the_shell_starts_is_not_glued_to_the_restored_input(terminal, fake):
    """Typed before the shell is ready (the keys the person types at once, not seeing the prompt yet):
    it stays at the prompt alone, and the input of last time goes to the kill ring; nothing is sent."""
    term = terminal()
    term.type("from last time")
    term.wait_for(lambda _s: term.line_at_cursor() == PROMPT + "from last time", what="the typed text")
    term.press("C-x C-c")
    term.wait_for(lambda _s: ended(term), timeout=20, what="Emacs to exit")
    assert not term.close()
    term = terminal(connected=False, AMACS_HOME=str(term.amacs_home))
    early = term.elisp("(and (amacs-live-p) t)") != "t"
    term.type("typed at start")
    term.wait_for("is in the kill ring (C-y): you typed at the prompt meanwhile", timeout=30,
                  what="the note that the input of last time is in the kill ring")
    term.wait_for(lambda _s: term.line_at_cursor() == PROMPT + "typed at start", timeout=10,
                  what="what was typed at start, alone at the prompt")
    assert term.elisp_string("(car kill-ring)") == "from last time"
    assert not fake.requests, "nothing was sent"
    assert early, "the server was ready before anything was typed: nothing was tested early"


def test_an_input_queued_when_emacs_quits_during_a_turn_comes_back(terminal, fake):
    """Sent while the agent works, it waits in the footer as queued; quit then (yes to "quit anyway?"),
    the server goes and takes its queue with it: the next ./amacs has it at the prompt, not lost."""
    fake.script(Reply(agent_json("Slow answer."), delay=60))
    term = terminal()
    term.type("a slow question")
    term.press("Enter")
    term.wait_for_elisp('(null (with-current-buffer "*amacs-shell*" (amacs-shell--queued-inputs)))',
                        what="the agent to take the first input")
    term.type("queued before quit")
    term.press("Enter")
    term.wait_for("⋯ queued", timeout=10, what="the second input queued")
    term.press("C-x C-c")
    term.wait_for("(yes or no)", timeout=10, what="the question whether to quit anyway")
    term.type("yes")
    term.press("Enter")
    term.wait_for(lambda _s: ended(term), timeout=20, what="Emacs to exit")
    term = reopen(terminal, term)
    restored(term, "queued before quit")  # alone: the input the agent took does not come back
