"""The fault suite's rewind and fork (issue 40): ``amacs-server rewind`` and ``fork`` killed
with SIGKILL at each of their points, then the next start.

One home is made once (a session whose later ticks write a scratchpad note, a thread, a memory
item and a skill; a later session's start; lines in server.log, in a tool server's log, which
is rotated after the cut, and in the local model's; a tool's result kept after it); each case
rewinds or forks a copy of it in a real ``python -m amacs_server`` process that
``AMACS_FAULT_POINT`` kills.
Then, as the person would go on:

- a rewind: a server starts on the home (a :class:`Runtime`, the server's start-up path). Its
  home is exactly the home before the rewind or exactly the home a rewind never killed makes
  (files, transcripts, every file of logs/, the shell's input history and unsent input,
  memory.db's rows, the history and the abandoned future's ref), and it said so in one line when
  it finished a rewind; its next input is answered at the tick that follows;
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
from concurrent.futures import ThreadPoolExecutor
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
# A start writes versions of the clock items when the time moved on (a second, a minute): left out.
CLOCK = (":system_clock", ":current_time")
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
    tool = home / "logs" / "mcp-tool.log"  # a tool server's stderr: rotated after the cut
    tool.write_text("--- before tick 1 starting tool\n")
    (home / "shell-history").write_bytes(b"an input before tick 1\0\n")  # Emacs's, as it sends an input
    run(home, fake, FUTURE_SESSION[:2])
    with (home / "shell-history").open("ab") as fh:
        fh.write(b"an input after the cut\0\n")
    (home / "shell-draft").write_text("typed after the cut, not sent")
    with tool.open("a") as log:
        log.write("a tool's line after tick 2\n")
    os.replace(tool, tool.with_name("mcp-tool.log.1"))
    tool.write_text("--- later starting tool\n")
    (home / "logs" / "local-model.log").write_text("a local model started after tick 2\n")
    (home / "transcripts" / "results").mkdir()
    (home / "transcripts" / "results" / "later-t-big.txt").write_text("a tool's long result after tick 2")
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
    for rel in ("rewound-spend", "budget-limit", *history.SETTINGS, *history.PERSON_FILES):
        if (home / rel).exists():
            files[rel] = masked((home / rel).read_bytes())
    for folder in ("logs", "transcripts/results"):
        for p in sorted((home / folder).glob("*")) if (home / folder).is_dir() else []:
            files[f"{folder}/{p.name}"] = masked(p.read_bytes())
    for p in sorted((home / "transcripts").glob("*.jsonl")):
        if p.name in SESSIONS:
            files[f"transcripts/{p.name}"] = masked(p.read_bytes())
    db = sqlite3.connect(home / "memory.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        tables = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        memory = {
            "items": [row for row in db.execute("SELECT id, base, version, content FROM items ORDER BY id")
                      if not row[1].endswith(CLOCK)],
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


def turn(home: Path, fake: FakeAnthropic, names: dict[str, str]) -> tuple[list[str], int, dict[str, Any]]:
    """A server started on HOME: what it said at start, the tick its next input ran at, and the
    home as the start left it (before that input; NAMES masked)."""
    rt = runtime(home, fake.url)
    try:
        seen = state(home, names=names)
        asyncio.run_coroutine_threadsafe(run_turn(rt, "go on"), rt.loop).result(60)
        assert rt.mind.commits.flush(60)
        return rt.startup_notes, rt.mind.consciousness.current_tick, seen
    finally:
        rt.stop()


def references(source: Path, fake: FakeAnthropic, root: Path) -> dict[str, Any]:
    """The home before a rewind and after one no kill cut short, and a fork no kill cut short,
    each as a server's start finds it; and the source as a fork must leave it."""
    before, after, home = copy(source, root / "before"), copy(source, root / "after"), copy(source, root / "src")
    done = cli("rewind", str(after), "--tick", str(CUT))
    assert done.returncode == 0, done.stderr
    # every log's lines after the cut are moved: the rotated tool log's tail, the files begun later
    # (gone: no program writes them); the tool log has its name back
    assert {p.name: p.read_text() for p in (after / "logs").iterdir()} == {
        "server.log": "2020-01-01 00:00:00,000 amacs INFO long before\n",
        "mcp-tool.log": "--- before tick 1 starting tool\n"}
    assert list((after / "transcripts" / "results").iterdir()) == []  # a result kept after the cut: on the ref
    # the shell's input history and unsent input as at the cut: the later input and draft on the ref
    assert (after / "shell-history").read_bytes() == b"an input before tick 1\0\n"
    assert not (after / "shell-draft").exists()
    done = cli("fork", str(home), "--tick", str(CUT), str(root / "fork"))
    assert done.returncode == 0, done.stderr
    return {"before": turn(before, fake, {str(before): "HOME"})[1:],
            "after": turn(after, fake, {str(after): "HOME"})[1:],
            "source": state(home, names={str(home): "SOURCE"}),
            "fork": turn(root / "fork", fake, {str(home): "SOURCE", str(root / "fork"): "DEST"})[1:]}


