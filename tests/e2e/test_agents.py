"""Agents and the World end to end (issue 5; agent-world-architecture.md; memid spec talk/wait)."""

import json
import subprocess
import sys
import threading

import pytest
import sexpdata

from amacs_server.persistence.chat_log import ChatLog
from tests.context_items import chat_lines, eval_result, newest_message, request_text
from tests.e2e.agent_fakes import (
    calls_by,
    event_lines,
    primary_texts,
    run_elisp,
    say,
    scripted_run,
    send,
    session,
    transcript,
    transcript_events,
    wait_text,
    who,
)
from tests.e2e.harness import run_emacs
from tests.fake_anthropic import Reply

pytestmark = pytest.mark.e2e


def test_websearch_shaped_task_spawns_two_subtasks_and_combines(fake, home, scripted):
    """A Task that fans out to two subtasks, waits for both, and combines their replies."""

    def answer(body):
        me, _kind, _template = who(body)
        msgs = transcript(body)
        if me == "primary":
            ctx = msgs[-1]  # the newest tick (the conversation is append-only, issue 10)
            replies = [e["content"]["reply"] for e in event_lines(ctx) if e.get("type") == "Agent"]
            if replies:
                return say(f"Research says: {replies[0]}")
            if "<last-eval-result>" in ctx:
                return say("Started research.")
            return run_elisp('(agent-task "researcher" "Compare A and B")')
        if msgs[0] == "Compare A and B":
            found = [e for m in msgs for e in event_lines(m)]
            if found:
                return say("Combined: " + " + ".join(sorted(e["content"]["reply"] for e in found)))
            return run_elisp('(agent-wait-for (list (plist-get (agent-task "researcher" "A?") :talk-id) '
                             '(plist-get (agent-task "researcher" "B?") :talk-id)))')
        return say({"A?": "A-answer", "B?": "B-answer"}[msgs[0]])

    scripted(answer, send("research A and B"),
             wait_text("Research says: Combined: A-answer + B-answer"))
    starts = {e["agent_id"]: e for e in transcript_events(home) if e["event"] == "agent_start"}
    assert {a: (s["parent_id"], s["data"]["depth"]) for a, s in starts.items()} == {
        "task-1": ("primary", 1), "task-2": ("task-1", 2), "task-3": ("task-1", 2)}
    ends = {e["agent_id"]: e["data"]["state"] for e in transcript_events(home) if e["event"] == "agent_end"}
    assert ends == {"task-1": "done", "task-2": "done", "task-3": "done"}
    # The default action `done' is not written into a task's own transcript (its subtasks' results
    # say how they ended, "status": "done", which is data, not an action).
    last_task1 = calls_by(fake, "task-1")[-1]
    assert all("done" not in m.replace('"status": "done"', "") for m in transcript(last_task1))
    results = [e for m in transcript(last_task1) for e in event_lines(m)]
    assert [r["content"]["status"] for r in results] == ["done", "done"]


