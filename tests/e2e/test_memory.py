"""Addressable memory end to end: the agent's elisp brain tools against the real server (issue 3)."""

import json
import re
import sqlite3

import pytest

from tests.context_items import chat_lines, eval_result, name_of, parse_context, request_text, state
from tests.e2e.harness import elisp_string, run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e
ME = "amacs-instance-1:primary"


def evals(*forms, reply="done"):
    return [Reply(agent_json(None, eval=f)) for f in forms] + [Reply(agent_json(reply))]


def session(*texts, setup="(setq amacs-max-steps 12)", middle=""):
    sends = " ".join(f"(amacs-e2e-send {elisp_string(t)})" for t in texts)
    return f"{setup} (amacs-e2e-open) {sends} {middle} (amacs-e2e-finish)"


def memory_items(ctx):
    return parse_context(ctx).get("memory", [])


def test_create_mutate_evict_search_load_earlier_version(fake, home):
    """memid integration test 3: create -> mutate -> evict -> load a historical version, via elisp."""
    fake.script(*evals(
        '(agent-memory-create "groceries" "milk" :tags \'("shopping"))',
        f'(agent-memory-mutate "<EOT>{ME}:groceries:1<EOT>" "milk, eggs")',
        f'(agent-memory-evict "<EOT>{ME}:groceries<EOT>")',
        '(agent-memory-search "eggs")',
        f'(agent-memory-load "<EOT>{ME}:groceries<EOT>" 1)',
    ))
    run_emacs(home, fake.url, session("remember groceries")).check()
    ctx = fake.user_texts()
    assert len(ctx) == 6
    for text in ctx:  # every request's context is made of addressable items only
        parse_context(text)

    created = eval_result(ctx[1])
    assert created["success"] and created["result"] == (
        f'(:mem-id "<EOT>{ME}:groceries:1<EOT>" :version 1 :tier "ram" :kind "note")')
    assert [(name_of(i), i["version"], i["content"]) for i in memory_items(ctx[1])] == [("groceries", 1, "milk")]

    assert f':mem-id "<EOT>{ME}:groceries:2<EOT>" :version 2' in eval_result(ctx[2])["result"]
    assert [(i["version"], i["content"]) for i in memory_items(ctx[2])] == [(2, "milk, eggs")]

    handle = memory_items(ctx[3])
    assert [(i["kind"], i["version"], i["content"]["preview"]) for i in handle] == [("handle", 2, "milk, eggs")]

    found = eval_result(ctx[4])["result"]
    assert found.startswith(f'((:mem-id "<EOT>{ME}:groceries:2<EOT>" :kind "note"') and "[eggs]" in found

    loaded = eval_result(ctx[5])["result"]
    assert f':mem-id "<EOT>{ME}:groceries:1<EOT>" :version 1' in loaded and ':content "milk"' in loaded
    assert [(i["kind"], i["version"], i["content"]) for i in memory_items(ctx[5])] == [("note", 1, "milk")]


def test_rom_mutate_and_evict_refused_from_eval(fake, home):
    """memid integration test 7: ROM mutation and eviction are refused deterministically."""
    fake.script(*evals(
        f'(agent-memory-mutate "<EOT>{ME}:current_tick<EOT>" 1)',
        f'(agent-memory-evict "<EOT>{ME}:identity<EOT>")',
        f'(agent-memory-mutate "<EOT>{ME}:last_eval_result<EOT>" "forged")',
    ))
    run_emacs(home, fake.url, session("try to cheat")).check()
    ctx = fake.user_texts()
    for i, verb in ((1, "mutated"), (2, "evicted"), (3, "mutated")):
        result = eval_result(ctx[i])
        assert not result["success"]
        assert re.fullmatch(rf"refused: <EOT>{ME}:\w+<EOT> is ROM \(harness-owned\) and cannot be {verb}",
                            result["error"]), result["error"]
    assert state(ctx[3], "current_tick") == 4 and state(ctx[3], "identity") == "amacs-instance-1"


