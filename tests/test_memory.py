"""Long-term memory and the brain tools, in process (memid spec Phases 2-3; unit tests 2-4)."""

import pytest

from amacs_server.config import load_config
from amacs_server.errors import AmacsError
from amacs_server.memory.items import Kind, MemoryItem, Tier
from amacs_server.memory.ltm import LongTermMemory, LtmError
from amacs_server.memory.memid import MemId
from amacs_server.runtime import Runtime
from amacs_server.state.consciousness import EvalResult
from amacs_server.tools import memory as tools
from amacs_server.views import memory_summary


class SilentFace:
    def reply(self, text, streamed=False): ...
    def reply_delta(self, text, last=False): ...
    def thinking_delta(self, text): ...
    def reply_abandon(self, reason): ...
    def annotate(self, text, kind="info"): ...
    def retrying(self, retry): ...

    def preparing(self, text): ...
    def agent_ended(self, agent_id, state, ok, text):
        return True
    def turn_started(self): ...
    def step_started(self, step, limit): ...
    def turn_done(self, tick): ...
    def ticked(self, tick, usage): ...
    def input_taken(self, saved=True): ...
    def agents(self, working, spending): ...

    async def evaluate(self, form, agent="primary"):
        return EvalResult(True, result="nil")

    async def hydrate(self, buffers):
        return [{"name": b, "error": "no Emacs here"} for b in buffers]


