"""A tick's commit is that tick: with the commit worker held behind (a git on PATH whose
write-tree waits for a token), files are created, appended to, rewritten and deleted at random
ticks; every tick's commit holds exactly the bytes each file had at that tick's end, as this
test recorded them by walking the home, and no file the home did not have then."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amacs_server.persistence.git_repo import CommitWorker, HomeRepo
from amacs_server.persistence.history import tracked

FILES = ("agent-chat.org", "monologue.org", "scratchpad.org", "consciousness.el", "tick-state.json",
         "chat/2026-10.org", "monologue/2026-10.org", "skills/notes/SKILL.md", "skills/notes/more.org")
OPS = ("append", "rewrite", "replace", "same-size", "delete")

op = st.tuples(st.sampled_from(OPS), st.sampled_from(FILES), st.binary(min_size=1, max_size=24))
# Per tick: what is done to the files, then how many held commits may go on.
tick = st.tuples(st.lists(op, max_size=5), st.integers(0, 2))

GIT_WRAPPER = """#!/bin/sh
# Each write-tree (one per commit) waits for a token file, or for the gate to open.
if [ "$1" = write-tree ]; then
  while [ ! -e "$GATE/open" ]; do
    for t in "$GATE"/token-*; do
      if [ -e "$t" ] && mv "$t" "$GATE/used-${t##*-}" 2>/dev/null; then break 2; fi
    done
    sleep 0.005
  done
fi
exec REAL_GIT "$@"
"""


@contextmanager
def held_git(folder: Path) -> Iterator[Path]:
    """A git on PATH that holds each commit at write-tree until the gate folder gets a token."""
    bin_dir, gate = folder / "bin", folder / "gate"
    bin_dir.mkdir()
    gate.mkdir()
    real = shutil.which("git")
    assert real
    wrapper = bin_dir / "git"
    wrapper.write_text(GIT_WRAPPER.replace("REAL_GIT", real))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    saved = {k: os.environ.get(k) for k in ("PATH", "GATE")}
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    os.environ["GATE"] = str(gate)
    try:
        yield gate
    finally:
        (gate / "open").touch()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def apply(home: Path, what: str, name: str, data: bytes) -> None:
    path = home / name
    if what == "delete":
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if what == "append" or not path.exists():
        with path.open("ab") as fh:
            fh.write(data)
    elif what == "rewrite":  # in place: same inode
        path.write_bytes(data)
    elif what == "replace":  # a new file renamed over it
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    else:  # same size, other bytes, in place: only the content tells it changed
        old = path.read_bytes()
        path.write_bytes(bytes((b + 1) % 256 for b in old))


def record(home: Path) -> dict[str, bytes]:
    """Every file of the home but .git's, by its path: what this test knows the tick left."""
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(home).parts[:1]}


def git(home: Path, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(["git", *args], cwd=home, input=data, capture_output=True, check=True).stdout


def commit_files(home: Path, sha: str) -> dict[str, bytes]:
    """The files of commit SHA with their bytes."""
    entries = [line.split(b"\t", 1) for line in git(home, "ls-tree", "-r", "-z", sha).split(b"\0") if line]
    names = [name.decode() for _, name in entries]
    blobs = [info.split()[2] for info, _ in entries]
    out = git(home, "cat-file", "--batch", data=b"".join(b + b"\n" for b in blobs))
    files, at = {}, 0
    for name in names:
        header_end = out.index(b"\n", at)
        size = int(out[at:header_end].split()[2])
        files[name] = out[header_end + 1:header_end + 1 + size]
        at = header_end + 1 + size + 1
    return files


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session=st.lists(tick, min_size=1, max_size=10))
def test_every_ticks_commit_holds_that_ticks_bytes_however_late_it_is_made(session):
    folder = Path(tempfile.mkdtemp(prefix="amacs-tick-commits-"))
    try:
        home = folder / "home"
        home.mkdir()
        with held_git(folder) as gate:
            worker = CommitWorker(HomeRepo(home))
            recorded, tokens = [], 0
            for number, (ops, release) in enumerate(session, 1):
                for what, name, data in ops:
                    apply(home, what, name, data)
                recorded.append(record(home))
                worker.submit(tracked(home), f"[TICK {number}][no-thread][ok] tick {number}")
                for _ in range(release):
                    tokens += 1
                    (gate / f"token-{tokens}").touch()
            (gate / "open").touch()
            assert worker.stop(60)
        log = git(home, "log", "--reverse", "--format=%H %s").decode().splitlines()
        assert [line[41:] for line in log] == [f"[TICK {n}][no-thread][ok] tick {n}" for n in range(1, len(session) + 1)]
        for number, (line, expected) in enumerate(zip(log, recorded, strict=True), 1):
            assert commit_files(home, line[:40]) == expected, f"tick {number}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_git_runs_in_a_session_of_its_own_so_a_hangup_to_the_servers_group_spares_the_commit(tmp_path, monkeypatch):
    """Was: Emacs quit right after a reply; the hangup it sent the server's process group
    killed the git of the tick's commit ("git ls-files failed (-1)"), and the tick had no commit."""
    real = shutil.which("git")
    assert real
    bin_dir, seen = tmp_path / "bin", tmp_path / "sessions"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(f"#!/bin/sh\necho $(ps -o sid= -p $$) \"$1\" >> {seen}\nexec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    home = tmp_path / "home"
    home.mkdir()
    (home / "agent-chat.org").write_text("* Tick 1\n")
    worker = CommitWorker(HomeRepo(home))
    worker.submit(tracked(home), "[TICK 1][no-thread][ok] tick 1")
    assert worker.stop(60)
    ran = [line.split() for line in seen.read_text().splitlines()]
    assert ran and all(int(sid) != os.getsid(0) for sid, *_ in ran), ran
    assert git(home, "log", "--format=%s").decode().strip() == "[TICK 1][no-thread][ok] tick 1"


def _git(home: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(home), *args], capture_output=True, text=True, check=True).stdout.strip()


