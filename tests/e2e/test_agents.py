"""Agents and the World end to end (issue 5; agent-world-architecture.md; memid spec talk/wait)."""

import json
import subprocess
import sys
import threading

import pytest
import sexpdata

from tests.context_items import chat_lines, eval_result
from tests.e2e.agent_fakes import event_lines, primary_texts, run_elisp, say, transcript, who
from tests.e2e.harness import elisp_string, run_emacs
from tests.fake_anthropic import Reply

pytestmark = pytest.mark.e2e


def events_of(home):
    return [json.loads(x) for f in (home / "transcripts").glob("*.jsonl") for x in f.read_text().splitlines()]


def session(*steps, setup="(setq amacs-max-steps 20)"):
    return f"{setup} (amacs-e2e-open) {' '.join(steps)} (amacs-e2e-finish)"


def send(text):
    return f"(amacs-e2e-send {elisp_string(text)})"


def wait_text(text):
    return f"(amacs-e2e-wait-text {elisp_string(text)})"


def test_websearch_shaped_task_spawns_two_subtasks_and_combines(fake, home):
    """A Task that fans out to two subtasks, waits for both, and combines their replies."""

    def answer(body):
        me, _kind, _template = who(body)
        msgs = transcript(body)
        if me == "primary":
            ctx = msgs[0]
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

    fake.respond_with(answer)
    run = run_emacs(home, fake.url, session(send("research A and B"),
                                            wait_text("Research says: Combined: A-answer + B-answer"))).check()
    assert "Started research." in run.shell
    starts = {e["agent_id"]: e for e in events_of(home) if e["event"] == "agent_start"}
    assert {a: (s["parent_id"], s["data"]["depth"]) for a, s in starts.items()} == {
        "task-1": ("primary", 1), "task-2": ("task-1", 2), "task-3": ("task-1", 2)}
    ends = {e["agent_id"]: e["data"]["state"] for e in events_of(home) if e["event"] == "agent_end"}
    assert ends == {"task-1": "done", "task-2": "done", "task-3": "done"}
    # The default action `done' is not written into a task's own transcript.
    last_task1 = [r["body"] for r in fake.requests if who(r["body"])[0] == "task-1"][-1]
    assert all("done" not in m for m in transcript(last_task1))


def test_debate_three_viewpoints_two_rounds(fake, home):
    """Each viewpoint answers in turn; every comment is shared with the others as [name] comment."""
    rounds = {"optimist": 0, "skeptic": 0, "pragmatist": 0}

    def answer(body):
        me, _kind, _template = who(body)
        msgs = transcript(body)
        if me == "primary":
            ctx = msgs[0]
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

    fake.respond_with(answer)
    run = run_emacs(home, fake.url, session(send("debate shipping"), wait_text("Debate over:"))).check()
    assert ("Debate over: [optimist] optimist round 2 | [skeptic] skeptic round 2 | "
            "[pragmatist] pragmatist round 2") in run.shell
    skeptic = [r["body"] for r in fake.requests if who(r["body"])[0] == "viewpoint-skeptic"]
    seen = "\n".join(transcript(skeptic[-1]))
    for line in ("[primary] Ship on Friday?", "[optimist] optimist round 1", "[pragmatist] pragmatist round 1",
                 "[primary] And on Monday?", "[optimist] optimist round 2"):
        assert line in seen, line
    assert "[skeptic] skeptic round 1" not in seen  # its own comments are its assistant turns, not shared back


def test_compulsion_blocks_the_fourth_task_and_only_it_can_quit(fake, home):
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
        ctx = msgs[0]
        said = [line for line in chat_lines(ctx) if line.startswith("Human: ")]
        pending = said[-1] if said else ""
        spawned = ctx.count('"content": "spawn ')
        if pending == "Human: watch me":
            return run_elisp('(agent-compulsion "spawn-limiter")', monologue="attach") \
                if "<last-eval-result>" not in ctx else say("Watched.")
        if pending == "Human: spawn" and spawned < 4:
            return run_elisp(f'(agent-task "researcher" "job {spawned + 1}")', monologue=f"spawn {spawned + 1}")
        if pending == "Human: stop watching":
            return run_elisp("(agent-quit)", monologue="try quit") if "try quit" not in ctx else say("Tried.")
        return say("noted", monologue="noted")

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(send("watch me"), send("spawn"), send("stop watching"), send("after"),
                                      setup="(setq amacs-max-steps 8) (setq amacs-eval-timeout 10)")).check()
    results = [e for e in events_of(home) if e["event"] == "eval_result" and e["agent_id"] == "primary"]
    errors = [r["data"]["error"] for r in results if not r["data"]["success"]]
    assert errors[0] == ("blocked by compulsion compulsion-1 (spawn-limiter): "
                         "Three subagents already run in this turn; use their results first.")
    blocked_ctx = [t for t in primary_texts(fake) if "blocked by compulsion" in t]
    assert blocked_ctx and eval_result(blocked_ctx[0])["error"].startswith("blocked by compulsion compulsion-1")
    assert sum(1 for e in events_of(home) if e["event"] == "agent_start" and e["agent_type"] == "task") == 3
    # The primary may not quit a compulsion; the compulsion quits itself and is consulted no more.
    assert "only a compulsion can agent-quit" in errors[1]
    quit_at = next(i for i, e in enumerate(events_of(home)) if e["event"] == "agent_end"
                   and e["agent_id"] == "compulsion-1")
    later = [e for e in events_of(home)[quit_at + 1:] if e["agent_id"] == "compulsion-1"
             and e["event"] == "model_request"]
    assert later == []


