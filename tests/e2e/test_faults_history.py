"""The fault suite's rewind and fork (issue 40): ``amacs-server rewind`` and ``fork`` killed
with SIGKILL at each of their points, then the next start.

One home is made once (a session whose later ticks write a scratchpad note, a thread, a memory
item and a skill; a later session's start; server.log lines); each case rewinds or forks a
copy of it in a real ``python -m amacs_server`` process that ``AMACS_FAULT_POINT`` kills.
Then, as the person would go on:

- a rewind: a server starts on the home (a :class:`Runtime`, the server's start-up path). Its
  home is exactly the home before the rewind or exactly the home a rewind never killed makes
  (files, transcripts, server.log, memory.db's rows, the history and the abandoned future's
  ref), and it said so in one line when it finished a rewind; its next input is answered at
  the tick that follows;
- a fork: the source home is as it was; DEST is absent or whole; forking again into DEST
  works (saying what it removed) and the fork is the one a fork never killed makes.

Every case also checks ``git fsck``, memory.db's integrity and that no lock or journal is left.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amacs_server.faults import FORK_POINTS, REWIND_POINTS
from amacs_server.loop.primary import run_turn
from amacs_server.persistence import history
from tests.fake_anthropic import FakeAnthropic
from tests.test_rewind import FUTURE_SESSION, answer, do, run, runtime

pytestmark = pytest.mark.e2e

CUT = 2  # the tick rewound and forked to: before the note, thread, memory item and skill
# The commit a rewind or fork makes at its end, and memory.db's writes, are killed at theirs too.
COMMIT_POINTS = ("commit.index-lock", "commit.indexed", "commit.tree", "commit.object", "commit.ref-lock",
                 "commit.done")
REWIND_CASES = (*REWIND_POINTS, *COMMIT_POINTS, "ltm.commit")
FORK_CASES = (*FORK_POINTS, *COMMIT_POINTS, "ltm.commit")
REF = re.compile(r"refs/amacs/abandoned/[0-9T.]+-tick-\d+-to-\d+")
CLOCK = (":system_clock", ":current_time")  # a start's own versions of the clock items: their text is its time
SESSIONS: set[str] = set()  # the source home's transcripts (a later start's own are not compared)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic(default=answer).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory, fake: FakeAnthropic) -> Path:
    """The home every case copies: five ticks, a later session's start, server.log lines."""
    home = tmp_path_factory.mktemp("history-faults") / "home"
    (home / "logs").mkdir(parents=True)
    (home / "logs" / "server.log").write_text("2020-01-01 00:00:00,000 amacs INFO long before\n")
    run(home, fake, FUTURE_SESSION[:2])
    skill = home / "skills" / "later" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: later\ndescription: a skill written later\n---\nLater.\n")
    run(home, fake, FUTURE_SESSION[2:])
    rt = runtime(home, fake.url)  # a session that made a viewpoint and stopped before its first tick
    try:
        do(rt, ("viewpoint", "critic"))
    finally:
        rt.stop()
    with (home / "logs" / "server.log").open("a") as log:
        log.write("2999-01-01 00:00:00,000 amacs INFO long after\nTraceback: a line of no stamp\n")
    SESSIONS.update(p.name for p in (home / "transcripts").glob("*.jsonl"))
    return home


