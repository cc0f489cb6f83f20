"""Every agent obeys the same rules (issue 11; agent-world-architecture.md, Compulsions and The World).

Each test drives the real shell in batch Emacs against the fake model and
asserts on the requests the fake received: who called the model, and what it saw.
"""

import re
import subprocess
import threading
import time

import pytest

from amacs_server.inference.parse import MAX_PARSE_RETRIES, RETRY_PROMPT
from amacs_server.persistence.chat_log import ChatLog
from tests.context_items import said
from tests.e2e.agent_fakes import (
    calls_by,
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
from tests.e2e.harness import elisp_string, finish_emacs, run_emacs, start_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e


def test_a_subagent_stops_at_the_budget(fake, home, scripted):
    """The primary's first call spends the budget: the task it starts makes no model call, and the person is told."""

    def answer(body):
        if who(body)[0] == "primary":
            return run_elisp('(agent-task "researcher" "dig into it")')
        return say("found it")

    run = scripted(answer, send("research"), wait_text("wanted another model call"), AMACS_BUDGET_LIMIT="0.0000001")
    assert calls_by(fake, "task-1") == []
    assert "task-1 (task researcher) wanted another model call and was stopped" in run.shell
    assert [e["data"]["state"] for e in transcript_events(home, "task-1") if e["event"] == "agent_end"] == ["stopped"]


def test_interrupt_stops_a_running_task(fake, home):
    """C-c C-c while a task waits on the model: no model call from it afterwards; its transcript says interrupted."""
    hold = threading.Event()

    def answer(body):
        me = who(body)[0]
        if me == "primary":
            if "<last-eval-result>" in transcript(body)[-1]:
                return say("Waiting for the task.")
            return run_elisp('(agent-wait-for (plist-get (agent-task "researcher" "slow work") :talk-id) '
                             ':timeout 60)')
        return _held(hold)

    fake.respond_with(answer)
    marker = home.parent / "task-called"
    program = session(
        '(amacs-e2e-send-no-wait "start a slow task")',
        f'(amacs-e2e-wait (lambda () (file-exists-p {elisp_string(str(marker))})) "the task\'s model call")',
        "(with-current-buffer amacs-shell-buffer-name (call-interactively (key-binding (kbd \"C-c C-c\"))))",
        '(amacs-e2e-wait (lambda () (not amacs-shell-busy)) "the prompt")',
        pause(1.0))
    proc = start_emacs(home, fake.url, program)
    try:
        deadline = time.monotonic() + 30
        while not calls_by(fake, "task-1"):
            assert time.monotonic() < deadline, "the task never called the model"
            time.sleep(0.05)
        marker.touch()  # the task's call is under way (held by the fake): now C-c C-c
        run = finish_emacs(proc, home, timeout=60).check()
    finally:
        hold.set()
    time.sleep(0.5)  # the held answer is released: nothing may follow it
    assert len(calls_by(fake, "task-1")) == 1
    assert "Interrupted." in run.shell
    events = [e["event"] for e in transcript_events(home, "task-1")]
    assert "interrupted" in events
    assert [e["data"]["state"] for e in transcript_events(home, "task-1") if e["event"] == "agent_end"] == [
        "interrupted"]
    # The tick responded (its eval started the task and waited) and was committed; what the
    # interrupt ended was its wait.  Its second commit says so, not that the tick had no response
    # (a newcomer read two [TICK 50] commits, the second "(no response: interrupted by the person)").
    subjects = subprocess.run(["git", "-C", str(home), "log", "--reverse", "--format=%s"], capture_output=True,
                              text=True, check=True).stdout.splitlines()
    assert [s.partition("] «")[2] for s in subjects if s.startswith("[TICK 1]")] == [
        "start a slow task» — thinking",
        "start a slow task» — (its wait for its subagents ended: interrupted by the person)"], subjects


def _held(hold):
    from tests.fake_anthropic import Reply, agent_json

    return Reply(agent_json("a late answer"), hold=hold)


def test_a_compulsion_on_a_task_blocks_that_tasks_eval(fake, home, scripted):
    """A task attaches a compulsion to itself; the compulsion blocks the task's eval, and the task hears why."""

    def answer(body):
        me, kind, _template = who(body)
        msgs = transcript(body)
        if me == "primary":
            if "Agent" in msgs[-1] and "task-1" in msgs[-1]:
                return say("The task is back.")
            if "<last-eval-result>" in msgs[-1]:
                return say("Started.")
            return run_elisp('(agent-task "researcher" "work" :allowed (list "eval" "compulsion"))')
        if kind == "compulsion":
            if msgs[-1].startswith("[before action]") and "forbidden" in msgs[-1]:
                return say("No messages from this task.")
            return say("")
        if len(msgs) == 1:
            return run_elisp('(agent-compulsion "spawn-limiter" "watch this task")')
        if "blocked by compulsion" in msgs[-1]:
            return say("Blocked, so I stop.")
        return run_elisp('(message "forbidden")')

    scripted(answer, send("go"), wait_text("The task is back."))
    task_calls = calls_by(fake, "task-1")
    assert "blocked by compulsion compulsion-" in transcript(task_calls[-1])[-1]
    asked = [transcript(r["body"])[-1] for r in fake.requests if who(r["body"])[1] == "compulsion"]
    assert any(m.startswith('[before action] The agent wants to evaluate:\n(message "forbidden")') for m in asked)
    blocked = [e for e in transcript_events(home, "task-1") if e["event"] == "blocked"]
    assert len(blocked) == 1 and blocked[0]["data"]["action"] == "eval"


def test_a_compulsion_holds_the_primarys_reply_until_a_condition_holds(fake, home, scripted):
    """A reply is an action: the compulsion blocks it until the agent says it considered viewpoints."""

    def answer(body):
        me, kind, _template = who(body)
        msgs = transcript(body)
        if kind == "compulsion":
            last = msgs[-1]
            if last.startswith("[before action]") and "wants to reply" in last and "considered" not in last:
                return say("Consider the viewpoints before you answer.")
            return say("")
        ctx = msgs[-1]
        if "your reply was not delivered" in ctx:
            return say("Having considered the viewpoints: ship on Monday.")
        if "<last-eval-result>" in ctx:
            return say("Ship on Friday!")
        return run_elisp('(agent-compulsion "spawn-limiter" "hold replies")')

    run = scripted(answer, send("when do we ship?"),
                   wait_text("Having considered the viewpoints"))
    assert "Ship on Friday!" not in run.shell
    assert "A reply was held back: blocked by compulsion" in run.shell
    chat = (home / "agent-chat.org").read_text()
    assert "Ship on Friday!" not in chat and "Having considered the viewpoints: ship on Monday." in chat
    # The held reply's tick says it was blocked and by whom, in agent-chat.org (no empty
    # ``** Agent``) and in its commit's subject, as the transcript's reply_blocked does.
    held = [e for e in ChatLog(home / "agent-chat.org").read() if e.blocked]
    assert [e.blocked for e in held] == [["A reply was held back: blocked by compulsion compulsion-1 (spawn-limiter): "
                                          "Consider the viewpoints before you answer."]]
    assert held[0].agent is None
    subjects = subprocess.run(["git", "-C", str(home), "log", "--format=%s"], capture_output=True, text=True,
                              check=True).stdout.splitlines()
    subject = [s for s in subjects if s.startswith(f"[TICK {held[0].tick}]")]
    assert len(subject) == 1 and ("] reply blocked by compulsion-1 (spawn-limiter): Consider the viewpoints "
                                  "before you answer. — ") in subject[0], subject


def test_a_task_out_of_steps_says_so_in_its_result(fake, home, scripted):
    def answer(body):
        me = who(body)[0]
        msgs = transcript(body)
        if me == "primary":
            if "step-limit" in msgs[-1]:
                return say("The task ran out of steps.")
            if "<last-eval-result>" in msgs[-1]:
                return say("Started.")
            return run_elisp('(agent-task "researcher" "loop forever")')
        return run_elisp("(+ 1 1)")

    scripted(answer, send("go"), wait_text("The task ran out of steps."))
    assert len(calls_by(fake, "task-1")) == 8  # Limits.max_steps
    result = [e for e in transcript_events(home, "primary") if e["event"] == "event"
              and e["data"]["source"] == "task-1"]
    assert result[0]["data"]["content"]["status"] == "step-limit"


def test_a_task_and_the_primary_share_one_parse_policy(fake, home, scripted):
    """A task's answers that are never valid JSON get the primary's retry prompt, the same
    number of times (MAX_PARSE_RETRIES), then its text is kept as its answer (the fallback)."""

    def answer(body):
        me = who(body)[0]
        msgs = transcript(body)
        if me == "primary":
            if "task-1" in msgs[-1] and "Agent" in msgs[-1]:
                return say("The task answered.")
            if "<last-eval-result>" in msgs[-1]:
                return say("Started.")
            return run_elisp('(agent-task "researcher" "answer badly")')
        return Reply(f"not json, try {len(calls_by(fake, 'task-1')) + 1}")

    scripted(answer, send("go"), wait_text("The task answered."))
    calls = calls_by(fake, "task-1")
    assert len(calls) == MAX_PARSE_RETRIES + 1
    for call in calls[1:]:
        last = call["messages"][-1]
        assert last["role"] == "user" and said(last["content"]) == RETRY_PROMPT and "notice.retry" in last["content"]
    errors = [e for e in transcript_events(home, "task-1") if e["event"] == "parse_error"]
    assert [e["data"]["attempt"] for e in errors] == list(range(MAX_PARSE_RETRIES + 1))
    result = [e for e in transcript_events(home, "primary") if e["event"] == "event"
              and e["data"]["source"] == "task-1"]
    reply = result[0]["data"]["content"]["reply"]
    assert reply == f"(answer not valid JSON after {MAX_PARSE_RETRIES} retries) not json, try {MAX_PARSE_RETRIES + 1}"


def test_a_disallowed_action_comes_back_as_an_error(fake, home, scripted):
    """A task allowed only to talk tries an eval: it is not run, and the task hears why."""

    def answer(body):
        me = who(body)[0]
        msgs = transcript(body)
        if me == "primary":
            if "Agent" in msgs[-1] and "task-1" in msgs[-1]:
                return say("Task finished.")
            if "<last-eval-result>" in msgs[-1]:
                return say("Started.")
            return run_elisp('(agent-task "researcher" "try an eval" :allowed (list "talk"))')
        if "<last-eval-result>" in msgs[-1]:
            return say("Understood, no eval.")
        return run_elisp("(setq amacs-rules-test-ran t)")

    run = scripted(answer, send("go"), wait_text("Task finished."),
                   '(princ (format "RAN<<%S>>\\n" (bound-and-true-p amacs-rules-test-ran)))')
    second = transcript(calls_by(fake, "task-1")[1])[-1]
    assert "eval is not among your allowed actions (talk); it was not run" in second
    assert "RAN<<nil>>" in run.stdout


def test_emacs_gone_mid_turn_means_no_more_model_calls(fake, home):
    """Emacs is killed while the primary's turn runs evals: the server makes no further model call."""
    fake.respond_with(lambda body: run_elisp("(sleep-for 0.2)"))
    proc = start_emacs(home, fake.url, session('(amacs-e2e-send-no-wait "keep going")',
                                               pause(30)))
    deadline = time.monotonic() + 30
    while len(fake.requests) < 3:
        assert time.monotonic() < deadline, "the turn did not start"
        time.sleep(0.05)
    proc.kill()
    finish_emacs(proc, home, timeout=10)
    at_kill = len(fake.requests)
    time.sleep(2.0)
    assert len(fake.requests) <= at_kill + 1  # at most the call already under way


def test_the_hub_cancels_a_task_and_its_subtask(fake, home):
    """k on a task's line in the hub: the task and the subtask it started make no model call afterwards."""
    hold = threading.Event()

    def answer(body):
        me = who(body)[0]
        msgs = transcript(body)
        if me == "primary":
            if "<last-eval-result>" in msgs[-1]:
                return say("Started.")
            return run_elisp('(agent-task "researcher" "outer")')
        if me == "task-1":
            if len(msgs) == 1:
                return run_elisp('(agent-wait-for (plist-get (agent-task "researcher" "inner") :talk-id) :timeout 60)')
            return say("outer done")
        return _held(hold)  # task-2 hangs on the model

    fake.respond_with(answer)
    marker = home.parent / "inner-called"
    program = session(
        send("start"),
        f'(amacs-e2e-wait (lambda () (file-exists-p {elisp_string(str(marker))})) "the inner task call")',
        "(amacs-hub)",
        '(amacs-e2e-wait (lambda () (with-current-buffer "*amacs-hub*" (save-excursion (goto-char (point-min)) '
        '(search-forward "task-1 " nil t)))) "task-1 in the hub")',
        '(with-current-buffer "*amacs-hub*" (goto-char (point-min)) (search-forward "task-1 ") '
        "(cl-letf (((symbol-function 'y-or-n-p) (lambda (&rest _) t))) "
        "(call-interactively (key-binding (kbd \"k\")))))",
        pause(1.0))
    proc = start_emacs(home, fake.url, program)
    try:
        deadline = time.monotonic() + 30
        while not calls_by(fake, "task-2"):
            assert time.monotonic() < deadline, "the inner task never called the model"
            time.sleep(0.05)
        marker.touch()
        finish_emacs(proc, home, timeout=60).check()
    finally:
        hold.set()
    time.sleep(0.5)
    assert len(calls_by(fake, "task-2")) == 1 and len(calls_by(fake, "task-1")) == 1
    for agent in ("task-1", "task-2"):
        assert "cancelled" in [e["event"] for e in transcript_events(home, agent)], agent


def test_pause_and_resume_from_elisp(fake, home):
    """A paused task makes no model call until resumed; then it goes on."""
    from tests.fake_anthropic import Reply, agent_json

    def answer(body):
        if who(body)[0] == "primary":
            return say("ok")
        if len(transcript(body)) >= 7:
            return say("finished")
        return Reply(agent_json(None, eval="(+ 1 1)"), delay=0.2)

    fake.respond_with(answer)
    program = session(
        send("hello"),
        '(setq e2e-task (plist-get (agent-task "researcher" "count") :handle))',
        pause(0.3),
        "(agent-pause e2e-task)",
        pause(0.5),  # the call under way when paused may finish
        '(princ (format "PAUSED<<%s>>\\n" (length (agent-list-agents))))',
        "(setq e2e-calls-paused (length (seq-filter (lambda (a) (equal (plist-get a :state) \"paused\")) "
        "(agent-list-agents))))",
        '(princ (format "NPAUSED<<%s>>\\n" e2e-calls-paused))',
        pause(1.0),
        "(agent-resume e2e-task)",
        '(amacs-e2e-wait (lambda () (null (agent-list-agents))) "the task to finish")')
    proc = start_emacs(home, fake.url, program)
    deadline = time.monotonic() + 60
    counts = []
    while proc.poll() is None and time.monotonic() < deadline:
        counts.append(len(calls_by(fake, "task-1")))
        time.sleep(0.1)
    run = finish_emacs(proc, home, timeout=30).check()
    assert "NPAUSED<<1>>" in run.stdout
    assert max(counts.count(n) for n in set(counts)) >= 10  # one count held for >= 1 s: paused
    assert len(calls_by(fake, "task-1")) == 4  # and it went on after resume, to its end
    assert {"paused", "resumed"} <= {e["event"] for e in transcript_events(home, "task-1")}


def test_the_person_talks_to_a_viewpoint_from_the_hub(fake, home, scripted):
    def answer(body):
        me = who(body)[0]
        msgs = transcript(body)
        if me == "primary":
            if "<last-eval-result>" in msgs[-1]:
                return say("The skeptic is here.")
            return run_elisp('(agent-viewpoint "skeptic" "debater")')
        if msgs[-1] == "[person] is it safe?":
            return say("Not until the tests pass.")
        return say("?")

    run = scripted(answer, send("bring a skeptic"),
                   "(amacs-hub)",
                   '(amacs-e2e-wait (lambda () (with-current-buffer "*amacs-hub*" (save-excursion (goto-char (point-min)) '
                   '(search-forward "viewpoint-skeptic" nil t)))) "the viewpoint in the hub")',
                   '(with-current-buffer "*amacs-hub*" (goto-char (point-min)) (search-forward "viewpoint-skeptic") '
                   "(cl-letf (((symbol-function 'read-string) (lambda (&rest _) \"is it safe?\"))) "
                   "(call-interactively (key-binding (kbd \"t\")))))",
                   wait_text("[viewpoint-skeptic] Not until the tests pass."))
    assert "[viewpoint-skeptic] Not until the tests pass." in run.shell
    # What the person said from the hub shows in the shell, as @skeptic typed there does, and
    # both lines are in agent-chat.org, each naming who said it.
    assert "You said to viewpoint-skeptic (from the hub): is it safe?" in run.shell
    assert [line for e in ChatLog(home / "agent-chat.org").read() for line in e.talk] == [
        "the person to viewpoint-skeptic: is it safe?",
        "viewpoint-skeptic (debater) to the person: Not until the tests pass."]


def test_a_task_paused_during_its_model_call_delivers_nothing_until_resumed(fake, home):
    """Paused while its one model call is under way (a newcomer pressed z in the hub): the call
    finishes, but the task does not act on the answer or report done until it is resumed."""

    def answer(body):
        if who(body)[0] == "primary":
            return say("ok")
        return Reply(agent_json("finished"), delay=0.8)

    fake.respond_with(answer)
    program = session(
        send("hello"),
        '(setq e2e-task (plist-get (agent-task "researcher" "one step") :handle))',
        pause(0.3),
        "(agent-pause e2e-task)",
        pause(2.0),  # the call ended ~1.5 s ago
        '(princ (format "STATES<<%S>>\\n" (mapcar (lambda (a) (plist-get a :state)) (agent-list-agents))))',
        "(agent-resume e2e-task)",
        '(amacs-e2e-wait (lambda () (null (agent-list-agents))) "the task to finish")')
    run = run_emacs(home, fake.url, program).check()
    assert len(calls_by(fake, "task-1")) == 1
    assert 'STATES<<("paused")>>' in run.stdout, run.stdout
    events = [e["event"] for e in transcript_events(home, "task-1")]
    assert events.index("resumed") < events.index("agent_end"), events


def test_a_task_paused_from_the_hub_is_shown_paused_and_the_hub_redraws_by_itself(fake, home):
    """z in the hub on a working task: the shell's line for it and the header say paused (not
    working), t in the hub and @task-1 in the shell say it reads the message once resumed; z again
    shows it working; and
    the hub shows the task's end without g."""

    calls = []

    def answer(body):
        if who(body)[0] == "primary":
            return say("ok")
        calls.append(1)
        if len(calls) >= 10:  # about 2 s of work after it is resumed
            return say("finished")
        return Reply(agent_json(None, eval="(+ 1 1)"), delay=0.4)

    fake.respond_with(answer)
    shell = "(get-buffer amacs-shell-buffer-name)"
    footer = (f'(with-current-buffer {shell} (save-excursion (goto-char (point-min)) '
              '(and (search-forward "⟳ task-1" nil t) (buffer-substring (line-beginning-position) '
              "(line-end-position)))))")
    hub_line = ('(with-current-buffer "*amacs-hub*" (save-excursion (goto-char (point-min)) '
                '(and (search-forward "task-1" nil t) (buffer-substring (line-beginning-position) '
                "(line-end-position)))))")
    z = ('(with-current-buffer "*amacs-hub*" (goto-char (point-min)) (search-forward "task-1") '
         '(call-interactively (key-binding (kbd "z"))))')

    def until(what, *conditions):
        """Wait (not a fixed pause: a loaded machine is slow) until every lisp CONDITION holds."""
        return f'(amacs-e2e-wait (lambda () (and {" ".join(conditions)})) "{what}")'

    def has(form, text):
        return f'(let ((s {form})) (and s (string-match-p "{text}" s)))'

    header = f"(with-current-buffer {shell} (amacs-shell-state-string))"

    def show(tag):
        return (f'(princ (format "{tag}-FOOTER<<%s>>\\n{tag}-HEADER<<%s>>\\n{tag}-HUB<<%s>>\\n" {footer} '
                f"(with-current-buffer {shell} (amacs-shell-state-string)) {hub_line}))")

    program = session(
        "(advice-add 'message :filter-return (lambda (m) (when m (princ (format \"MSG<<%s>>\\n\" m))) m))",
        send("hello"),
        '(agent-task "researcher" "count")',
        "(amacs-hub)",
        '(amacs-e2e-wait (lambda () (with-current-buffer "*amacs-hub*" (save-excursion (goto-char (point-min)) '
        '(search-forward "task-1" nil t)))) "task-1 in the hub")',
        pause(0.5),
        show("WORKING"),
        z,
        until("task-1 shown paused", has(footer, "paused"), has(header, "1 paused"), has(hub_line, "paused")),
        show("PAUSED"),
        '(with-current-buffer "*amacs-hub*" (goto-char (point-min)) (search-forward "task-1") '
        "(cl-letf (((symbol-function 'read-string) (lambda (&rest _) \"how far?\"))) "
        "(call-interactively (key-binding (kbd \"t\")))))",
        pause(0.5),
        "(amacs-e2e-send-no-wait \"@task-1 and now?\")",
        wait_text("task-1 is paused; it reads this once resumed (z in the hub)."),
        z,
        until("task-1 shown working again", f"(not {has(footer, 'paused')})", has(header, "1 agent working")),
        show("RESUMED"),
        # The hub shows the task's end by itself (no g): the wait fails the run if it never does.  Not
        # "no agent left": a talk queued while it was paused may take it up again once it has ended.
        until("the hub to show task-1 done by itself", has(hub_line, " done ")))
    out = run_emacs(home, fake.url, program).check().stdout

    def shown(tag, part):
        found = re.search(rf"{tag}-{part}<<(.*?)>>", out)
        assert found, out
        return found.group(1)

    assert "working" in shown("WORKING", "HEADER") and "paused" not in shown("WORKING", "FOOTER")
    assert "paused" in shown("PAUSED", "FOOTER"), out
    assert "agent working" not in shown("PAUSED", "HEADER") and "1 paused" in shown("PAUSED", "HEADER"), out
    assert "paused" in shown("PAUSED", "HUB"), out
    assert "task-1 is paused; it will read it once resumed" in out, out
    assert "paused" not in shown("RESUMED", "FOOTER") and "1 agent working" in shown("RESUMED", "HEADER"), out