def test_wait_for_needs_a_talk_and_wakes_on_the_reply(fake, home):
    """memid Phase 3: wait.for without a talk in the same eval fails; with one, the reply wakes it."""

    def answer(body):
        me, _kind, _template = who(body)
        msgs = transcript(body)
        if me == "viewpoint-oracle":
            return say("42")
        ctx = msgs[0]
        if "<events>" in ctx:
            reply = [e for e in event_lines(ctx) if e.get("source") == "viewpoint-oracle"][0]
            return say(f"The oracle said {reply['content']['reply']} (talk {reply['talk_id']})")
        if "needs an agent-talk" in ctx:
            return run_elisp('(progn (agent-viewpoint "oracle" "debater") '
                             '(agent-wait-for (agent-talk-agent "oracle" "what is 6*7?") :timeout 30))')
        return run_elisp("(agent-wait-for 1)")

    fake.respond_with(answer)
    run = run_emacs(home, fake.url, session(send("ask the oracle"))).check()
    first = eval_result(primary_texts(fake)[1])
    assert not first["success"] and first["error"] == (
        "agent-wait-for needs an agent-talk-* (or agent-task/agent-consider) call earlier in the same eval")
    assert "The oracle said 42 (talk 1)" in run.shell  # one turn: the wait ended when the reply came


def test_fifty_tasks_with_a_pool_of_eight_and_the_fifty_first_refused(fake, home):
    """50 tasks at 200 ms each, pool 8: all finish, none lost; the 51st is refused at once."""
    lock = threading.Lock()
    total = {"received": 0}

    def answer(body):
        me, kind, _template = who(body)
        if kind == "task":
            return Reply(json.dumps({"reply": f"done {me}", "mood": "ok", "confidence": 1, "monologue": "m"}),
                         delay=0.2)
        ctx = transcript(body)[0]
        if "<last-eval-result>" in ctx or "<events>" in ctx:
            with lock:
                total["received"] += ctx.count('"type": "Agent"')
                return say(f"received total {total['received']}")
        return run_elisp("(let (out) (dotimes (i 51) (push (condition-case err "
                         "(plist-get (agent-task \"researcher\" (format \"q%d\" i)) :handle) "
                         "(error (error-message-string err))) out)) (nreverse out))")

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(send("fan out"), wait_text("received total 50")),
              AMACS_AGENT_POOL="8", AMACS_MAX_TASKS="50").check()
    result = eval_result(primary_texts(fake)[1])
    handles = sexpdata.loads(result["result"])
    assert handles[:50] == [f"task-{i}" for i in range(1, 51)]
    assert handles[50].startswith("overloaded: 50 tasks are queued or running (limit 50)")
    ends = [e for e in events_of(home) if e["event"] == "agent_end" and e["agent_type"] == "task"]
    assert len(ends) == 50 and all(e["data"]["state"] == "done" for e in ends)
    delivered = [e for e in events_of(home) if e["event"] == "event" and e["agent_id"] == "primary"
                 and e["data"]["type"] == "Agent"]
    assert sorted(d["data"]["content"]["handle"] for d in delivered) == sorted(f"task-{i}" for i in range(1, 51))
    shown = sum(t.count('"type": "Agent"') for t in primary_texts(fake))
    assert shown == 50  # every result reached the primary's context exactly once


def test_transcript_summary_counts(fake, home):
    """`python -m amacs_server.transcripts' loads a folder of runs into DuckDB and counts."""
    test_compulsion_blocks_the_fourth_task_and_only_it_can_quit(fake, home)
    out = subprocess.run([sys.executable, "-m", "amacs_server", "transcripts", str(home / "transcripts")],
                         capture_output=True, text=True, check=True)
    summary = json.loads(out.stdout)
    events = events_of(home)
    assert summary["runs"] == 1
    assert summary["agents_by_type"] == {"compulsion": 1, "primary": 1, "task": 3}
    assert summary["blocks_by_compulsion"] == [{"by": "compulsion-1", "template": "spawn-limiter", "blocks": 1}]
    evals = [e for e in events if e["event"] == "eval_result"]
    assert summary["evals"] == len(evals)
    assert summary["eval_errors"] == sum(1 for e in evals if not e["data"]["success"])
    calls = sum(1 for e in events if e["event"] == "model_response" and e["agent_type"] == "task")
    assert summary["model_calls_tokens_cost_by_type"]["task"]["calls"] == calls
    assert summary["model_calls_tokens_cost_by_type"]["task"]["tokens"] == calls * 120
