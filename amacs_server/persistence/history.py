"""Every tick restorable: the tick state, rewind in place and fork as a copy.

What the request after tick N is built from is on disk after tick N:

- in that tick's git commit: ``consciousness.el``, the chat log and the
  monologue (every month), ``scratchpad.org``, the home's ``skills/`` and
  :data:`STATE_FILE`, the *tick state*, written at the end of each tick;
- in ``memory.db``: every item version (copy-on-write, never changed), whose
  row ids grow.  The tick state records the highest row id at the tick, so the
  long-term memory at tick N is the rows up to it: no copy of the database per
  tick.

The tick state holds what neither has exactly: the active table (what each
brain pinned or evicted), the order and pages of the primary's pinned items,
the primary's conversation (the prefix every later request repeats), and the
size of each file of the append-only logs.  A commit is made off the loop
thread, from a snapshot of the tracked files taken at the tick's end
(:class:`~.git_repo.Snapshot`): it holds the tick's bytes however late it is
made.  (Commits made before snapshots could hold a later tick's lines: the
recorded sizes cut the logs back when such a tick is checked out.)

A rewind never deletes the future it abandons: the home as it was is committed
and kept on a ref under :data:`ABANDONED` (printed, and written in
``agent-chat.org``); the item versions written after tick N move to
``memory.db``'s ``abandoned_items`` table under that ref's name; the
transcripts' lines of the later ticks move to that ref too (a commit on the
abandoned one, under ``transcripts/``), and a ``rewind`` event is written.

The mind's budget item is the tick's (its requests are the ones it made then), but the money
paid since stays counted (:mod:`.rewound_spend`) and the limit the person set stays the one
enforced (:mod:`.person_limit`); a fork starts with the home's limit too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import faults
from ..errors import AmacsError
from ..files import atomic_write
from . import person_limit, rewound_spend
from .events import Fork, Record, Rewind
from .git_repo import HomeRepo, ignored
from .home_lock import LOCK_FILE, HomeInUse, HomeLock
from .recovery import FORK_UNFINISHED
from .transcript import Transcript

STATE_FILE = "tick-state.json"
STATE_VERSION = 1
ABANDONED = "refs/amacs/abandoned"
# The append-only logs whose tick-N contents are their first bytes (sizes in the tick state).
LOGS = ("agent-chat.org", "monologue.org")
LOG_FOLDERS = ("chat", "monologue")
# What a fork copies beside the mind: the home's settings, not in git.
SETTINGS = ("mcp.json", "model-capabilities.json")
ABANDONED_SCHEMA = """CREATE TABLE IF NOT EXISTS abandoned_items (
  ref TEXT NOT NULL, id INTEGER NOT NULL, base TEXT NOT NULL, version INTEGER NOT NULL, tier TEXT NOT NULL,
  kind TEXT NOT NULL, created_at_ms INTEGER NOT NULL, content TEXT NOT NULL, text TEXT NOT NULL)"""


class HistoryError(AmacsError, RuntimeError):
    """A rewind or fork that cannot be made; the message is one line for the person."""


def log_files(home: Path) -> list[Path]:
    """The files of the append-only logs: the current months and the earlier ones."""
    found = [home / name for name in LOGS if (home / name).exists()]
    for folder in LOG_FOLDERS:
        if (home / folder).is_dir():
            found += sorted(p for p in (home / folder).iterdir() if p.suffix == ".org")
    return found


def skill_files(home: Path) -> list[Path]:
    """The files of the home's skills (the templates the person edits), committed each tick."""
    folder = home / "skills"
    if not folder.is_dir():
        return []
    found = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith((".#", "#"))
                   and not p.name.endswith("~"))
    left_out = ignored(home, found)  # what the person's .gitignore leaves out stays out
    return [p for p in found if p not in left_out] if left_out else found


def tracked(home: Path) -> list[Path]:
    """Every file a tick's commit carries (those of them that exist: :data:`~.git_repo.TRACKED_NAMES`
    and the files under :data:`~.git_repo.TRACKED_FOLDERS`)."""
    return [home / "consciousness.el", *log_files(home), home / "scratchpad.org", home / STATE_FILE,
            *skill_files(home)]


def ltm_watermark(db: sqlite3.Connection) -> int:
    """The highest item row id: the long-term memory at a tick is the rows up to it."""
    return int(db.execute("SELECT coalesce(max(id), 0) FROM items").fetchone()[0])


