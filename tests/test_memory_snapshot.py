"""The memory snapshot a home's server keeps for its forks (persistence.history), and the tags
a memory holds as at a tick."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from amacs_server.memory.items import Kind, MemoryItem, Tier
from amacs_server.memory.ltm import LongTermMemory
from amacs_server.memory.memid import MemId
from amacs_server.persistence import git_repo, history
from tests import test_rewind
from tests.test_rewind import FUTURE, FUTURE_SESSION, _fork_holds, do, run, runtime

fake = test_rewind.fake  # the fixture: a fake model server

ROOT = Path(__file__).resolve().parents[1]
QUERY = "SELECT rowid, round(rank, 9) FROM items_fts WHERE items_fts MATCH ? ORDER BY rank, rowid"


def _item(name: str, version: int, text: str, tags: tuple[str, ...] = ()) -> MemoryItem:
    return MemoryItem(MemId("amacs", "primary", name, version), Tier.RAM, Kind.NOTE, text, tags=tags)


def _home(tmp_path: Path, rows: int, *, later: int = 0) -> Path:
    """A folder with a .git and a memory.db of ROWS versions (every tenth a new version of a
    base, tagged), each with a word of its own; the last LATER of them with a later word too."""
    home = tmp_path / "home"
    (home / ".git").mkdir(parents=True)
    ltm = LongTermMemory(home / "memory.db")
    with ltm.transaction():
        for i in range(1, rows + 1):
            late = f" laterword{i}zq" if i > rows - later else ""
            name = f"n{i // 10}" if i % 10 else f"n{i // 10 - 1}"
            version = (ltm.latest_version(MemId("amacs", "primary", name).base) or 0) + 1
            ltm.put(_item(name, version, f"word{i} common{i % 7} " + " ".join(["filler"] * (i % 13)) + late,
                          (f"tag{i % 3}", f"ver{version}")))
    ltm.close()
    return home


def _later_words(db_path: Path, top: int) -> list[int]:
    """The rows after TOP (of a memory :func:`_home` made) whose text is in DB_PATH's bytes."""
    held = db_path.read_bytes()
    return [i for i in range(top + 1, 3001) if f"word{i} common".encode() in held]


def _state(top: int, active: list[list[Any]] | None = None) -> dict[str, Any]:
    return {"ltm_max_id": top, "active": active or [["primary", "amacs:primary:n3", "pinned", 1]]}


def _memory(db_path: Path) -> dict[str, Any]:
    db = sqlite3.connect(db_path)
    try:
        db.execute("INSERT INTO items_fts (items_fts, rank) VALUES ('integrity-check', 1)")
        words = ["common3", "word77", "filler", "ver2", "laterword2990zq", "word2800"]
        return {"items": db.execute("SELECT * FROM items ORDER BY id").fetchall(),
                "tags": db.execute("SELECT base, tag FROM tags ORDER BY base, tag").fetchall(),
                "active": db.execute("SELECT * FROM active ORDER BY brain, base").fetchall(),
                "found": [db.execute(QUERY, (w,)).fetchall() for w in words]}
    finally:
        db.close()


def test_a_tag_given_by_a_version_after_the_tick_is_in_no_fork_nor_rewind_of_it(tmp_path):
    """A base's tags are those any of its versions had: a version written after the tick that
    gives an older base a new tag (a note made again under a name only LTM held) must not give
    the fork, or the home rewound, that tag; the tag of the base's first version stays."""
    home = tmp_path / "home"
    (home / ".git").mkdir(parents=True)
    ltm = LongTermMemory(home / "memory.db")
    ltm.put(_item("plan", 1, "the plan", ("kepttag",)))
    top = int(ltm.db.execute("SELECT max(id) FROM items").fetchone()[0])
    ltm.put(_item("plan", 2, "the plan again", ("kepttag", "latertagzq")))
    ltm.put(_item("other", 1, "other later", ("othertagzq",)))
    ltm.close()
    state = {"ltm_max_id": top, "active": []}
    history._memory_up_to(home / "memory.db", tmp_path / "fork.db", state)
    assert not re.findall(rb"tagzq", (tmp_path / "fork.db").read_bytes())
    assert LongTermMemory(tmp_path / "fork.db").tags_of("amacs:primary:plan") == ("kepttag",)
    history._memory_at(home / "memory.db", state, "refs/amacs/abandoned/x")
    ltm = LongTermMemory(home / "memory.db")
    try:
        assert ltm.tags_of("amacs:primary:plan") == ("kepttag",)
        assert ltm.db.execute("SELECT count(*) FROM tags WHERE tag LIKE '%zq'").fetchone()[0] == 0
    finally:
        ltm.close()


