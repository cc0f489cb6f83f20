"""The commit worker (issue 10): commits off the loop thread, in order, flushed on stop;
durable writes deferred to it; the person's input still synced at once."""

from __future__ import annotations

import gc
import os
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from amacs_server import files
from amacs_server.files import append_durably, atomic_write, deferred_sync, sync_paths
from amacs_server.persistence import git_repo
from amacs_server.persistence.git_repo import PACK_EVERY, CommitWorker, HomeRepo


@contextmanager
def live_git_holding_index_lock(home: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real git (update-index reading paths from its stdin) holding HOME's index.lock, for
    the length of the block; the lock waits are shortened to 0.3 s meanwhile."""
    git = subprocess.Popen(["git", "update-index", "--add", "--stdin"], cwd=home, stdin=subprocess.PIPE)
    assert git.stdin is not None
    git.stdin.write(b".gitignore\n")
    git.stdin.flush()
    lock = home / ".git" / "index.lock"
    deadline = time.monotonic() + 10
    while not lock.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lock.exists()
    wait, git_repo.LOCK_WAIT_SECONDS = git_repo.LOCK_WAIT_SECONDS, 0.3
    try:
        yield git
    finally:
        git_repo.LOCK_WAIT_SECONDS = wait
        git.kill()
        git.wait()


def subjects(home):
    out = subprocess.run(["git", "-C", str(home), "log", "--format=%s"], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def test_commits_in_order_without_waiting_and_flushed_on_stop(tmp_path):
    repo = HomeRepo(tmp_path)
    gate = threading.Event()
    original = repo.commit

    def slow_commit(paths, message):
        gate.wait(5)
        return original(paths, message)

    repo.commit = slow_commit  # type: ignore[method-assign]
    worker = CommitWorker(repo)
    f = tmp_path / "agent-chat.org"
    t0 = time.perf_counter()
    for i in range(1, 6):
        append_durably(f, f"tick {i}\n")
        worker.submit([f], f"[TICK {i}][no-thread][ok] m{i}")
    assert time.perf_counter() - t0 < 0.5 and worker.pending == 5  # nobody waited for git
    gate.set()
    assert worker.stop(timeout=30)
    assert subjects(tmp_path) == [f"[TICK {i}][no-thread][ok] m{i}" for i in range(5, 0, -1)]
    assert subprocess.run(["git", "-C", str(tmp_path), "show", "HEAD:agent-chat.org"], capture_output=True,
                          text=True).stdout.endswith("tick 5\n")
    # The index matches the files: git status is clean for what the worker commits.
    status = subprocess.run(["git", "-C", str(tmp_path), "status", "--porcelain"], capture_output=True, text=True)
    assert "agent-chat.org" not in status.stdout


def test_an_empty_tick_still_gets_its_commit(tmp_path):
    repo = HomeRepo(tmp_path)
    f = tmp_path / "monologue.org"
    f.write_text("a\n")
    repo.commit([f], "[TICK 1][no-thread][ok] one")
    repo.commit([f], "[TICK 2][no-thread][ok] nothing changed")
    assert repo.log() == ["[TICK 2][no-thread][ok] nothing changed", "[TICK 1][no-thread][ok] one"]


def test_commit_failure_is_reported_as_a_warning(tmp_path):
    repo = HomeRepo(tmp_path)
    repo.prepare()  # the repository exists before the first commit: a lock can be left in it
    notes: list[tuple[str, str]] = []
    worker = CommitWorker(repo, lambda text, kind: notes.append((text, kind)))
    f = tmp_path / "agent-chat.org"
    f.write_text("a")
    with live_git_holding_index_lock(tmp_path):  # the person's own git, say
        worker.submit([f], "[TICK 1][no-thread][ok] one")
        assert worker.flush(10)
    assert notes and notes[0][1] == "warning" and "git is busy" in notes[0][0]
    assert (tmp_path / ".git" / "index.lock").exists()  # that git was killed: its lock is stale now
    worker.submit([f], "[TICK 2][no-thread][ok] two")
    assert worker.stop(10)
    assert subjects(tmp_path) == ["[TICK 2][no-thread][ok] two"]
    assert notes[1][1] == "info" and "removed a stale .git/index.lock" in notes[1][0]


def test_loose_objects_are_packed(tmp_path):
    repo = HomeRepo(tmp_path)
    worker = CommitWorker(repo)
    f = tmp_path / "agent-chat.org"
    for i in range(PACK_EVERY + 1):
        append_durably(f, f"tick {i} " + "words " * 400 + "\n")
        worker.submit([f], f"[TICK {i}][no-thread][ok] m")
        worker.flush(10)
    assert worker.stop(30)
    worker.wait_packed(60)
    assert worker.pack_ms
    count = subprocess.run(["git", "-C", str(tmp_path), "count-objects", "-v"], capture_output=True, text=True).stdout
    fields = dict(line.split(": ") for line in count.splitlines())
    assert int(fields["count"]) < 10 and int(fields["packs"]) >= 1
    assert subprocess.run(["git", "-C", str(tmp_path), "config", "gc.auto"], capture_output=True,
                          text=True).stdout.strip() == "0"


def test_a_flush_then_wait_packed_waits_for_the_repack_the_last_commit_started(tmp_path, monkeypatch):
    """The worker starts its packer before the commit it follows counts as made: a caller that
    flushes, then waits for the packer (bench_flat copying a home) finds it, even when the thread
    is slow to start (seen: the copy raced the repack's prune-packed, ENOENT on .git/objects/25)."""
    start = threading.Thread.start

    def slow(thread: threading.Thread) -> None:
        if thread.name == "amacs-git-pack":
            time.sleep(0.3)  # a loaded machine
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", slow)
    worker = CommitWorker(HomeRepo(tmp_path))
    f = tmp_path / "agent-chat.org"
    for i in range(PACK_EVERY):
        append_durably(f, f"tick {i}\n")
        worker.submit([f], f"[TICK {i}][no-thread][ok] m")
    assert worker.flush(30)
    worker.wait_packed(30)
    assert worker.pack_ms
    count = subprocess.run(["git", "-C", str(tmp_path), "count-objects"], capture_output=True, text=True).stdout
    assert count.startswith("0 objects")
    assert worker.stop(30)


def test_deferred_writes_skip_fsync_and_the_input_does_not(tmp_path, monkeypatch):
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(files.os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    append_durably(tmp_path / "chat.org", "** Human\nhi\n")  # the write-ahead
    assert len(synced) == 1
    with deferred_sync():
        append_durably(tmp_path / "chat.org", "** Agent\nhello\n")
        append_durably(tmp_path / "monologue.org", "- x\n")
        atomic_write(tmp_path / "consciousness.el", "((tick . 1))")
    assert len(synced) == 1  # none inside
    assert (tmp_path / "consciousness.el").read_text() == "((tick . 1))"
    assert not list(tmp_path.glob(".*.tmp"))
    append_durably(tmp_path / "chat.org", "x\n")  # outside again: synced
    assert len(synced) == 2
    sync_paths([tmp_path / "chat.org", tmp_path / "consciousness.el", tmp_path / "missing"])
    assert len(synced) == 2 + 2 + 1  # two files and their folder


def test_sync_paths_syncs_its_files_at_once_then_their_folders(tmp_path, monkeypatch):
    """One fsync after another, each waited for a journal commit of its own (a 20,000-tick
    fork's ~120 files: 170-206 ms at load 7); at once they share one.  The folders still come
    after every file: a name in a folder is durable only with the file it names."""
    paths = []
    for i in range(8):
        (tmp_path / "d").mkdir(exist_ok=True)
        paths.append(tmp_path / "d" / f"f{i}")
        paths[-1].write_text(str(i))
    lock, running, most, kinds = threading.Lock(), [0], [0], []
    real = os.fsync

    def slow(fd: int) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        kinds.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)
        with lock:
            running[0] -= 1

    monkeypatch.setattr(files.os, "fsync", slow)
    sync_paths([*paths, tmp_path / "missing"])
    assert most[0] >= 4
    assert kinds == ["file"] * 8 + ["folder"]


def test_a_blob_is_written_when_the_packer_removed_its_folder_meanwhile(tmp_path, monkeypatch):
    """The packer's repack removes the loose-object folders it emptied, also one a commit made
    for a new blob a moment before writing it (seen building a long home: "git commit failed:
    No such file or directory: .git/objects/0a/tmp_obj_..."): the folder is made again."""
    repo = HomeRepo(tmp_path)
    repo.prepare()
    real_open, removed = os.open, []

    def pruned_first(path, flags, mode=0o777):
        if not removed and "tmp_obj_" in str(path):
            removed.append(Path(path).parent)
            os.rmdir(Path(path).parent)  # as git prune-packed does to an empty folder
        return real_open(path, flags, mode)

    monkeypatch.setattr(git_repo.os, "open", pruned_first)
    sha = repo.write_blob(b"hello\n")
    monkeypatch.undo()
    assert removed
    assert subprocess.run(["git", "-C", str(tmp_path), "cat-file", "-p", sha], capture_output=True, text=True,
                          check=True).stdout == "hello\n"


def test_a_commit_made_by_hand_in_between_is_kept(tmp_path):
    repo = HomeRepo(tmp_path)
    f = tmp_path / "agent-chat.org"
    f.write_text("a")
    repo.commit([f], "[TICK 1][no-thread][ok] one")
    (tmp_path / "notes.txt").write_text("mine")
    for args in (["add", "notes.txt"], ["commit", "-q", "-m", "by hand"]):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    f.write_text("b")
    repo.commit([f], "[TICK 2][no-thread][ok] two")
    assert repo.log() == ["[TICK 2][no-thread][ok] two", "by hand", "[TICK 1][no-thread][ok] one"]


def test_worker_fsyncs_only_what_changed(tmp_path, monkeypatch):
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(files.os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    worker = CommitWorker(HomeRepo(tmp_path))
    chat, state = tmp_path / "agent-chat.org", tmp_path / "consciousness.el"
    with deferred_sync():
        append_durably(chat, "a\n")
        atomic_write(state, "1")
    worker.submit([chat, state], "[TICK 1][no-thread][ok] one")
    worker.flush(10)
    assert len(synced) == 3  # two new files and their folder
    with deferred_sync():
        append_durably(chat, "b\n")
    worker.submit([chat, state], "[TICK 2][no-thread][ok] two")
    worker.flush(10)
    assert len(synced) == 4  # only the appended file: no rename, no folder
    assert worker.stop(10)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the stopped loop's task
def test_an_eval_turn_and_the_prompt_do_not_wait_for_git(tmp_path):
    """Issue 10: both ticks of an eval turn run and the prompt returns while git is stuck;
    the commits follow in order, and Runtime.stop flushes them."""
    import asyncio

    from amacs_server.config import load_config
    from amacs_server.runtime import Runtime
    from tests.fake_anthropic import FakeAnthropic, Reply, agent_json
    from tests.test_memory import SilentFace

    class Face(SilentFace):
        done: list[int] = []

        def turn_done(self, tick):
            self.done.append(tick)

    fake = FakeAnthropic().start()
    fake.script(Reply(agent_json(None, eval="(+ 2 2)", monologue="adding")),
                Reply(agent_json("4", monologue="answered")))
    home = tmp_path / "home"
    rt = Runtime(load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k",
                              "ANTHROPIC_BASE_URL": fake.url}), Face())
    gate = threading.Event()
    original = rt.mind.repo.commit

    def stuck_commit(paths, message):
        gate.wait(30)
        return original(paths, message)

    rt.mind.repo.commit = stuck_commit  # type: ignore[method-assign]
    rt.start()
    try:
        from amacs_server.loop.primary import run_turn
        asyncio.run_coroutine_threadsafe(run_turn(rt, "what is 2+2?"), rt.loop).result(30)
        assert Face.done == [2] and len(fake.requests) == 2  # the prompt is back after two ticks
        assert rt.mind.commits.pending == 2 and rt.mind.repo.log() == []
    finally:
        gate.set()
        rt.stop()
        fake.stop()
    del rt
    gc.collect()  # the stopped loop's pending task is finalized here, not inside a later compile()
    assert subjects(home) == ["[TICK 2][no-thread][focused] reply: 4 — answered",
                              "[TICK 1][no-thread][focused] «what is 2+2?» — adding"]


def test_recent_lists_pending_commits_without_waiting(tmp_path):
    repo = HomeRepo(tmp_path)
    f = tmp_path / "agent-chat.org"
    f.write_text("a")
    repo.commit([f], "[TICK 1][no-thread][ok] one")
    gate = threading.Event()
    original = repo.commit
    repo.commit = lambda paths, message: (gate.wait(10), original(paths, message))[1]  # type: ignore[method-assign]
    worker = CommitWorker(repo)
    worker.submit([f], "[TICK 2][no-thread][ok] two")
    t0 = time.perf_counter()
    assert [s for _sha, s in worker.recent(5, wait=0)] == ["[TICK 2][no-thread][ok] two", "[TICK 1][no-thread][ok] one"]
    assert worker.recent(5, wait=0)[0][0] == "pending" and time.perf_counter() - t0 < 1
    gate.set()
    assert worker.recent(5)[0][0] != "pending"
    assert worker.stop(10)


def test_a_lock_no_live_git_holds_is_removed_at_once_and_said(tmp_path):
    """Issue 12: a git killed mid-commit (with the server) leaves index.lock or a ref's .lock;
    none of them, however fresh, may block the next tick's commit."""
    repo = HomeRepo(tmp_path)
    f = tmp_path / "agent-chat.org"
    f.write_text("a")
    repo.commit([f], "[TICK 1][no-thread][ok] one")
    git_dir = tmp_path / ".git"
    branch = subprocess.run(["git", "-C", str(tmp_path), "symbolic-ref", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    left = [git_dir / "index.lock", git_dir / "HEAD.lock", git_dir / f"{branch}.lock"]
    for lock in left:
        lock.write_text("")
    f.write_text("b")
    t0 = time.monotonic()
    _sha, note = repo.commit([f], "[TICK 2][no-thread][ok] two")
    assert time.monotonic() - t0 < 2
    assert note is not None and "that no running git held" in note
    assert ".git/index.lock (0 s old)" in note and ".git/HEAD.lock" in note and f".git/{branch}.lock" in note
    assert not [lock for lock in left if lock.exists()]
    assert subjects(tmp_path) == ["[TICK 2][no-thread][ok] two", "[TICK 1][no-thread][ok] one"]


def test_a_lock_a_live_git_releases_is_waited_for(tmp_path):
    """A git at work in the home (one a killed server left running, the person's) is waited for:
    once it ends, the commit goes on, and there was nothing stale to say."""
    repo = HomeRepo(tmp_path)
    f = tmp_path / "agent-chat.org"
    f.write_text("a")
    repo.commit([f], "[TICK 1][no-thread][ok] one")
    with live_git_holding_index_lock(tmp_path) as git:
        git_repo.LOCK_WAIT_SECONDS = 10
        threading.Timer(0.5, lambda: git.stdin.close() if git.stdin else None).start()  # git finishes
        f.write_text("b")
        _sha, note = repo.commit([f], "[TICK 2][no-thread][ok] two")
    assert note is None
    assert subjects(tmp_path)[0] == "[TICK 2][no-thread][ok] two"


def test_git_processes_in_sees_a_git_working_in_the_home(tmp_path):
    repo = HomeRepo(tmp_path)
    repo.prepare()
    assert git_repo.git_processes_in(tmp_path) == []
    with live_git_holding_index_lock(tmp_path) as git:
        assert git_repo.git_processes_in(tmp_path) == [git.pid]
        assert git_repo.git_processes_in(tmp_path / "elsewhere") == []


def loose_blobs(home: Path) -> set[str]:
    """The blobs stored as loose objects in HOME's repository."""
    objects = home / ".git" / "objects"
    found = {p.parent.name + p.name for p in objects.glob("??/*") if len(p.parent.name) == 2}
    return {sha for sha in found if subprocess.run(["git", "-C", str(home), "cat-file", "-t", sha], capture_output=True,
                                                   text=True).stdout.strip() == "blob"}


def closed_months(home: Path) -> tuple[Path, list[Path]]:
    """HOME's chat log and six closed months of it (chat/), each 12 KB."""
    months = [home / "chat" / f"2026-{m:02d}.org" for m in range(1, 7)]
    months[0].parent.mkdir()
    for i, month in enumerate(months):
        month.write_text(f"* Tick {i}\n" + "words " * 2000)
    chat = home / "agent-chat.org"
    chat.write_text("* Tick 7\n")
    return chat, months


def test_the_first_commit_after_a_start_writes_only_the_blobs_that_changed(tmp_path):
    """Was: a server's first commit wrote every tracked file as a loose object again (hashed and
    compressed: every closed month of the history, ~0.2-1 s at 20,000 ticks), though git held
    each in a pack already."""
    chat, months = closed_months(tmp_path)
    repo = HomeRepo(tmp_path)
    repo.commit([chat, *months], "[TICK 7][no-thread][ok] seven")
    subprocess.run(["git", "-C", str(tmp_path), "repack", "-a", "-d", "-q"], check=True)
    assert loose_blobs(tmp_path) == set()
    append_durably(chat, "* Tick 8\n")
    again = HomeRepo(tmp_path)  # a new server
    again.commit([chat, *months], "[TICK 8][no-thread][ok] eight")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD:agent-chat.org"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert loose_blobs(tmp_path) == {head}
    assert subprocess.run(["git", "-C", str(tmp_path), "fsck", "--strict"], capture_output=True).returncode == 0


def test_a_new_servers_first_snapshot_reads_only_the_files_changed_since_the_last_commit(tmp_path, monkeypatch):
    """Was: a server's first snapshot read every tracked file (every closed month: 14 MB at
    20,000 ticks, on the loop thread at the end of the person's first turn) and its commit hashed
    each.  A file whose stat is as the last commit recorded it is its committed blob; one changed
    since (grown, edited by hand in place keeping its size and its mtime) or whose blob git lost
    is read."""
    monkeypatch.setattr(git_repo, "RACY_NS", 0)  # the files were just written: no wait for the clock
    chat, months = closed_months(tmp_path)
    files = [chat, *months]
    HomeRepo(tmp_path).commit(files, "[TICK 7][no-thread][ok] seven")
    append_durably(chat, "* Tick 8\n")
    edited = months[2]
    before = edited.stat()
    edited.write_text(edited.read_text().replace("words", "WORDS", 1))  # by hand: same size, in place
    os.utime(edited, ns=(before.st_atime_ns, before.st_mtime_ns))
    lost = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", f"HEAD:chat/{months[4].name}"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / ".git" / "objects" / lost[:2] / lost[2:]).unlink()
    read: list[str] = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: (read.append(self.name), real(self))[1])
    HomeRepo(tmp_path).commit(files, "[TICK 8][no-thread][ok] eight")  # a new server
    monkeypatch.undo()
    assert sorted(read) == sorted(["agent-chat.org", edited.name, months[4].name])
    for path in files:
        name = str(path.relative_to(tmp_path))
        assert subprocess.run(["git", "-C", str(tmp_path), "show", f"HEAD:{name}"], capture_output=True,
                              check=True).stdout == path.read_bytes(), name
    assert subprocess.run(["git", "-C", str(tmp_path), "fsck", "--strict"], capture_output=True).returncode == 0