def test_debate_three_viewpoints_two_rounds(fake, home, scripted):
    """Each viewpoint answers in turn; every comment is shared with the others as [name] comment."""
    rounds = {"optimist": 0, "skeptic": 0, "pragmatist": 0}

    def answer(body):
        me, _kind, _template = who(body)
        msgs = transcript(body)
        if me == "primary":
            ctx = msgs[-1]  # the newest tick
            considered = [e for e in event_lines(ctx) if e.get("source") == "consider"]
            if considered and "Friday" in considered[0]["content"]["prompt"]:
                return run_elisp('(agent-consider "And on Monday?")')
            if considered:
                return say("Debate over: " + " | ".join(considered[0]["content"]["comments"]))
            if "<last-eval-result>" in ctx:
                return say("Listening to the panel.")
            return run_elisp('(progn (agent-viewpoint "optimist" "debater") (agent-viewpoint "skeptic" "debater") '
                             '(agent-viewpoint "pragmatist" "debater") (agent-consider "Ship on Friday?"))')
        name = me.removeprefix("viewpoint-")
        rounds[name] += 1
        return say(f"{name} round {rounds[name]}")

    run = scripted(answer, send("debate shipping"), wait_text("Debate over:"))
    assert ("Debate over: [optimist] optimist round 2 | [skeptic] skeptic round 2 | "
            "[pragmatist] pragmatist round 2") in run.shell
    skeptic = calls_by(fake, "viewpoint-skeptic")
    seen = "\n".join(transcript(skeptic[-1]))
    for line in ("[primary] Ship on Friday?", "[optimist] optimist round 1", "[pragmatist] pragmatist round 1",
                 "[primary] And on Monday?", "[optimist] optimist round 2"):
        assert line in seen, line
    assert "[skeptic] skeptic round 1" not in seen  # its own comments are its assistant turns, not shared back
    # The record says who said what, and what began the ticks no input began: the comments the
    # shell showed are in agent-chat.org under the tick they came in, and the tick the comments
    # woke says so there and in its commit's subject.
    entries = ChatLog(home / "agent-chat.org").read()
    talk = [line for e in entries for line in e.talk]
    assert talk[:3] == ["viewpoint-optimist (debater) said: [optimist] optimist round 1",
                        "viewpoint-skeptic (debater) said: [skeptic] skeptic round 1",
                        "viewpoint-pragmatist (debater) said: [pragmatist] pragmatist round 1"]
    woken = [e for e in entries if e.event is not None]
    assert {e.event for e in woken} == {"viewpoints optimist, skeptic and pragmatist commented"}
    assert woken[-1].agent and woken[-1].agent.startswith("Debate over:")
    subjects = subprocess.run(["git", "-C", str(home), "log", "--format=%s"], capture_output=True, text=True,
                              check=True).stdout.splitlines()
    assert any(s.startswith(f"[TICK {woken[-1].tick}]") and
               "on viewpoints optimist, skeptic and pragmatist commented: reply: Debate over:" in s for s in subjects)


def test_compulsion_blocks_the_fourth_task_and_only_it_can_quit(fake, home, scripted):
    """spawn-limiter: the 4th agent-task in a turn is blocked with its reason; agent-quit removes it."""

    def answer(body):
        me, kind, _template = who(body)
        msgs = transcript(body)
        if kind == "compulsion":
            last = msgs[-1]
            if "stop watching" in last:
                if "<last-eval-result>" in last:
                    return say("")
                return run_elisp("(agent-quit)")
            if last.startswith("[before action]") and "agent-task" in last:
                turn = "\n".join(msgs).rsplit("The person said: spawn", 1)[-1]
                if turn.count("(agent-task") >= 4:
                    return say("Three subagents already run in this turn; use their results first.")
            return say("")
        if kind == "task":
            return say("ok")
        ctx, newest = request_text(body), msgs[-1]  # the whole conversation; its newest tick
        said = [line for line in chat_lines(ctx) if line.startswith("Human: ")]
        pending = said[-1] if said else ""
        spawned = ctx.count('"content": "spawn ')
        if pending == "Human: watch me":
            return run_elisp('(agent-compulsion "spawn-limiter")', monologue="attach") \
                if "<last-eval-result>" not in newest else say("Watched.")
        if pending == "Human: spawn" and spawned < 4:
            return run_elisp(f'(agent-task "researcher" "job {spawned + 1}")', monologue=f"spawn {spawned + 1}")
        if pending == "Human: stop watching":
            return run_elisp("(agent-quit)", monologue="try quit") if "try quit" not in ctx else say("Tried.")
        return say("noted", monologue="noted")

    scripted(answer, send("watch me"), send("spawn"), send("stop watching"), send("after"), setup="(setq amacs-max-steps 8) (setq amacs-eval-timeout 10)")
    results = [e for e in transcript_events(home) if e["event"] == "eval_result" and e["agent_id"] == "primary"]
    errors = [r["data"]["error"] for r in results if not r["data"]["success"]]
    assert all("# Spawn limiter" in b["system"][0]["text"] for b in calls_by(fake, "compulsion-1"))  # the shipped one
    assert errors[0] == ("blocked by compulsion compulsion-1 (spawn-limiter): "
                         "Three subagents already run in this turn; use their results first.")
    blocked_ctx = [t for t in primary_texts(fake) if "blocked by compulsion" in t]
    assert blocked_ctx and eval_result(blocked_ctx[0])["error"].startswith("blocked by compulsion compulsion-1")
    assert sum(1 for e in transcript_events(home) if e["event"] == "agent_start" and e["agent_type"] == "task") == 3
    # The primary may not quit a compulsion; the compulsion quits itself and is consulted no more.
    assert "only a compulsion can agent-quit" in errors[1]
    quit_at = next(i for i, e in enumerate(transcript_events(home)) if e["event"] == "agent_end"
                   and e["agent_id"] == "compulsion-1")
    later = [e for e in transcript_events(home)[quit_at + 1:] if e["agent_id"] == "compulsion-1"
             and e["event"] == "model_request"]
    assert later == []


