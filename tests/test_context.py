"""Context assembly from active-memory items (RFC v4 §4, IMP-038, IMP-019, memid spec)."""

import pytest

from amacs_server.context.assemble import assemble
from amacs_server.memory.active import ActiveMemory
from amacs_server.memory.items import Kind
from amacs_server.memory.ltm import LongTermMemory
from amacs_server.state.consciousness import Consciousness, EvalResult
from tests.context_items import chat_lines, eval_result, name_of, parse_context


@pytest.fixture
def memory(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db")
    yield ActiveMemory(ltm, agent="amacs-instance-1")
    ltm.close()


def exchanges(memory, c, n):
    for tick in range(1, n + 1):
        c.begin_tick(tick)
        memory.sync_state(c)
        memory.begin_chat(tick, f"message {tick}")
        memory.finish_chat(tick, f"response {tick}")
        memory.add_monologue(tick, f"thought {tick}")


def test_imp038_depth_scenario(memory):
    """IMP-038: depth 3 and 10 exchanges -> the last 3 pairs, then the pending message."""
    c = Consciousness(chat_context_depth=3)
    exchanges(memory, c, 10)
    c.begin_tick(11)
    memory.sync_state(c)
    memory.begin_chat(11, "message 11")
    text = assemble(memory.snapshot(c)).text
    assert chat_lines(text) == [
        "Human: message 8", "Agent: response 8",
        "Human: message 9", "Agent: response 9",
        "Human: message 10", "Agent: response 10",
        "Human: message 11",
    ]


def test_pending_always_included_even_at_depth_zero(memory):
    c = Consciousness(chat_context_depth=0)
    exchanges(memory, c, 4)
    memory.begin_chat(5, "now")
    assert chat_lines(assemble(memory.snapshot(c)).text) == ["Human: now"]


def test_every_item_in_the_context_has_a_memid_and_tier(memory):
    """memid spec, Key Requirement: no anonymous memory; the test walks the whole context."""
    c = Consciousness(monologue_context_depth=2)
    exchanges(memory, c, 3)
    c.last_eval_result = EvalResult(success=True, result="4")
    memory.sync_state(c)
    memory.create_note("groceries", "milk", Kind.NOTE, ())
    memory.evict(memory.mem_id("chat.2"))
    memory.begin_chat(4, "next")
    text = assemble(memory.snapshot(c)).text
    ctx = parse_context(text)  # raises on any line that is not an item with a valid MemId
    assert list(ctx) == ["memory", "monologue", "agent-consciousness", "chat", "last-eval-result"]
    walked = [item for items in ctx.values() for item in items]
    assert len(walked) == text.count('"mem_id"')
    for item in walked:
        assert item["tier"] in ("ram", "rom") and isinstance(item["version"], int)
        assert set(item) >= {"mem_id", "tier", "version", "kind", "mutable", "content"}
        assert item["mutable"] == (item["tier"] == "ram")
    assert [name_of(i) for i in ctx["monologue"]] == ["monologue.2", "monologue.3"]
    assert chat_lines(text)[2] == "[evicted chat.2]"


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
