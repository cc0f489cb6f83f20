"""A tick that ended and whose commit was never made (the server was killed first) is committed at
the next start, with the bytes it ended with, or not at all.

The server runs in a process of its own whose git holds every commit at write-tree (the worker
falls behind, as on a loaded machine), and is killed with SIGKILL (``AMACS_FAULT_POINT``) as the
tick after it writes the person's input ahead.  The test copies the home as the tick ended, before
the next input, independently of the code under test.  The next start commits that tick: its
commit holds exactly those bytes (agent-chat.org without the later input), and says it was made
late and that the tick before it has no commit of its own.  If a file changed meanwhile, nothing
is committed as that tick, and the start says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amacs_server.persistence.git_repo import MAX_CHUNKS, UNCOMMITTED, Digests, Snapshotter
from tests.fake_anthropic import FakeAnthropic
from tests.test_rewind import answer, do, runtime
from tests.test_tick_commits import commit_files, git

ROOT = Path(__file__).resolve().parents[1]
TRACKED = ("consciousness.el", "agent-chat.org", "monologue.org", "scratchpad.org", "tick-state.json", ".gitignore")
TRACKED_FOLDERS = ("chat", "monologue", "skills")

# Every write-tree waits until the gate file exists, then fails: no commit is ever made.
HELD_GIT = """#!/bin/sh
if [ "$1" = write-tree ]; then
  while [ ! -e "$GATE" ]; do sleep 0.02; done
  exit 1
fi
exec REAL_GIT "$@"
"""

# The server's session in a process of its own: two inputs, the home copied as the second tick
# left it, then a third input, whose write-ahead is the third: the process is killed there.
SESSION = """
import shutil, sys
from pathlib import Path
from tests.test_rewind import do, runtime
home, url, copy = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
rt = runtime(home, url)
do(rt, ("say", "first"))
do(rt, ("say", "note the second"))
shutil.copytree(home, copy, ignore=shutil.ignore_patterns(".git"))
do(rt, ("say", "third"))
"""


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic(default=answer).start()
    yield server
    server.stop()


def tracked_of(folder: Path) -> dict[str, bytes]:
    """The files of FOLDER a tick's commit holds, as this test names them, with their bytes."""
    out = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_file() and (name in TRACKED or name.partition("/")[0] in TRACKED_FOLDERS and "/" in name):
            out[name] = path.read_bytes()
    return out