def active_rows(db: sqlite3.Connection) -> list[list[Any]]:
    """Every brain's pinned and evicted items (LTM's active table)."""
    return [list(r) for r in db.execute("SELECT brain, base, status, version FROM active ORDER BY brain, base")]


def write_state(home: Path, state: dict[str, Any]) -> None:
    """Write the tick state (not synced: the commit worker syncs the tick's files)."""
    atomic_write(home / STATE_FILE, json.dumps(state, ensure_ascii=False, separators=(",", ":")))


def read_state(home: Path) -> dict[str, Any] | None:
    """The home's tick state, or None when it has none (or it cannot be read)."""
    try:
        data = json.loads((home / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == STATE_VERSION else None


def file_sizes(home: Path) -> dict[str, int]:
    """Each append-only log file's size, by its path in the home."""
    return {str(p.relative_to(home)): p.stat().st_size for p in log_files(home)}


# -- abandoned futures --------------------------------------------------------------------

_ABANDONED_NAME = re.compile(r"-tick-([^-/]+)-to-(\d+)$")
_FIRST_INPUTS: dict[tuple[Path, str], str | None] = {}  # (home, commit) -> its first abandoned input


def abandoned_futures(home: Path) -> list[dict[str, Any]]:
    """The futures the rewinds of HOME left, newest first: each one's ref, commit, the tick it
    was at (``from_tick``) and the one rewound to (``to_tick``), and the person's first input
    of it (None if it had none)."""
    if not (home / ".git").is_dir():
        return []
    out = _git(home, "for-each-ref", "--sort=-refname", "--format=%(refname) %(objectname)", ABANDONED)
    found = []
    for line in out.decode(errors="replace").splitlines():
        ref, _, sha = line.rpartition(" ")
        name = _ABANDONED_NAME.search(ref)
        if name is None:
            continue
        to_tick = int(name[2])
        if (home, sha) not in _FIRST_INPUTS:
            _FIRST_INPUTS[home, sha] = _input_of(home, sha, to_tick + 1)
        found.append({"ref": ref, "commit": sha, "from_tick": int(name[1]) if name[1].isdigit() else None,
                      "to_tick": to_tick, "first_input": _FIRST_INPUTS[home, sha]})
    return found


def _input_of(home: Path, commit: str, tick: int) -> str | None:
    """The person's input of tick TICK in COMMIT's chat log (its current month or, rotated, the
    months before), or None."""
    head = re.compile(rf"^\* Tick {tick}\n(?:[^*\n][^\n]*\n|\n)*?\*\* Human\n(.*?)\n(?:\n|\*)", re.M | re.S)
    names = ["agent-chat.org"]
    try:
        listed = _git(home, "ls-tree", "--name-only", f"{commit}:chat").decode(errors="replace").split()
        names += [f"chat/{n}" for n in sorted(listed, reverse=True)]
    except HistoryError:
        pass
    for name in names:
        try:
            text = _git(home, "show", f"{commit}:{name}").decode(errors="replace")
        except HistoryError:
            continue
        match = head.search(text)
        if match:
            said = " ".join(match[1].split())
            return said if len(said) <= 200 else said[:200] + "…"
    return None


# -- rewind and fork ---------------------------------------------------------------------


@dataclass
class Done:
    """What a rewind or fork made: the home, the tick it is at, the commit, the abandoned ref."""

    home: Path
    tick: int
    commit: str
    abandoned: str | None
    seconds: float

    def line(self) -> str:
        """One line for the person."""
        if self.abandoned is not None:
            return (f"rewound {self.home} to tick {self.tick}; the abandoned future is kept on git ref "
                    f"{self.abandoned}")
        return f"forked {self.home} at tick {self.tick}"


def _git(home: Path, *args: str, stdin: bytes | None = None) -> bytes:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    done = subprocess.run(["git", *args], cwd=home, input=stdin, capture_output=True, env=env, check=False)
    if done.returncode != 0:
        raise HistoryError(f"git {args[0]} failed in {home}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def tick_commit(home: Path, tick: int) -> str:
    """The newest commit of HEAD's line whose subject starts ``[TICK N]``."""
    if not (home / ".git").is_dir():
        raise HistoryError(f"{home} has no git history: is it an AMACS home?")
    prefix = f"[TICK {tick}]"
    out = _git(home, "log", "--format=%H %s", "--fixed-strings", f"--grep={prefix}").decode(errors="replace")
    for line in out.splitlines():
        if line[41:].startswith(prefix):
            return line[:40]
    raise HistoryError(f"{home} has no tick {tick} in its history")


def last_tick(home: Path) -> int:
    """The tick of the newest ``[TICK N]`` commit of HEAD's line: the mind as it is now."""
    if not (home / ".git").is_dir():
        raise HistoryError(f"{home} has no git history: is it an AMACS home?")
    out = _git(home, "log", "--max-count=1", "--format=%s", "--extended-regexp", r"--grep=^\[TICK [0-9]+\]")
    subject = out.decode(errors="replace")
    if not subject.startswith("[TICK "):
        raise HistoryError(f"{home} has no tick in its history yet")
    return int(subject[6:subject.index("]")])


def state_at(home: Path, commit: str, tick: int) -> dict[str, Any]:
    """The tick state COMMIT holds (tick TICK's)."""
    try:
        data = json.loads(_git(home, "show", f"{commit}:{STATE_FILE}"))
    except HistoryError as err:
        raise HistoryError(f"tick {tick} of {home} was committed before ticks were restorable "
                           f"(it has no {STATE_FILE}); a later tick can be") from err
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION or data.get("tick") != tick:
        raise HistoryError(f"tick {tick}'s {STATE_FILE} in {home} is not one this server reads")
    return data


def lock(home: Path) -> HomeLock:
    """The home's lock, or HistoryError naming the live server that holds it."""
    if not (home / ".git").is_dir():  # no lock file left in a folder that is not a home
        raise HistoryError(f"{home} has no git history: is it an AMACS home?")
    lock = HomeLock(home, headless=True)
    try:
        lock.acquire(stopping_wait=0)
    except HomeInUse as err:
        try:
            pid = json.loads((home / LOCK_FILE).read_text()).get("pid", "unknown")
        except (OSError, ValueError, AttributeError):
            pid = "unknown"
        # Said to a person at a shell, not in Emacs: what to stop, then what to run again.
        raise HistoryError(f"refused: an AMACS server (pid {pid}) serves {home}; quit the Emacs it serves "
                           f"(or kill {pid}), then run this command again") from err
    return lock


def _check_out(home: Path, commit: str, state: dict[str, Any]) -> None:
    """The home's tracked files as the tick left them: COMMIT's tree, the logs cut to the sizes
    the tick state recorded."""
    _git(home, "read-tree", "-u", "--reset", commit)
    sizes: dict[str, int] = state["files"]
    for path in log_files(home):
        rel = str(path.relative_to(home))
        if rel not in sizes:
            path.unlink()  # a month begun after the tick
        elif path.stat().st_size > sizes[rel]:
            with path.open("r+b") as fh:
                fh.truncate(sizes[rel])



def _memory_at(db_path: Path, state: dict[str, Any], abandoned: str | None) -> int:
    """memory.db as at the tick: the item versions written after it leave ``items`` (kept in
    ``abandoned_items`` under ABANDONED's name; a fork drops them), and the active table is
    the tick's.  Returns how many versions left."""
    from ..memory.ltm import LongTermMemory  # noqa: PLC0415 - sqlite schema, only when a rewind runs

    ltm = LongTermMemory(db_path)
    try:
        db, top = ltm.db, int(state["ltm_max_id"])
        with ltm.transaction():
            later = db.execute("SELECT id, text FROM items WHERE id > ?", (top,)).fetchall()
            if abandoned is not None and later:
                db.execute(ABANDONED_SCHEMA)
                db.execute("INSERT INTO abandoned_items SELECT ?, id, base, version, tier, kind, created_at_ms, "
                           "content, text FROM items WHERE id > ?", (abandoned, top))
            for rowid, text in later:
                db.execute("INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', ?, ?)", (rowid, text))
            db.execute("DELETE FROM items WHERE id > ?", (top,))
            db.execute("DELETE FROM tags WHERE base NOT IN (SELECT base FROM items)")  # made with the first version
            if abandoned is None:  # a fork: the abandoned futures of HOME are not its history
                db.execute("DROP TABLE IF EXISTS abandoned_items")
            db.execute("DELETE FROM active")
            db.executemany("INSERT INTO active (brain, base, status, version) VALUES (?,?,?,?)", state["active"])
        return len(later)
    finally:
        ltm.close()


def _forget_deleted(db_path: Path) -> None:
    """memory.db without a trace of its deleted rows: the full-text index merged into new
    segments and the file rewritten (a deleted row's text stays in free pages until then)."""
    db = sqlite3.connect(db_path)
    try:
        db.execute("INSERT INTO items_fts (items_fts) VALUES ('rebuild')")
        db.commit()
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


_TICK_FIELD = re.compile(rb'"tick": (\d+)')


def _transcripts_after(home: Path, tick: int) -> dict[str, tuple[int, bytes]]:
    """Each transcript of HOME that has lines written after TICK: name -> (where they start,
    those lines).  Transcripts are append-only, so a file's future starts at its first line of
    a later tick (a line's first ``"tick": N`` is its own: a string value cannot hold a bare
    quote)."""
    out: dict[str, tuple[int, bytes]] = {}
    folder = home / "transcripts"
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        data, at = path.read_bytes(), 0
        for line in data.splitlines(keepends=True):
            found = _TICK_FIELD.search(line)
            if found and int(found[1]) > tick:
                out[path.name] = (at, data[at:])
                break
            at += len(line)
    return out


def _commit_beside(home: Path, parent: str, folder: str, files: dict[str, bytes], message: str) -> str:
    """A commit on PARENT of its tree with FOLDER holding FILES (name -> bytes); its sha.  No
    index or working file is touched."""
    entries = []
    for name, data in files.items():
        blob = _git(home, "hash-object", "-w", "--stdin", stdin=data).decode().strip()
        entries.append(f"100644 blob {blob}\t{name}\n")
    sub = _git(home, "mktree", stdin="".join(entries).encode()).decode().strip()
    top = [line for line in _git(home, "ls-tree", parent).decode().splitlines() if not line.endswith(f"\t{folder}")]
    root = _git(home, "mktree", stdin=("\n".join([*top, f"040000 tree {sub}\t{folder}"]) + "\n").encode())
    return _git(home, "commit-tree", root.decode().strip(), "-p", parent, "-m", message).decode().strip()


def _record(home: Path, tick: int, heading: str, text: str, event: Record) -> None:
    """Say what was done in agent-chat.org (a part the chat's reader skips) and in a transcript."""
    from .chat_log import ChatLog  # noqa: PLC0415

    ChatLog(home / "agent-chat.org").log.append(f"** {heading}\n{text}\n\n")
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + f"-{event.kind}"
    transcript = Transcript(home / "transcripts", run_id)
    try:
        transcript.write(event, tick=tick)
    finally:
        transcript.close()


def rewind(home: Path, tick: int, *, locked: bool = False, limit: float | None = None) -> Done:
    """Return HOME to just after tick TICK, keeping the future it leaves on a git ref, and the
    budget limit LIMIT (default: the one HOME has now).

    Refused (HistoryError) while a live server serves HOME, unless LOCKED (the
    server itself rewinds, holding the lock)."""
    t0 = time.perf_counter()
    home = home.expanduser().resolve()
    held = None if locked else lock(home)
    try:
        commit = tick_commit(home, tick)
        state = state_at(home, commit, tick)
        repo = HomeRepo(home)
        now = read_state(home)
        last = now["tick"] if now else "?"
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%f")[:-3]  # to the millisecond: the rewinds of one second sort in order
        kept, _note = repo.commit(tracked(home), f"[TICK {last}][abandoned] the home as it was before a "
                                                 f"rewind to tick {tick}")
        cut = _transcripts_after(home, tick)
        if cut:
            kept = _commit_beside(home, kept, "transcripts", {name: data for name, (_at, data) in cut.items()},
                                  f"[TICK {last}][abandoned] the transcripts' lines after tick {tick}")
        ref = f"{ABANDONED}/{stamp}-tick-{last}-to-{tick}"
        _git(home, "update-ref", ref, kept)
        _git(home, "update-ref", "-m", f"rewind to tick {tick}", "HEAD", commit)
        spent = rewound_spend.total(home)
        limit = person_limit.current(home) if limit is None else limit
        _check_out(home, commit, state)
        for name, (at, _data) in cut.items():  # in place: a live server's transcript appends on
            with (home / "transcripts" / name).open("r+b") as fh:
                fh.truncate(at)
        # The mind's budget is tick TICK's; the money paid stays counted, the person's limit stays.
        rewound_spend.keep(home, spent, rewound_spend.mind_spent(home))
        if limit is not None:
            person_limit.write(home, limit)
        left = _memory_at(home / "memory.db", state, ref) if (home / "memory.db").exists() else 0
        _record(home, tick, "Rewound",
                f"Rewound to this tick from tick {last}. The abandoned future is kept on git ref {ref} "
                f"({left} memory item versions of it in memory.db's abandoned_items).",
                Rewind(to_tick=tick, from_tick=last, ref=ref, abandoned_versions=left))
        sha, _ = HomeRepo(home).commit(tracked(home), f"[TICK {tick}][rewind] back to tick {tick} from tick "
                                                      f"{last}; the abandoned future is {ref}")
        return Done(home, tick, sha, ref, time.perf_counter() - t0)
    finally:
        if held is not None:
            held.release()


def fork(home: Path, tick: int, dest: Path, *, locked: bool = False, limit: float | None = None) -> Done:
    """A new AMACS home DEST holding HOME's mind just after tick TICK (its history up to there),
    with the budget limit LIMIT (default: the one HOME has now).

    Refused while a live server serves HOME, unless LOCKED (that server forks it)."""
    t0 = time.perf_counter()
    home, dest = home.expanduser().resolve(), dest.expanduser().resolve()
    if dest == home or home in dest.parents:  # HOME's commits would take in the fork's files
        raise HistoryError(f"refused: {dest} is inside {home}; name a folder outside the home for the fork")
    if (dest / FORK_UNFINISHED).exists():
        raise HistoryError(f"refused: {dest} is a fork whose making was cut short; remove it (rm -r {dest}) and "
                           "fork again")
    if dest.exists() and any(dest.iterdir()):
        raise HistoryError(f"refused: {dest} exists and is not empty; name a new folder for the fork")
    held = None if locked else lock(home)
    try:
        commit = tick_commit(home, tick)
        state = state_at(home, commit, tick)
        dest.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Until the fork is whole: a retry names what it is, and no server starts on it.
        (dest / FORK_UNFINISHED).write_text(f"a fork of {home} at tick {tick}, being made\n")
        # A repository of its own holding the history up to the tick only: no later object, ref
        # or reflog entry of HOME (a clone would share them all).
        _git(dest, "init", "--quiet")
        _git(dest, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", str(home), commit)
        _git(dest, "update-ref", "-m", f"fork of {home} at tick {tick}", "HEAD", commit)
        _check_out(dest, commit, state)
        faults.point("fork.checked-out")
        limit = person_limit.current(home) if limit is None else limit
        if limit is not None:
            person_limit.write(dest, limit)
        for name in SETTINGS:
            if (home / name).exists():
                shutil.copy2(home / name, dest / name)
        if (home / "memory.db").exists():
            src = sqlite3.connect(home / "memory.db")
            target = sqlite3.connect(dest / "memory.db")
            try:
                src.backup(target)  # a consistent copy, also while the home's server writes
            finally:
                target.close()
                src.close()
            _memory_at(dest / "memory.db", state, None)
            _forget_deleted(dest / "memory.db")
        _record(dest, tick, "Forked", f"Forked from {home} at this tick.", Fork(from_home=str(home), at_tick=tick, from_commit=commit))
        sha, _ = HomeRepo(dest).commit(tracked(dest), f"[TICK {tick}][fork] forked from {home} at tick {tick}")
        (dest / FORK_UNFINISHED).unlink()
        return Done(dest, tick, sha, None, time.perf_counter() - t0)
    finally:
        if held is not None:
            held.release()


def _tick(text: str) -> int | str:
    """--tick's value: a tick number, or ``now``."""
    import argparse  # noqa: PLC0415

    if text == "now":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a tick number or now") from None


def main(argv: list[str]) -> int:
    """``amacs-server rewind HOME --tick N`` and ``amacs-server fork HOME --tick N|now DEST``."""
    import argparse  # noqa: PLC0415

    command, rest = argv[0], argv[1:]
    parser = argparse.ArgumentParser(prog=f"amacs-server {command}")
    parser.add_argument("home", help="the AMACS home")
    if command == "fork":
        parser.add_argument("--tick", type=_tick, required=True,
                            help="the tick whose end to fork at, or now: the last one")
        parser.add_argument("dest", help="the new home")
    else:
        parser.add_argument("--tick", type=int, required=True, help="the tick to return to (its end)")
    args = parser.parse_args(rest)
    os.umask(0o077)
    try:
        if command == "fork":
            home = Path(args.home).expanduser().resolve()
            done = fork(home, last_tick(home) if args.tick == "now" else args.tick, Path(args.dest))
        else:
            done = rewind(Path(args.home), args.tick)
    except (HistoryError, OSError, sqlite3.Error) as err:
        print(f"amacs-server {command}: {' '.join(str(err).split())}", file=sys.stderr)
        return 1
    print(done.line())
    return 0