def test_wait_for_needs_a_talk_and_wakes_on_the_reply(fake, home, scripted):
    """memid Phase 3: wait.for without a talk in the same eval fails; with one, the reply wakes it."""

    def answer(body):
        me, _kind, _template = who(body)
        msgs = transcript(body)
        if me == "viewpoint-oracle":
            return say("42")
        ctx = msgs[-1]  # the newest tick
        if "<events>" in ctx:
            reply = [e for e in event_lines(ctx) if e.get("source") == "viewpoint-oracle"][0]
            return say(f"The oracle said {reply['content']['reply']} (talk {reply['talk_id']})")
        if "needs an agent-talk" in ctx:
            return run_elisp('(progn (agent-viewpoint "oracle" "debater") '
                             '(agent-wait-for (agent-talk-agent "oracle" "what is 6*7?") :timeout 30))')
        return run_elisp("(agent-wait-for 1)")

    run = scripted(answer, send("ask the oracle"))
    first = eval_result(primary_texts(fake)[1])
    assert not first["success"] and first["error"] == (
        "agent-wait-for needs an agent-talk-* (or agent-task/agent-consider) call earlier in the same eval")
    assert "The oracle said 42 (talk 1)" in run.shell  # one turn: the wait ended when the reply came


def test_fifty_tasks_with_a_pool_of_eight_and_the_fifty_first_refused(fake, home, scripted):
    """50 tasks at 500 ms each, pool 8: all finish, none lost; the 51st is refused at once."""
    lock = threading.Lock()
    total = {"received": 0}

    def answer(body):
        me, kind, _template = who(body)
        if kind == "task":
            # Longer than the eval's 51 calls take (~0.1-0.2 s at load 8): at 200 ms the first
            # task had ended before the 51st call, 1 run in 4 at that load, and task-51 started.
            return Reply(json.dumps({"reply": f"done {me}", "mood": "ok", "confidence": 1, "monologue": "m"}),
                         delay=0.5)
        ctx = transcript(body)[-1]  # the newest tick
        if "<last-eval-result>" in ctx or "<events>" in ctx:
            with lock:
                total["received"] += ctx.count('"type": "Agent"')
                return say(f"received total {total['received']}")
        return run_elisp("(let (out) (dotimes (i 51) (push (condition-case err "
                         "(plist-get (agent-task \"researcher\" (format \"q%d\" i)) :handle) "
                         "(error (error-message-string err))) out)) (nreverse out))")

    scripted(answer, send("fan out"), wait_text("received total 50"), AMACS_AGENT_POOL="8", AMACS_MAX_TASKS="50")
    result = eval_result(primary_texts(fake)[1])
    handles = sexpdata.loads(result["result"])
    assert handles[:50] == [f"task-{i}" for i in range(1, 51)]
    # The refusal is the condition `amacs-remote-error' (issue 14), an `error': its message is the server's.
    assert handles[50].startswith('AMACS server error: "overloaded: 50 tasks are queued or running (limit 50)')
    ends = [e for e in transcript_events(home) if e["event"] == "agent_end" and e["agent_type"] == "task"]
    assert len(ends) == 50 and all(e["data"]["state"] == "done" for e in ends)
    delivered = [e for e in transcript_events(home) if e["event"] == "event" and e["agent_id"] == "primary"
                 and e["data"]["type"] == "Agent"]
    assert sorted(d["data"]["content"]["handle"] for d in delivered) == sorted(f"task-{i}" for i in range(1, 51))
    shown = sum(newest_message(t).count('"type": "Agent"') for t in primary_texts(fake))
    assert shown == 50  # every result reached the primary's context exactly once (in the tick it arrived)
    # A slot freed by an answer goes to a waiting task, whose request is sent before that answer
    # is taken further (parsed, acted on, delivered): 42 answers freed a slot for one of the 42
    # waiting tasks, so at least 42 tasks have another's model_request between their
    # model_response and their agent_end (none did when the whole step came first).
    steps = [(e["agent_id"], e["event"]) for e in transcript_events(home) if e["agent_type"] == "task"
             and e["event"] in ("model_request", "model_response", "agent_end")]
    answered = {a: i for i, (a, ev) in enumerate(steps) if ev == "model_response"}
    ended = {a: i for i, (a, ev) in enumerate(steps) if ev == "agent_end"}
    overtaken = [a for a in answered
                 if any(ev == "model_request" for _b, ev in steps[answered[a] + 1:ended[a]])]
    assert len(overtaken) >= 42, steps


