"""Rewind and fork as a person does them, in a real terminal (issue 26): ``./amacs`` in tmux against
the fake model.  M-x amacs-fork opens a second shell beside the first, on the new home; both answer;
each header names its home; M-x amacs-rewind in the first, picking an input older than the chat's
memory holds (completed with TAB), returns it to before that input, and that input sent again makes
the same request as the first time (but for the clock), while the budget limit the person raised
before the rewind stays in the mode line."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests import demo_model
from tests.test_rewind import answer, requests
from tests.tmux.terminal import Terminal

pytestmark = pytest.mark.tmux


def send(term: Terminal, text: str) -> None:
    term.type(text)
    term.press("Enter")
    term.wait_for(f"answer to {text}", what=f"the answer to {text!r}")
    term.wait_for_elisp("(not (amacs-shell-busy-p))", what="the end of the turn")


def test_fork_opens_a_second_shell_and_rewind_asks_the_same_again(terminal, fake, tmp_path):
    fake.respond_with(answer)
    term = terminal(200, 40)
    send(term, "note the first")
    send(term, "the second")
    fork = tmp_path / "forked"
    term.press("M-x")
    term.type("amacs-fork")
    term.press("Enter")
    term.wait_for("Fork now, or from before you typed (default now: the mind as it is):",
                  what="the fork's input prompt")
    term.type("the sec")
    term.press("Tab")  # completes to the second input: the fork ends at tick 1
    term.wait_for("(default now: the mind as it is): the second", what="the second input, completed")
    term.press("Enter")
    term.wait_for("New home for the fork from before you typed «the second»", what="the fork's folder prompt")
    term.press("C-a", "C-k")
    term.type(str(fork))
    term.press("Enter")
    term.wait_for_elisp(f'(amacs-live-p (amacs-connection-for "{fork}"))', timeout=30, what="the fork's server")
    send(term, "note the fork")  # typed in the window the fork opened, beside the first
    # The turn's end is drawn at the next redisplay: the header read "writing…" just before it.
    screen = term.wait_for(lambda s: "writing…" not in s, what="the headers redrawn after the turn")
    header = next(line for line in screen.splitlines() if "|" in line)  # the two windows' header row
    left, right = header.split("|", 1)
    # Each header names its home: by its folder's name where the window is too narrow for its path.
    assert f" {term.amacs_home.name} " in left and f" {fork.name} " in right, screen
    assert "note the fork" in (fork / "agent-chat.org").read_text()
    assert "note the fork" not in (term.amacs_home / "agent-chat.org").read_text()
    term.press("C-x", "o")  # back to the first shell
    for text in ("the third", "the fourth", "the fifth"):  # the second is no longer in the chat's memory
        send(term, text)
    term.press("M-x")  # the person raises the limit after the ticks the rewind goes back to
    term.type("amacs-set-budget")
    term.press("Enter")
    term.wait_for("Budget limit in dollars, now $5.00", what="the budget's prompt")
    term.type("7")
    term.press("Enter")
    term.wait_for("/$7.00", what="the new limit in the mode line")
    usage = "(plist-get (buffer-local-value 'amacs-shell-usage (window-buffer (selected-window))) :spent)"
    spent = float(term.elisp(usage))
    term.press("M-x")
    term.type("amacs-rewind")
    term.press("Enter")
    term.wait_for("Go back to before you typed (default the fifth, your last input):", what="the rewind's input prompt")
    # Shown at once in Emacs -Q's completion (a newcomer pressed RET by reflex, seeing no choice).
    term.wait_for("Possible completions are:", what="the inputs listed before any TAB")
    term.type("the sec")
    term.press("Tab")  # completes to the second input
    term.wait_for("(default the fifth, your last input): the second", what="the second input, completed")
    term.press("Enter")
    term.wait_for("Go back to before you typed «the second»? (yes or no)", what="the rewind's question")
    assert "*Completions*" not in term.screen()
    term.type("yes")
    term.press("Enter")
    term.wait_for("refs/amacs/abandoned/", what="the ref that keeps the future")
    assert "Completions" not in term.screen(), term.screen()
    assert float(term.elisp(usage)) == pytest.approx(spent)  # the abandoned future's money stays spent
    mode_line = next(line for line in term.screen().splitlines() if " budget $" in line)
    assert "/$7.00" in mode_line, mode_line  # and the limit the person set stays
    # The input gone back over is at the prompt to edit (as Claude Code's rewind does); M-p no
    # longer offers the abandoned ones.  RET sends it again.
    at_prompt = (f'(amacs-with-connection (amacs-connection-for "{term.amacs_home}") (with-current-buffer '
                 '(amacs-shell--buffer) (list (amacs-shell--draft) (ring-elements comint-input-ring))))')
    shown = " ".join(term.elisp(at_prompt).split())
    assert shown == '("the second" ("note the first"))', shown
    first = len(fake.requests)
    term.press("Enter")
    deadline = time.monotonic() + 30
    while len(fake.requests) == first and time.monotonic() < deadline:
        time.sleep(0.1)
    term.wait_for_elisp("(not (amacs-shell-busy-p))", what="the end of the turn")
    sent = [json.loads(r) for r in requests(fake)]
    again = [json.loads(r) for r in requests(fake, first)]
    assert again and again[-1] == sent[1], "the second input after the rewind asks as it did"


def test_rewind_shows_the_task_lines_the_live_shell_showed(terminal, fake):
    """The ``✓ task-N … done`` lines shown live when the subagents answered are shown again in the
    conversation a rewind replays, where they were (after the eval that started the tasks,
    before the reply that read their results); those of the ticks rewound away are not."""
    fake.respond_with(demo_model.answer)  # "task": two researchers, each answering in ~3 s
    term = terminal(160, 50)
    for n in (1, 3):
        term.type("task")
        term.press("Enter")
        term.wait_for(f"✓ task-{n + 1} (researcher) done", timeout=40, what=f"the tasks {n} and {n + 1} done")
        term.wait_for_elisp("(not (amacs-shell-busy-p))", timeout=30, what="the end of the turn")
    live = term.screen().split("amacs> task", 1)[1].split("amacs> task", 1)[0]
    # The two researchers run at once: either may answer first, so only their place is checked.
    for task in ("✓ task-1", "✓ task-2"):
        assert live.index("▸ eval") < live.index(task) < live.index("Done:"), live
    term.press("M-x")
    term.type("amacs-rewind")
    term.press("Enter")
    # Typed twice: each copy says when it was typed, the newest (the default) too.
    term.wait_for(lambda screen: re.search(r"Go back to before you typed \(default task  \(typed [^)]+\), "
                                           r"your last input\):", screen), what="the rewind's input prompt")
    term.press("Enter")  # the newest input: the rewind ends at tick 2, after the first tasks' reply
    term.wait_for("yes or no", what="the rewind's question")
    term.type("yes")
    term.press("Enter")
    # The rewind's line and its replay are drawn by one command: on screen together.
    screen = term.wait_for("The conversation up to there:", what="the rewind's line and its replay")
    replayed = screen.split("The conversation up to there:", 1)[1].rsplit("\namacs>", 1)[0]
    assert "amacs> task" + live.rstrip() in replayed, (live, replayed)
    assert "task-3" not in replayed and "task-4" not in replayed, replayed


def say(term: Terminal, text: str) -> None:
    """TEXT to the demo model, which answers any text with "You said: TEXT"."""
    term.type(text)
    term.press("Enter")
    term.wait_for(f"You said: {text}.", timeout=30, what=f"the demo model's answer to {text!r}")
    term.wait_for_elisp("(not (amacs-shell-busy-p))", timeout=30, what="the end of the turn")


def test_a_fork_of_now_runs_on_the_parents_model_and_the_hub_opens_a_rewinds_future(terminal, tmp_path):
    """``./amacs --demo`` with no key: M-x amacs-fork offers now, and the fork's shell answers on
    the demo model too (a fork used to open on Claude, with no key).  Then a rewind in the first
    shell draws a line under the abandoned conversation, and the hub lists that future with its
    first input and shows its log on RET (each commit's stat), and a commit's patch on RET."""
    term = terminal(200, 50, args=("--demo",), ANTHROPIC_API_KEY="", ANTHROPIC_BASE_URL="")
    for text in ("first words", "second words", "third words"):
        say(term, text)
    fork = tmp_path / "forked-now"
    term.fork_now(fork)
    say(term, "in the fork")  # typed in the fork's shell, beside the first: the demo model answers
    models = [term.elisp(f'(amacs-with-connection (amacs-connection-for "{home}") (amacs-status :model))')
              for home in (term.amacs_home, fork)]
    assert models == ['"demo"', '"demo"'], models  # the fork's server runs on its parent's model
    # Side by side in a 120-column terminal the fork's header kept "(fork)" and its whole path but
    # dropped the model, just when the person asks whether the fork runs on the same one.
    term.resize(120, 50)
    term.wait_for(lambda screen: screen.splitlines()[1][60:].rstrip().endswith("waiting for you"),
                  what="the two headers (under the menu bar), side by side in 120 columns")
    header = term.screen().splitlines()[1]
    assert header[60:].rstrip() == f" {fork.name} (fork) — demo model — waiting for you", header
    assert header[:60].rstrip(" |").endswith(" demo model — waiting for you"), header  # the first shell's
    term.resize(200, 50)
    chat = (fork / "agent-chat.org").read_text()
    assert "third words" in chat and "in the fork" in chat  # now: the last tick, whole
    assert "in the fork" not in (term.amacs_home / "agent-chat.org").read_text()

    term.press("C-x", "o")  # back to the first shell
    term.press("M-x")
    term.type("amacs-rewind")
    term.press("Enter")
    term.wait_for("Go back to before you typed (default third words, your last input):", what="the rewind's input prompt")
    term.type("second w")
    term.press("Tab")
    term.wait_for("(default third words, your last input): second words", what="the second input, completed")
    term.press("Enter")
    term.wait_for("yes or no", what="the rewind's question")
    term.type("yes")
    term.press("Enter")
    divider = "above: the abandoned future"
    shell = (f'(amacs-with-connection (amacs-connection-for "{term.amacs_home}") (with-current-buffer '
             '(amacs-shell--buffer) (buffer-substring-no-properties (point-min) (point-max))))')
    term.wait_for(lambda _s: "The conversation up to there:" in term.elisp_string(shell).rpartition(divider)[2],
                  what="the line under the abandoned conversation, and the conversation replayed")
    above, _, below = term.elisp_string(shell).rpartition(divider)
    assert "third words" in above and "refs/amacs/abandoned/" in below, (above[-300:], below)
    replayed, _, prompt = below.split("The conversation up to there:", 1)[1].rpartition("amacs> ")
    assert prompt.strip() == "second words", prompt  # the input gone back over, at the prompt to edit
    assert replayed.split("amacs> ", 1)[1].startswith("first words") and "second words" not in replayed, replayed

    term.press("C-c C-v")
    term.wait_for("Abandoned futures", timeout=15, what="the abandoned futures in the hub")
    term.wait_for("ticks 2-3: second words", what="the future's ticks and first input")
    term.press("C-s")
    term.type("ticks 2-3")
    term.press("Enter")
    term.press("Enter")
    shown = term.wait_for("Abandoned future refs/amacs/abandoned/", timeout=15, what="the future's log")
    assert "ticks 2-3, left by a rewind" in shown, shown
    assert "[TICK 3][abandoned]" in shown, shown
    # Its log is each commit's stat, as light as a commit's view: the transcripts' moved lines
    # (whole model requests) are listed, not drawn.
    view = (f'(with-current-buffer (amacs-connection-buffer-name (amacs-connection-for "{term.amacs_home}") '
            '"{}") (list (buffer-size) (and (string-search " transcripts/" (buffer-string)) t) '
            '(and (string-search "+third words" (buffer-string)) t)))')
    size, moved, patch = term.elisp(view.format("abandoned")).strip("()").split()
    assert int(size) < 20000 and moved == "t" and patch == "nil", (size, moved, patch)
    term.press("C-s")
    term.type("[TICK 3][no-thread]")
    term.press("Enter")
    term.press("Enter")  # RET on that commit's line: its patch, as the hub opens a commit
    term.wait_for_elisp(f'(get-buffer (amacs-connection-buffer-name (amacs-connection-for "{term.amacs_home}") '
                        '"commit"))', timeout=15, what="the commit's view")
    _size, _moved, patch = term.elisp(view.format("commit")).strip("()").split()
    assert patch == "t"  # its diff
    # Point stays in the log, where n and p go from commit to commit (view-mode's n and p, search
    # again, shadowed them: "No previous View-mode search"), so n then RET walks the commits.
    here = ('(with-current-buffer (window-buffer (selected-window)) (format "%s|%s" (buffer-name) '
            '(buffer-substring-no-properties (line-beginning-position) (line-end-position))))')
    log = term.elisp_string(f'(amacs-connection-buffer-name (amacs-connection-for "{term.amacs_home}") "abandoned")')
    buffer, line = term.elisp_string(here).split("|", 1)
    assert buffer == log and "[TICK 3][no-thread]" in line, (buffer, line)
    term.press("n")
    term.wait_for(lambda _s: "[TICK 2]" in term.elisp_string(here), timeout=10, what="n: the next commit")
    term.press("Enter")
    commit = (f'(with-current-buffer (amacs-connection-buffer-name (amacs-connection-for "{term.amacs_home}") '
              '"commit") (buffer-substring-no-properties (point-min) (line-end-position 6)))')
    term.wait_for(lambda _s: "[TICK 2]" in term.elisp_string(commit), timeout=10, what="RET: that commit shown")
    assert term.elisp_string(here).startswith(log + "|"), term.elisp_string(here)
    term.press("p")
    term.wait_for(lambda _s: "[TICK 3][no-thread]" in term.elisp_string(here), timeout=10, what="p: back")


def test_rewind_replays_the_changed_lines_of_the_turns_it_keeps(terminal, tmp_path):
    """A newcomer ran the demo's ``note`` and ``todo``, then rewound: the replayed replies said "RET
    on the ▸ changed line below" and no ▸ changed line was replayed.  Each kept turn's line shows
    again where the live turn drew it, RET on it still shows the diff; the abandoned turn's does not."""
    term = terminal(160, 50, args=("--demo",), ANTHROPIC_API_KEY="", ANTHROPIC_BASE_URL="")
    for word, changed in (("note", "▸ changed: notes (buffer, +1 line)"), ("todo", "(new file, +1 line)"),
                          ("note", "▸ changed: notes (buffer, +1 line)")):
        term.type(word)
        term.press("Enter")
        term.wait_for_elisp("(not (amacs-shell-busy-p))", timeout=30, what=f"the end of the turn of {word!r}")
        term.wait_for(changed, what=f"the changed line of {word!r}")
    copy = tmp_path / "shell.txt"  # the shell's text, its newlines as they are

    def shell_text() -> str:
        term.elisp(f'(with-current-buffer (amacs-shell--buffer) (let ((coding-system-for-write (quote utf-8))) '
                   f'(write-region nil nil "{copy}" nil (quote silent))))')
        return copy.read_text()

    live = shell_text()
    first_two = live.split("amacs> note", 1)[1].rsplit("amacs> note", 1)[0]
    assert first_two.count("▸ changed:") == 2, first_two
    term.press("M-x")
    term.type("amacs-rewind")
    term.press("Enter")
    # Typed twice: each copy says when it was typed, the newest (the default) too.
    term.wait_for(lambda screen: re.search(r"Go back to before you typed \(default note  \(typed [^)]+\), "
                                           r"your last input\):", screen), what="the rewind's input prompt")
    term.press("Enter")  # the newest input: the second note's turn is abandoned
    term.wait_for("yes or no", what="the rewind's question")
    term.type("yes")
    term.press("Enter")
    term.wait_for(lambda _s: "The conversation up to there:" in shell_text(), what="the rewind's replay")
    replayed = shell_text().split("The conversation up to there:\n", 1)[1].rsplit("\namacs> ", 1)[0]
    assert replayed.rstrip("\n") == "amacs> note" + first_two.rstrip("\n"), (first_two, replayed)
    assert "earlier Emacs" not in replayed
    # RET on the replayed line offers the diff and the undo, as the live one did.
    term.press("C-r")
    term.type("changed: notes")
    term.press("Enter")
    term.press("Enter")
    term.wait_for("Undo the agent's change to buffer notes", what="the diff and the offer to undo")
    term.press("n")