def _blob_of(home: Path, name: str) -> str:
    return subprocess.run(["git", "-C", str(home), "hash-object", name], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_file_assumed_to_hold_a_blob_is_not_read_until_it_changes(tmp_path):
    """HomeRepo.assume: a file taken to hold a blob is committed with it, unread (here a blob it
    does not hold, to see that); once the file changes (here grows: the bytes before are not
    known), it is read and hashed whole."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "consciousness.el").write_text("(one)\n")
    (home / "scratchpad.org").write_text("* a note\n")
    repo = HomeRepo(home)
    repo.commit(tracked(home), "first")
    other = _blob_of(home, "scratchpad.org")
    fresh = HomeRepo(home)
    fresh.assume([("consciousness.el", "100644", other)])
    fresh.commit(tracked(home), "second")
    assert _git(home, "rev-parse", "HEAD:consciousness.el") == other  # taken as told: not read
    with (home / "consciousness.el").open("a") as fh:
        fh.write("(two)\n")
    fresh.commit(tracked(home), "third")
    assert _git(home, "rev-parse", "HEAD:consciousness.el") == _blob_of(home, "consciousness.el")


def test_a_commit_aside_reads_only_the_files_git_finds_changed(tmp_path, monkeypatch):
    """commit_aside hashes the files whose stat git finds changed since it wrote them (a rewind's
    check-out wrote every one), not every tracked file; its tree is the files as they are."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "chat").mkdir()
    for month in range(5):
        (home / "chat" / f"2026-0{month + 1}-1.org").write_text(f"* month {month}\n" * 100)
    (home / "agent-chat.org").write_text("* now\n")
    repo = HomeRepo(home)
    sha, _ = repo.commit(tracked(home), "first")
    _git(home, "read-tree", "-u", "--reset", sha)  # as a rewind's check-out leaves the index: stat known
    time.sleep(0.05)
    with (home / "agent-chat.org").open("a") as fh:
        fh.write("more\n")
    read: list[str] = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self.name) or real(self))
    aside = HomeRepo(home).commit_aside(tracked(home), "aside", sha)
    assert "agent-chat.org" in read and not [name for name in read if name.startswith("2026-")], read
    for rel in ("agent-chat.org", "chat/2026-03-1.org"):
        assert _git(home, "rev-parse", f"{aside}:{rel}") == _blob_of(home, rel)


# A process that commits tick after tick, a hangup only noted as a stopping server notes it.
HANGUP_CHILD = """
import json, signal, sys, time
from pathlib import Path
from amacs_server.persistence.git_repo import CommitError, HomeRepo
signal.signal(signal.SIGHUP, lambda *_: None)
home = Path(sys.argv[1])
repo, made, failed = HomeRepo(home), 0, []
print("ready", flush=True)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end or made < 5:
    tick = made + len(failed) + 1
    (home / "agent-chat.org").write_text(f"* Tick {tick}\\n")
    try:
        repo.commit([home / "agent-chat.org"], f"[TICK {tick}][no-thread][ok] tick {tick}")
        made += 1
    except CommitError as err:
        failed.append(str(err))
print(json.dumps({"made": made, "failed": failed}), flush=True)
"""


