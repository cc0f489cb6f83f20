"""The commit worker (issue 10): commits off the loop thread, in order, flushed on stop;
durable writes deferred to it; the person's input still synced at once."""

from __future__ import annotations

import os
import subprocess
import threading
import time

from amacs_server.persistence import files
from amacs_server.persistence.files import append_durably, atomic_write, deferred_sync, sync_paths
from amacs_server.persistence.git_repo import PACK_EVERY, CommitWorker, HomeRepo


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
    notes: list[tuple[str, str]] = []
    worker = CommitWorker(repo, lambda text, kind: notes.append((text, kind)))
    f = tmp_path / "agent-chat.org"
    f.write_text("a")
    (tmp_path / ".git" / "index.lock").write_text("")  # fresh: maybe a live git
    worker.submit([f], "[TICK 1][no-thread][ok] one")
    assert worker.flush(10)
    assert notes and notes[0][1] == "warning" and "git is busy" in notes[0][0]
    (tmp_path / ".git" / "index.lock").unlink()
    worker.submit([f], "[TICK 2][no-thread][ok] two")
    assert worker.stop(10)
    assert subjects(tmp_path) == ["[TICK 2][no-thread][ok] two"]


def test_loose_objects_are_packed(tmp_path):
    repo = HomeRepo(tmp_path)
    worker = CommitWorker(repo)
    f = tmp_path / "agent-chat.org"
    for i in range(PACK_EVERY + 1):
        append_durably(f, f"tick {i} " + "words " * 400 + "\n")
        worker.submit([f], f"[TICK {i}][no-thread][ok] m")
        worker.flush(10)
    assert worker.stop(30)
    assert worker.pack_ms
    count = subprocess.run(["git", "-C", str(tmp_path), "count-objects", "-v"], capture_output=True, text=True).stdout
    fields = dict(line.split(": ") for line in count.splitlines())
    assert int(fields["count"]) < 10 and int(fields["packs"]) >= 1
    assert subprocess.run(["git", "-C", str(tmp_path), "config", "gc.auto"], capture_output=True,
                          text=True).stdout.strip() == "0"


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