def test_transcript_summary_counts(fake, home):
    """`python -m amacs_server.transcripts' loads a folder of runs into DuckDB and counts."""
    test_compulsion_blocks_the_fourth_task_and_only_it_can_quit(fake, home, scripted_run(fake, home))
    out = subprocess.run([sys.executable, "-m", "amacs_server", "transcripts", str(home / "transcripts")],
                         capture_output=True, text=True, check=True)
    summary = json.loads(out.stdout)
    events = transcript_events(home)
    assert summary["runs"] == 1
    assert summary["agents_by_type"] == {"compulsion": 1, "primary": 1, "task": 3}
    assert summary["blocks_by_compulsion"] == [{"by": "compulsion-1", "template": "spawn-limiter", "blocks": 1}]
    evals = [e for e in events if e["event"] == "eval_result"]
    assert summary["evals"] == len(evals)
    assert summary["eval_errors"] == sum(1 for e in evals if not e["data"]["success"])
    calls = sum(1 for e in events if e["event"] == "model_response" and e["agent_type"] == "task")
    assert summary["model_calls_tokens_cost_by_type"]["task"]["calls"] == calls
    assert summary["model_calls_tokens_cost_by_type"]["task"]["tokens"] == calls * 120
    above = subprocess.run([sys.executable, "-m", "amacs_server", "transcripts", str(home.parent)],
                           capture_output=True, text=True, check=True)  # a folder above: found below it
    assert json.loads(above.stdout) == summary


def test_hub_lists_agents_and_opens_a_transcript_and_cost_rolls_up(fake, home):
    """The hub shows each agent's type, template, state and cost; RET opens its transcript."""

    def answer(body):
        me, kind, _template = who(body)
        if kind == "task":
            return say("the answer is 7")
        ctx = transcript(body)[-1]  # the newest tick
        if "<events>" in ctx:
            return say("Task finished.")
        if "<last-eval-result>" in ctx:
            return say("Started.")
        return run_elisp('(agent-task "researcher" "what is 3+4?")')

    fake.respond_with(answer)
    program = session(
        send("go"), wait_text("Task finished."),
        "(defvar e2e-renders 0)",
        "(add-hook 'amacs-hub-rendered-hook (lambda () (setq e2e-renders (1+ e2e-renders))))",
        "(amacs-hub) (amacs-e2e-wait (lambda () (> e2e-renders 0)) \"hub\")",
        "(princ (format \"HUB<<%s>>\\n\" (with-current-buffer \"*amacs-hub*\" (buffer-string))))",
        "(with-current-buffer \"*amacs-hub*\" (goto-char (point-min)) (search-forward \"  task-1\") (amacs-hub-visit))",
        "(amacs-e2e-wait (lambda () (get-buffer \"*amacs-transcript task-1*\")) \"the transcript\")",
        "(princ (format \"TRANSCRIPT<<%s>>\\n\" (with-current-buffer \"*amacs-transcript task-1*\" (buffer-string))))")
    run = run_emacs(home, fake.url, program).check()
    hub = run.stdout.split("HUB<<")[1].split(">>\n")[0]
    assert "Agents (2)" in hub
    # The primary is an agent as the task is (issue 11): its line has its state, its model
    # calls and their cost, as its transcript has them.
    primary_calls = [e for e in transcript_events(home) if e["event"] == "model_response" and e["agent_id"] == "primary"]
    line = next(x for x in hub.splitlines() if x.split()[:1] == ["primary"])
    assert line.split()[:5] == ["primary", "primary", "core", "idle", str(len(primary_calls))], line
    assert line.endswith(f"${sum(e['data']['cost'] for e in primary_calls):.4f}"), line
    assert any(line.split()[:5] == ["task-1", "task", "researcher", "done", "1"] and line.endswith("$0.0006")
               for line in hub.splitlines()), hub
    text = run.stdout.split("TRANSCRIPT<<")[1].split(">>\n")[0]
    assert text.startswith("Transcript of task-1 (task, template researcher, parent primary)")
    assert "what is 3+4?" in text and "the answer is 7" in text and "$0.000600" in text
    # Every model call, the task's included, is in the primary's budget.  (The task may finish
    # during the primary's second tick or after it: three or four calls, both correct.)
    calls = [e for e in transcript_events(home) if e["event"] == "model_response"]
    assert any(e["agent_id"] == "task-1" for e in calls) and len(calls) in (3, 4)
    costs = round(sum(e["data"]["cost"] for e in calls), 6)
    assert costs == round(0.0006 * len(calls), 6)
    assert f"(cost-so-far . {costs})" in (home / "consciousness.el").read_text()