def test_a_tag_kept_before_its_origin_was_is_taken_as_its_bases_first_versions(tmp_path):
    """A memory.db made before tags' origins were kept gets the column on its first open, its
    tags of unknown origin; a fork keeps those of the bases it holds, as before."""
    db_path = tmp_path / "memory.db"
    old = sqlite3.connect(db_path)
    old.executescript(LongTermMemory.__init__.__globals__["SCHEMA"].replace("  since INTEGER,\n", ""))
    old.execute("INSERT INTO items (id, base, version, tier, kind, created_at_ms, content, text) VALUES "
                "(1, 'amacs:primary:a', 1, 'ltm', 'note', 0, '\"x\"', 'x'), "
                "(2, 'amacs:primary:b', 1, 'ltm', 'note', 0, '\"y\"', 'y')")
    old.execute("INSERT INTO items_fts (rowid, text) VALUES (1, 'x'), (2, 'y')")
    old.execute("INSERT INTO tags VALUES ('amacs:primary:a', 'olda'), ('amacs:primary:b', 'oldbzq')")
    old.commit()
    old.close()
    history._memory_up_to(db_path, tmp_path / "fork.db", {"ltm_max_id": 1, "active": []})
    fork = LongTermMemory(tmp_path / "fork.db")
    assert fork.db.execute("SELECT base, tag, since FROM tags").fetchall() == [("amacs:primary:a", "olda", None)]
    fork.close()
    ltm = LongTermMemory(db_path)
    ltm.put(_item("a", 2, "x2", ("newa",)))
    assert ltm.db.execute("SELECT tag, since FROM tags WHERE base = 'amacs:primary:a' ORDER BY tag").fetchall() == [
        ("newa", 3), ("olda", None)]
    ltm.close()


def test_a_fork_from_the_snapshot_holds_no_byte_after_its_tick_and_is_the_fork_made_without_it(tmp_path):
    """The snapshot is made LAG versions behind the memory; a fork at a tick after it copies it
    and adds the versions up to the tick: no byte of a later version (its unique word, its
    index entry) is in the file, and its items, tags, active table and search answers are the
    ones a fork made from the home's file has."""
    home = _home(tmp_path, 3000, later=200)
    made = history.keep_memory_snapshot(home, lag=500, every=100)
    assert made is not None and made.name == f"amacs-memory-{(home / 'memory.db').stat().st_ino}-2500.db"
    assert history.keep_memory_snapshot(home, lag=500, every=100) is None  # not due again
    assert list((home / ".git").glob("amacs-memory*")) == [made]
    assert _later_words(made, 2500) == []
    for top in (2500, 2800):
        state = _state(top)
        assert history._memory_from_snapshot(home, tmp_path / f"snap{top}.db", state)
        history._memory_up_to(home / "memory.db", tmp_path / f"old{top}.db", state)
        assert not re.findall(rb"terword\d+zq", (tmp_path / f"snap{top}.db").read_bytes())
        assert _later_words(tmp_path / f"snap{top}.db", top) == []
        want, got = _memory(tmp_path / f"old{top}.db"), _memory(tmp_path / f"snap{top}.db")
        assert got == want and want["found"][1] == [(77, want["found"][1][0][1])] and not want["found"][4]
        assert bool(want["found"][5]) == (top == 2800)
    assert not history._memory_from_snapshot(home, tmp_path / "before.db", _state(2499))  # a tick before it
    assert not (tmp_path / "before.db").exists()