def test_crash_between_ticks_loses_nothing(fake, home):
    """Issue 3: after a crash between ticks, memory.db and the org files agree and the note is back."""
    fake.script(
        *evals('(agent-memory-create "plan" "step one: buy a kettle")', reply="Noted."),
        Reply(agent_json("Still here.")),
        Reply(agent_json("Back again.")),
    )
    program = session("make a plan", "and then?",
                      middle='(amacs-e2e-crash-server) (amacs-e2e-send "after the crash")')
    run = run_emacs(home, fake.url, program).check()
    assert "Back again." in run.shell
    after = fake.user_texts()[-1]
    assert [(name_of(i), i["content"]) for i in memory_items(after)] == [("plan", "step one: buy a kettle")]
    assert chat_lines(after)[-3:] == ["Human: and then?", "Agent: Still here.", "Human: after the crash"]

    db = sqlite3.connect(home / "memory.db")
    latest = {}
    for base, version, content in db.execute("SELECT base, version, content FROM items WHERE base LIKE ?",
                                             (f"{ME}:chat.%",)):
        if version > latest.get(base, (0, None))[0]:
            latest[base] = (version, json.loads(content))
    org = (home / "agent-chat.org").read_text()
    org_ticks = re.findall(r"^\* Tick (\d+)$", org, re.M)
    assert sorted(int(b.rsplit(".", 1)[1]) for b in latest) == sorted(int(t) for t in org_ticks)
    for block in org.split("* Tick ")[1:]:
        tick = int(block.split("\n", 1)[0])
        content = latest[f"{ME}:chat.{tick}"][1]
        for part in ("Human", "Agent"):
            m = re.search(rf"\*\* {part}\n(.*?)\n\n", block, re.S)
            assert (m.group(1) if m else None) == content.get(part.lower()), (tick, part)


def test_depth_change_takes_effect_next_tick_and_persists(fake, home):
    """A depth the agent changes applies from the next tick and survives a restart."""
    fake.script(Reply(agent_json("one")), Reply(agent_json("two")),
                *evals(f'(agent-memory-mutate "<EOT>{ME}:chat_context_depth<EOT>" 1)', reply="three"))
    run_emacs(home, fake.url, session("first", "second", "third")).check()
    ctx = fake.user_texts()
    assert len(chat_lines(ctx[2])) == 5  # the tick that changes it still sees depth 5
    assert chat_lines(ctx[3]) == ["Human: third", "Agent: "]
    fake.script(Reply(agent_json("four")))
    run_emacs(home, fake.url, session("fourth")).check()
    after = fake.user_texts()[-1]
    assert state(after, "chat_context_depth") == 1
    # The restart resumes the conversation: its earlier message (depth 1: the third exchange, as it
    # stood) is repeated, and the new one shows depth 1 too, as a run without the restart sends.
    assert chat_lines(after) == ["Human: third", "Agent: ", "Agent: three", "Human: fourth"]


def test_scratchpad_note_is_written_shown_and_committed(fake, home):
    """RFC §4.2: the response's scratchpad goes to scratchpad.org and is an item in the next context."""
    import json as _json
    import subprocess

    reply = _json.loads(agent_json("Noted."))
    reply["scratchpad"] = {"heading": "Kettle research", "thread": None, "content": "Prefer steel."}
    fake.script(Reply(_json.dumps(reply)), Reply(agent_json("ok")))
    run_emacs(home, fake.url, session("note this", "next")).check()
    org = (home / "scratchpad.org").read_text()
    assert org == "* Kettle research\n:PROPERTIES:\n:THREAD: null\n:TICK: 1\n:END:\nPrefer steel.\n\n"
    items = parse_context(fake.user_texts()[1])["scratchpad"]
    assert [(name_of(i), i["content"]) for i in items] == [
        ("scratchpad.1", {"heading": "Kettle research", "thread": None, "content": "Prefer steel."})]
    shown = subprocess.run(["git", "-C", str(home), "show", "--stat", "HEAD~1"], capture_output=True, text=True)
    assert "scratchpad.org" in shown.stdout


def test_agent_evicts_by_the_mem_id_it_observed(fake, home):
    """memid integration test 6: the brain evicts by a mem_id seen in its previous context."""
    def answer(body):
        ctx = request_text(body)
        items = parse_context(ctx)
        if chat_lines(ctx)[-1] == "Human: forget my secret":
            secret = next(i for i in items["chat"] if i["content"].get("human") == "my secret is 42")
            return Reply(agent_json(None, eval=f'(agent-memory-evict "{secret["mem_id"]}")'))
        return Reply(agent_json("ok"))

    fake.respond_with(answer)
    run_emacs(home, fake.url, session("my secret is 42", "forget my secret")).check()
    ctx = fake.user_texts()
    after = parse_context(ctx[2])["chat"]
    handle = next(i for i in after if i["kind"] == "handle")
    assert handle["content"]["preview"].startswith("{\"human\": \"my secret is 42\"")
    assert "my secret is 42" not in json.dumps([i for i in after if i["kind"] != "handle"])
    assert eval_result(ctx[2])["success"]
