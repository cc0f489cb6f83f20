"""LTM search on FTS5's own bm25() and document counts (issues 10 and 13): ranking,
versions, rollbacks, the durability setting."""

import sqlite3

import pytest

from amacs_server.memory.items import Kind, MemoryItem, Tier
from amacs_server.memory.ltm import LongTermMemory, LtmError, fts_query
from amacs_server.memory.memid import MemId
from tests.test_memory import put_all


def note(name, content, version=1, tags=()):
    return MemoryItem(MemId("a", "primary", name, version), Tier.RAM, Kind.NOTE, content, tags=tags)


def names(hits):
    return [h.mem_id.name for h in hits]


def test_rolled_back_versions_are_neither_found_nor_counted(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db", common_df=2, common_pool=10)
    put_all(ltm, [note("n1", "zebra cat"), note("n2", "zebra dog"),
                  *(note(f"m{i}", "a cat") for i in range(3))])
    with pytest.raises(RuntimeError), ltm.transaction():
        put_all(ltm, [note(f"gone{i}", "zebra zebra") for i in range(3)])
        raise RuntimeError("the tick failed")
    # "cat" is in 4 versions (> 2): left out beside "zebra", which is in 2, not 5:
    # a count kept beside the index would have drifted with the rollback.
    for store in (ltm, LongTermMemory(tmp_path / "memory.db", common_df=2, common_pool=10)):
        assert sorted(names(store.search("zebra cat"))) == ["n1", "n2"]
        assert store.search("gone0") == [] and store.count() == 5


def scored(hits):
    return [(h.mem_id.name, h.mem_id.version, h.score, h.snippet) for h in hits]


def test_a_rolled_back_insert_leaves_no_trace_in_results_or_ranking(tmp_path):
    """FTS5's totals (items, tokens, each word's items) roll back with the rows: the scores
    are those of a database that never saw the rolled-back items, also after more writes."""
    def fill(ltm):
        put_all(ltm, [note(f"n{i}", f"otter river {'stone ' * (i % 4)}bank {i}") for i in range(30)])
        put_all(ltm, [note("story", "the otter slept by the river"), note("kelp", "kelp forest otter")])

    clean, dirty = LongTermMemory(tmp_path / "clean.db"), LongTermMemory(tmp_path / "dirty.db")
    fill(clean)
    fill(dirty)
    with pytest.raises(RuntimeError), dirty.transaction():  # many items, long ones: N and lengths would move
        put_all(dirty, [note(f"gone{i}", "kelp otter river " * 40 + "forest") for i in range(50)])
        raise RuntimeError("the tick failed")
    with pytest.raises(LtmError):  # a batch that fails half-way is rolled back whole
        put_all(dirty, [note("half", "kelp kelp otter"), note("n0", "a duplicate")])
    for ltm in (clean, dirty):
        ltm.put(note("later", "otter kelp river stone"))
    queries = ("otter", "kelp forest", "river stone bank", "the otter", "forest", "gone3", "half")
    for store in (dirty, LongTermMemory(tmp_path / "dirty.db")):
        for q in queries:
            assert scored(store.search(q, limit=50)) == scored(clean.search(q, limit=50)), q
        assert store.count() == clean.count() == 33
    assert clean.search("gone3") == [] and clean.search("half") == []


def test_a_rarer_words_match_ranks_above_a_common_ones(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db")
    put_all(ltm, [note(f"cat{i}", f"a cat sat on mat {i}") for i in range(40)])
    ltm.put(note("rare", "a zebra sat on mat"))
    ltm.put(note("common", "a cat sat on mat"))
    hits = ltm.search("cat zebra", limit=50)
    assert names(hits)[0] == "rare" and hits[0].score > 2 * hits[1].score
    assert len(hits) == 42  # every match of either word, the rare one first
    # A word in more than common_df items is left out beside rarer ones (and only ranks alone).
    small = LongTermMemory(tmp_path / "memory.db", common_df=10, common_pool=100)
    assert names(small.search("cat zebra")) == ["rare"]
    assert len(small.search("cat", limit=50)) == 41


def test_an_exact_phrase_or_heading_ranks_above_its_words_scattered(tmp_path):
    """The query as typed is a phrase of the FTS5 query too: bm25() adds its weight."""
    ltm = LongTermMemory(tmp_path / "memory.db")
    put_all(ltm, [note(f"f{i}", f"plain filler words number {i} about the garden") for i in range(30)])
    ltm.put(note("heading", {"heading": "Kettle repair plan",
                             "content": "Order the thermostat, then test it twice before the weekend."}))
    ltm.put(note("scattered", "The plan for the garden: repair the fence, and the kettle is fine. "
                              "Repair the gate. The plan changes."))
    ltm.put(note("one-word", "kettle"))
    assert names(ltm.search("kettle repair plan"))[:2] == ["heading", "scattered"]
    assert names(ltm.search("Kettle, repair: PLAN!"))[0] == "heading"  # as FTS5 tokenizes it
    # Without the phrase, bm25() over the three words alone puts the scattered words first.
    plain = ltm.db.execute("SELECT rowid FROM items_fts WHERE items_fts MATCH ? ORDER BY bm25(items_fts) LIMIT 1",
                           (fts_query(["kettle", "repair", "plan"]),)).fetchone()[0]
    assert ltm.db.execute("SELECT base FROM items WHERE id=?", (plain,)).fetchone()[0].endswith("scattered")
    # A phrase of a common word and a rare one: the items holding it in that order first.
    put_all(ltm, [note("in-order", "we saw the garden gnome today"), note("apart", "gnome near the garden wall")])
    assert names(ltm.search("the garden gnome"))[0] == "in-order"


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


def test_one_hit_per_item_its_newest_matching_version_and_a_newer_one_is_named(tmp_path):
    """A hit is the item's newest version that matches, ranked by its best version's score: an
    agent acting on a hit must not get the old note because its shorter text scored higher
    (bm25 prefers it).  A newer version that does not match is named (:latest)."""
    ltm = LongTermMemory(tmp_path / "memory.db")
    first = note("plan", "heron nest by the lake")
    ltm.put(first)
    ltm.put(first.next_version("eagle"))
    ltm.put(note("other", "a heron"))
    seen = [(h.mem_id.name, h.mem_id.version, h.latest) for h in ltm.search("heron nest")]
    assert seen == [("plan", 1, 2), ("other", 1, None)]
    assert ltm.search("heron nest")[0].to_dict()["latest"] == 2 and "latest" not in ltm.search("eagle")[0].to_dict()
    assert [(h.mem_id.name, h.mem_id.version, h.latest) for h in ltm.search("eagle")] == [("plan", 2, None)]
    groceries = note("groceries", "buy oat milk and rye bread")
    ltm.put(groceries)
    second = groceries.next_version("buy oat milk, rye bread and coffee")
    ltm.put(second)
    best_alone = ltm.db.execute("SELECT rowid FROM items_fts WHERE items_fts MATCH 'milk' ORDER BY bm25(items_fts)")
    assert best_alone.fetchone()[0] < best_alone.fetchone()[0]  # bm25 alone prefers version 1
    [milk] = ltm.search("milk")
    assert (milk.mem_id.version, milk.latest, milk.snippet) == (2, None, "buy oat [milk], rye bread and coffee")
    ltm.put(second.next_version("buy tea"))
    assert [(h.mem_id.version, h.latest) for h in ltm.search("bread")] == [(2, 3)]


def test_filters_page_past_ranked_rows_they_drop(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db", common_df=5, common_pool=100)
    put_all(ltm, [note(f"n{i}", "the tern " * (1 + i % 3)) for i in range(60)])
    ltm.put(note("tagged", "the tern", tags=("birds",)))
    ltm.put(MemoryItem(MemId("b", "primary", "elsewhere", 1), Tier.RAM, Kind.NOTE, "the tern tern tern"))
    assert names(ltm.search("tern", limit=1, tags=("birds",))) == ["tagged"]
    assert "elsewhere" not in names(ltm.search("the tern", limit=100, agent_brain="a:primary"))
    assert "elsewhere" in names(ltm.search("the tern", limit=100))


def test_durability_settings_and_the_old_counter_table_goes(tmp_path):
    """A home made before issue 13 had a term_df table (its items and FTS5 index are as now):
    it is dropped at open (it is the stale count, and a table nothing reads only costs space)."""
    path = tmp_path / "memory.db"
    made = LongTermMemory(path)
    put_all(made, [note("owl", "barn owl at dusk"), note("wren", "a wren")])
    made.close()
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE term_df (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID")
    old.executemany("INSERT INTO term_df VALUES (?, ?)", [("owl", 7), ("wren", 0)])  # drifted
    old.commit()
    old.close()
    ltm = LongTermMemory(path)
    assert names(ltm.search("owl wren")) == ["wren", "owl"]
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