def rewind_killed_at(point: str, source: Path, fake: FakeAnthropic, want: dict[str, Any], root: Path) -> None:
    home = copy(source, root / "home")
    killed = cli("rewind", str(home), "--tick", str(CUT), point=point)
    assert killed.returncode == -signal.SIGKILL, f"not killed at {point}: {killed.stdout}{killed.stderr}"
    assert f"AMACS_FAULT_POINT {point.partition('@')[0]}" in killed.stderr
    journaled = (home / history.REWIND_JOURNAL).exists()
    notes, tick, seen = turn(home, fake, {str(home): "HOME"})
    said = [n for n in notes if "rewind to tick" in n]
    if journaled:  # past the journal: finished by the start, and said in one line
        assert said == [f"a rewind to tick {CUT} was cut short (its process was killed) and is now finished: "
                        f"{home} is at tick {CUT}; the abandoned future is kept on git ref "
                        f"{REF.search(said[0])[0] if said else ''}"], notes
        want_tick, home_then = CUT + 1, want["after"][1]
    else:  # before it: nothing changed, nothing said
        assert said == [], notes
        want_tick, home_then = want["before"]
    assert tick == want_tick
    assert seen == home_then, _first_difference(seen, home_then)


def fork_killed_at(point: str, source: Path, fake: FakeAnthropic, want: dict[str, Any], root: Path) -> None:
    home, dest = copy(source, root / "src"), root / "fork"
    names = {str(home): "SOURCE", str(dest): "DEST"}
    killed = cli("fork", str(home), "--tick", str(CUT), str(dest), point=point)
    assert killed.returncode == -signal.SIGKILL, f"not killed at {point}: {killed.stdout}{killed.stderr}"
    assert f"AMACS_FAULT_POINT {point.partition('@')[0]}" in killed.stderr
    assert state(home, names={str(home): "SOURCE"}) == want["source"]  # a fork never changes its source
    left = list(root.glob(".fork.forking-*"))
    if dest.exists():  # killed once it was whole
        assert left == [] and point == "fork.renamed"
    else:
        assert len(left) <= 1
        again = cli("fork", str(home), "--tick", str(CUT), str(dest))
        assert again.returncode == 0, again.stderr
        removed = [line for line in again.stderr.splitlines() if "cut short" in line]
        assert len(removed) == len(left), again.stderr
        assert not any(p.exists() for p in left)
    _notes, tick, seen = turn(dest, fake, names)
    want_tick, fork_then = want["fork"]
    assert tick == want_tick == CUT + 1
    assert seen == fork_then, _first_difference(seen, fork_then)


CASES = [("rewind", p) for p in REWIND_CASES] + [("fork", p) for p in FORK_CASES]
WORKERS = 3  # each case mostly waits (a process's start, git, fsync): three at a time


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, source: Path, fake: FakeAnthropic,
             tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], BaseException | None]:
    """Run the selected cases (all, or those -k picked), WORKERS at a time: each one's failure or None."""
    wanted = [tuple(item.callspec.params["case"]) for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec") and "case" in item.callspec.params]
    want = references(source, fake, tmp_path_factory.mktemp("references"))

    def one(case: tuple[str, str]) -> BaseException | None:
        what, point = case
        try:
            (rewind_killed_at if what == "rewind" else fork_killed_at)(
                point, source, fake, want, tmp_path_factory.mktemp(re.sub(r"[^a-z0-9]+", "-", f"{what}-{point}")))
        except BaseException as err:  # noqa: BLE001 - raised in the case's test
            return err
        return None

    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(zip(wanted, pool.map(one, wanted), strict=True))


@pytest.mark.parametrize("case", CASES, ids=[f"{w}-{p}" for w, p in CASES])
def test_killed_at(case: tuple[str, str], outcomes: dict[tuple[str, str], BaseException | None]) -> None:
    failure = outcomes[tuple(case)]
    if failure is not None:
        raise failure


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