def killed_after_tick_two(tmp_path: Path, fake: FakeAnthropic) -> tuple[Path, dict[str, bytes]]:
    """A home whose server was killed as tick 3 began, no commit made; and tick 2's files as it left them."""
    home, copy, gate, bin_dir = tmp_path / "agent", tmp_path / "tick-2", tmp_path / "gate", tmp_path / "bin"
    bin_dir.mkdir()
    real = shutil.which("git")
    assert real
    (bin_dir / "git").write_text(HELD_GIT.replace("REAL_GIT", real))
    (bin_dir / "git").chmod(stat.S_IRWXU)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GATE": str(gate),
           "AMACS_FAULT_POINT": "write-ahead.done@3"}
    try:
        done = subprocess.run([sys.executable, "-c", SESSION, str(home), fake.url, str(copy)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
    finally:
        gate.touch()  # the held gits fail, and exit
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    deadline = time.monotonic() + 10
    while subprocess.run(["pgrep", "-f", str(bin_dir)], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "the held gits did not exit"
        time.sleep(0.05)
    assert git(home, "rev-list", "--all") == b"", "a commit was made: nothing was left to the next start"
    assert (home / UNCOMMITTED).exists()
    ended = tracked_of(copy)
    assert ended["agent-chat.org"] != (home / "agent-chat.org").read_bytes(), "tick 3's input was not written"
    assert (home / "agent-chat.org").read_bytes().startswith(ended["agent-chat.org"])
    return home, ended


def test_a_tick_killed_before_its_commit_is_committed_at_the_next_start_with_its_bytes(tmp_path, fake):
    home, ended = killed_after_tick_two(tmp_path, fake)
    rt = runtime(home, fake.url)
    try:
        assert rt.mind.commits.flush(60)
        log = git(home, "log", "--format=%H%n%B%x00").decode().split("\0")
        assert len([entry for entry in log if entry.strip()]) == 1, log
        sha, subject, _, *body = log[0].strip().splitlines()
        assert subject.startswith("[TICK 2]") and "thought about note the second" in subject, subject
        assert "Committed at the next start" in " ".join(body) and "Tick 1 has no commit of its own" in " ".join(body)
        assert commit_files(home, sha) == ended
        assert b"noted: note the second" in ended["scratchpad.org"]  # a file the tick made is in it
        assert not (home / UNCOMMITTED).exists()
        do(rt, ("say", "after the start"))
        assert rt.mind.commits.flush(60)
        assert git(home, "log", "-1", "--format=%s").decode().startswith("[TICK 4]")
        assert not (home / UNCOMMITTED).exists()
    finally:
        rt.stop()


def test_a_tick_whose_files_changed_since_is_not_committed_as_that_tick(tmp_path, fake):
    home, _ended = killed_after_tick_two(tmp_path, fake)
    with (home / "scratchpad.org").open("a") as pad:  # the person's own edit, before the next start
        pad.write("* a line the person added\n")
    (home / "consciousness.el").write_text((home / "consciousness.el").read_text().replace("calm", "edited"))
    rt = runtime(home, fake.url)
    try:
        assert rt.mind.commits.flush(60)
        assert git(home, "rev-list", "--all") == b""
        said = [note for note in rt.startup_notes if "Tick 2 ended" in note]
        assert said and "consciousness.el" in said[0] and "tick 2 has no commit of its own" in said[0], rt.startup_notes
        assert "scratchpad.org" not in said[0], "a file that only grew still holds the tick's bytes"
        assert not (home / UNCOMMITTED).exists()
    finally:
        rt.stop()


def test_a_record_of_a_tick_committed_since_or_of_another_tick_is_dropped(tmp_path, fake):
    """A server killed after the commit and before its record went; a record of a tick the mind
    is no longer at (a rewind since): the start removes it and commits nothing."""
    home = tmp_path / "agent"
    rt = runtime(home, fake.url)
    try:
        do(rt, ("say", "first"))
        assert rt.mind.commits.flush(60)
        assert not (home / UNCOMMITTED).exists(), "made, the commit's record goes"
        files = rt.mind.commits._digests.of(rt.mind.repo.snapshots.take(rt.mind.tracked_files()))
    finally:
        rt.stop()
    made = git(home, "rev-list", "--all")
    for message in ("[TICK 1][no-thread][calm] thought about first", "[TICK 5][no-thread][calm] later"):
        (home / UNCOMMITTED).write_text(json.dumps({"message": message, "files": files}))
        rt = runtime(home, fake.url)
        try:
            assert rt.mind.commits.flush(60)
        finally:
            rt.stop()
        assert not (home / UNCOMMITTED).exists(), message
        assert git(home, "rev-list", "--all") == made, message
        assert not [note for note in rt.startup_notes if "ended" in note], rt.startup_notes


def test_digests_hash_only_what_a_file_added_and_equal_the_whole_bytes_digest(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    path = home / "agent-chat.org"
    snapshots, digests = Snapshotter(home), Digests()
    data = b""
    for n in range(MAX_CHUNKS + 6):
        if n == 7:
            data = b"rewritten\n"
            path.write_bytes(data)
        else:
            data += f"* Tick {n}\n".encode() * (n + 1)
            with path.open("wb") as fh:
                fh.write(data)
        os.utime(path, ns=(n * 10**9, n * 10**9))  # a new stat each time, as a later write has
        got = digests.of(snapshots.take([path]))["agent-chat.org"]
        assert got == [f"sha256:{hashlib.sha256(data).hexdigest()}", len(data), "100644"], n
