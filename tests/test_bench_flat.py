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
