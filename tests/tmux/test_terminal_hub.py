"""The hub (C-c C-v) as a newcomer saw it in tmux, in a real terminal.

Point was put on task-2's line; after C-x o and a message in the shell the
hub was redrawn and showed ``Top L1``; the same while ``k``'s prompt was open
and the tasks ended underneath; ``k`` then ``y`` on a task that had ended said
nothing until a note in the shell much later; and the mode line said the hub
was modified (``%*``).
"""

from __future__ import annotations

import itertools
import re
import threading

import pytest

from tests.e2e.agent_fakes import transcript, who
from tests.fake_anthropic import Reply, agent_json
from tests.tmux.terminal import Terminal
from tests.tmux.test_terminal_shell import send, wait_turn_over

pytestmark = pytest.mark.tmux

HUB = "*amacs-hub*"


def hub_mode_line(term: Terminal) -> str:
    """The hub window's mode line as the screen shows it."""
    return next(row for row in term.lines() if HUB in row and re.search(r"\bL\d+\b", row))


def hub_line_number(term: Terminal) -> int:
    return int(re.search(r"\bL(\d+)\b", hub_mode_line(term)).group(1))


def hub_line_at_point(term: Terminal) -> str:
    """The text of the line the hub window's point is on."""
    return term.elisp_string(
        f'(with-selected-window (get-buffer-window "{HUB}") '
        "(buffer-substring-no-properties (line-beginning-position) (line-end-position)))")


def renders(term: Terminal) -> int:
    return int(term.elisp("amacs-hub--test-renders"))


def test_the_hub_keeps_point_on_the_agent_and_is_never_modified(terminal, fake):
    primary_calls = itertools.count()
    lock = threading.Lock()
    released = {"Find A": threading.Event(), "Find B": threading.Event()}

    def answer(body):
        me, _kind, _template = who(body)
        if me != "primary":
            task = transcript(body)[0]
            return Reply(agent_json(f"{task}: found."), hold=released[task])
        with lock:
            call = next(primary_calls)
        if call == 0:
            return Reply(agent_json("Two researchers are at work.", eval=(
                '(progn (agent-task "researcher" "Find A") (agent-task "researcher" "Find B") t)')))
        return Reply(agent_json("Noted."))

    fake.respond_with(answer)
    term = terminal()
    try:
        term.elisp("(progn (defvar amacs-hub--test-renders 0)"
                   " (add-hook 'amacs-hub-rendered-hook (lambda () (setq amacs-hub--test-renders"
                   " (1+ amacs-hub--test-renders)))))")
        send(term, "research A and B")
        term.wait_for("Two researchers are at work.", timeout=15)
        wait_turn_over(term)
        term.press("C-c C-v")
        term.wait_for(lambda s: "task-2" in s and "running" in s, timeout=10, what="task-2 at work in the hub")
        term.press("C-s")
        term.type("task-2")
        term.press("Enter")
        term.press("C-a")
        term.wait_for(lambda _s: "task-2" in hub_line_at_point(term), timeout=5, what="point on task-2")
        line = hub_line_number(term)
        assert line > 1
        assert ":%%" in hub_mode_line(term), hub_mode_line(term)  # read-only, not modified

        # C-x o to the shell, a message: the hub is redrawn, point stays on task-2's line.
        term.press("C-x o")
        before = renders(term)
        released["Find A"].set()                   # and task-1 ends meanwhile
        send(term, "how goes it?")
        term.wait_for_elisp(f"(> amacs-hub--test-renders {before + 1})", timeout=20,
                            what="the hub redrawn after the ticks")
        wait_turn_over(term)
        term.wait_for(lambda _s: re.search(r"task-1 .* done ", term.screen()) is not None, timeout=10,
                      what="task-1 done in the hub")
        assert "task-2" in hub_line_at_point(term)
        assert hub_line_number(term) == line, hub_mode_line(term)
        assert ":%%" in hub_mode_line(term) and ":%*" not in hub_mode_line(term), hub_mode_line(term)
        assert term.elisp(f'(buffer-modified-p (get-buffer "{HUB}"))') == "nil"

        # Back in the hub, k: task-2 ends while its prompt is open; point stays; y says it had ended.
        term.press("C-x o")
        term.press("k")
        term.wait_for("Cancel task-2 and its subagents? (y or n)", timeout=5)
        before = renders(term)
        released["Find B"].set()
        term.wait_for_elisp(f"(> amacs-hub--test-renders {before})", timeout=20,
                            what="the hub redrawn while the prompt is open")
        term.wait_for(lambda _s: re.search(r"task-2 .* done ", term.screen()) is not None, timeout=10,
                      what="task-2 done in the hub")
        assert "task-2" in hub_line_at_point(term)
        assert hub_line_number(term) == line, hub_mode_line(term)
        term.press("y")
        term.wait_for("AMACS: task-2 has already ended (done)", timeout=3)
        # k on an agent that has ended says so at once, without asking.
        term.press("k")
        term.wait_for(lambda s: "AMACS: task-2 has already ended (done)" in s and "(y or n)" not in s,
                      timeout=3, what="k on an ended task: said at once")
    finally:
        for event in released.values():
            event.set()
