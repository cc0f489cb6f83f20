"""bench_flat's ``--context same`` growth keeps pinned only the newest notes, the rest back in
long-term memory alone, so a grown home's context (and its tick states) stays the size of the
smallest home's."""

from __future__ import annotations

from amacs_server.memory.active import ActiveMemory
from amacs_server.memory.items import Kind
from amacs_server.memory.ltm import LongTermMemory
from bench.bench_flat import unpin_older


def test_unpin_older_keeps_the_newest_notes_pinned_and_the_rest_in_ltm_alone(tmp_path) -> None:
    ltm = LongTermMemory(tmp_path / "memory.db")
    memory = ActiveMemory(ltm, agent="a")
    summary = memory.create_note("summary-0", {"text": "kept"}, Kind.SUMMARY, ())
    for tick in range(1, 6):
        memory.create_note(f"note-{tick}", {"text": f"made at {tick}"}, Kind.NOTE, ())
    memory.mutate(memory.mem_id("note-1"), {"text": "changed"})  # a new version keeps its place: still the oldest
    unpin_older(memory, 2)
    kept = [memory.mem_id(f"note-{t}").base for t in (4, 5)]
    assert list(memory.pinned) == [summary.mem_id.base, *kept]
    assert sorted(b for b, status, _v in ltm.active_set("primary")) == sorted([summary.mem_id.base, *kept])
    assert not memory.evicted  # no handle left in the context
    assert [i.mem_id.base for i in memory.memory_items()] == [summary.mem_id.base, *kept]
    assert ltm.get(memory.mem_id("note-1")).content == {"text": "changed"}  # still in long-term memory
    unpin_older(memory, 2)
    assert list(memory.pinned) == [summary.mem_id.base, *kept]
    ltm.close()


def test_a_grown_home_raises_the_budget_and_a_turn_that_asked_no_model_stops_the_growth(tmp_path) -> None:
    """A home grown past the default budget ($5, ~8,000 of the workload's turns) went on with ticks
    that had no reply ("budget limit reached"): its 20,000-tick home was lighter than the one it
    stood for.  The growth raises the limit, and a turn that made no model call stops it."""
    import pytest

    from amacs_server.config import load_config
    from amacs_server.loop.primary import run_turn
    from amacs_server.runtime import Runtime
    from bench.bench_rewind import answer, answered_turn, grown_config
    from tests.fake_anthropic import FakeAnthropic
    from tests.test_memory import SilentFace

    fake = FakeAnthropic(default=answer).start()
    try:
        for limit, answered in (("0", False), (None, True)):
            env = grown_config(tmp_path / f"home-{limit}", fake.url)
            if limit is not None:
                env["AMACS_BUDGET_LIMIT"] = limit  # a home at its budget, as the default one is at ~8,000 ticks
            rt = Runtime(load_config(env), SilentFace(), turn=run_turn)
            rt.start()
            try:
                rt.mind.consciousness.budget.cost_so_far = 6.0  # more than the default $5 spent
                if answered:
                    answered_turn(rt, fake, "a question")
                else:
                    with pytest.raises(RuntimeError, match="made no model call"):
                        answered_turn(rt, fake, "a question")
            finally:
                rt.stop(grace=30)
    finally:
        fake.stop()
