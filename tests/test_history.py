"""History costs nothing per tick (issue 12, item 8): the chat log and monologue are split by
month (persistence.monthly), start-up reads only their tail, a tick's commit adds only small
blobs, and resume, search and the full read still see every month."""

from __future__ import annotations

import asyncio
import builtins
import io
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orgparse
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amacs_server import views
from amacs_server.config import load_config
from amacs_server.loop.primary import run_turn
from amacs_server.persistence import history, monthly
from amacs_server.persistence.chat_log import ChatEntry, ChatLog, unescape_org, unnest_reply
from amacs_server.persistence.monologue import MonologueLog
from amacs_server.runtime import Runtime
from amacs_server.state import consciousness
from amacs_server.tools.memory import memory_search
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json
from tests.test_memory import SilentFace, put_all


def _write_ticks(log: ChatLog, ticks: range, month: str, text: str = "said") -> None:
    for tick in ticks:
        stamp = f"{month}-03T10:00:00Z"
        log.write_human(tick, stamp, f"{text} {tick}\n* not a heading")
        log.write_agent(tick, stamp, f"* Heading {tick}\n#+begin_src\n* Tick 1\n#+end_src", with_heading=False)


def test_old_months_move_to_chat_and_are_never_rewritten(tmp_path):
    log = ChatLog(tmp_path / "agent-chat.org")
    _write_ticks(log, range(1, 6), "2026-01")
    _write_ticks(log, range(6, 9), "2026-02")
    january = tmp_path / "chat" / "2026-01.org"
    assert [p.name for p in log.files()] == ["2026-01.org", "agent-chat.org"]
    before = january.read_bytes()
    _write_ticks(log, range(9, 12), "2026-03")
    assert january.read_bytes() == before  # one blob for ever
    assert sorted(p.name for p in (tmp_path / "chat").iterdir()) == ["2026-01.org", "2026-02.org"]
    current = (tmp_path / "agent-chat.org").read_text()
    assert "[[file:chat/2026-02.org]" in current and current.count("\n* Tick ") == 3  # C-c C-l links to the rest
    everything = ChatLog(tmp_path / "agent-chat.org").read()
    assert [e.tick for e in everything] == list(range(1, 12))
    assert everything[0] == ChatEntry(1, "2026-01-03T10:00:00Z", "said 1\n* not a heading",
                                      "* Heading 1\n#+begin_src\n* Tick 1\n#+end_src")
    for n in (1, 3, 4, 9, 11, 50):  # the tail crosses into the archive as far as it needs
        assert ChatLog(tmp_path / "agent-chat.org").read_tail(n, chunk=64) == everything[-n:]


def test_a_long_month_is_archived_in_parts(tmp_path):
    log = ChatLog(tmp_path / "agent-chat.org", rotate_bytes=1000)
    _write_ticks(log, range(1, 30), "2026-05")
    parts = [p.name for p in log.files()]
    assert parts[:3] == ["2026-05.org", "2026-05-2.org", "2026-05-3.org"] and parts[-1] == "agent-chat.org"
    assert all(p.stat().st_size < 1400 for p in log.files())
    assert [e.tick for e in ChatLog(tmp_path / "agent-chat.org").read()] == list(range(1, 30))
    assert [e.tick for e in ChatLog(tmp_path / "agent-chat.org").read_tail(12)] == list(range(18, 30))


def test_a_home_made_before_the_split_is_split_by_month_at_its_next_tick(tmp_path):
    path = tmp_path / "agent-chat.org"
    old = ChatLog(path, rotate_bytes=1 << 30)  # the layout before: one file
    _write_ticks(old, range(1, 4), "2025-11")
    _write_ticks(old, range(4, 6), "2025-12")
    _write_ticks(old, range(6, 8), "2026-01")
    whole = old.read()
    log = ChatLog(path)
    assert log.read_tail(3) == whole[-3:]  # start-up: nothing moves
    _write_ticks(log, range(8, 9), "2026-02")
    assert [p.name for p in log.files()] == ["2025-11.org", "2025-12.org", "2026-01.org", "agent-chat.org"]
    assert log.read()[:-1] == whole and log.read()[-1].tick == 8


