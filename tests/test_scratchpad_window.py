"""A start reads from the scratchpad only what its context shows while memory.db is level with the
file (its digest, recorded at each note written), and the whole file, org file winning, when not."""

import dataclasses

import pytest

import amacs_server.mind as mind_module
from amacs_server.memory.active import PAD_FILE
from amacs_server.persistence import history
from amacs_server.persistence.scratchpad import ScratchpadEntry
from amacs_server.tools import memory as tools
from tests.fake_anthropic import FakeAnthropic
from tests.test_memory import silent_runtime
from tests.test_rewind import answer, do, run, runtime

OLD = 150  # notes of a thread no longer active, older than every global note


def write(rt, tick, heading, thread, text):
    """A note as a tick's record writes it: the file, then its item."""
    rt.mind.scratchpad.append(ScratchpadEntry(tick, heading, thread, text))
    rt.mind.memory.add_scratchpad(tick, heading, thread, text)


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    rt = silent_runtime(home)
    for tick in range(1, OLD + 1):
        write(rt, tick, f"old {tick}", "old-thread", f"old text {tick}")
    for tick in range(OLD + 1, OLD + 21):
        write(rt, tick, f"global {tick}", None, f"global text {tick}")
    rt.mind.ltm.close()
    return home


def started(home):
    rt = silent_runtime(home)
    return rt, rt.mind.memory


def shown(memory, c):
    return [(i.mem_id.format(), i.content) for i in memory.scratchpad_window(c)]


def test_a_start_reads_only_the_notes_its_context_shows_and_a_thread_made_active_its_own(home, monkeypatch):
    """memory.db level with the file: no heading parsed, no note's item read until the context
    shows it: the last global notes first, the old thread's when it becomes active; what is
    shown is what a start reading the whole file shows."""
    rt, memory = started(home)  # a full start would read every note: the file is not parsed
    rt.mind.ltm.close()
    whole_rt = silent_runtime(home)
    whole_rt.mind.ltm.set_level(PAD_FILE, None)  # as if the file had changed since: read whole
    whole_rt.mind.ltm.close()
    whole_rt, whole = started(home)
    assert all(e.item is not None for e in whole.pad)

    def no_parse(*_args):
        raise AssertionError("the scratchpad file was parsed at start")

    monkeypatch.setattr(mind_module, "read_plain", no_parse)
    monkeypatch.setattr(mind_module, "read_org", no_parse)
    monkeypatch.setattr(type(whole.ltm), "latest_with_prefix", no_parse)
    rt, memory = started(home)
    try:
        assert len(memory.pad) == OLD + 20
        assert [e for e in memory.pad if e.item is not None] == []  # nothing read before the context
        c = rt.mind.consciousness
        assert c.active_thread is None and c.global_scratchpad_depth == 5
        assert shown(memory, c) == shown(whole, c)
        assert [e.tick for e in memory.pad if e.item is not None] == list(range(OLD + 16, OLD + 21))
        old = dataclasses.replace(c, active_thread="old-thread")
        assert shown(memory, old) == shown(whole, old)  # the thread's notes read when it is active
        read = [e.tick for e in memory.pad if e.item is not None]
        assert read == [*range(OLD - old.thread_scratchpad_depth + 1, OLD + 1), *range(OLD + 16, OLD + 21)]
        assert [i.mem_id for i in memory.last_notes(3)] == [i.mem_id for i in whole.last_notes(3)]
    finally:
        rt.mind.ltm.close()
        whole_rt.mind.ltm.close()


def test_a_note_not_shown_yet_is_mutated_moved_and_evicted_as_when_every_note_was_read(home):
    rt, memory = started(home)
    try:
        c = dataclasses.replace(rt.mind.consciousness, global_scratchpad_depth=2)
        target = memory.mem_id("scratchpad.3")
        assert memory.pad[2].item is None
        tools.memory_mutate(rt, target.format(), {"thread": None, "content": "moved to global"})
        assert memory.pad[2].thread is None
        window = [i.mem_id.name for i in memory.scratchpad_window(dataclasses.replace(c, global_scratchpad_depth=21))]
        assert window[0] == "scratchpad.3"  # a global note now, shown by its tick
        assert [e for e in rt.mind.scratchpad.read() if e.tick == 3][0].content == "moved to global"
        handle = memory.evict(memory.mem_id("scratchpad.4"))  # never shown: read to be evicted
        assert handle.content["evicted"] is True
    finally:
        rt.mind.ltm.close()
    again, memory = started(home)  # the mutation was recorded level: a start reads none
    try:
        assert all(e.item is None for e in memory.pad)
        assert memory.scratchpad[2].content["content"] == "moved to global"
        assert memory.pad[2].thread is None
    finally:
        again.mind.ltm.close()