def silent_runtime(home, key="k"):
    """A Runtime on HOME (API key KEY) with no Emacs: its face is a SilentFace."""
    return Runtime(load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": key}), SilentFace())


@pytest.fixture
def rt(tmp_path):
    runtime = silent_runtime(tmp_path / "home")
    yield runtime
    runtime.mind.ltm.close()


def note(name, content, version=1, tags=()):
    return MemoryItem(MemId("a", "primary", name, version), Tier.RAM, Kind.NOTE, content, tags=tags)


def put_all(ltm, items):
    """Store ITEMS in LTM in one transaction: all of them, or none when one put fails."""
    with ltm.transaction():
        for item in items:
            ltm.put(item)


def test_ltm_wal_versions_and_copy_on_write(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db")
    assert ltm.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    first = note("plan", "draft")
    ltm.put(first)
    ltm.put(first.next_version("final"))
    assert ltm.latest_version("a:primary:plan") == 2
    assert [ltm.get(MemId("a", "primary", "plan", v)).content for v in (1, 2)] == ["draft", "final"]
    assert ltm.get(MemId.parse("<EOT>a:primary:plan<EOT>")).content == "final"
    assert ltm.get(MemId.parse("<EOT>a:primary:plan:1<EOT>")).content == "draft"
    with pytest.raises(LtmError, match="versions 1..2 do"):
        ltm.get(MemId.parse("<EOT>a:primary:plan:7<EOT>"))
    with pytest.raises(LtmError, match="already exists"):
        ltm.put(first)


def test_search_ranks_closer_match_first_with_snippets_and_tags(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db")
    for i in range(30):
        ltm.put(note(f"filler{i}", f"ordinary words about topic {i}"))
    ltm.put(note("weak", "a heron stood by the water among many reeds and stones and other birds"))
    ltm.put(note("strong", "heron nest: the heron nest is in the tall pine", tags=("birds",)))
    hits = ltm.search("heron nest")
    assert [h.mem_id.name for h in hits[:2]] == ["strong", "weak"]
    assert hits[0].score > hits[1].score and "[heron]" in hits[0].snippet
    assert [h.mem_id.name for h in ltm.search("heron", tags=("birds",))] == ["strong"]
    with pytest.raises(LtmError, match="vector search"):
        ltm.search("heron", mode="vector")
    with pytest.raises(LtmError, match="no words"):
        ltm.search("!!!")
    assert ltm.search('he said "nest" (AND) NOT -- OR') != []  # query syntax never leaks into FTS5


def test_tools_create_mutate_evict_load_echo_memid_and_version(rt):
    made = tools.memory_create(rt, "groceries", "milk", {"tags": ["shopping"]})
    assert made == {"mem_id": "<EOT>amacs-instance-1:primary:groceries:1<EOT>", "version": 1,
                    "tier": "ram", "kind": "note"}
    changed = tools.memory_mutate(rt, made["mem_id"], "milk, eggs")
    assert (changed["version"], changed["previous_version"]) == (2, 1)
    # As a person types it, read without its <EOT>s: the same item (a newcomer's was refused).
    typed = tools.memory_load(rt, "amacs-instance-1:primary:groceries:2")
    assert (typed["mem_id"], typed["content"]) == ("<EOT>amacs-instance-1:primary:groceries:2<EOT>", "milk, eggs")
    evicted = tools.memory_evict(rt, "<EOT>amacs-instance-1:primary:groceries<EOT>")
    assert evicted["evicted"] and evicted["handle"]["preview"] == "milk, eggs"
    assert "amacs-instance-1:primary:groceries" not in rt.mind.memory.pinned
    loaded = tools.memory_load(rt, "<EOT>amacs-instance-1:primary:groceries<EOT>", {"version": 1})
    assert (loaded["version"], loaded["content"]) == (1, "milk")
    assert rt.mind.memory.pinned["amacs-instance-1:primary:groceries"].content == "milk"
    hits = tools.memory_search(rt, "eggs", None)
    assert hits[0]["mem_id"] == "<EOT>amacs-instance-1:primary:groceries:2<EOT>"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda rt: tools.memory_create(rt, "Bad Name", "x"), "must start with"),
        (lambda rt: tools.memory_create(rt, "chat.5", "x"), "reserved"),
        (lambda rt: tools.memory_create(rt, "mood", "x"), "reserved"),
        (lambda rt: tools.memory_create(rt, "n", None), "memory-create: CONTENT is required"),
        (lambda rt: tools.memory_create(rt, "n", "x", {"colour": "red"}), "OPTS has unknown option(s) :colour; allowed: :kind, :tags"),
        (lambda rt: tools.memory_create(rt, "n", "x", {"kind": "message"}), ":kind must be 'note' or 'summary', got 'message'"),
        (lambda rt: tools.memory_create(rt, 3, "x"), "memory-create: NAME must be a string, got 3"),
        (lambda rt: tools.memory_load(rt, "<EOT>amacs-instance-1:primary:mood<EOT>", {"version": True}),
         ":version must be an integer, got True"),
        (lambda rt: tools.memory_mutate(rt, "groceries", "x"), "MemId 'groceries' needs AGENT:BRAIN:NAME"),
        (lambda rt: tools.memory_mutate(rt, "<EOT>amacs-instance-1:primary:groceries", "x"), "must start and end with <EOT>"),
        (lambda rt: tools.memory_mutate(rt, "<EOT>amacs-instance-1:primary:nothing<EOT>", "x"), "no memory item"),
        (lambda rt: tools.memory_mutate(rt, "<EOT>amacs-instance-1:primary:current_tick<EOT>", 9), "is ROM"),
        (lambda rt: tools.memory_evict(rt, "<EOT>amacs-instance-1:primary:budget<EOT>"), "is ROM"),
        (lambda rt: tools.memory_evict(rt, "<EOT>amacs-instance-1:primary:mood<EOT>"), "consciousness field"),
        (lambda rt: tools.memory_load(rt, "<EOT>other:primary:x<EOT>"), "another brain"),
        (lambda rt: tools.memory_load(rt, "<EOT>amacs-instance-1:primary:mood:1<EOT>", {"version": 2}),
         "names version 1 but :version is 2"),
        (lambda rt: tools.memory_search(rt, "", None), "memory-search: QUERY must not be empty"),
        (lambda rt: tools.memory_search(rt, "x", {"limit": 1000}), "limit must be within"),
    ],
)
def test_invalid_calls_fail_deterministically(rt, call, message):
    for _ in range(2):  # the same call fails the same way every time
        with pytest.raises(AmacsError) as err:  # a rule of the tool, or its arguments refused at the boundary
            call(rt)
        assert message in str(err.value)


