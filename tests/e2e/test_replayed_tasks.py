"""A newcomer in tmux: the ``✓ task-1 (researcher) done: …`` lines the live shell showed when
subagent tasks ended were missing from the exchanges shown again after M-x amacs-rewind and in
a shell resumed on the same home.  Now agent-chat.org keeps each such line (``** Task ended``)
where it fell among the ticks' parts, and the replay draws them as the live shell did: the same
lines in the same order, a task that ended while the agent was answering before its reply, and
none of the ticks a rewind leaves."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from amacs_server.persistence.chat_log import ChatLog, ChatTaskEnded
from tests.demo_model import has_eval_result, last_human
from tests.e2e.harness import run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e

# Enough exchanges resumed to hold every one; (amacs-e2e-visible), in driver.el, is the shell's text as the person sees it.
VISIBLE = r"""
(setq amacs-shell-resume-exchanges 10)
"""

PAIR = ('(agent-wait-for (list (plist-get (agent-task "researcher" "Find sources on {a}") :talk-id) '
        '(plist-get (agent-task "researcher" "Find sources on {b}") :talk-id)))')


class Model:
    """The primary asks two researchers and waits ("pair one": A and B answer; "pair two": C
    answers, D's model call fails), or starts one and does not wait ("start"); the researcher
    it started answers only once the primary is asked "slow", whose reply comes late: that
    task ends while the agent is answering."""

    def __init__(self) -> None:
        self.slow_asked = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply:
        text = json.dumps(body)
        system = json.dumps(body.get("system"))
        if "a task" in system and "You are" in system:  # a subagent
            if "Find sources on D" in text:
                return Reply(status=400)
            if "Find sources on E" in text:
                self.slow_asked.wait(30)
                return Reply(agent_json("E has one source."))
            return Reply(agent_json(f"{'A' if 'sources on A' in text else 'B' if 'sources on B' in text else 'C'}"
                                    " found three sources."), delay=0.2 if "sources on A" in text else 0.8)
        human = last_human(body).strip()
        after = has_eval_result(body)
        if human.startswith("pair") and not after:
            a, b = ("A", "B") if human == "pair one" else ("C", "D")
            return Reply(agent_json(f"I'll ask two researchers ({human}).", eval=PAIR.format(a=a, b=b)))
        if human == "start" and not after:
            return Reply(agent_json("I'll start one.", eval='(agent-task "researcher" "Find sources on E")'))
        if human == "slow" and not after:
            self.slow_asked.set()
            return Reply(agent_json("Slowly said."), delay=4.0)
        return Reply(agent_json(f"Done with {human}." if after else f"You said {human}."))


def between(text: str, tag: str) -> str:
    return text.split(f"{tag}<<", 1)[1].split(">>\n", 1)[0]


def wait_quiet(text: str) -> str:
    """Elisp: wait for TEXT in the shell, then for the turn and every subagent to be over."""
    return (f'(amacs-e2e-wait-text "{text}") '
            "(amacs-e2e-wait (lambda () (and (not amacs-shell-busy) "
            "(null (amacs-shell--get 'amacs-shell--agents)))) \"the agents to be done\") "
            "(accept-process-output nil 0.3) ")


def test_task_lines_are_replayed_after_rewind_and_resume(fake, home):
    model = Model()
    fake.respond_with(model)
    live = run_emacs(home, fake.url, VISIBLE + "(amacs-e2e-open) "
                     '(amacs-e2e-send-no-wait "pair one") ' + wait_quiet("Done with pair one.")
                     + '(amacs-e2e-send-no-wait "start") ' + wait_quiet("Done with start.")
                     + '(amacs-e2e-send-no-wait "slow") ' + wait_quiet("E has one source")
                     + '(amacs-e2e-send-no-wait "pair two") ' + wait_quiet("Done with pair two.")
                     + '(amacs-e2e-send "last") '
                     '(princ (format "LIVE<<%s>>\\n" (amacs-e2e-visible))) (amacs-e2e-finish)').check()
    seen = between(live.stdout, "LIVE")
    for line in ("✓ task-1 (researcher) done: A found three sources.",
                 "✓ task-2 (researcher) done: B found three sources.",
                 "✓ task-3 (researcher) done: E has one source.",
                 "✓ task-4 (researcher) done: C found three sources.",
                 "✗ task-5 (researcher) failed: "):
        assert line in seen, seen
    # E's task ended while the agent was answering "slow": before that reply, live.
    assert seen.index("amacs> slow") < seen.index("✓ task-3") < seen.index("Slowly said."), seen

    entries = ChatLog(home / "agent-chat.org").read()
    slow = next(e for e in entries if e.human == "slow")
    assert slow.tasks == [ChatTaskEnded("task-3 (researcher) done: E has one source.", True, before_reply=True)]
    first = entries[0]
    assert [(t.text, t.before_reply) for t in first.tasks] == [
        ("task-1 (researcher) done: A found three sources.", False),
        ("task-2 (researcher) done: B found three sources.", False)]
    two = next(e for e in entries if e.human == "pair two")
    rewind_to = two.tick - 1  # just before "pair two": its tasks are rewound away
    asked = len(fake.requests)

    run = run_emacs(home, fake.url, VISIBLE + "(amacs-e2e-open) (accept-process-output nil 0.3) "
                    '(princ (format "RESUMED<<%s>>\\n" (amacs-e2e-visible))) '
                    f"(amacs-rewind {rewind_to}) (accept-process-output nil 0.3) "
                    '(princ (format "REWOUND<<%s>>\\n" (amacs-e2e-visible))) (amacs-e2e-finish)').check()
    assert len(fake.requests) == asked  # replaying calls no model
    live_part = seen.split("amacs> ", 1)[1].rsplit("\namacs> ", 1)[0]  # every exchange, from the first input
    resumed = between(run.stdout, "RESUMED")
    # Turns of the last Emacs evaluated: what that changed is not known here, and the start says so.
    before = f";; (Turns up to tick {entries[-1].tick} were in an earlier Emacs: no ▸ changed lines.)\n"
    assert ";; Resumed: the last exchanges from agent-chat.org (C-c C-l opens it all):\n" + before + "amacs> " \
        + live_part in resumed, (live_part, resumed)
    rewound = between(run.stdout, "REWOUND").split("The conversation up to there:\n", 1)[1]
    # This Emacs saw none of those turns end: what their evals changed is not known here (elisp knows it).
    said, _, rewound = rewound.partition("\n")
    assert said.startswith(f";; (Turns up to tick {rewind_to} were in an earlier Emacs:"), said
    kept = live_part.split("\namacs> pair two", 1)[0]
    assert rewound.startswith("amacs> " + kept + "\n") and ";; Resumed" not in rewound, (kept, rewound)
    assert "task-4" not in rewound and "task-5" not in rewound


def test_a_task_the_rewind_interrupts_is_not_replayed_under_the_tick_kept(fake, home):
    """A task at work while the agent waits for the person (started, not waited for) is
    interrupted by M-x amacs-rewind: its ``✗`` line is shown, before the rewind's line, and it
    belongs to the future rewound away: agent-chat.org does not get it under the tick kept, so
    no later replay shows it there."""
    model = Model()
    fake.respond_with(model)
    run = run_emacs(home, fake.url, VISIBLE + "(amacs-e2e-open) "
                    '(amacs-e2e-send "hello") '
                    '(amacs-e2e-send-no-wait "start") (amacs-e2e-wait-text "Done with start.") '
                    "(amacs-e2e-wait (lambda () (not amacs-shell-busy)) \"the turn's end\") "
                    "(amacs-rewind 1) (accept-process-output nil 1.0) "
                    '(princ (format "REWOUND<<%s>>\\n" (amacs-e2e-visible))) (amacs-e2e-finish)')
    model.slow_asked.set()  # E's researcher may answer now: nothing waits for it
    run.check()
    shown = between(run.stdout, "REWOUND")
    assert "✗ task-1 (researcher) interrupted" in shown, shown
    assert shown.index("✗ task-1") < shown.index(";; rewound"), shown
    chat = (home / "agent-chat.org").read_text()
    assert "Task ended" not in chat, chat
    replayed = run_emacs(home, fake.url, VISIBLE + "(amacs-e2e-open) (accept-process-output nil 0.3) "
                         '(princ (format "RESUMED<<%s>>\\n" (amacs-e2e-visible))) (amacs-e2e-finish)').check()
    assert "✗ task-1" not in between(replayed.stdout, "RESUMED")


def test_a_task_interrupted_as_emacs_quits_is_not_replayed(fake, home):
    """A task at work when Emacs quits is interrupted with no one to see its ``✗`` line: the
    replay shows what the person saw, so agent-chat.org does not get it (the next start says,
    once, that the task at work was not resumed)."""
    model = Model()
    fake.respond_with(model)
    run_emacs(home, fake.url, VISIBLE + "(amacs-e2e-open) "
              '(amacs-e2e-send-no-wait "start") (amacs-e2e-wait-text "Done with start.") '
              "(amacs-e2e-wait (lambda () (not amacs-shell-busy)) \"the turn's end\") "
              "(amacs-e2e-dump) (kill-emacs 0)").check()
    model.slow_asked.set()
    again = run_emacs(home, fake.url, VISIBLE + "(amacs-e2e-open) (accept-process-output nil 0.3) "
                      '(princ (format "RESUMED<<%s>>\\n" (amacs-e2e-visible))) (amacs-e2e-finish)').check()
    assert "Task ended" not in (home / "agent-chat.org").read_text()
    assert "✗ task-1" not in between(again.stdout, "RESUMED")
