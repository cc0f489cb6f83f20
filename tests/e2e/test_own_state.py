"""Every agent acts on its own state, its compulsions see every step, and the person's attention
is given, not taken (docs/ARCHITECTURE.md, Trust; agent-world-architecture.md: Compulsions,
"consulted after each result"; request_input).
"""

import re

import pytest

from tests.context_items import request_text
from tests.e2e.agent_fakes import (
    calls_by,
    last_eval_result,
    pause,
    run_elisp,
    say,
    send,
    session,
    transcript,
    transcript_events,
    wait_text,
    who,
)
from tests.e2e.harness import run_emacs

pytestmark = pytest.mark.e2e

MEDDLE = """
(mapcar (lambda (f) (condition-case err (progn (funcall f) "accepted") (error (amacs-error-message err))))
        (list (lambda () (agent-set-consciousness 'chat-context-depth 0))
              (lambda () (agent-create-thread "hijack" :concern "the task's"))
              (lambda () (agent-switch-thread "mine"))
              (lambda () (agent-thread-add-buffer "mine" "*scratch*"))
              (lambda () (agent-bind-skill-to-thread "researcher" "mine"))
              (lambda () (agent-complete-thread "mine" :learned "nothing"))))
"""


def test_a_tasks_consciousness_and_thread_calls_leave_the_primarys_as_they_were(fake, home):
    """A task's agent-set-consciousness and thread tools are refused, naming it; the primary's
    chat depth and active thread are what they were."""

    def answer(body):
        me, kind, _ = who(body)
        if kind == "task":
            return say("meddled") if "<last-eval-result>" in transcript(body)[-1] else run_elisp(MEDDLE)
        ctx = request_text(body)
        if "thread-made" not in ctx:
            return run_elisp('(agent-create-thread "mine" :concern "the primary\'s")', monologue="thread-made")
        if "task-started" not in ctx:
            return run_elisp('(agent-task "researcher" "meddle" :allowed (list "eval" "talk"))',
                             monologue="task-started")
        return say("Done.", monologue="done")

    fake.respond_with(answer)
    show = ('(let ((c (agent-consciousness))) (princ (format "STATE<<%S %S>>\\n" '
            "(alist-get 'chat-context-depth c) (alist-get 'active-thread c))))")
    run = run_emacs(home, fake.url, session(send("go"), wait_text("Done."), pause(1.0), show)).check()
    task = next(who(r["body"])[0] for r in fake.requests if who(r["body"])[1] == "task")
    result = last_eval_result(transcript(calls_by(fake, task)[1])[-1])
    outcomes = re.findall(r'"((?:[^"\\]|\\.)*)"', result["result"])
    assert len(outcomes) == 6, result
    for out in outcomes:
        assert out.startswith("refused: ") and f"{task} is not the primary" in out, out
    assert 'STATE<<5 "mine">>' in run.stdout, run.stdout


def test_a_compulsion_on_a_task_sees_what_the_task_was_told_before_its_first_step(fake, home, scripted):
    """A compulsion set on a task when it starts blocks any action once it has seen the word
    PINEAPPLE, which only the task's first message holds: it must see that message before the
    task's first model call, since the task acts at once."""

    def answer(body):
        me, kind, _ = who(body)
        msgs = transcript(body)
        if kind == "compulsion":
            if msgs[-1].startswith("[before action] The agent wants to evaluate") and any("PINEAPPLE" in m for m in msgs):
                return say("blocked by the pineapple rule")
            return say("")
        if kind == "task":
            if "<last-eval-result>" in msgs[-1]:
                return say("stopped")
            return run_elisp('(message "acting on it")', monologue="acting")
        ctx = request_text(body)
        if "task-started" not in ctx:
            return run_elisp('(agent-task "researcher" "The word is PINEAPPLE. Act on it now." '
                             ':allowed (list "eval" "talk") :compulsions (list "spawn-limiter"))',
                             monologue="task-started")
        return say("Started.", monologue="done")

    scripted(answer, send("go"), wait_text("task-1 (researcher) done"), pause(0.5))
    task_calls = calls_by(fake, "task-1")
    result = last_eval_result(transcript(task_calls[1])[-1])
    assert not result["success"] and "blocked by the pineapple rule" in result["error"], result
    comp = [r["body"] for r in fake.requests if who(r["body"])[1] == "compulsion"]
    first = transcript(comp[0])[-1]
    assert first.startswith("[before model call]") and "task-1 was told:" in first and "PINEAPPLE" in first, first