def test_a_snapshot_past_a_rewinds_tick_is_removed_and_one_whose_row_is_not_the_homes_is_not_used(tmp_path):
    """A rewind to a tick before the snapshot's row removes it; one put back (a copy made
    before) no longer matches the home's row once that id is given again; nor is one used whose
    row S differs, or that was made of another memory.db (a salvaged or replaced one)."""
    home = _home(tmp_path, 1200)
    made = history.keep_memory_snapshot(home, lag=200, every=100)
    assert made is not None and made.name.endswith("-1000.db")
    kept = made.read_bytes()
    history._memory_at(home / "memory.db", _state(1100), "refs/amacs/abandoned/a")
    assert made.exists()  # rows up to S unchanged: still the home's
    assert history._memory_from_snapshot(home, tmp_path / "a.db", _state(1100))
    history._memory_at(home / "memory.db", _state(900), "refs/amacs/abandoned/b")
    assert not made.exists()
    made.write_bytes(kept)  # as if a kill had left it: its rows 901.. left, their ids given again
    ltm = LongTermMemory(home / "memory.db")
    with ltm.transaction():
        for i in range(901, 1101):
            ltm.put(_item(f"again{i}", 1, f"again{i}"))
    ltm.close()
    assert not history._memory_from_snapshot(home, tmp_path / "b.db", _state(1100))
    assert not (tmp_path / "b.db").exists()
    made = history.keep_memory_snapshot(home, lag=100, every=100)
    assert made is not None and made.name.endswith("-1000.db") and history._memory_from_snapshot(
        home, tmp_path / "c.db", _state(1100))
    db = sqlite3.connect(home / "memory.db")
    db.execute("UPDATE items SET created_at_ms = created_at_ms + 1 WHERE id = 1000")
    db.commit()
    db.close()
    assert not history._memory_from_snapshot(home, tmp_path / "d.db", _state(1100))
    db = sqlite3.connect(home / "memory.db")
    db.execute("UPDATE items SET created_at_ms = created_at_ms - 1 WHERE id = 1000")
    db.commit()
    db.close()
    assert history._memory_from_snapshot(home, tmp_path / "e.db", _state(1100))
    os.replace(home / "memory.db", home / "aside.db")  # another file in its place, rows alike
    (home / "memory.db").write_bytes((home / "aside.db").read_bytes())
    assert not history._memory_from_snapshot(home, tmp_path / "f.db", _state(1100))


