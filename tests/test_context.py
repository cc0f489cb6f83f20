"""Context assembly from active-memory items (RFC v4 §4, IMP-038, IMP-019, memid spec)."""

import asyncio
import json

import pytest

from amacs_server.context.assemble import BLOCK_TICKS, Conversation, assemble
from amacs_server.inference.parse import RETRY_PROMPT
from amacs_server.memory.active import ActiveMemory
from amacs_server.memory.items import Kind
from amacs_server.memory.ltm import LongTermMemory
from amacs_server.state.consciousness import Consciousness, EvalResult
from tests.context_items import (
    chat_lines,
    eval_result,
    every_item,
    message_items,
    name_of,
    parse_context,
    request_text,
    text_of,
)
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json, model_info
from tests.test_real_models import _calls, _events, _runtime, _turn
from tests.test_talk import _run_world as run_world
from tests.test_talk import _runtime as talk_runtime


@pytest.fixture
def memory(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db")
    yield ActiveMemory(ltm, agent="amacs-instance-1")
    ltm.close()


@pytest.fixture
def fake():
    server = FakeAnthropic().start()
    yield server
    server.stop()


def exchanges(memory, c, n):
    for tick in range(1, n + 1):
        c.begin_tick(tick)
        memory.sync_state(c)
        memory.begin_chat(tick, f"message {tick}")
        memory.finish_chat(tick, f"response {tick}")
        memory.add_monologue(tick, f"thought {tick}")


def test_imp038_depth_scenario(tmp_path, fake):
    """IMP-038 in the conversation the real requests are built from (a Runtime, the fake API
    over HTTP, each request read whole): 10 exchanges, then the agent sets chat depth 3; the
    next request shows the last 3 pairs, then the pending message (the window shrinks at once).
    Kept at 3, the conversation adds each exchange as it comes and shows exactly 3 again when
    it restarts from a new base, after BLOCK_TICKS ticks."""
    fake.models["m"] = model_info("m")
    rt, _face = _runtime(tmp_path / "h", fake, "m")

    def turn(n):
        fake.script(Reply(agent_json(f"response {n}")))
        _turn(rt, f"message {n}")
        text = request_text(_calls(fake)[-1]["body"])
        every_item(text)  # the model and window notices too: nothing but items
        return chat_lines(text)

    def pairs(first, last):
        return [line for n in range(first, last + 1) for line in (f"Human: message {n}", f"Agent: response {n}")]

    try:
        for n in range(1, 11):
            turn(n)
        rt.loop.call_soon_threadsafe(rt.mind.agent_set, "chat-context-depth", 3)
        assert turn(11) == [*pairs(8, 10), "Human: message 11"]
        for n in range(12, 11 + BLOCK_TICKS):
            assert turn(n) == [*pairs(8, n - 1), f"Human: message {n}"]
        n = 11 + BLOCK_TICKS
        assert turn(n) == [*pairs(n - 3, n - 1), f"Human: message {n}"]
    finally:
        rt.stop()


def test_pending_always_included_even_at_depth_zero(memory):
    c = Consciousness(chat_context_depth=0)
    exchanges(memory, c, 4)
    memory.begin_chat(5, "now")
    assert chat_lines(assemble(memory.snapshot(c)).text) == ["Human: now"]


def test_every_item_in_the_context_has_a_memid_and_tier(tmp_path, fake):
    """memid spec, Key Requirement: no anonymous memory.  The test walks every request real
    turns sent (a Runtime, the fake API over HTTP), each user message whole: the model in use,
    an eval's result, a format correction and what a compaction left out are items too."""
    fake.models["m"] = model_info("m", adaptive=False, enabled=False, structured=False, effort=False)
    fake.script(Reply("not JSON at all"), Reply(agent_json(None, eval="(+ 2 2)")), Reply(agent_json("four")))
    rt, _face = _runtime(tmp_path / "h", fake, "m")
    try:
        rt.loop.call_soon_threadsafe(rt.mind.agent_set, "api-settings", {"thinking": True})  # one it ignores
        _turn(rt, "what is 2+2?")
        for n in range(4):
            _turn(rt, f"turn {n}: " + "words " * 800)
        fake.models["m"]["max_input_tokens"] = len(json.dumps(fake.requests[-1]["body"]["messages"])) // 4 - 200
        _turn(rt, "the last one")
        assert _events(rt, "context_compacted")
    finally:
        rt.stop()
    seen: dict[str, dict] = {}
    for request in _calls(fake):
        for item in every_item(request_text(request["body"])):  # fails on any line that is not an item
            seen[name_of(item)] = item
    assert {"notice.model", "notice.retry", "notice.context-window", "last_eval_result", "chat.1", "mood",
            "monologue.1"} <= set(seen)
    assert seen["notice.model"]["content"]["model"] == "m"
    assert seen["notice.model"]["content"]["ignored_settings"] == ["thinking (this model does not think on request)"]
    assert "compacted" in seen["notice.context-window"]["content"]
    assert seen["notice.retry"]["content"] == RETRY_PROMPT
    for name in ("notice.model", "notice.retry", "notice.context-window"):
        assert seen[name]["tier"] == "rom" and seen[name]["kind"] == "notice"
        assert not seen[name]["mutable"] and not seen[name]["evictable"]


def test_everything_a_subagent_receives_is_an_item(tmp_path, fake):
    """The same for subagents: a task's prompt, its format correction, a viewpoint's join and
    leave notices and what another viewpoint said are, part by part, items of its memory."""
    from amacs_server.agents.kinds import PRIMARY

    # Its first answer stops at the length limit before its JSON ends: it is asked again.
    fake.script(Reply('{"eval": null, "reply": "a long story', stop="max_tokens"), Reply(agent_json("found it")))
    rt = talk_runtime(tmp_path, fake)

    async def run():
        rt.world.task(PRIMARY, None, "researcher", "find the file")
        while rt.world.tasks_live:
            await asyncio.sleep(0.01)
        for name in ("optimist", "skeptic", "cynic"):
            rt.world.viewpoint(PRIMARY, name, "debater")
        rt.world.discard(PRIMARY, "cynic")
        rt.world.consider(PRIMARY, None, "Should we ship on Monday?")
        while not any(e.source == "consider" for e in rt.world.bus.peek(PRIMARY)):
            await asyncio.sleep(0.01)

    run_world(rt, run, fake)
    seen = set()
    for request in fake.requests:
        for message in request["body"]["messages"]:
            if message["role"] != "assistant":  # the model's own answers
                seen.update(name_of(i) for i in message_items(text_of(message["content"])))
    assert {"notice.retry", "notice.panel", "chat.1"} <= seen


def test_rom_and_ram_fields(memory):
    """Issue 3: ROM identity, tick, time, budget, eval result, clock; RAM mood, confidence, depths, api."""
    c = Consciousness()
    c.last_eval_result = EvalResult(success=True, result="1")
    memory.sync_state(c)
    ctx = parse_context(assemble(memory.snapshot(c)).text)
    tiers = {name_of(i): i["tier"] for i in ctx["agent-consciousness"] + ctx["last-eval-result"]}
    assert {n for n, t in tiers.items() if t == "rom"} >= {
        "identity", "current_tick", "current_time", "budget", "last_eval_result", "system_clock"}
    assert {n for n, t in tiers.items() if t == "ram"} == {
        "mood", "confidence", "chat_context_depth", "monologue_context_depth",
        "global_scratchpad_depth", "thread_scratchpad_depth", "api_settings"}


def test_eval_result_camel_case_and_omitted_when_skipped(memory):
    """IMP-019: lastEvalResult in camelCase; no section when there was no eval."""
    c = Consciousness()
    c.last_eval_result = EvalResult(success=False, error="boom")
    memory.sync_state(c)
    text = assemble(memory.snapshot(c)).text
    assert eval_result(text) == {"success": False, "result": None, "error": "boom", "skipped": False}
    c.last_eval_result = EvalResult.skipped_result()
    memory.sync_state(c)
    assert "<last-eval-result>" not in assemble(memory.snapshot(c)).text


def test_state_versions_only_when_values_change(memory):
    c = Consciousness(mood="calm")
    memory.sync_state(c)
    v = memory.state["mood"].version
    memory.sync_state(c)
    assert memory.state["mood"].version == v
    c.mood = "😤"
    memory.sync_state(c)
    assert memory.state["mood"].version == v + 1
    assert memory.ltm.get(memory.mem_id("mood", v)).content == "calm"


def test_scratchpad_global_and_thread_filtering_with_both_depths(memory):
    """RFC §4.2 / IMP-038's deferred test: global notes always, thread notes while active, two depths."""
    c = Consciousness(global_scratchpad_depth=2, thread_scratchpad_depth=1)
    memory.add_scratchpad(1, "G1", None, "global one")
    memory.add_scratchpad(2, "A1", "rust", "rust one")
    memory.add_scratchpad(3, "G2", None, "global two")
    memory.add_scratchpad(4, "A2", "rust", "rust two")
    memory.add_scratchpad(5, "B1", "blog", "blog one")
    memory.add_scratchpad(6, "G3", None, "global three")
    shown = lambda: [i.content["heading"] for i in memory.scratchpad_window(c)]  # noqa: E731
    assert shown() == ["G2", "G3"]  # no thread active: the last 2 global notes
    c.active_thread = "rust"
    assert shown() == ["G2", "A2", "G3"]  # plus the last 1 note of the active thread
    c.thread_scratchpad_depth = 5
    assert shown() == ["A1", "G2", "A2", "G3"]
    c.active_thread = "blog"
    assert shown() == ["G2", "B1", "G3"]
    c.global_scratchpad_depth = 0
    assert shown() == ["B1"]


def test_the_scratchpad_window_walks_back_only_as_far_as_its_depths_need(memory):
    """No thread active: the window stops at the last global notes it shows, not walking every
    note ever written (each tick's cost would grow with the scratchpad)."""

    class Unread:
        tick = 0

        @property
        def thread(self):
            raise AssertionError("an older note than the window needs was looked at")

        item = thread

    c = Consciousness(global_scratchpad_depth=2, thread_scratchpad_depth=3)
    memory.add_scratchpad(1, "A1", "rust", "rust one")
    for tick in (2, 3):
        memory.add_scratchpad(tick, f"G{tick}", None, "global")
    memory.pad.insert(0, Unread())
    assert [i.content["heading"] for i in memory.scratchpad_window(c)] == ["G2", "G3"]


# -- the append-only conversation (issue 10) ----------------------------------------------


def _prefix(messages):
    """The request's blocks up to its last cache breakpoint, without the markers."""
    blocks = []
    for m in messages:
        content = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        for b in content:
            blocks.append((m["role"], b["text"], "cache_control" in b))
    last = max(i for i, b in enumerate(blocks) if b[2])
    return [(r, t) for r, t, _ in blocks[: last + 1]]


def _tick(memory, c, conv, tick, human=None, reply="ok"):
    c.begin_tick(tick)
    memory.sync_state(c)
    if human is not None:
        memory.begin_chat(tick, human)
    ctx = assemble(memory.snapshot(c), conv, c.active_thread)
    ctx.answered(reply)
    memory.finish_chat(tick, reply)
    memory.add_monologue(tick, f"thought {tick}")
    return ctx


def test_each_request_extends_the_previous_one_up_to_its_breakpoint(memory):
    """The whole previous request (its prefix up to the last breakpoint) is the start of the next."""
    c, conv = Consciousness(chat_context_depth=2, monologue_context_depth=3), Conversation()
    memory.create_note("groceries", "milk", Kind.NOTE, ())
    prev = None
    for tick in range(1, BLOCK_TICKS + 1):
        ctx = _tick(memory, c, conv, tick, human=f"message {tick}" if tick % 2 else None)
        blocks = _prefix(ctx.messages)
        if prev is not None:
            assert blocks[: len(prev)] == prev
        assert sum("cache_control" in b for m in ctx.messages if isinstance(m["content"], list)
                   for b in m["content"]) <= 3  # + the system prompt: Anthropic's 4
        prev = blocks
    assert conv.restarts == 1
    newest = ctx.newest
    assert "<agent-consciousness>" in newest and "groceries" not in newest  # only what is new
    assert ctx.messages[-2] == {"role": "assistant", "content": "ok"}
    # the merged view: every exchange of the block, the newest pending last
    lines = chat_lines(ctx.text)
    assert lines[-1] == f"Human: message {BLOCK_TICKS - 1}" or lines[-1].startswith("Agent:")
    # after a block of ticks the conversation restarts with the windows at their depths
    ctx = _tick(memory, c, conv, BLOCK_TICKS + 1, human="again")
    assert conv.restarts == 2 and len(ctx.messages) == 1
    assert [name_of(i) for i in parse_context(ctx.text)["monologue"]] == [
        f"monologue.{t}" for t in range(BLOCK_TICKS - 2, BLOCK_TICKS + 1)]
    assert chat_lines(ctx.text)[-1] == "Human: again"


def test_the_conversation_restarts_when_something_leaves_the_context(memory):
    c, conv = Consciousness(), Conversation()
    _tick(memory, c, conv, 1, human="my secret is 42")
    _tick(memory, c, conv, 2, human="hi")
    assert conv.restarts == 1
    memory.evict(memory.mem_id("chat.1"))
    ctx = _tick(memory, c, conv, 3, human="forget it")
    assert conv.restarts == 2 and "my secret is 42" not in ctx.text.split("preview")[0]
    assert chat_lines(ctx.text)[0] == "[evicted chat.1]"
    c.active_thread = "rust"  # a thread switch
    _tick(memory, c, conv, 4)
    assert conv.restarts == 3
    # a tick without a response leaves no half turn behind
    c.begin_tick(5)
    memory.sync_state(c)
    assemble(memory.snapshot(c), conv, c.active_thread)
    ctx = assemble(memory.snapshot(c), conv, c.active_thread)
    assert conv.restarts == 4 and [m["role"] for m in ctx.messages] == ["user"]


def test_ram_holds_only_the_windows(memory):
    """Old exchanges and monologue lines leave RAM; they stay loadable from LTM."""
    c = Consciousness(chat_context_depth=2, monologue_context_depth=3)
    exchanges(memory, c, 400)
    memory.snapshot(c)
    assert len(memory.chat) <= 2 * 64 and len(memory.monologue) <= 2 * 64
    assert memory.load(memory.mem_id("chat.1")).content == {"human": "message 1", "agent": "response 1"}


def test_chat_tail_reads_only_the_end_and_matches_the_whole_read(tmp_path):
    from amacs_server.persistence.chat_log import ChatLog
    log = ChatLog(tmp_path / "agent-chat.org")
    for tick in range(1, 41):
        if tick % 3:
            log.write_human(tick, "2025-01-01T00:00:00Z", f"* not a heading {tick}\nline é")
        log.write_agent(tick, "2025-01-01T00:00:00Z", f"* Tick heading in a reply {tick}\n#+begin_src\n* x\n#+end_src",
                        with_heading=tick % 3 == 0)
    whole = log.read()
    for n in (1, 2, 7, 40, 100):
        assert log.read_tail(n, chunk=128) == whole[-n:]
    assert ChatLog(tmp_path / "none.org").read_tail(5) == []