def test_the_file_is_read_whole_and_wins_when_it_changed_since_memory_db_was_level(home):
    """A note in the file only (a kill between the file and memory.db), a note whose item could
    not be written (the notes written after it must not make memory.db seem level), a note
    removed by hand: each start reads the file whole and shows what it holds."""
    rt = silent_runtime(home)
    rt.mind.scratchpad.append(ScratchpadEntry(200, "file only", None, "the kill came before its item"))
    rt.mind.ltm.close()
    rt, memory = started(home)
    try:
        assert memory.pad[-1].item.content["heading"] == "file only"
        assert rt.mind.ltm.find(memory.mem_id("scratchpad.200")) is not None
        put = rt.mind.ltm.put
        calls = []

        def fails_once(item, **kw):
            calls.append(item)
            if len(calls) == 1:
                raise OSError("disk full")
            put(item, **kw)

        rt.mind.ltm.put = fails_once
        with pytest.raises(OSError):
            write(rt, 201, "lost item", None, "its file entry was written")
        write(rt, 202, "after", None, "written whole")
    finally:
        rt.mind.ltm.close()
    rt, memory = started(home)
    try:
        assert [e.tick for e in memory.pad[-3:]] == [200, 201, 202]
        assert memory.pad[-2].item.content["heading"] == "lost item"  # read from the file, written again
        path = rt.mind.scratchpad.path
    finally:
        rt.mind.ltm.close()
    text = path.read_text()
    start = text.index("* lost item")
    path.write_text(text[:start] + text[text.index("* after"):])  # removed by hand
    rt, memory = started(home)
    try:
        assert [e.tick for e in memory.pad[-2:]] == [200, 202]
        assert [i.mem_id.name for i in memory.last_notes(2)] == ["scratchpad.200", "scratchpad.202"]
    finally:
        rt.mind.ltm.close()


def test_a_note_that_would_read_back_otherwise_makes_the_next_start_read_the_file_whole(home, monkeypatch):
    """Org markup in a note (a link): the file is read by orgparse; memory.db records no digest."""
    rt = silent_runtime(home)
    write(rt, 300, "links", None, "see [[https://example.org][the docs]]")
    assert rt.mind.ltm.level(PAD_FILE) is None
    rt.mind.ltm.close()
    read = []
    real = mind_module.read_org
    monkeypatch.setattr(mind_module, "read_org", lambda text: read.append(1) or real(text))
    rt, memory = started(home)
    try:
        assert read == [1] and memory.pad[-1].item.content["content"] == "see the docs"  # as orgparse reads it
        assert rt.mind.ltm.level(PAD_FILE) is None
    finally:
        rt.mind.ltm.close()


@pytest.fixture
def fake():
    server = FakeAnthropic(default=answer).start()
    yield server
    server.stop()


def test_a_rewind_leaves_memory_db_not_known_level_with_the_scratchpad(tmp_path, fake):
    """A note edited by hand while a server ran reaches memory.db at the next start, as a version
    written after the tick the edit was committed in; a rewind to that tick takes the version
    out though the file it restores holds the edit (the same bytes as before the rewind): the
    next start reads the file whole, and the edit wins again."""
    home = tmp_path / "home"
    run(home, fake, [("say", "note one")])
    rt = runtime(home, fake.url)
    try:
        pad = home / "scratchpad.org"
        pad.write_text(pad.read_text().replace("noted: note one", "edited by hand"))
        do(rt, ("say", "hello"))  # tick 2's commit holds the edit; memory.db does not
        assert rt.mind.commits.flush(60)
    finally:
        rt.stop()
    _, tick = run(home, fake, [("say", "more")])  # this start writes the edit to memory.db
    assert tick == 3
    history.rewind(home, 2)
    rt = runtime(home, fake.url)
    try:
        assert [i.content["content"] for i in rt.mind.memory.scratchpad] == ["edited by hand"]
    finally:
        rt.stop()
