"""The memid contract's item fields, in process (issue 13): created_at_ms and the flags on every
item shown, each item once, load's paging, scratchpad entries mutated in their org file, and the
MemIds in the transcript.  The end-to-end table is tests/e2e/test_memory_contract.py."""

import json

import pytest

from amacs_server.context.assemble import Conversation, assemble
from amacs_server.errors import AmacsError
from amacs_server.memory.active import ActiveMemory
from amacs_server.memory.items import (
    DEFAULT_PAGE_CHARS,
    MAX_PAGE_CHARS,
    Kind,
    MemoryItem,
    Tier,
    page_of,
)
from amacs_server.memory.ltm import LongTermMemory
from amacs_server.memory.memid import MemId
from amacs_server.persistence.scratchpad import ScratchpadEntry, ScratchpadLog
from amacs_server.state.consciousness import Consciousness, EvalResult
from amacs_server.tools import memory as tools
from tests.context_items import name_of, parse_context
from tests.test_memory import silent_runtime

ME = "amacs-instance-1:primary"


@pytest.fixture
def memory(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db")
    yield ActiveMemory(ltm, agent="amacs-instance-1")
    ltm.close()


@pytest.fixture
def rt(tmp_path):
    runtime = silent_runtime(tmp_path / "home")
    yield runtime
    runtime.mind.ltm.close()


def item(content, kind=Kind.NOTE):
    return MemoryItem(MemId("a", "primary", "x", 1), Tier.RAM, kind, content)


# -- paging -------------------------------------------------------------------------------------


def test_a_short_text_is_not_paged_and_a_long_one_is_in_parts_with_its_total():
    short = item("milk")
    assert page_of(short) == short and "page" not in short.to_contract()
    long = item("abcdefghij" * 1000)  # 10,000 characters
    first = page_of(long)
    assert first.content == long.content[:DEFAULT_PAGE_CHARS]
    assert first.to_contract()["page"] == {"offset": 0, "limit": DEFAULT_PAGE_CHARS, "total_chars": 10_000,
                                           "next_offset": DEFAULT_PAGE_CHARS}
    last = page_of(long, 9_995, 100)
    assert last.content == "fghij" and last.page is not None and last.page.next_offset is None
    assert page_of(long, 0, 10_000).page is None  # all of it fits from 0: as it is
    with pytest.raises(ValueError):
        page_of(long, -1, 5)
    with pytest.raises(ValueError):
        page_of(long, 0, 0)


def test_paging_reads_the_text_field_of_data_and_the_json_of_other_data():
    buffer = item({"name": "a.py", "mode": "python-mode", "content": "0123456789"}, Kind.BUFFER)
    part = page_of(buffer, 2, 3)
    assert part.content == {"name": "a.py", "mode": "python-mode", "content": "234"}
    assert part.page is not None and (part.page.field, part.page.total_chars) == ("content", 10)
    skill = page_of(item({"name": "s", "body": "x" * 50}, Kind.SKILL), 0, 10)
    assert skill.content["body"] == "x" * 10 and skill.page is not None and skill.page.field == "body"
    chat = item({"human": "hello", "agent": "hi"}, Kind.MESSAGE)
    text = json.dumps(chat.content)
    part = page_of(chat, 0, 5)
    assert part.content == text[:5] and part.page is not None and part.page.total_chars == len(text)
    assert part.page.field is None


def test_load_pages_a_long_note_and_memory_shows_the_part_loaded(rt):
    text = "".join(f"{i:05d} " for i in range(4000))  # 24,000 characters
    tools.memory_create(rt, "log", text)
    first = tools.memory_load(rt, f"<EOT>{ME}:log<EOT>")  # the defaults: the first part
    assert (first["total_chars"], first["offset"], first["limit"], first["next_offset"]) == (
        24_000, 0, DEFAULT_PAGE_CHARS, DEFAULT_PAGE_CHARS)
    assert first["content"] == text[:DEFAULT_PAGE_CHARS] and first["section"] == "memory"
    last = tools.memory_load(rt, f"<EOT>{ME}:log:1<EOT>", {"offset": 20_000, "limit": 5_000})
    assert last["content"] == text[20_000:] and last["next_offset"] is None
    shown = rt.mind.memory.snapshot(rt.mind.consciousness).memory
    assert [(i.content, i.page.offset if i.page else None) for i in shown] == [(text[20_000:], 20_000)]
    assert tools.memory_load(rt, f"<EOT>{ME}:log<EOT>", {"version": 1})["content"] == text[:DEFAULT_PAGE_CHARS]
    assert rt.mind.memory.snapshot(rt.mind.consciousness).memory[0].page.offset == 0
    assert rt.mind.memory.snapshot(rt.mind.consciousness).memory[0].content == text[:DEFAULT_PAGE_CHARS]  # shown again
    tools.memory_mutate(rt, f"<EOT>{ME}:log<EOT>", "y" + text)  # the part shown is the new version's
    assert rt.mind.memory.snapshot(rt.mind.consciousness).memory[0].content == ("y" + text)[:DEFAULT_PAGE_CHARS]
    short = tools.memory_create(rt, "short", "milk")
    loaded = tools.memory_load(rt, short["mem_id"])  # as before: the whole content
    assert loaded["content"] == "milk" and loaded["total_chars"] == 4 and "offset" not in loaded
    for opts, message in (({"offset": 30_000}, "past the end"), ({"limit": MAX_PAGE_CHARS + 1}, ":limit must be"),
                          ({"offset": -1}, ":offset must be"), ({"page": 2}, r"unknown option\(s\) :page")):
        with pytest.raises(AmacsError, match=message):
            tools.memory_load(rt, f"<EOT>{ME}:log<EOT>", opts)


# -- every item: created_at_ms, flags, once ------------------------------------------------------


def full_snapshot(memory):
    c = Consciousness(monologue_context_depth=3)
    for tick in (1, 2, 3):
        c.begin_tick(tick)
        memory.sync_state(c)
        memory.begin_chat(tick, f"message {tick}")
        memory.finish_chat(tick, f"response {tick}")
        memory.add_monologue(tick, f"thought {tick}")
    c.last_eval_result = EvalResult(success=True, result="4")
    c.active_thread = "code"
    memory.sync_state(c)
    memory.create_note("groceries", "milk", Kind.NOTE, ())
    memory.add_scratchpad(3, "Kettle", None, "Prefer steel.")
    memory.put_thread({"id": "code", "concern": "C", "buffers": ["a.py"], "status": "active"})
    memory.set_skills([{"name": "rust-mode", "kind": "skill", "description": "d", "body": "tips"}])
    memory.set_buffers([{"name": "a.py", "mode": "python-mode", "content": "print(1)"}])
    memory.set_events([{"type": "Hook", "source": "log", "content": "x"}], 1)
    memory.begin_chat(4, "next")
    return c


FLAGS = {  # name (or its prefix) -> (tier, mutable, evictable)
    "groceries": ("ram", True, True), "scratchpad.": ("ram", True, True), "chat.": ("rom", False, True),
    "monologue.": ("rom", False, True), "mood": ("ram", True, False), "identity": ("rom", False, False),
    "system_clock": ("rom", False, False), "last_eval_result": ("rom", False, False),
    "thread.": ("rom", False, False), "skill.": ("rom", False, False), "buffer.": ("rom", False, False),
    "event.": ("rom", False, False),
}


def test_every_item_shown_has_created_at_ms_and_says_what_may_be_done_with_it(memory):
    c = full_snapshot(memory)
    ctx = parse_context(assemble(memory.snapshot(c)).text)
    assert set(ctx) == {"skills", "threads", "scratchpad", "memory", "buffers", "monologue", "chat", "events",
                        "agent-consciousness", "last-eval-result"}
    seen = set()
    for tag, items in ctx.items():
        for shown in items:
            assert list(shown)[:7] == ["mem_id", "tier", "version", "kind", "mutable", "evictable", "created_at_ms"]
            assert isinstance(shown["created_at_ms"], int) and shown["created_at_ms"] > 1_600_000_000_000
            name = name_of(shown)
            rule = next((v for k, v in FLAGS.items() if name == k or (k.endswith(".") and name.startswith(k))),
                        None)
            if rule is not None:
                assert (shown["tier"], shown["mutable"], shown["evictable"]) == rule, (tag, name)
                seen.add(name if name in FLAGS else name.split(".")[0] + ".")
            assert shown["mutable"] == (shown["tier"] == "ram")  # this brain's own items
    assert seen == set(FLAGS)


def test_an_evicted_item_comes_back_with_load_exactly_once(memory):
    """The issue's case: a scratchpad entry evicted by the MemId shown, then loaded, showed twice."""
    c = full_snapshot(memory)
    for name, tag in (("scratchpad.3", "scratchpad"), ("chat.2", "chat"), ("monologue.3", "monologue"),
                      ("groceries", "memory")):
        shown = next(i for i in memory.snapshot(c).all_items() if i.mem_id.name == name)
        memory.evict(MemId.parse(shown.mem_id.format()))  # exactly the MemId shown, version and all
        after = [(i.kind, i.mem_id.name) for i in memory.snapshot(c).all_items() if i.mem_id.name == name]
        assert after == [(Kind.HANDLE, name)]
        memory.load(MemId.parse(shown.mem_id.format()))
        snap = memory.snapshot(c)
        where = [t for t, items in (("scratchpad", snap.scratchpad), ("chat", snap.chat),
                                    ("monologue", snap.monologue), ("memory", snap.memory))
                 for i in items if i.mem_id.name == name]
        assert where == [tag], name
        assert memory.shown_in(shown.mem_id) == tag
    # a chat exchange loaded from beyond the window shows in <memory>, and it too may be evicted
    c.chat_context_depth = 1
    snap = memory.snapshot(c)
    assert [i.mem_id.name for i in snap.memory] == ["chat.2", "groceries"]
    assert snap.memory[0].evictable and not snap.memory[0].mutable


def test_load_of_an_item_its_section_shows_only_reads_it(memory):
    c = full_snapshot(memory)
    memory.snapshot(c)
    for name in ("thread.code", "skill.rust-mode", "buffer.a.py", "event.1", "mood", "last_eval_result"):
        loaded = memory.load(memory.mem_id(name, 1))
        assert loaded.version == 1 and not loaded.evictable
        assert all(i.mem_id.name != name for i in memory.snapshot(c).memory), name
    memory.set_events([], 2)  # the next tick: the event is gone, and loading it pins it
    memory.load(memory.mem_id("event.1"))
    shown = memory.snapshot(c).memory
    assert [(i.mem_id.name, i.evictable) for i in shown] == [("groceries", True), ("event.1", True)]
    memory.evict(memory.mem_id("event.1", 1))
    assert [i.mem_id.name for i in memory.snapshot(c).memory] == ["groceries"]


def test_refusals_match_the_flags(memory):
    c = full_snapshot(memory)
    for item in memory.snapshot(c).all_items():
        target = MemId.parse(item.mem_id.format())
        if not item.evictable:
            with pytest.raises(ValueError, match="cannot be evicted|mutate it instead"):
                memory.evict(target)
        if not item.mutable:
            with pytest.raises(ValueError, match="cannot be mutated"):
                memory.mutate(target, "forged")


def test_a_notice_is_neither_mutated_nor_evicted_and_its_names_are_reserved(memory):
    """A notice of the harness (``notice.*``: the model, the window, a retry, a panel's joins)
    stays as it was said, in the primary's RAM and a subagent's: mutating or evicting it is
    refused with what to do instead, every time, and a note may not take a ``notice.`` name."""
    from amacs_server.memory.active import MemoryRefused
    from amacs_server.memory.items import Kind

    sub = ActiveMemory.for_subagent(memory.ltm, memory.agent, "viewpoint-critic")
    for brain in (memory, sub):
        said = brain.notice("retry", "say it again, as JSON")
        target = MemId.parse(said.mem_id.format())
        for _ in range(2):  # deterministically: the same refusal each time
            with pytest.raises(MemoryRefused, match=r"is a notice of the harness and cannot be mutated: "
                                                     r"it stays as it was said"):
                brain.mutate(target, "forged")
            with pytest.raises(MemoryRefused, match=r"is a notice of the harness and cannot be evicted: "
                                                     r"a notice is shown only in the message it was said in"):
                brain.evict(target)
        with pytest.raises(MemoryRefused, match=r"the name 'notice.x' is reserved for the harness's own items"):
            brain.create_note("notice.x", "a note dressed as the harness", Kind.NOTE, ())
        assert memory.ltm.get(target).content == "say it again, as JSON"
        assert target.base not in brain.evicted


# -- the scratchpad in its org file --------------------------------------------------------------


def test_scratchpad_replace_rewrites_one_heading_and_keeps_the_rest(tmp_path):
    log = ScratchpadLog(tmp_path / "scratchpad.org")
    for tick, heading in ((1, "One"), (2, "Two"), (3, "Three")):
        log.append(ScratchpadEntry(tick, heading, None if tick != 2 else "code", f"text {tick}\n* not a heading"))
    before = (tmp_path / "scratchpad.org").read_text()
    log.replace(ScratchpadEntry(2, "Two, revised", "code", "new text"))
    after = (tmp_path / "scratchpad.org").read_text()
    one, three = before.split("* Two")[0], "* Three" + before.split("* Three")[1]
    assert after.startswith(one) and after.endswith(three)
    assert [(e.tick, e.heading, e.thread, e.content) for e in log.read()] == [
        (1, "One", None, "text 1\n* not a heading"), (2, "Two, revised", "code", "new text"),
        (3, "Three", None, "text 3\n* not a heading")]
    log.replace(ScratchpadEntry(9, "Gone", None, "removed by hand, written again"))
    assert log.read()[-1].heading == "Gone"


def test_a_mutated_scratchpad_entry_is_in_its_org_file_and_survives_a_restart(tmp_path):
    home = tmp_path / "home"
    rt = silent_runtime(home)
    rt.mind.scratchpad.append(ScratchpadEntry(1, "Kettle", None, "Prefer steel."))
    rt.mind.memory.add_scratchpad(1, "Kettle", None, "Prefer steel.")
    out = tools.memory_mutate(rt, f"<EOT>{ME}:scratchpad.1:1<EOT>", "Prefer steel, always.")
    assert out["mem_id"] == f"<EOT>{ME}:scratchpad.1:2<EOT>"
    moved = tools.memory_mutate(rt, f"<EOT>{ME}:scratchpad.1<EOT>", {"heading": "Kettles", "thread": "home"})
    assert moved["version"] == 3
    with pytest.raises(tools.ToolError, match="no field"):
        tools.memory_mutate(rt, f"<EOT>{ME}:scratchpad.1<EOT>", {"colour": "red"})
    with pytest.raises(tools.ToolError, match="heading is a non-empty string"):
        tools.memory_mutate(rt, f"<EOT>{ME}:scratchpad.1<EOT>", {"heading": " "})
    assert [(e.heading, e.thread, e.content) for e in rt.mind.scratchpad.read()] == [
        ("Kettles", "home", "Prefer steel, always.")]
    rt.mind.ltm.close()
    again = silent_runtime(home)  # the org file and memory.db agree: no new version at start-up
    try:
        assert [(i.version, i.content) for i in again.mind.memory.scratchpad] == [
            (3, {"heading": "Kettles", "thread": "home", "content": "Prefer steel, always."})]
    finally:
        again.mind.ltm.close()
    (home / "scratchpad.org").write_text((home / "scratchpad.org").read_text().replace("always", "by hand"))
    edited = silent_runtime(home)  # an edit by hand wins, as a new version
    try:
        assert [(i.version, i.content["content"]) for i in edited.mind.memory.scratchpad] == [(4, "Prefer steel, by hand.")]
    finally:
        edited.mind.ltm.close()


# -- the transcript ------------------------------------------------------------------------------


def test_memory_calls_are_in_the_transcript_with_the_mem_ids_they_read_and_wrote(rt):
    tools.memory_create(rt, "groceries", "milk")
    tools.memory_mutate(rt, f"<EOT>{ME}:groceries:1<EOT>", "milk, eggs")
    tools.memory_evict(rt, f"<EOT>{ME}:groceries<EOT>")
    tools.memory_load(rt, f"<EOT>{ME}:groceries:1<EOT>")
    tools.memory_search(rt, "eggs", None)
    with pytest.raises(tools.ToolError):
        tools.memory_evict(rt, f"<EOT>{ME}:identity:1<EOT>")
    events = [(e["event"], e["data"]) for e in rt.transcript.read("primary") if e["event"].startswith("memory_")]
    g = f"<EOT>{ME}:groceries"
    assert events == [
        ("memory_create", {"read": [], "wrote": [f"{g}:1<EOT>"], "mem_ids": [f"{g}:1<EOT>"]}),
        ("memory_mutate", {"read": [f"{g}:1<EOT>"], "wrote": [f"{g}:2<EOT>"], "mem_ids": [f"{g}:1<EOT>", f"{g}:2<EOT>"]}),
        ("memory_evict", {"read": [f"{g}:2<EOT>"], "wrote": [], "mem_ids": [f"{g}:2<EOT>"]}),
        ("memory_load", {"read": [f"{g}:1<EOT>"], "wrote": [], "mem_ids": [f"{g}:1<EOT>"]}),
        ("memory_search", {"read": [f"{g}:2<EOT>"], "wrote": [], "mem_ids": [f"{g}:2<EOT>"]}),
        ("memory_evict", {"error": f"refused: <EOT>{ME}:identity<EOT> is ROM (harness-owned) and cannot be evicted",
                          "mem_ids": [f"<EOT>{ME}:identity:1<EOT>"]}),
    ]


def test_a_loaded_item_that_leaves_its_window_shows_once_in_the_conversation(memory):
    """The append-only conversation keeps earlier messages: when a loaded exchange moves from the
    chat window to <memory>, the conversation restarts so the model sees it once."""
    c, conv = Consciousness(chat_context_depth=2), Conversation()

    def tick(n):
        c.begin_tick(n)
        memory.sync_state(c)
        memory.begin_chat(n, f"message {n}")
        ctx = assemble(memory.snapshot(c), conv, c.active_thread)
        ctx.answered("ok")
        memory.finish_chat(n, f"response {n}")
        return ctx

    tick(1)
    tick(2)
    memory.load(memory.mem_id("chat.1"))  # pinned while its window shows it: shown there
    for n in (3, 4, 5):
        ctx = tick(n)
        where = [tag for tag, items in parse_context(ctx.text).items()
                 if any(name_of(i) == "chat.1" for i in items)]
        assert where == (["chat"] if n == 3 else ["memory"]), (n, where)
