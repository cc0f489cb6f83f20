"""Every brain sees MemId items (memid-active-memory.md: "No text-only anonymous memory
representation is exposed to the brain"): what a subagent is told are items of its own
memory, which it evicts (a handle stays) and loads back, as the primary does its chat.
"""

import json

import pytest

from tests.context_items import text_of
from tests.e2e.agent_fakes import run_elisp, say, send, session, wait_text, who
from tests.e2e.harness import run_emacs

pytestmark = pytest.mark.e2e

LONG = "the whole report: " + "details " * 200


def items(body):
    """Each user message of request BODY as the items (dicts) it shows, in order."""
    out = []
    for m in body["messages"]:
        if m["role"] == "user":
            out.append([json.loads(chunk) for chunk in text_of(m["content"]).split("\n\n")
                        if chunk.startswith('{"mem_id"')])
    return out


def test_a_task_sees_what_it_is_told_as_items_and_evicts_and_loads_one(fake, home):
    state = {}

    def answer(body):
        me, kind, _ = who(body)
        if me == "primary":
            msgs = body["messages"]
            if "task-1" in text_of(msgs[-1]["content"]) and "reply" in text_of(msgs[-1]["content"]):
                return say("The task is back.")
            if "<last-eval-result>" in text_of(msgs[-1]["content"]):
                return say("Started.")
            return run_elisp(f'(agent-task "researcher" {json.dumps(LONG)})')
        shown = items(body)
        first = shown[0][0]
        state.setdefault("requests", []).append(shown)
        step = len(state["requests"])
        if step == 1:
            return run_elisp(f'(agent-memory-evict "{first["mem_id"]}")')
        if step == 2:
            return run_elisp(f'(agent-memory-load "{first["mem_id"]}")')
        return say("read it twice")

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(send("go"), wait_text("The task is back."))).check()

    one, two, three = state["requests"]
    told = one[0][0]
    # The prompt it was given is an item of its own brain: a message record, evictable, not mutable.
    assert told["mem_id"] == "<EOT>amacs-instance-1:task-1:chat.1:1<EOT>"
    assert told["kind"] == "message" and told["evictable"] is True and told["mutable"] is False
    assert told["content"] == {"said": LONG}
    # Evicted: the next request shows its handle in its place, not its text.
    assert two[0][0]["kind"] == "handle" and LONG not in json.dumps(two[0][0])
    assert two[0][0]["mem_id"].startswith("<EOT>amacs-instance-1:task-1:chat.1")
    # Its eval's result is an item too.
    assert two[1][0]["mem_id"] == "<EOT>amacs-instance-1:task-1:chat.2:1<EOT>"
    assert "<last-eval-result>" in two[1][0]["content"]["said"]
    # Loaded: back in place, with its text.
    assert three[0][0]["content"] == {"said": LONG}