def test_only_a_task_started_with_request_input_talks_to_the_person(fake, home, scripted):
    """Without :request-input, a task's agent-talk-user is refused as data and nothing reaches the
    person; with it, its words are shown in the shell."""

    def answer(body):
        me, kind, template = who(body)
        msgs = transcript(body)
        if kind == "task":
            if "<last-eval-result>" in msgs[-1]:
                return say(f"{me} finished")
            return run_elisp(f'(agent-talk-user "hello person from {me}")')
        ctx = request_text(body)
        if "first-task" not in ctx:
            return run_elisp('(agent-task "researcher" "greet" :allowed (list "eval" "talk"))', monologue="first-task")
        if "second-task" not in ctx:
            return run_elisp('(agent-task "researcher" "greet" :allowed (list "eval" "talk") :request-input t)',
                             monologue="second-task")
        return say("Both ran.", monologue="done")

    run = scripted(answer, send("go"), wait_text("Both ran."), wait_text("hello person from"),
                   pause(1.0))
    tasks = sorted({who(r["body"])[0] for r in fake.requests if who(r["body"])[1] == "task"})
    first, second = tasks
    refused = last_eval_result(transcript(calls_by(fake, first)[1])[-1])
    assert not refused["success"] and f"{first} may not talk to the person" in refused["error"], refused
    assert f"hello person from {first}" not in run.shell.replace(f'(agent-talk-user "hello person from {first}")', "")
    assert f"[{second}] hello person from {second}" in run.shell


def test_a_timer_a_tasks_eval_left_neither_talks_nor_acts_as_the_primary(fake, home, scripted):
    """A task without :request-input leaves a timer that, after its eval ended, talks to the person
    and makes a thread.  No eval calls them and no key of the person's did, so nobody can say they
    are the primary's: each is refused, said in the shell at once and recorded; nothing reaches the
    person and the primary's threads are as they were."""
    timer = ('(progn (run-at-time 1.0 nil (lambda () (ignore-errors (agent-talk-user (concat "HELLO-" "FROM-TIMER"))) '
             '(ignore-errors (agent-create-thread (concat "timer-" "thread"))))) "timer set")')

    def answer(body):
        me, kind, _ = who(body)
        if kind == "task":
            return say(f"{me} finished") if "<last-eval-result>" in transcript(body)[-1] else run_elisp(timer)
        ctx = request_text(body)
        if "task-started" not in ctx:
            return run_elisp('(agent-task "researcher" "leave a timer" :allowed (list "eval" "talk"))',
                             monologue="task-started")
        return say("Started.", monologue="done")

    show = ('(let ((c (agent-consciousness))) (princ (format "STATE<<%S %S>>\\n" '
            "(alist-get 'active-thread c) (alist-get 'pending-threads c))))")
    run = scripted(answer, send("go"), wait_text("Refused thread_create"), pause(0.5), show)
    assert "Refused talk_user('HELLO-FROM-TIMER'): no key of yours and no agent's eval called it" in run.shell
    assert run.shell.count("HELLO-FROM-TIMER") == 1, run.shell  # only in the refusal
    assert "Refused thread_create('timer-thread'" in run.shell
    events = [e["data"] for e in transcript_events(home) if e["event"] == "control_unattributed"]
    assert [e["method"] for e in events] == ["talk_user", "thread_create"], events
    assert all(e["via"] == "timer-event-handler" for e in events), events
    assert "timer-thread" not in run.stdout.split("STATE<<")[-1], run.stdout