def test_mutating_a_state_item_goes_through_consciousness_rules(rt):
    out = tools.memory_mutate(rt, "<EOT>amacs-instance-1:primary:chat_context_depth<EOT>", 2)
    assert rt.mind.consciousness.chat_context_depth == 2 and out["version"] == out["previous_version"] + 1
    with pytest.raises(tools.ToolError, match="integer within"):
        tools.memory_mutate(rt, "<EOT>amacs-instance-1:primary:chat_context_depth<EOT>", -4)
    out = tools.memory_mutate(rt, "<EOT>amacs-instance-1:primary:api_settings<EOT>",
                              {"temperature": 0.3, "max_tokens": 2000})
    assert (rt.mind.consciousness.api_settings.temperature, rt.mind.consciousness.api_settings.max_tokens) == (0.3, 2000)
    with pytest.raises(tools.ToolError, match="temperature must be within"):
        tools.memory_mutate(rt, "<EOT>amacs-instance-1:primary:api_settings<EOT>", {"temperature": 9, "top_p": 0.5})
    assert rt.mind.consciousness.api_settings.top_p == 1.0  # all or nothing


def test_common_words_are_bounded_and_rare_words_decide(tmp_path):
    """Search cost stays bounded: near-universal words are dropped beside rarer ones,
    and a query of only such words ranks the most recent matches."""
    ltm = LongTermMemory(tmp_path / "memory.db", common_df=5, common_pool=4)
    for i in range(12):
        ltm.put(note(f"n{i}", f"the cat {'sat' if i % 2 else 'ran'} number{i}"))
    ltm.put(note("zebra", "the zebra"))
    # "the" is in 13 items (> 5): with "zebra" present only "zebra" is matched.
    hits = ltm.search("the zebra")
    assert [h.mem_id.name for h in hits] == ["zebra"] and "[zebra]" in hits[0].snippet
    # Only common words: the 4 most recent matches are ranked, nothing older;
    # both words beat one, and equal scores go newest first.
    assert [h.mem_id.name for h in ltm.search("the cat", limit=10)] == ["n11", "n10", "n9", "zebra"]
    assert all(h.snippet for h in ltm.search("the cat"))


def _committed(path, base):
    """True when another connection (another process) reads BASE's version 1 in the database at PATH."""
    import sqlite3

    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT 1 FROM items WHERE base=? AND version=1", (base,)).fetchone() is not None
    finally:
        db.close()


def test_versions_put_soon_commit_together_at_the_end_of_the_loops_turn_or_before_any_other_write(tmp_path):
    import asyncio

    path = tmp_path / "memory.db"
    ltm = LongTermMemory(path)

    async def go():
        ltm.put(note("one", "told"), soon=True)
        ltm.put(note("two", "told too"), soon=True)
        assert ltm.get(MemId("a", "primary", "one")).content == "told"  # read back at once
        assert not _committed(path, "a:primary:one")  # waiting for the end of the turn
        with pytest.raises(LtmError, match="already exists"):
            ltm.put(note("one", "again"), soon=True)  # refused alone: the others still commit
        await asyncio.sleep(0)
        assert _committed(path, "a:primary:one") and _committed(path, "a:primary:two")
        ltm.put(note("three", "soon"), soon=True)
        ltm.put(note("four", "now"))  # any other write commits what waits, with it
        assert _committed(path, "a:primary:three") and _committed(path, "a:primary:four")
        ltm.put(note("five", "soon"), soon=True)
        ltm.commit()  # asked for (a subagent's request is about to leave)
        assert _committed(path, "a:primary:five")
        ltm.put(note("six", "soon"), soon=True)

    asyncio.run(go())
    assert _committed(path, "a:primary:six")
    ltm.put(note("seven", "no loop runs"), soon=True)  # outside a loop: at once
    assert _committed(path, "a:primary:seven")
    ltm.close()