def test_a_rotation_cut_short_keeps_each_tick_once(tmp_path):
    """Killed after the archive was written, before the current file was emptied: the moved
    ticks are in both; they are read once and not archived again."""
    path = tmp_path / "agent-chat.org"
    log = ChatLog(path)
    _write_ticks(log, range(1, 5), "2026-01")
    before = path.read_bytes()
    _write_ticks(log, range(5, 6), "2026-02")
    path.write_bytes(before)  # as if the process died inside the rotation
    again = ChatLog(path)
    assert [e.tick for e in again.read()] == [1, 2, 3, 4]
    assert [e.tick for e in again.read_tail(10)] == [1, 2, 3, 4]
    _write_ticks(again, range(5, 6), "2026-02")
    _write_ticks(again, range(6, 7), "2026-03")
    assert sorted(p.name for p in (tmp_path / "chat").iterdir()) == ["2026-01.org", "2026-02.org"]
    assert [e.tick for e in ChatLog(path).read()] == [1, 2, 3, 4, 5, 6]


def test_ticks_numbered_from_1_again_in_an_old_home_are_all_kept(tmp_path):
    """Entries are told apart by their bytes: an old home whose ticks restarted at 1 loses none."""
    path = tmp_path / "agent-chat.org"
    old = ChatLog(path, rotate_bytes=1 << 30)
    _write_ticks(old, range(1, 4), "2025-11", text="first life")
    _write_ticks(old, range(1, 3), "2025-12", text="second life")
    _write_ticks(ChatLog(path), range(3, 4), "2026-01", text="second life")
    ticks = [(e.tick, e.human.split("\n")[0]) for e in ChatLog(path).read()]
    assert ticks == [(1, "first life 1"), (2, "first life 2"), (3, "first life 3"), (1, "second life 1"),
                     (2, "second life 2"), (3, "second life 3")]
    assert [(e.tick, e.human.split("\n")[0]) for e in ChatLog(path).read_tail(6)] == ticks


def test_monologue_is_split_and_its_tail_read(tmp_path):
    log = MonologueLog(tmp_path / "monologue.org")
    for tick in range(1, 9):
        log.append(tick, f"2026-0{1 + tick // 4}-01T00:00:00Z", f"thought {tick}")
    assert [p.name for p in log.files()] == ["2026-01.org", "2026-02.org", "monologue.org"]
    assert MonologueLog(tmp_path / "monologue.org").read() == [(t, f"thought {t}") for t in range(1, 9)]
    assert MonologueLog(tmp_path / "monologue.org").read_tail(6) == [(t, f"thought {t}") for t in range(3, 9)]


def _orgparse_entries(text: str) -> list[tuple[int, str, str | None, str | None]]:
    """The chat as the org parser read it before issue 12 (the reference for parse_tick)."""
    out = []
    for node in orgparse.loads(text).children:
        title = node.heading.split()
        if len(title) != 2 or title[0] != "Tick" or not title[1].isdigit():
            continue
        human = agent = None
        for child in node.children:
            if child.heading == "Human":
                human = unescape_org(child.body.strip("\n"))
            elif child.heading == "Agent":
                raw = "\n".join(str(part) for part in child[:]).partition("\n")[2]
                agent = unnest_reply(raw[:-1] if raw.endswith("\n") else raw)
        out.append((int(title[1]), str(node.properties.get("TIMESTAMP", "")), human, agent))
    return out