def cli(*args: str, point: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMACS_")}
    if point:
        env["AMACS_FAULT_POINT"] = point
    return subprocess.run([sys.executable, "-m", "amacs_server", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def state(home: Path, *, names: dict[str, str]) -> dict[str, Any]:
    """What a rewind or fork claims about HOME, with the stamps of refs and NAMES (paths) masked."""
    def masked(data: bytes) -> str:
        text = REF.sub("REF", data.decode(errors="replace"))
        for path, name in names.items():
            text = text.replace(path, name)
        return text

    files = {str(p.relative_to(home)): masked(p.read_bytes()) for p in history.tracked(home) if p.exists()}
    for rel in ("rewound-spend", "budget-limit", "logs/server.log", *history.SETTINGS):
        if (home / rel).exists():
            files[rel] = masked((home / rel).read_bytes())
    for p in sorted((home / "transcripts").glob("*.jsonl")):
        if p.name in SESSIONS:
            files[f"transcripts/{p.name}"] = masked(p.read_bytes())
    db = sqlite3.connect(home / "memory.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        tables = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        memory = {
            "items": [(i, base, v, "CLOCK" if base.endswith(CLOCK) else text) for i, base, v, text in db.execute(
                "SELECT id, base, version, text FROM items ORDER BY id")],
            "active": db.execute("SELECT * FROM active ORDER BY 1, 2").fetchall(),
            "tags": db.execute("SELECT * FROM tags ORDER BY 1, 2").fetchall(),
            "abandoned": [(masked(r.encode()), i, t) for r, i, t in db.execute(
                "SELECT ref, id, text FROM abandoned_items ORDER BY id")] if "abandoned_items" in tables else None}
    finally:
        db.close()
    git = lambda *a: subprocess.run(["git", *a], cwd=home, capture_output=True, text=True, check=True).stdout  # noqa: E731
    fsck = subprocess.run(["git", "fsck", "--full", "--no-progress"], cwd=home, capture_output=True, text=True)
    assert fsck.returncode == 0 and not re.search(r"^(error|missing|broken|bad)", fsck.stdout + fsck.stderr, re.M)
    refs = git("for-each-ref", "--format=%(refname) %(tree)").split("\n")
    assert not list((home / ".git").rglob("*.lock")) and not (home / history.REWIND_JOURNAL).exists()
    assert not (home / ".git" / "amacs-aside.index").exists()
    return {"files": files, "memory": memory, "log": masked(git("log", "--format=%s").encode()),
            # the branch's tree holds the abandoned ref's stamp (the chat says it): its files are compared above
            "refs": sorted(masked(r.encode()) if r.startswith("refs/amacs/") else r.split()[0] for r in refs if r),
            "status": git("status", "--porcelain")}


def copy(source: Path, to: Path) -> Path:
    shutil.copytree(source, to, symlinks=True)
    return to


def turn(home: Path, fake: FakeAnthropic, text: str) -> tuple[list[str], int, dict[str, Any]]:
    """A server started on HOME: what it said at start, the tick its next input ran at, and the
    home as the start left it (before that input)."""
    rt = runtime(home, fake.url)
    try:
        seen = state(home, names={str(home): "HOME"})
        asyncio.run_coroutine_threadsafe(run_turn(rt, text), rt.loop).result(60)
        assert rt.commits.flush(60)
        return rt.startup_notes, rt.consciousness.current_tick, seen
    finally:
        rt.stop()


@pytest.fixture(scope="module")
def rewound(source: Path, fake: FakeAnthropic, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The home before a rewind and after one no kill cut short, each as a server's start finds it."""
    root = tmp_path_factory.mktemp("rewound")
    before = copy(source, root / "before")
    after = copy(source, root / "after")
    done = cli("rewind", str(after), "--tick", str(CUT))
    assert done.returncode == 0, done.stderr
    return {"before": turn(before, fake, "go on")[1:], "after": turn(after, fake, "go on")[1:]}


@pytest.mark.parametrize("point", REWIND_CASES)
def test_a_rewind_killed_at(point: str, source: Path, fake: FakeAnthropic, rewound: dict[str, Any],
                            tmp_path: Path) -> None:
    home = copy(source, tmp_path / "home")
    killed = cli("rewind", str(home), "--tick", str(CUT), point=point)
    assert killed.returncode == -signal.SIGKILL, f"not killed at {point}: {killed.stdout}{killed.stderr}"
    assert f"AMACS_FAULT_POINT {point.partition('@')[0]}" in killed.stderr
    journaled = (home / history.REWIND_JOURNAL).exists()
    notes, tick, seen = turn(home, fake, "go on")
    said = [n for n in notes if "rewind to tick" in n]
    if journaled:  # past the journal: finished by the start, and said in one line
        assert said == [f"a rewind to tick {CUT} was cut short (its process was killed) and is now finished: "
                        f"{home} is at tick {CUT}; the abandoned future is kept on git ref "
                        f"{REF.search(said[0])[0] if said else ''}"], notes
        want, want_tick = rewound["after"][1], CUT + 1
    else:  # before it: nothing changed, nothing said
        assert said == [], notes
        want, want_tick = rewound["before"][1], rewound["before"][0]
    assert tick == want_tick
    assert seen == want, _first_difference(seen, want)


@pytest.fixture(scope="module")
def forked(source: Path, fake: FakeAnthropic, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The source home and a fork no kill cut short, as a server's start finds the fork."""
    root = tmp_path_factory.mktemp("forked")
    home = copy(source, root / "home")
    dest = root / "fork"
    done = cli("fork", str(home), "--tick", str(CUT), str(dest))
    assert done.returncode == 0, done.stderr
    return {"source": state(home, names={}), "fork": turn(dest, fake, "go on")[1:],
            "names": {str(home): "SOURCE", str(dest): "DEST"}, "home": home, "dest": dest}


@pytest.mark.parametrize("point", FORK_CASES)
def test_a_fork_killed_at(point: str, source: Path, fake: FakeAnthropic, forked: dict[str, Any],
                          tmp_path: Path) -> None:
    # The same paths as the fork never killed (the fork's commit names its source): moved aside meanwhile.
    home, dest = forked["home"], forked["dest"]
    aside = tmp_path / "aside"
    os.replace(dest, aside)
    try:
        before = state(home, names={})
        killed = cli("fork", str(home), "--tick", str(CUT), str(dest), point=point)
        assert killed.returncode == -signal.SIGKILL, f"not killed at {point}: {killed.stdout}{killed.stderr}"
        assert f"AMACS_FAULT_POINT {point.partition('@')[0]}" in killed.stderr
        assert state(home, names={}) == before  # a fork never changes its source
        left = list(dest.parent.glob(f".{dest.name}.forking-*"))
        if dest.exists():  # killed once it was whole
            assert left == [] and point == "fork.renamed"
        else:
            assert [p.name for p in left] == [f".{dest.name}.forking-{p.name.rpartition('-')[2]}" for p in left]
            again = cli("fork", str(home), "--tick", str(CUT), str(dest))
            assert again.returncode == 0, again.stderr
            removed = [line for line in again.stderr.splitlines() if "cut short" in line]
            assert len(removed) == len(left) == (1 if left else 0), again.stderr
            assert not any(p.exists() for p in left)
        _notes, tick, seen = turn(dest, fake, "go on")
        want_tick, want = forked["fork"]
        assert tick == want_tick == CUT + 1
        assert seen == want, _first_difference(seen, want)
    finally:
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(aside, dest)


def _first_difference(got: dict[str, Any], want: dict[str, Any]) -> str:
    """Where GOT and WANT (states) first differ, in words."""
    for part in ("files", "memory"):
        for key in sorted(set(got[part]) | set(want[part])):
            a, b = got[part].get(key), want[part].get(key)
            if a != b:
                if isinstance(a, list) and isinstance(b, list):
                    return f"{part} {key}: {[x for x in a if x not in b]}\n   not {[x for x in b if x not in a]}"
                return f"{part} {key}: {json.dumps(a, default=str)[:600]}\n   not {json.dumps(b, default=str)[:600]}"
    for key in ("log", "refs", "status"):
        if got[key] != want[key]:
            return f"{key}: {got[key]!r}\n   not {want[key]!r}"
    return "equal"


SHELL_POINTS = ("rewind.kept", "rewind.checked-out", "rewind.memory")


@pytest.mark.parametrize("point", SHELL_POINTS)
def test_the_server_killed_in_a_rewind_from_the_shell(point: str, fake: FakeAnthropic, tmp_path: Path) -> None:
    """M-x amacs-rewind, and the server (which rewinds its own home) killed at POINT: the next
    input starts a server that finishes the rewind and says so in the shell in one line (or,
    killed before the journal, finds the home as before and says nothing), then answers at the
    tick that follows."""
    from tests.e2e.harness import run_emacs
    from tests.e2e.test_rewind_session import rewind_elisp, steps_elisp

    home = tmp_path / "home"
    said = [("say", "plain one"), ("say", "plain two"), ("say", "note the plan")]
    program = f"""
      (setq amacs-max-steps 20 amacs-e2e-timeout 60)
      (amacs-e2e-open)
      {steps_elisp(said, home)}
      (condition-case err {rewind_elisp("plain two")}  ; to tick 1
        (error (princ (format "REWIND-FAILED %S\\n" err))))
      (amacs-e2e-wait-disconnect)
      (setenv "AMACS_FAULT_POINT" nil)
      {steps_elisp([("say", "after the crash")], home)}
      (amacs-e2e-finish)"""
    run = run_emacs(home, fake.url, program, timeout=150, AMACS_FAULT_POINT=point).check()
    assert f"AMACS_FAULT_POINT {point}" in (home / "logs" / "server.log").read_text(errors="replace")
    lines = [line for line in run.shell.splitlines() if "was cut short (its process was killed)" in line]
    after = re.search(r'^AFTER (\d+) "after the crash"$', run.stdout, re.M)
    assert after, run.stdout
    if point == "rewind.kept":  # before the journal: the home as it was
        assert lines == [] and int(after[1]) == 4, run.shell
        assert "note the plan" in (home / "agent-chat.org").read_text()
    else:
        assert len(lines) == 1 and "a rewind to tick 1 was cut short" in lines[0] and "now finished" in lines[0]
        assert int(after[1]) == 2, run.stdout
        chat = (home / "agent-chat.org").read_text()
        assert "plain two" not in chat.split("refs/amacs/abandoned/")[-1]
    fsck = subprocess.run(["git", "fsck", "--full", "--no-progress"], cwd=home, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