def test_a_version_put_soon_survives_a_kill_after_the_turn_it_was_put_in(tmp_path):
    # The process is killed (SIGKILL: nothing of it runs) once the turn that put the version is
    # over; the version is in the database.
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "memory.db"
    script = textwrap.dedent(f"""
        import asyncio, time
        from pathlib import Path
        from amacs_server.memory.items import Kind, MemoryItem, Tier
        from amacs_server.memory.ltm import LongTermMemory
        from amacs_server.memory.memid import MemId
        ltm = LongTermMemory(Path({str(path)!r}))
        async def go():
            ltm.put(MemoryItem(MemId("a", "task-1", "chat.1", 1), Tier.ROM, Kind.MESSAGE, {{"said": "q"}}), soon=True)
            await asyncio.sleep(0)
            print("turned", flush=True)
            time.sleep(60)  # killed here, the loop held
        asyncio.run(go())
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "turned"
    finally:
        proc.kill()
        proc.wait()
    assert _committed(path, "a:task-1:chat.1")


def test_the_latest_items_of_a_prefix_in_one_read_are_what_finding_each_gives(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db")
    for i in range(12):
        first = note(f"scratchpad.{i}", f"note {i}", tags=("t", f"x{i % 3}") if i % 2 else ())
        ltm.put(first)
        for v in range(i % 4):
            first = first.next_version(f"note {i} v{v + 2}")
            ltm.put(first)
    for name in ("scratchpad", "scratchpad-", "scratchpae.1", "plan", "scratchpad_1"):
        ltm.put(note(name, "around the range"))
    ltm.put(MemoryItem(MemId("b", "primary", "scratchpad.1", 1), Tier.RAM, Kind.NOTE, "another agent's"))
    bases = ltm.bases_with_prefix("a:primary", "scratchpad.")
    assert len(bases) == 12
    assert ltm.latest_with_prefix("a:primary", "scratchpad.") == {
        base: ltm.find(MemId.from_base(base)) for base in bases}
    assert ltm.latest_with_prefix("a:primary", "nothing.") == {}


def test_restoring_the_scratchpad_from_one_read_keeps_what_a_lookup_per_note_kept(tmp_path, monkeypatch):
    """Notes as stored, changed by hand, missing from memory.db, and two of one tick (the second
    compared with what the first wrote): the same items and the same rows as looking each up."""
    import shutil

    from amacs_server.memory.active import ActiveMemory
    from amacs_server.state.consciousness import Consciousness

    ltm = LongTermMemory(tmp_path / "memory.db")
    memory = ActiveMemory(ltm, agent="a")
    for tick in range(1, 9):
        memory.add_scratchpad(tick, f"H{tick}", "t-1" if tick % 2 else None, f"text {tick}")
    ltm.close()
    org = [(t, f"H{t}", "t-1" if t % 2 else None, f"text {t}") for t in range(1, 9)]
    org[3] = (4, "H4", None, "changed by hand")
    org += [(9, "new", None, "not in memory.db"), (9, "new", None, "not in memory.db"), (9, "new", None, "second"),
            (5, "H5", "t-1", "text 5")]

    def restored(folder, per_note):
        shutil.copytree(tmp_path, folder, ignore=shutil.ignore_patterns("copy-*"))
        ltm = LongTermMemory(folder / "memory.db")
        if per_note:
            class Lookup:
                def get(self, base):
                    return ltm.find(MemId.from_base(base))
            monkeypatch.setattr(ltm, "latest_with_prefix", lambda *_: Lookup())
        memory = ActiveMemory(ltm, agent="a")
        memory.restore(Consciousness(), chat=[], monologue=[], scratchpad=org)
        rows = ltm.db.execute("SELECT base, version, content FROM items ORDER BY base, version").fetchall()
        return [(i.mem_id, i.content, i.tags) for i in memory.scratchpad], rows

    assert restored(tmp_path / "copy-bulk", False) == restored(tmp_path / "copy-each", True)


def test_the_active_set_read_in_two_queries_is_what_a_get_of_each_row_gives(tmp_path, monkeypatch):
    """Start-up reads every pinned and evicted item (a home of 20,000 ticks had 800 pinned):
    two queries give what active_set and a get of each row's version gave, and the restore
    of active memory uses them, not one get a row."""
    from amacs_server.memory.active import ActiveMemory
    from amacs_server.state.consciousness import Consciousness

    ltm = LongTermMemory(tmp_path / "memory.db")
    for i in range(12):
        item = note(f"n{i}", f"note {i}", tags=("t", f"x{i % 3}") if i % 2 else ())
        ltm.put(item)
        for v in range(i % 3):
            item = item.next_version(f"note {i} v{v + 2}")
            ltm.put(item)
        status = "pinned" if i % 3 else "evicted"
        ltm.set_active("primary", item.mem_id.base, status, None if i % 4 == 0 else 1 + (i % 2) * (i % 3))
    ltm.set_active("other", "a:primary:n1", "pinned", 1)
    expected = [(status, ltm.get(MemId.from_base(base, version))) for base, status, version in ltm.active_set("primary")]
    assert ltm.active_items("primary") == expected and len(expected) == 12
    assert ltm.active_items("other") == [("pinned", ltm.get(MemId.from_base("a:primary:n1", 1)))]
    assert ltm.active_items("nobody") == []
    gets: list[MemId] = []
    real_get = ltm.get
    monkeypatch.setattr(ltm, "get", lambda mem_id: (gets.append(mem_id), real_get(mem_id))[1])
    memory = ActiveMemory(ltm, agent="a")
    memory.restore(Consciousness(), chat=[], monologue=[])
    assert list(memory.pinned) == [i.mem_id.base for s, i in expected if s == "pinned"]
    assert [memory.pinned[i.mem_id.base] for s, i in expected if s == "pinned"] == [i for s, i in expected if s == "pinned"]
    assert list(memory.evicted) == [i.mem_id.base for s, i in expected if s == "evicted"]
    assert not [g for g in gets if g.name.startswith("n")], gets
    ltm.set_active("primary", "a:primary:gone", "pinned", 3)
    with pytest.raises(LtmError, match="no memory item"):
        ltm.active_items("primary")


def test_an_address_read_back_from_memory_db_is_not_checked_again_but_a_salvaged_one_is(tmp_path, monkeypatch):
    """Each MemId was checked when its version was written: a start reading 800 pinned notes
    spent ~5 ms checking them again.  What salvage reads from a damaged file is checked."""
    from amacs_server.memory import memid

    ltm = LongTermMemory(tmp_path / "memory.db")
    items = [note("kettle", "steel", 1, ("metal",)), note("kettle", "iron", 2, ("metal",)), note("scratchpad.3", {"a": 1})]
    for item in items:
        ltm.put(item)
    ltm.set_active("primary", items[0].mem_id.base, "pinned")
    latest = items[1].mem_id.at(None)
    checks = []
    real = memid._Part.check
    monkeypatch.setattr(memid._Part, "check", lambda self, part, text: checks.append(part) or real(self, part, text))
    read = [ltm.find(items[0].mem_id), ltm.get(latest),
            *ltm.latest_with_prefix("a:primary", "scratchpad.").values(), *(i for _s, i in ltm.active_items("primary"))]
    assert checks == []
    assert read == [items[0], items[1], items[2], items[1]]
    assert all(type(i.mem_id) is MemId and hash(i.mem_id) == hash(MemId.parse(i.mem_id.format())) for i in read)
    ltm.db.execute("INSERT INTO items (base, version, tier, kind, created_at_ms, content, text) "
                   "VALUES ('a:primary:Not A Name', 1, 'ram', 'note', 1, '\"x\"', 'x')")
    ltm.close()
    new = LongTermMemory(tmp_path / "new.db")
    assert new.salvage_from(tmp_path / "memory.db") == 3  # the row no MemId can name is left
    new.close()


def test_the_hubs_memory_section_lists_the_newest_pinned_items_and_counts_them_all(rt):
    """A home may pin hundreds of notes (800 at 20,000 ticks of bench_flat's workload, whose hub then
    took 1.5 s a draw): the hub lists the newest few and counts the rest."""
    for n in range(12):
        tools.memory_create(rt, f"note-{n}", f"text {n}\n  of note {n}")
    summary = memory_summary(rt.mind, 10)
    assert summary["pinned_count"] == 12 and summary["versions"] == rt.mind.ltm.count()
    assert [p["name"] for p in summary["pinned"]] == [f"note-{n}" for n in range(11, 1, -1)]
    assert summary["pinned"][0] == {"mem_id": "amacs-instance-1:primary:note-11:1", "name": "note-11", "kind": "note",
                                    "version": 1, "preview": "text 11 of note 11"}