_PIECES = st.sampled_from(["*", "**", " ", "\t", ",", "a", "é", "\n", "#+", "- ", ":END:", "* Tick 3",
                           "** Agent", "#+begin_src", "#+end_src", "#+BEGIN_EXAMPLE", "#+end_example"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(human=st.one_of(st.none(), st.lists(_PIECES, max_size=20).map("".join)),
       reply=st.one_of(st.none(), st.lists(_PIECES, max_size=30).map("".join)))
def test_the_line_parser_reads_what_orgparse_read(tmp_path, human, reply):
    path = tmp_path / "agent-chat.org"
    path.unlink(missing_ok=True)
    log = ChatLog(path)
    for tick in (1, 2):
        if human is not None:
            log.write_human(tick, "2026-01-01T00:00:00Z", human)
        if reply is not None or human is None:
            log.write_agent(tick, "2026-01-01T00:00:00Z", reply or "", with_heading=human is None)
    mine = [(e.tick, e.timestamp, e.human, e.agent) for e in log.read()]
    assert mine == _orgparse_entries(path.read_text())
    if human is not None and human.strip("\n") == human:  # blank lines around an input are dropped
        assert mine[0][2] == human
    if reply is not None:
        assert mine[0][3] == reply


# -- the runtime on a home with a long history ---------------------------------------------


class Clock:
    """consciousness.datetime with a settable now (ticks stamped in the month a test wants)."""

    now = datetime(2026, 1, 10, tzinfo=UTC)

    @classmethod
    def set(cls, moment: datetime) -> None:
        cls.now = moment


class _Datetime(datetime):
    @classmethod
    def now(cls, tz=None):  # noqa: ANN001, ANN206 - datetime.now's signature
        return Clock.now


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic(default=lambda _body: Reply(agent_json("noted", monologue="noted it"))).start()
    yield server
    server.stop()


@pytest.fixture
def clock(monkeypatch) -> type[Clock]:
    monkeypatch.setattr(consciousness, "datetime", _Datetime)
    Clock.set(datetime(2026, 1, 10, tzinfo=UTC))
    return Clock


def _runtime(home: Path, url: str) -> Runtime:
    return Runtime(load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": url}),
                   SilentFace())


def _turns(rt: Runtime, texts: list[str]) -> None:
    for text in texts:
        asyncio.run_coroutine_threadsafe(run_turn(rt, text), rt.loop).result(60)
        assert rt.mind.commits.flush(60)


def _git(home: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(home), *args], capture_output=True, text=True, check=True).stdout


def _old_home(home: Path, megabytes: float) -> int:
    """A home made before the split: one agent-chat.org of MEGABYTES over the months of 2025,
    and its monologue; returns the last tick."""
    home.mkdir(parents=True)
    ticks = int(megabytes * 1e6 / 600)
    chat, mono = [], ["#+TITLE: Monologue\n\n"]
    for tick in range(1, ticks + 1):
        stamp = f"2025-{1 + 12 * (tick - 1) // ticks:02d}-05T09:00:00Z"
        chat.append(f"* Tick {tick}\n:PROPERTIES:\n:TIMESTAMP: {stamp}\n:END:\n\n** Human\nquestion {tick} "
                    f"{'abcdefgh ' * 20}\n\n** Agent\nanswer {tick} {'ijklmnop ' * 45}\n\n")
        mono.append(f"- [TICK {tick}][{stamp}] thought {tick}\n")
    (home / "agent-chat.org").write_text("".join(chat), encoding="utf-8")
    (home / "monologue.org").write_text("".join(mono), encoding="utf-8")
    return ticks


class _Reads:
    """Bytes read from the chat log's and monologue's files (every open in binary mode)."""

    def __init__(self, monkeypatch, home: Path) -> None:
        self.bytes = 0
        real = builtins.open
        counter = self

        class Counting(io.BufferedReader):
            def read(self, size: int | None = -1) -> bytes:
                data = super().read(size)
                counter.bytes += len(data)
                return data

        def counting_open(file, mode="r", *args, **kwargs):  # noqa: ANN001, ANN202
            name = Path(str(file)) if isinstance(file, str | Path) else None
            if mode == "rb" and name is not None and (name.name in ("agent-chat.org", "monologue.org")
                                                      or name.parent.name in ("chat", "monologue")):
                return Counting(io.FileIO(str(name), "r"))
            return real(file, mode, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", counting_open)
        monkeypatch.setattr(io, "open", counting_open)


def test_a_long_history_is_read_only_at_its_end_and_each_tick_commits_small_blobs(tmp_path, fake, clock,
                                                                                  monkeypatch):
    home = tmp_path / "home"
    last = _old_home(home, 6)
    size = (home / "agent-chat.org").stat().st_size
    reads = _Reads(monkeypatch, home)
    rt = _runtime(home, fake.url)
    assert reads.bytes < 300_000 < size // 20  # start-up read the tail of 6 MB, not all of it
    monkeypatch.undo()
    assert views.status(rt)["recent"][-1]["tick"] == last
    clock.set(datetime(2026, 1, 10, tzinfo=UTC))
    rt.start()
    try:
        _turns(rt, ["the first tick after the split"])  # the old file is split by month, committed once
        assert len([p for p in (home / "chat").iterdir()]) == 12
        assert (home / "agent-chat.org").stat().st_size < 4000
        for i in range(3):
            _turns(rt, [f"an ordinary tick {i}"])
            new_blobs = {line.split()[5]: line.split()[3]
                         for line in _git(home, "diff-tree", "-r", "HEAD~1", "HEAD").splitlines()}
            sizes = {name: int(_git(home, "cat-file", "-s", sha)) for name, sha in new_blobs.items()}
            state = sizes.pop("tick-state.json")
            assert sizes and max(sizes.values()) < 20_000, sizes  # the tick's files, not the history
            # The tick state is the conversation the next request repeats: bounded by the context,
            # whatever the history's length.
            request = len(json.dumps(fake.requests[-1]["body"]["messages"], ensure_ascii=False))
            assert state < request + 8_000, (state, request)
            assert _git(home, "diff-tree", "-r", "--name-only", "HEAD~1", "HEAD").split() == [
                "agent-chat.org", "consciousness.el", "monologue.org", "tick-state.json"]
    finally:
        rt.stop()
    assert len(ChatLog(home / "agent-chat.org").read()) == last + 4
    assert _git(home, "status", "--porcelain", "--", "agent-chat.org", "chat", "monologue.org", "monologue") == ""


def test_resume_search_and_the_log_see_an_earlier_month(tmp_path, fake, clock):
    home = tmp_path / "home"
    rt = _runtime(home, fake.url)
    rt.start()
    try:
        clock.set(datetime(2026, 1, 20, tzinfo=UTC))
        _turns(rt, ["remember the aubergine", "and the parsnip"])
        clock.set(datetime(2026, 2, 2, tzinfo=UTC))
        _turns(rt, ["a new month"])
    finally:
        rt.stop()
    assert (home / "chat" / "2026-01.org").exists() and (home / "monologue" / "2026-01.org").exists()
    assert "aubergine" not in (home / "agent-chat.org").read_text()
    assert "aubergine" in _git(home, "show", "HEAD:chat/2026-01.org")
    again = _runtime(home, fake.url)
    try:
        recent = views.status(again)["recent"]  # the shell's last exchanges cross the month
        assert [r["human"] for r in recent] == ["remember the aubergine", "and the parsnip", "a new month"]
        assert [tick for tick, _line in again.mind.monologue.read_tail(3)] == [1, 2, 3]
        hits = memory_search(again, "aubergine")
        assert hits and ":primary:chat.1:" in hits[0]["mem_id"]
        assert [e.human for e in again.mind.chat_log.read()] == [r["human"] for r in recent]
    finally:
        again.mind.ltm.close()


def test_startup_status_cuts_a_huge_exchange(tmp_path, fake):
    home = tmp_path / "home"
    home.mkdir()
    ChatLog(home / "agent-chat.org").write_agent(1, "2026-01-01T00:00:00Z", "x" * 300_000 + "\nend",
                                                 with_heading=True)
    rt = _runtime(home, fake.url)
    try:
        agent = views.status(rt)["recent"][-1]["agent"]
        assert len(agent) < views.RECENT_CHARS + 200 and "C-c C-l" in agent
    finally:
        rt.mind.ltm.close()


def test_tail_budget_bounds_what_start_up_reads_of_huge_ticks(tmp_path):
    log = ChatLog(tmp_path / "agent-chat.org", rotate_bytes=1 << 30)
    for tick in range(1, 9):
        log.write_agent(tick, "2026-01-01T00:00:00Z", f"{tick} " + "y" * 500_000, with_heading=True)
    assert [e.tick for e in log.read_tail(64, budget=1_200_000)] == [7, 8]
    assert [e.tick for e in log.read_tail(64, budget=10)] == [8]  # the newest whole, whatever its size
    assert monthly.TAIL_BYTES <= 4 << 20


def test_threads_are_found_by_an_index_range_not_a_scan_of_every_item(tmp_path):
    """Start-up looks up the open threads among every item of the history: a range of the
    (base, version) index (LIKE scanned every version; ~0.1 s with 50 MB of chat)."""
    from amacs_server.memory.items import Kind, MemoryItem, Tier
    from amacs_server.memory.ltm import LongTermMemory
    from amacs_server.memory.memid import MemId

    ltm = LongTermMemory(tmp_path / "memory.db")
    try:
        for agent, name in (("a_b", "thread.main"), ("axb", "thread.other"), ("a_b", "chat.1"),
                            ("a_b", "thread-x"), ("a_b", "threadz")):
            ltm.put(MemoryItem(MemId(agent, "primary", name, 1), Tier.RAM, Kind.NOTE, {"id": name}))
        assert ltm.bases_with_prefix("a_b:primary", "thread.") == {"a_b:primary:thread.main"}
        plan = " ".join(str(row) for row in ltm.db.execute(
            "EXPLAIN QUERY PLAN SELECT DISTINCT base FROM items WHERE base >= ? AND base < ?", ("a", "b")))
        assert "USING COVERING INDEX" in plan
    finally:
        ltm.close()


def test_a_database_closed_cleanly_is_not_read_page_by_page_at_start(tmp_path, monkeypatch):
    """PRAGMA integrity_check reads every page of memory.db (0.6-0.9 s for 50 MB of chat on two
    loaded cores): start-up skips it for a database closed cleanly and untouched since."""
    from amacs_server.memory import ltm as ltm_module
    from amacs_server.memory.ltm import LongTermMemory, check_database, sealed
    from tests.test_recovery import damage_middle, items

    path = tmp_path / "memory.db"
    db = LongTermMemory(path)
    put_all(db, items(300))
    assert not sealed(path)  # open
    db.close()
    assert sealed(path)
    real_connect = ltm_module.sqlite3.connect
    monkeypatch.setattr(ltm_module.sqlite3, "connect", lambda *a, **k: pytest.fail("the database was read"))
    assert check_database(path) is None
    monkeypatch.setattr(ltm_module.sqlite3, "connect", real_connect)
    LongTermMemory(path).set_active("primary", "a:primary:note.1", "pinned", 1)  # dies unclosed: unsealed
    assert not sealed(path) and check_database(path) is None
    db = LongTermMemory(path)
    db.close()
    damage_middle(path)  # anything that writes to it after the close: checked page by page
    assert not sealed(path) and check_database(path)


def test_a_tick_lists_the_months_only_when_they_change_and_looks_at_each_of_its_files_once(tmp_path, fake, clock,
                                                                                           monkeypatch):
    """A tick's file work does not grow with the closed months: their folders are listed again only
    when they changed, and the loop thread stats each tracked file once a tick (the tick state's
    log sizes are those of the snapshot its commit holds, not a second look)."""
    home = tmp_path / "home"
    _old_home(home, 1)
    rt = _runtime(home, fake.url)
    rt.start()
    try:
        _turns(rt, ["the first tick after the split"])
        months = sorted(p.name for p in (home / "chat").iterdir())
        assert len(months) == 12
        monkeypatch.setattr(history, "RACY_NS", 0, raising=False)  # the months were just written: no wait for the clock
        listed: list[str] = []
        stats: dict[str, int] = {}
        real_iterdir, real_stat = Path.iterdir, os.stat

        def iterdir(self: Path) -> Iterator[Path]:
            listed.append(self.name)
            return real_iterdir(self)

        def counting_stat(path, *args, **kwargs):  # noqa: ANN001, ANN202
            if threading.current_thread().name != "amacs-git" and Path(path).parent.name == "chat":
                stats[Path(path).name] = stats.get(Path(path).name, 0) + 1
            return real_stat(path, *args, **kwargs)

        monkeypatch.setattr(Path, "iterdir", iterdir)
        monkeypatch.setattr(os, "stat", counting_stat)
        _turns(rt, ["one"])  # lists the folders once more (changed since the last listing)
        listed.clear()
        stats.clear()
        _turns(rt, ["two", "three"])
        monkeypatch.undo()
        assert "chat" not in listed and "monologue" not in listed, listed
        assert stats == dict.fromkeys(months, 2), stats
        state = history.read_state(home)
        assert state is not None and state["tick"] == rt.mind.consciousness.current_tick
        committed = {name: int(_git(home, "cat-file", "-s", f"HEAD:{name}")) for name in state["files"]}
        assert state["files"] == committed == history.file_sizes(home)
        assert len([n for n in committed if n.startswith("chat/")]) == 12
    finally:
        rt.stop()
