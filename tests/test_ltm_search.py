"""LTM search on FTS5's own bm25() and document counts (issues 10 and 13): ranking,
versions, rollbacks, the durability setting."""

import sqlite3

import pytest

from amacs_server.memory.items import Kind, MemoryItem, Tier
from amacs_server.memory.ltm import LongTermMemory
from amacs_server.memory.memid import MemId


def note(name, content, version=1, tags=()):
    return MemoryItem(MemId("a", "primary", name, version), Tier.RAM, Kind.NOTE, content, tags=tags)


def names(hits):
    return [h.mem_id.name for h in hits]


def test_rolled_back_versions_are_neither_found_nor_counted(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db", common_df=2, common_pool=10)
    ltm.put_many([note("n1", "zebra cat"), note("n2", "zebra dog"),
                  *(note(f"m{i}", "a cat") for i in range(3))])
    with pytest.raises(RuntimeError), ltm.transaction():
        ltm.put_many(note(f"gone{i}", "zebra zebra") for i in range(3))
        raise RuntimeError("the tick failed")
    # "cat" is in 4 versions (> 2): left out beside "zebra", which is in 2, not 5:
    # a count kept beside the index would have drifted with the rollback.
    for store in (ltm, LongTermMemory(tmp_path / "memory.db", common_df=2, common_pool=10)):
        assert sorted(names(store.search("zebra cat"))) == ["n1", "n2"]
        assert store.search("gone0") == [] and store.count() == 5


def test_bm25_ranks_frequency_and_brevity_and_scores_are_positive(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db")
    for i in range(20):
        ltm.put(note(f"filler{i}", f"plain words number {i}"))
    ltm.put(note("long", "kettle " + "and then some other words " * 10))
    ltm.put(note("short", "kettle and steel"))
    ltm.put(note("twice", "kettle kettle steel"))
    hits = ltm.search("kettle")
    assert names(hits) == ["twice", "short", "long"]
    assert hits[0].score > hits[1].score > hits[2].score > 0
    assert hits[0].snippet == "[kettle] [kettle] steel"
    assert isinstance(hits[0].to_dict()["score"], float)


def test_one_hit_per_item_its_best_matching_version(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db")
    first = note("plan", "heron nest by the lake")
    ltm.put(first)
    ltm.put(first.next_version("eagle"))
    ltm.put(note("other", "a heron"))
    assert [(h.mem_id.name, h.mem_id.version) for h in ltm.search("heron nest")] == [("plan", 1), ("other", 1)]
    assert [(h.mem_id.name, h.mem_id.version) for h in ltm.search("eagle")] == [("plan", 2)]


def test_filters_page_past_ranked_rows_they_drop(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db", common_df=5, common_pool=100)
    ltm.put_many(note(f"n{i}", "the tern " * (1 + i % 3)) for i in range(60))
    ltm.put(note("tagged", "the tern", tags=("birds",)))
    ltm.put(MemoryItem(MemId("b", "primary", "elsewhere", 1), Tier.RAM, Kind.NOTE, "the tern tern tern"))
    assert names(ltm.search("tern", limit=1, tags=("birds",))) == ["tagged"]
    assert "elsewhere" not in names(ltm.search("the tern", limit=100, agent_brain="a:primary"))
    assert "elsewhere" in names(ltm.search("the tern", limit=100))


def test_durability_settings_and_the_old_counter_table_goes(tmp_path):
    path = tmp_path / "memory.db"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE term_df (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID")
    old.commit()
    old.close()
    ltm = LongTermMemory(path)
    assert ltm.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert ltm.db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL: see ltm.py's docstring
    tables = {r[0] for r in ltm.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "term_df" not in tables


def test_snippets_show_the_window_with_the_most_query_words():
    from amacs_server.memory.ltm import snippet

    text = "Heron, " + " ".join(f"w{i}" for i in range(30)) + " then heron and NEST. " + "x " * 30
    assert snippet(text, ["heron", "nest"]) == "…w27 w28 w29 then [heron] and [NEST]. x x x x x…"
    assert snippet('{"human": "milk, eggs"}', ["eggs"]) == '{"human": "milk, [eggs]"}'
    assert snippet("", ["eggs"]) == ""