def hang_up_on(script: str, *args: str) -> tuple[int, Any]:
    """Run python SCRIPT with ARGS in a process group of its own and, from the "ready" line it
    prints until it exits, send that group a hangup every 2 ms; the hangups sent, and the JSON
    it printed last."""
    child = subprocess.Popen([sys.executable, "-c", script, *args], start_new_session=True,
                             stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        sent = 0
        while child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGHUP)
                sent += 1
            time.sleep(0.002)
        return sent, json.loads(child.stdout.read())
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def test_a_hangup_to_the_servers_group_while_git_starts_does_not_kill_that_git(tmp_path):
    """Was: Emacs quit right after a reply and hung up on the server's process group while the
    server started a git of the tick's commit: between its fork and its setsid the git was still
    in that group, subprocess unblocked the hangup there before git ran, and it died ("git ls-files
    failed (-1)": 276 of 388 commits failed under this test's hangups); the tick had no commit.
    Here hangups come every 2 ms while commits are made: none fails."""
    home = tmp_path / "home"
    home.mkdir()
    sent, result = hang_up_on(HANGUP_CHILD, str(home), "2")
    assert sent > 100, sent
    assert result["failed"] == [], f"{len(result['failed'])} of {result['made'] + len(result['failed'])} failed"
    assert result["made"] >= 5


# Every place the server's code starts a process, but the one start of every git it runs
# (git_repo.start_git, with the stop signals blocked): each with what a quit does to it.
STARTS_OTHER_THAN_GIT = {
    # Read-only: a pickaxe search can run a minute; once the server is gone no one wants its
    # answer, so it stays in the server's group and the quit's hangup ends it.
    "persistence/history_search.py:_git": "a search of the history, ended by a quit",
    "faults.py:kill_holding_lock": "a fault point's git, which it kills itself",
    "local_model.py:_spawn": "llama.cpp's server, this server's model: ends with it",
    "tools_mcp/hub.py:_transport": "an MCP server (through guard.py): ends with the server",
    "tools_mcp/guard.py:main": "guard.py, a program of its own: the MCP server it guards",
    "warm.py:_fork": "the warm server's fork: a server itself",
    "warm_launch.py:start_warm": "the launcher starting a warm server",
    "warm_launch.py:main": "the launcher becoming the server",
    "research/cluster.py:__init__": "the research harness, not the server",
    "research/forkserver.py:serve": "the research harness, not the server",
    "research/runs.py:package_dirs": "the research harness, not the server",
    "research/runs.py:prepare": "the research harness, not the server",
}
PROCESS_STARTS = {("subprocess", name) for name in ("Popen", "run", "call", "check_call", "check_output",
                                                     "getoutput", "getstatusoutput")} | {
    ("os", name) for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "popen", "execv",
                              "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv",
                              "spawnve", "spawnvp", "spawnvpe")} | {
    ("asyncio", "create_subprocess_exec"), ("asyncio", "create_subprocess_shell")}


def _process_starts(root: Path) -> dict[str, set[str]]:
    """Each function of ROOT's modules ("path:name", the innermost) that starts a process, and how."""
    found: dict[str, set[str]] = {}

    def visit(node: ast.AST, rel: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = f"{rel}:{child.name}" if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else where
            if isinstance(child, ast.Call):
                called = child.func
                if isinstance(called, ast.Attribute) and isinstance(called.value, ast.Name) \
                        and (called.value.id, called.attr) in PROCESS_STARTS:
                    found.setdefault(inner, set()).add(f"{called.value.id}.{called.attr}")
                elif isinstance(called, ast.Name) and called.id == "stdio_client":
                    found.setdefault(inner, set()).add(called.id)
            visit(child, rel, inner)

    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root))
        visit(ast.parse(path.read_text(encoding="utf-8")), rel, f"{rel}:")
    return found


def test_every_git_the_server_runs_starts_out_of_reach_of_the_stop_signals():
    """Was: the rewind's and the fork's gits (persistence/history.py) were started with a plain
    subprocess.run, in the server's group: a quit mid-rewind killed the git at work.  Every
    process the server's code starts is git_repo.start_git's (every git that writes the home or
    serves a commit) or one listed here with what a quit does to it."""
    root = Path(__file__).resolve().parents[1] / "amacs_server"
    found = _process_starts(root)
    assert found.pop("persistence/git_repo.py:start_git") == {"subprocess.Popen"}
    assert sorted(found) == sorted(STARTS_OTHER_THAN_GIT)