def test_task_with_request_input_talks_to_the_person(fake, home, scripted):
    """Interlocutor control: a task given request-input asks the person in the shell, labelled."""

    def answer(body):
        me, kind, _template = who(body)
        msgs = transcript(body)
        if kind == "task":
            if len(msgs) == 1:
                return say("What is your name?")
            return Reply(json.dumps({"reply": f"The name is {msgs[-1].strip()}", "done": True,
                                     "mood": "ok", "confidence": 1, "monologue": "asked"}))
        ctx = msgs[-1]  # the newest tick
        replies = [e["content"]["reply"] for e in event_lines(ctx) if e.get("type") == "Agent"]
        if replies:
            return say(f"The task found: {replies[0]}")
        if "<last-eval-result>" in ctx:
            return say("A task will ask you.")
        return run_elisp('(agent-task "researcher" "ask the person for their name" :request-input t)')

    run = scripted(answer, send("find my name"), wait_text("What is your name?"),
                   send("Ada"), wait_text("The task found:"))
    assert "[task-1 researcher] What is your name?" in run.shell
    assert "task-1 is asking you; your next input goes to it." in run.shell
    assert "The task found: The name is Ada" in run.shell
    assert not any("Ada" in t for t in primary_texts(fake)[:-1])  # the answer went to the task, not the primary


def test_agents_waiting_on_each_other_do_not_deadlock(fake, home, scripted):
    """Two viewpoints that wait on each other wake by timeout; the primary gets its answer."""

    def answer(body):
        me, _kind, _template = who(body)
        msgs = transcript(body)
        if me in ("viewpoint-a", "viewpoint-b"):
            other = "b" if me == "viewpoint-a" else "a"
            if "<last-eval-result>" in msgs[-1] or "<events>" in msgs[-1]:
                return say(f"{me} finished")
            return run_elisp(f'(agent-wait-for (agent-talk-agent "{other}" "after you") :timeout 1)')
        ctx = msgs[-1]  # the newest tick
        replies = [e for e in event_lines(ctx) if e.get("type") == "Agent"]
        if replies:
            return say(f"Got: {replies[0]['content']['reply']}")
        if "<last-eval-result>" in ctx:
            return say("Waiting for a.")
        return run_elisp('(progn (agent-viewpoint "a" "debater") (agent-viewpoint "b" "debater") '
                         '(agent-talk-agent "a" "go first"))')

    run = scripted(answer, send("start"), wait_text("Got: viewpoint-a finished"))
    assert "Got: viewpoint-a finished" in run.shell
    timeouts = [e for e in transcript_events(home) if e["event"] == "event" and e["data"]["type"] == "Time"]
    assert timeouts  # at least one wait ended by its timeout rather than hanging