@pytest.mark.parametrize("point", ["snapshot.written", "snapshot.kept"])
def test_a_snapshot_killed_while_made_is_never_used_half_made(tmp_path, point):
    """Killed before its rename, the making leaves a file under a name no fork uses (the next
    making removes it); killed after it, the snapshot is whole and used."""
    home = _home(tmp_path, 1200, later=300)
    code = ("import sys; from pathlib import Path; from amacs_server.persistence import history; "
            "history.keep_memory_snapshot(Path(sys.argv[1]), lag=300, every=100)")
    done = subprocess.run([sys.executable, "-c", code, str(home)], env={**os.environ, "AMACS_FAULT_POINT": point},
                          capture_output=True, cwd=ROOT, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    names = sorted(p.name for p in (home / ".git").iterdir())
    if point == "snapshot.written":
        assert names == [f"amacs-memory.tmp-{names[0].rpartition('-')[2]}"]
        assert not history._memory_from_snapshot(home, tmp_path / "a.db", _state(1000))
        made = history.keep_memory_snapshot(home, lag=300, every=100)
        assert made is not None and [p.name for p in (home / ".git").iterdir()] == [made.name]
    else:
        assert len(names) == 1 and names[0].endswith("-900.db")
    assert history._memory_from_snapshot(home, tmp_path / "b.db", _state(1000))
    history._memory_up_to(home / "memory.db", tmp_path / "c.db", _state(1000))
    assert _memory(tmp_path / "b.db") == _memory(tmp_path / "c.db")


def test_the_server_makes_the_snapshot_in_the_background_and_a_fork_from_it_holds_no_future(
        tmp_path, fake, monkeypatch):  # noqa: F811 - the fixture
    """The home's server makes the snapshot after a repack (its packer thread) once its memory
    has grown past the threshold; a fork of a tick after the snapshot's row is made from it and
    holds no byte of what was written after the tick, and replays as the original."""
    monkeypatch.setattr(git_repo, "PACK_EVERY", 2)
    monkeypatch.setattr(history, "SNAPSHOT_LAG", 0)
    monkeypatch.setattr(history, "SNAPSHOT_EVERY", 1)
    home = tmp_path / "home"
    rt = runtime(home, fake.url)
    try:
        for step in FUTURE_SESSION[:2]:
            do(rt, step)
            assert rt.mind.commits.flush(60)
        deadline = time.monotonic() + 30
        while not history.memory_snapshots(home) and time.monotonic() < deadline:
            rt.mind.commits.wait_packed(30)
            time.sleep(0.05)
    finally:
        rt.stop()
    snapshots = history.memory_snapshots(home)
    assert len(snapshots) == 1
    monkeypatch.setattr(git_repo, "PACK_EVERY", 100)  # the later ticks make none (nor read memory.db meanwhile)
    run(home, fake, FUTURE_SESSION[2:])
    assert history.memory_snapshots(home) == snapshots
    future = [text for text in FUTURE if "skill" not in text]  # no skill is written here
    assert [text for text in future if text.encode() not in _fork_holds(home)] == []
    used: list[bool] = []
    real = history._memory_from_snapshot
    monkeypatch.setattr(history, "_memory_from_snapshot", lambda *a: used.append(real(*a)) or used[-1])
    fork = history.fork(home, 2, tmp_path / "fork").home
    assert used == [True]
    assert [text for text in future if text.encode() in _fork_holds(fork)] == []
    snapshots[0][2].unlink()
    other = history.fork(home, 2, tmp_path / "other").home
    assert used == [True, False]
    assert _memory(fork / "memory.db") == _memory(other / "memory.db")


def _index_whole(db_path: Path) -> None:
    """FTS5's own check of DB_PATH's index against its content (each row's text as it reads):
    raises if one row's entries are not its text's words."""
    db = sqlite3.connect(db_path)
    try:
        db.execute("INSERT INTO items_fts (items_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        db.close()


STRANGE = ['a "quoted" word\nand a second line\twith a tab, a back\\slash and ünïcode ✓', ""]


def test_a_version_keeps_no_second_copy_of_its_content_as_its_text(tmp_path):
    """A version's searchable text is its content's own: the row keeps it once (its content),
    and the index, the snippets and the view of each row's text read it as MemoryItem.text()."""
    ltm = LongTermMemory(tmp_path / "memory.db")
    items = [_item("s", 1, STRANGE[0]), _item("e", 1, STRANGE[1]),
             MemoryItem(MemId("amacs", "primary", "d", 1), Tier.RAM, Kind.NOTE, {"text": "dictword here", "n": 2})]
    for item in items:
        ltm.put(item)
    try:
        assert ltm.db.execute("SELECT count(*) FROM items WHERE text <> ''").fetchone()[0] == 0
        assert ltm.db.execute("SELECT text FROM items_text ORDER BY id").fetchall() == [(i.text(),) for i in items]
        assert [h.mem_id.base for h in ltm.search("ünïcode")] == ["amacs:primary:s"]
        assert ltm.search("second")[0].snippet.startswith('a "quoted" word\nand a [second] line\twith')
        assert [h.mem_id.base for h in ltm.search("dictword")] == ["amacs:primary:d"]
    finally:
        ltm.close()
    _index_whole(tmp_path / "memory.db")


def test_a_memory_made_before_keeps_its_copies_and_its_snapshot_and_forks_drop_them(tmp_path):
    """A memory.db whose index reads ``items.text`` (made before the view) goes on writing each
    version's text; the snapshot made of it keeps no copy of a content's own text (a text that
    is not its content's stays), is smaller, and a fork from it reads as the fork made from the
    home's file: the same rows' texts, the same search answers, an index whole against them."""
    home = tmp_path / "home"
    (home / ".git").mkdir(parents=True)
    db_path = home / "memory.db"
    old = sqlite3.connect(db_path)
    old.executescript(LongTermMemory.__init__.__globals__["SCHEMA"].replace(
        "content='items_text'", "content='items'"))
    old.execute("INSERT INTO items (id, base, version, tier, kind, created_at_ms, content, text) VALUES "
                "(1, 'amacs:primary:own', 1, 'ram', 'note', 0, '\"the stored\"', 'a text of its own ownword')")
    old.execute("INSERT INTO items_fts (rowid, text) VALUES (1, 'a text of its own ownword')")
    old.commit()
    old.close()
    ltm = LongTermMemory(db_path)
    with ltm.transaction():
        for i in range(2, 1001):
            ltm.put(_item(f"n{i}", 1, f"word{i} " + STRANGE[0] + " filler" * 40))
    assert ltm.db.execute("SELECT count(*) FROM items WHERE text = ''").fetchone()[0] == 0  # its index reads them
    ltm.close()
    _index_whole(db_path)
    made = history.keep_memory_snapshot(home, lag=100, every=100)
    assert made is not None
    snap = sqlite3.connect(made)
    try:
        assert snap.execute("SELECT id FROM items WHERE text <> ''").fetchall() == [(1,)]
    finally:
        snap.close()
    _index_whole(made)
    assert made.stat().st_size < 0.75 * db_path.stat().st_size
    state = _state(950, active=[])
    assert history._memory_from_snapshot(home, tmp_path / "snap.db", state)
    history._memory_up_to(db_path, tmp_path / "whole.db", state)
    read = []
    for path in (tmp_path / "snap.db", tmp_path / "whole.db"):
        _index_whole(path)
        fork = LongTermMemory(path)
        try:
            read.append((fork.db.execute("SELECT id, text FROM items_text ORDER BY id").fetchall(),
                         [h.mem_id.base for h in fork.search("ownword")],
                         [h.mem_id.base for h in fork.search("word900", limit=3)]))
        finally:
            fork.close()
    assert read[0] == read[1]
    assert read[0][1] == ["amacs:primary:own"] and read[0][2] == ["amacs:primary:n900"]


def test_a_fork_takes_the_snapshots_ready_copy_and_one_is_made_again(tmp_path):
    """The ready copy of the snapshot (made off the person's path) becomes the fork's memory.db by a
    rename: the fork writes none of the snapshot's bytes, its memory is the one copying makes, the
    snapshot stays; a second fork before a new copy is made copies the snapshot; the copy is made
    again after a fork; a rewind before the snapshot's row removes it with the snapshot."""
    home = _home(tmp_path, 1200, later=300)
    made = history.keep_memory_snapshot(home, lag=300, every=100)
    assert made is not None
    ready = history.keep_ready_copy(home)
    assert ready is not None and ready.name == made.name.replace("amacs-memory-", "amacs-memory-ready-")
    assert ready.read_bytes() == made.read_bytes() and history.keep_ready_copy(home) is None  # there already
    inode = ready.stat().st_ino
    assert history._memory_from_snapshot(home, tmp_path / "a.db", _state(1000))
    assert (tmp_path / "a.db").stat().st_ino == inode and not ready.exists() and made.exists()
    assert history._memory_from_snapshot(home, tmp_path / "b.db", _state(1000))  # none ready: copied
    assert (tmp_path / "b.db").stat().st_ino != inode
    history._memory_up_to(home / "memory.db", tmp_path / "c.db", _state(1000))
    assert _memory(tmp_path / "a.db") == _memory(tmp_path / "b.db") == _memory(tmp_path / "c.db")
    again = history.keep_ready_copy(home)
    assert again is not None and again.read_bytes() == made.read_bytes()
    history._memory_at(home / "memory.db", _state(800), "refs/amacs/abandoned/x")
    assert history.memory_snapshots(home) == [] and history.ready_copies(home) == []


def test_a_ready_copy_killed_while_made_is_never_taken(tmp_path):
    """Killed before its rename, the making of the ready copy leaves a file under a name no fork
    takes, and the next making of a snapshot removes it."""
    home = _home(tmp_path, 1200, later=300)
    made = history.keep_memory_snapshot(home, lag=300, every=100)
    assert made is not None
    code = "import sys; from pathlib import Path; from amacs_server.persistence import history; " \
           "history.keep_ready_copy(Path(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", code, str(home)], env={**os.environ, "AMACS_FAULT_POINT": "ready.written"},
                          capture_output=True, cwd=ROOT, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert history.ready_copies(home) == [] and list((home / ".git").glob("amacs-memory.tmp-ready-*"))
    assert history._memory_from_snapshot(home, tmp_path / "a.db", _state(1000))
    history._memory_up_to(home / "memory.db", tmp_path / "c.db", _state(1000))
    assert _memory(tmp_path / "a.db") == _memory(tmp_path / "c.db")
    history._drop_snapshots(home)
    assert list((home / ".git").glob("amacs-memory*")) == []
