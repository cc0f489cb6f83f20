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
transcripts' lines of the later ticks (and the tool results kept since), and what
each file of ``logs/`` holds beyond the tick's mark (:func:`log_marks`), move to that ref too (a commit on
the abandoned one, under ``transcripts/`` and ``logs/``; a log file or transcript begun after the tick is then
removed, or emptied while a program of this process writes it, and a rotation since is undone),
and a ``rewind`` event is written, in a file of its own that a later rewind keeps, as it keeps a
fork's (:data:`HOME_STEPS`).  The person's shell files (:data:`PERSON_FILES`) are marked and
cut the same way: the inputs the shell's history gained after the tick, and an unsent input saved
since, go onto the ref (at their own paths), so M-p offers no input of the abandoned future.

The mind's budget item is the tick's (its requests are the ones it made then), but the money
paid since stays counted (:mod:`.rewound_spend`) and the limit the person set stays the one
enforced (:mod:`.person_limit`); a fork starts with the home's limit too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import sqlite3
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from .. import faults
from ..errors import AmacsError
from ..files import atomic_write, copy_range, sync_paths, write_back_soon
from ..records import Fork, Record, Rewind
from . import person_limit, rewound_spend
from .git_repo import (
    DELTA_WINDOW,
    PACK_NICE,
    PACKED_FILE,
    RACY_NS,
    UNCOMMITTED,
    CommitError,
    HomeRepo,
    Snapshot,
    Uncommitted,
    copy_vouched,
    git_env,
    ignored,
    nice_this_thread,
    pack_times,
    packed_records,
    run_git,
    settle_checkout,
    vouched_in_index,
)
from .home_lock import LOCK_FILE, HomeInUse, HomeLock
from .recovery import FORK_UNFINISHED
from .transcript import Transcript

log = logging.getLogger("amacs.history")

if TYPE_CHECKING:
    from ..memory.ltm import LongTermMemory

STATE_FILE = "tick-state.json"
STATE_VERSION = 1
ABANDONED = "refs/amacs/abandoned"
# The append-only logs whose tick-N contents are their first bytes (sizes in the tick state).
LOGS = ("agent-chat.org", "monologue.org")
LOG_FOLDERS = ("chat", "monologue")
# What a fork copies beside the mind: the home's settings, not in git.
SETTINGS = ("mcp.json", "model-capabilities.json")
T = TypeVar("T")
# In a fork: the home, tick and commit it was forked from (its own git's; a fork of it has its own).
# The commit makes it one mind: a tick's number is used again once a rewind goes back before it.
FORK_ORIGIN = ".git/amacs-fork.json"
# A rewind made with no server running (``amacs-server rewind``): the next server's start says it
# once (:func:`untold_rewind`), as a shell says its own rewinds when they are made.
UNTOLD_REWIND = ".git/amacs-rewound.json"
ABANDONED_SCHEMA = """CREATE TABLE IF NOT EXISTS abandoned_items (
  ref TEXT NOT NULL, id INTEGER NOT NULL, base TEXT NOT NULL, version INTEGER NOT NULL, tier TEXT NOT NULL,
  kind TEXT NOT NULL, created_at_ms INTEGER NOT NULL, content TEXT NOT NULL, text TEXT NOT NULL)"""


class HistoryError(AmacsError, RuntimeError):
    """A rewind or fork that cannot be made; the message is one line for the person."""


class NoSuchTick(HistoryError):
    """A tick the home cannot return to: it has none of that number, or one committed before
    ticks were restorable."""


def log_files(home: Path) -> list[Path]:
    """The files of the append-only logs: the current months and the earlier ones."""
    found = [home / name for name in LOGS if (home / name).exists()]
    for folder in LOG_FOLDERS:
        found += _months(home / folder)
    return found


def is_log(name: str) -> bool:
    """Whether NAME (a path in the home) is one of :func:`log_files`'s files, by its name."""
    folder, _, rest = name.partition("/")
    return name in LOGS or (folder in LOG_FOLDERS and rest.endswith(".org") and "/" not in rest)


_MONTHS: dict[Path, tuple[tuple[int, int, int], int, list[Path]]] = {}  # folder -> its stat, when listed, the list


def _months(folder: Path) -> list[Path]:
    """FOLDER's ``.org`` files, sorted ([] when it is no folder).  Listed again only when the
    folder changed (a file added, removed or renamed changes its stat) or may have changed
    unseen (a change within the clock's granularity of the last listing): a tick does not list
    every month of the history again."""
    try:
        st = os.stat(folder)
    except OSError:
        return []
    if not stat.S_ISDIR(st.st_mode):
        return []
    key = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    cached = _MONTHS.get(folder)
    if cached is not None and cached[0] == key and max(st.st_mtime_ns, st.st_ctime_ns) + RACY_NS < cached[1]:
        return cached[2]
    now = time.time_ns()
    try:
        found = sorted(p for p in folder.iterdir() if p.suffix == ".org")
    except OSError:
        return []
    _MONTHS[folder] = (key, now, found)
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


def fork_origin(home: Path) -> dict[str, Any] | None:
    """The home, tick and commit HOME was forked from (``from``, ``tick``, ``commit``: None for a fork
    an AMACS before it was recorded made); None when it is no fork."""
    try:
        data = json.loads((home / FORK_ORIGIN).read_text(encoding="utf-8"))
        commit = data.get("commit")
        return {"from": str(data["from"]), "tick": int(data["tick"]),
                "commit": commit if isinstance(commit, str) else None}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def untold_rewind(home: Path) -> str | None:
    """The line that says the rewind ``amacs-server rewind`` made of HOME while no server ran, once:
    the record of it is removed as it is read.  None when there is none (or it is unreadable)."""
    path = home / UNTOLD_REWIND
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        path.unlink()
        at = datetime.fromtimestamp(float(data["at"])).strftime("%b %d %H:%M")
        tick, ref = int(data["tick"]), str(data["ref"])
        name = _ABANDONED_NAME.search(ref)
        since = f" from tick {name[1]}" if name else ""
        return (f"This home was rewound to tick {tick}{since} on {at} (amacs-server rewind): the inputs after "
                f"it are kept with the abandoned future, on git ref {ref}.")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def file_sizes(home: Path, snapshot: Snapshot | None = None) -> dict[str, int]:
    """Each append-only log file's size, by its path in the home: as SNAPSHOT (of :func:`tracked`)
    holds it, else as on disk now."""
    if snapshot is not None:
        return {name: content.size for name, content in snapshot.files.items() if is_log(name)}
    return {str(p.relative_to(home)): p.stat().st_size for p in log_files(home)}


# -- abandoned futures --------------------------------------------------------------------

_ABANDONED_NAME = re.compile(r"-tick-([^-/]+)-to-(\d+)$")
_FUTURE_INPUTS: dict[tuple[Path, str, int], list[str]] = {}  # (home, commit, to_tick) -> its inputs


def abandoned_futures(home: Path) -> list[dict[str, Any]]:
    """The futures the rewinds of HOME left, newest first: each one's ref, commit, the tick it
    was at (``from_tick``) and the one rewound to (``to_tick``), and the person's inputs of it:
    the first and the last (None if it had none) and how many (``inputs``)."""
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
        if (home, sha, to_tick) not in _FUTURE_INPUTS:
            _FUTURE_INPUTS[home, sha, to_tick] = _inputs_after(home, sha, to_tick)
        inputs = _FUTURE_INPUTS[home, sha, to_tick]
        found.append({"ref": ref, "commit": sha, "from_tick": int(name[1]) if name[1].isdigit() else None,
                      "to_tick": to_tick, "first_input": inputs[0] if inputs else None,
                      "last_input": inputs[-1] if inputs else None, "inputs": len(inputs)})
    return found


def _inputs_after(home: Path, commit: str, tick: int) -> list[str]:
    """The person's inputs of the ticks after TICK in COMMIT's chat log (its current month and,
    rotated, the months before), oldest first, each on one line and cut at 200 characters."""
    head = re.compile(r"^\* Tick (\d+)\n(?:[^*\n][^\n]*\n|\n)*?\*\* Human\n(.*?)\n(?:\n|\*)", re.M | re.S)
    said: dict[int, str] = {}
    for text in _chat_texts(home, commit):
        for match in head.finditer(text):
            if int(match[1]) > tick:
                line = " ".join(match[2].split())
                said.setdefault(int(match[1]), line if len(line) <= 200 else line[:200] + "…")
    return [said[n] for n in sorted(said)]


def _chat_texts(home: Path, commit: str) -> Iterator[str]:
    """The text of each month of COMMIT's chat log, the current month first."""
    names = ["agent-chat.org"]
    try:
        listed = _git(home, "ls-tree", "--name-only", f"{commit}:chat").decode(errors="replace").split()
        names += [f"chat/{n}" for n in sorted(listed, reverse=True)]
    except HistoryError:
        pass
    for name in names:
        try:
            yield _git(home, "show", f"{commit}:{name}").decode(errors="replace")
        except HistoryError:
            continue


# -- rewind and fork ---------------------------------------------------------------------


@dataclass
class Done:
    """What a rewind or fork made: the home, the tick it is at, the commit, the abandoned ref."""

    home: Path
    tick: int
    commit: str
    abandoned: str | None
    seconds: float
    notes: list[str] = field(default_factory=list)  # what was repaired first (a rewind or fork cut short)

    def line(self) -> str:
        """One line for the person."""
        if self.abandoned is not None:
            return (f"rewound {self.home} to tick {self.tick}; the abandoned future is kept on git ref "
                    f"{self.abandoned}")
        return f"forked {self.home} at tick {self.tick}"


def _git(home: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    """git ARGS in HOME (with ENV added), out of reach of the signals that stop the server
    (:func:`~.git_repo.start_git`): a quit mid-rewind or mid-fork lets each git it started finish."""
    done = run_git(["git", *args], home, data=stdin or b"", env={**git_env(), **(env or {})})
    if done.returncode != 0:
        raise HistoryError(f"git {args[0]} failed in {home}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def tick_commit(home: Path, tick: int) -> str:
    """The newest commit of HEAD's line whose subject starts ``[TICK N]``."""
    if not (home / ".git").is_dir():
        raise HistoryError(f"{home} has no git history: is it an AMACS home?")
    if tick == 0:  # nothing is committed before the first input: its tick, 1, is the first commit
        raise NoSuchTick(f"{home} has no tick 0: its ticks start at 1, its first input's, and before that "
                         "the mind was new, as a new home's is (AMACS_HOME=NEW ./amacs starts one; an "
                         "experiment without `from` starts each run in a new home)")
    prefix = f"[TICK {tick}]"
    # Walked from HEAD only as far as the newest commit with a line that starts so: its subject,
    # most often (a recent tick is found in as many steps as it is back); else, every match.
    out = _git(home, "log", "--max-count=1", "--format=%H %s", "--extended-regexp",
               rf"--grep=^\[TICK {tick}\]").decode(errors="replace")
    if not out[41:].startswith(prefix):
        out = _git(home, "log", "--format=%H %s", "--fixed-strings", f"--grep={prefix}").decode(errors="replace")
    for line in out.splitlines():
        if line[41:].startswith(prefix):
            return line[:40]
    raise NoSuchTick(f"{home} has no tick {tick} in its history")


def names_commit(home: Path, text: str) -> bool:
    """Whether TEXT names a commit of HOME's repository (an id, or a prefix of one)."""
    return (home / ".git").is_dir() and run_git(
        ["git", "rev-parse", "--verify", "--quiet", f"{text}^{{commit}}"], home, env=git_env()).returncode == 0


def origin_commit(home: Path, commit: str) -> tuple[str, int]:
    """The commit COMMIT (an id, or a prefix of one, as ``git log`` prints it) names in HOME, and its
    tick: one of the ticks of HOME's history as it stands (HEAD's line), else NoSuchTick saying why."""
    if not (home / ".git").is_dir():
        raise HistoryError(f"{home} has no git history: is it an AMACS home?")
    found = run_git(["git", "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], home, env=git_env())
    sha = found.stdout.decode(errors="replace").strip()
    if found.returncode != 0 or not sha:
        raise NoSuchTick(f"{home} has no commit {commit}")
    if not on_line(home, sha):
        ref = abandoned_with(home, sha)
        raise NoSuchTick(f"commit {commit} is not in {home}'s history as it stands"
                         + (f" (a rewind left it on the abandoned future kept on git ref {ref})" if ref else "")
                         + ": a run starts from a tick of its history")
    subject = _git(home, "log", "-1", "--format=%s", sha).decode(errors="replace")
    tick = re.match(r"\[TICK (\d+)\]", subject)
    if tick is None:
        raise NoSuchTick(f"commit {commit} of {home} is no tick's ({subject.strip()!r})")
    return sha, int(tick[1])


def on_line(home: Path, sha: str) -> bool:
    """Whether commit SHA is of HOME's history as it stands (HEAD's line)."""
    return run_git(["git", "merge-base", "--is-ancestor", sha, "HEAD"], home, env=git_env()).returncode == 0


def abandoned_with(home: Path, sha: str) -> str | None:
    """The newest ref of an abandoned future of HOME that holds commit SHA (a rewind left it there), or None."""
    found = run_git(["git", "for-each-ref", "--sort=-refname", "--format=%(refname)", "--contains", sha, ABANDONED],
                    home, env=git_env())
    refs = found.stdout.decode(errors="replace").split() if found.returncode == 0 else []
    return refs[0] if refs else None


def last_tick(home: Path) -> int:
    """The tick of the newest ``[TICK N]`` commit of HEAD's line: the mind as it is now."""
    if not (home / ".git").is_dir():
        raise HistoryError(f"{home} has no git history: is it an AMACS home?")
    out = _git(home, "log", "--max-count=1", "--format=%s", "--extended-regexp", r"--grep=^\[TICK [0-9]+\]")
    subject = out.decode(errors="replace")
    if not subject.startswith("[TICK "):
        raise HistoryError(f"{home} has no tick in its history yet")
    return int(subject[6:subject.index("]")])


def turn_around(home: Path, tick: int) -> tuple[int, int, str] | None:
    """The turn of HOME that TICK is inside of, as (its first tick, its last, its input's first words);
    None when TICK ends a turn: the next tick began with an input, or it is the home's last.  A turn
    is the ticks from one that began with the person's input to the next such (as the dataset's
    ``turns``): a fork inside one holds a mind that has not yet answered it."""
    from .chat_log import ChatLog  # noqa: PLC0415

    log = ChatLog(home / "agent-chat.org")
    started, _ = log.input_page(1, tick + 1)  # the newest input at or before TICK
    upto, _ = log.input_page(1, tick + 2)
    if not started or (upto and upto[0].tick == tick + 1) or tick >= last_tick(home):
        return None
    following, before = None, None  # the oldest input after TICK: TICK's turn ends the tick before it
    while True:  # pages newest first, back to TICK
        page, more = log.input_page(200, before)
        following = min((entry.tick for entry in page if entry.tick > tick), default=following)
        if not more or not page or page[-1].tick <= tick:
            break
        before = page[-1].tick
    said = " ".join((started[0].human or "").split())
    return (started[0].tick, following - 1 if following is not None else last_tick(home),
            said if len(said) <= 60 else said[:60] + "…")


def mid_turn(home: Path, tick: int, there: str, written: Callable[[int], str], new: str,
             *, now: str | None = None) -> str | None:
    """Why TICK of HOME is no mind to start from, when it is inside a turn (:func:`turn_around`): one
    there holds an input it has not replied to, and answers it, not the next input (the shell's
    pickers offer only a turn's ends).  THERE: what would start there (``a fork there would
    start``); WRITTEN: a tick as the command takes it; NEW: what starts from a new mind; NOW: what
    the turn's end is, said instead of what starts there, when it is the home's last tick (a
    rewind there changes nothing).  None: TICK ends a turn."""
    inside = turn_around(home, tick)
    if inside is None:
        return None
    first, last, said = inside
    after = (f"{written(last)} starts after that turn's reply" if now is None or last != last_tick(home)
             else f"the turn ends at tick {last}, the home's last ({now})")
    return (f"tick {tick} of {home} is inside the turn of «{said}» (ticks {first}-{last}): {there} from a mind "
            f"that has not replied to it; {after}, "
            + (f"{written(first - 1)} before its input" if first > 1 else
               f"and before its input the mind was new ({new})"))


def late_commit(home: Path) -> tuple[Snapshot, str] | str | None:
    """The commit of the tick whose commit the last server of HOME asked for and never made (it
    stopped, or was killed, first: :data:`~.git_repo.UNCOMMITTED`): the snapshot of the bytes the
    tick ended with and the message, which says it was made late.  A note for the person (str) when
    a file no longer holds them: the tick has no commit of its own (the next tick's commit holds its
    files).  None when there is nothing to commit: no record, or a record of a tick committed since,
    or of a mind a rewind has moved (the tick state is another tick's).  The record is removed but
    when a commit is returned (the commit worker removes it once the commit is made)."""
    late = late_look(home)
    if not isinstance(late, tuple):
        (home / UNCOMMITTED).unlink(missing_ok=True)
    return late


def late_look(home: Path) -> tuple[Snapshot, str] | str | None:
    """What :func:`late_commit` would commit (or say) for HOME, changing nothing."""
    saved = Uncommitted.read(home)
    if saved is None:
        return None
    tick, state = saved.tick, read_state(home)
    try:
        committed = last_tick(home)
    except HistoryError:  # no history yet
        committed = 0
    if tick is None or state is None or state.get("tick") != tick or committed >= tick:
        return None
    snap, changed = saved.snapshot(home)
    if snap is None:
        return (f"Tick {tick} ended, but the server stopped before its commit was made, and files "
                f"changed since ({', '.join(changed)}): tick {tick} has no commit of its own in the "
                "home's history; the next tick's commit holds its files.")
    late = ("Committed at the next start: the server that ran this tick stopped before it made this "
            "commit.  The files are the bytes the tick ended with, checked against the digests "
            "recorded at its end.")
    if committed == tick - 2:
        late += f"  Tick {tick - 1} has no commit of its own: its changes are in this one."
    elif committed < tick - 2:
        late += f"  Ticks {committed + 1} to {tick - 1} have no commit of their own: their changes are in this one."
    return snap, f"{saved.message}\n\n{late}"


def state_at(home: Path, commit: str, tick: int) -> dict[str, Any]:
    """The tick state COMMIT holds (tick TICK's)."""
    try:
        data = json.loads(_git(home, "show", f"{commit}:{STATE_FILE}"))
    except HistoryError as err:
        raise NoSuchTick(f"tick {tick} of {home} was committed before ticks were restorable "
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


class _Beside(Generic[T]):
    """WORK run in a thread of its own from now on; :meth:`result` waits for it and returns what it
    returned, or raises what it raised."""

    def __init__(self, work: Callable[[], T], name: str) -> None:
        self._work = work
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"amacs-fork-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._work()
        except BaseException as err:  # noqa: BLE001 - raised again by result, in the caller's thread
            self._error = err

    def wait(self) -> None:
        """Wait for the work to end."""
        self._thread.join()

    def result(self) -> T:
        """Wait for the work to end; its value, or its error raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return cast("T", self._value)


def _tree(home: Path, commit: str) -> dict[str, tuple[str, str, str]]:
    """COMMIT's files in HOME's repository: path -> (path, mode, blob)."""
    held: dict[str, tuple[str, str, str]] = {}
    for record in _git(home, "ls-tree", "-r", "-z", commit).decode(errors="surrogateescape").split("\0"):
        info, _, rel = record.partition("\t")
        if record:
            mode, _kind, blob = info.split()
            held[rel] = (rel, mode, blob)
    return held


Vouched = tuple[dict[str, tuple[str, str, str]], dict[str, tuple[int, int, int, int]]]


def _copy_vouched(source: Path, commit: str, dest: Path) -> Vouched:
    """COMMIT's files (:func:`_tree`, read in SOURCE's repository), and those of them copied from
    the home SOURCE into the folder DEST (:func:`~.git_repo.copy_vouched`, its stat of each)."""
    held = _tree(source, commit)
    return held, copy_vouched(source, dest, {rel: (mode, blob) for rel, mode, blob in held.values()})


def _check_out(home: Path, commit: str, state: dict[str, Any], repo: HomeRepo | None = None, *,
               vouched: _Beside[Vouched] | None = None) -> HomeRepo:
    """The home's tracked files as the tick left them: COMMIT's tree, the logs cut to the sizes
    the tick state recorded, and a tracked file COMMIT lacks removed (also one no commit or index
    ever held: a skill or month made after the last commit).  Returns the home's repository (REPO,
    or a new one) knowing the blob of each file left as COMMIT has it (its next commit hashes only
    the others).  VOUCHED, for a fork (HOME, where no one else writes meanwhile): the copying
    (:func:`_copy_vouched`) into HOME of the files of the home it is made of that the server's
    record says hold COMMIT's blob (its past months, unchanged since they were archived), begun
    while git fetched the history; git writes only the rest, not inflating every month of the
    history; git is told to trust them all by their stat (:func:`~.git_repo.settle_checkout`)."""
    if vouched is not None:
        _git(home, "read-tree", "--reset", commit)  # the index alone: no file written by git yet
        held, copied = vouched.result()  # path -> (path, mode, blob): the files git wrote or found so
        held = dict(held)
        rest = [rel for rel in held if rel not in copied]
        if rest:
            _git(home, "checkout-index", "-u", "-z", "--stdin",
                 stdin="".join(f"{rel}\0" for rel in rest).encode("utf-8", "surrogateescape"))
        settle_checkout(home, copied)
    else:
        held = _tree(home, commit)
        if faults.armed("rewind.read-tree-lock"):
            faults.kill_holding_lock("rewind.read-tree-lock", ["git", "read-tree", "-u", "--reset", commit], home,
                                     home / ".git" / "index.lock")
        settle_checkout(home, vouched_in_index(home))  # git writes only the files COMMIT has otherwise
        _git(home, "read-tree", "-u", "--reset", commit)
    sizes: dict[str, int] = state["files"]
    logs = set(log_files(home))
    for path in tracked(home):
        rel = str(path.relative_to(home))
        if rel not in held or (path in logs and rel not in sizes):
            path.unlink(missing_ok=True)  # a file (a month, a skill) begun after the tick
            held.pop(rel, None)
        elif rel in sizes and path.stat().st_size > sizes[rel]:
            with path.open("r+b") as fh:
                fh.truncate(sizes[rel])
            held.pop(rel)
    if repo is None:
        ignore = home / ".gitignore"
        before = ignore.read_bytes() if ignore.exists() else None
        repo = HomeRepo(home)  # adds to .gitignore the names it lacks: then it is no longer COMMIT's
        if ignore.exists() and ignore.read_bytes() != before:
            held.pop(".gitignore", None)
    repo.forget_head()
    repo.assume(held.values())
    return repo


def _memory_at(db_path: Path, state: dict[str, Any], abandoned: str) -> int:
    """memory.db as at the tick: the item versions written after it leave ``items`` (kept in
    ``abandoned_items`` under ABANDONED's name), and the active table is
    the tick's.  One transaction: done whole or not at all, and done again it changes nothing.
    Returns how many versions left."""
    from ..memory.ltm import TEXT_OF, LongTermMemory  # noqa: PLC0415 - sqlite schema, only when a rewind runs

    top = int(state["ltm_max_id"])
    home = db_path.parent
    _drop_snapshots(home, above=top)  # first: killed after the rows leave, no snapshot holds them
    ltm = LongTermMemory(db_path)
    try:
        db = ltm.db
        with ltm.transaction():
            later = db.execute(f"SELECT id, {TEXT_OF}, base FROM items WHERE id > ?", (top,)).fetchall()
            if later:
                db.execute(ABANDONED_SCHEMA)
                db.execute("INSERT INTO abandoned_items SELECT ?, id, base, version, tier, kind, created_at_ms, "
                           f"content, {TEXT_OF} FROM items WHERE id > ?", (abandoned, top))  # the text read as it is
            for rowid, text, _base in later:
                db.execute("INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', ?, ?)", (rowid, text))
            db.execute("DELETE FROM items WHERE id > ?", (top,))
            db.execute("DELETE FROM tags WHERE since > ?", (top,))
            _drop_tags_of_gone(db, {base for _id, _text, base in later})
            db.execute("DELETE FROM active")
            db.executemany("INSERT INTO active (brain, base, status, version) VALUES (?,?,?,?)", state["active"])
            # Known level with no org file now (LongTermMemory.level): a version the last start wrote
            # to bring it level with a file may be gone, though the file restored is the same.
            db.execute("DELETE FROM level")
    finally:
        ltm.close()
    with _SNAPSHOT_LOCK:  # and after: one made meanwhile of rows that left is not kept
        _drop_snapshots(home, above=top)
    return len(later)


def _drop_tags_of_gone(db: sqlite3.Connection, bases: set[str]) -> None:
    """Delete the tags of each of BASES no item version is left of (a tag whose ``since`` is
    not known came with the base's first version)."""
    db.executemany("DELETE FROM tags WHERE base = ? AND NOT EXISTS (SELECT 1 FROM items WHERE base = ?)",
                   [(base, base) for base in sorted(bases)])


# The full-text index's own tables (FTS5's): copied as they are, then the rows after the tick taken out.
FTS_TABLES = ("items_fts_data", "items_fts_idx", "items_fts_docsize")


def _memory_up_to(src: Path, dest: Path, state: dict[str, Any], *, rewound: bool = True,
                  journal: str = "WAL", compact: bool = False) -> None:
    """A new memory.db DEST holding SRC's memory as at the tick STATE is of: its item versions up
    to the tick and their tags, the tick's active table, and the full-text index of them; no
    byte of anything written after the tick, nor of SRC's own (its abandoned futures).

    Each table is copied whole, row by row in its order (SQLite's transfer of one table into an
    empty one of the same schema: no index is searched, no text is split into words again, and
    no page of SRC is copied with what its free space still holds); then the rows after the tick
    are deleted, their entries taken out of the index, and the index merged into one segment,
    which drops every entry of a row taken out (here, or by SRC's rewinds).  The merge reads and
    writes the whole index: it is left out when no row is taken out here and SRC's index never
    had one taken out (FTS5 only marks a deletion): no rewind of its home (REWOUND false) and no
    ``abandoned_items`` in SRC (each rewind that took rows out kept them there).  ``secure_delete``
    zeroes every cell and page so freed.  The folder the fork is made in is removed if this
    fails or is killed, so the file is written without a journal.  SRC is read in one
    transaction: a consistent copy, also while its home's server writes.  COMPACT: the items
    are copied keeping no copy of a content's own text (SRC's made before kept one in each row:
    ``amacs_server.memory.ltm.TEXT_OF``), a row at a time: the file ~30 % smaller, twice the time."""
    from ..memory.ltm import CONTENT_TEXT, TEXT_OF  # noqa: PLC0415 - sqlite schema, only when a fork runs

    top = int(state["ltm_max_id"])
    ltm = _beside(dest, src)
    try:
        db = ltm.db
        with _reading(db):
            for table in ("items", *FTS_TABLES):
                db.execute(f"DELETE FROM {table}")  # empty, as the transfer needs (the index's start rows)
                if table == "items" and compact:
                    db.execute("INSERT INTO items SELECT id, base, version, tier, kind, created_at_ms, content, "
                               f"CASE WHEN text = {CONTENT_TEXT} THEN '' ELSE text END FROM home.items")
                else:
                    db.execute(f"INSERT INTO {table} SELECT * FROM home.{table}")
            _copy_tags(db, top)
            rewound = rewound or db.execute("SELECT 1 FROM home.sqlite_master WHERE type = 'table' AND "
                                            "name = 'abandoned_items'").fetchone() is not None
        db.execute("DETACH DATABASE home")
        faults.point("fork.copied")
        with ltm.transaction():  # a transaction of its own: the index is read as copied, not as cached
            later = db.execute(f"SELECT id, {TEXT_OF}, base FROM items WHERE id > ?", (top,)).fetchall()
            db.executemany("INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', ?, ?)",
                           [(rowid, text) for rowid, text, _base in later])
            db.execute("DELETE FROM items WHERE id > ?", (top,))
            db.executemany("INSERT INTO active (brain, base, status, version) VALUES (?,?,?,?)", state["active"])
            if later or rewound:
                db.execute("INSERT INTO items_fts (items_fts) VALUES ('optimize')")
        db.execute(f"PRAGMA journal_mode={journal}")  # WAL: as every memory.db is opened
    finally:
        ltm.close()


def _beside(dest: Path, src: Path) -> LongTermMemory:
    """DEST's memory.db opened to be made as a fork's (no journal: a fork cut short is removed
    whole; the bytes of a row taken out zeroed), the home's memory.db SRC attached as ``home``."""
    from ..memory.ltm import LongTermMemory  # noqa: PLC0415 - sqlite schema, only when a fork runs

    ltm = LongTermMemory(dest, unsynced=True)
    for pragma in ("secure_delete=ON", "journal_mode=OFF"):
        ltm.db.execute(f"PRAGMA {pragma}")
    ltm.db.execute("ATTACH DATABASE ? AS home", (str(src),))
    return ltm


@contextmanager
def _reading(db: sqlite3.Connection) -> Iterator[None]:
    """A transaction that reads the attached home's memory.db as one snapshot without taking its
    write lock (BEGIN IMMEDIATE takes every attached database's: its server's writes would wait)."""
    db.execute("BEGIN")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _copy_tags(db: sqlite3.Connection, top: int, since: int = 0) -> None:
    """Into DB's tags, those the attached home's memory.db had at the tick whose highest row id is
    TOP (:data:`~amacs_server.memory.ltm.TAGS_SINCE`) and not at SINCE's: given by a version up to TOP and
    after SINCE, or of unknown origin and of a base with a version in DB after SINCE.  Only these
    rows are written: no key of a later tag enters the file (a key deleted from a page can stay
    in the page's unused space)."""
    from ..memory.ltm import has_column  # noqa: PLC0415 - sqlite schema, only when a fork runs

    if has_column(db, "tags", "since", "home"):
        db.execute("INSERT OR IGNORE INTO tags (base, tag, since) SELECT base, tag, since FROM home.tags AS t "
                   "WHERE (since > ? AND since <= ?) OR (since IS NULL AND EXISTS "
                   "(SELECT 1 FROM main.items AS i WHERE i.base = t.base AND i.id > ? AND i.id <= ?))",
                   (since, top, since, top))
    else:  # a home's memory.db not opened since tags' origins are kept: every tag of a base at the tick
        db.execute("INSERT OR IGNORE INTO tags (base, tag) SELECT base, tag FROM home.tags AS t WHERE EXISTS "
                   "(SELECT 1 FROM main.items AS i WHERE i.base = t.base AND i.id > ? AND i.id <= ?)", (since, top))


# -- the memory snapshot: a fork's memory.db made from a clean copy kept by the home's server --
#
# A fork at a tick whose highest item row id is TOP needs memory.db as it was then, with no byte
# of anything later.  Made from the home's file (:func:`_memory_up_to`) that costs a copy of every
# table and a merge of the whole index, growing with the home.  So the home's server keeps, in
# its git folder (no file git tracks, nor one a fork copies), such a copy made at a row id S a
# little behind its memory (:func:`keep_memory_snapshot`, off the person's path): a fork at a tick
# with TOP >= S copies its bytes and adds the rows after S (new rows only: nothing to take out,
# nothing to merge).  Its name says S and the inode of the memory.db it was made of; it is used
# only while that file's row S is still the one it holds (an id can be given again once a rewind
# took its row out).  A rewind to a tick before S removes it.
SNAPSHOT_NAME = "amacs-memory-{ino}-{top}.db"
_SNAPSHOT = re.compile(r"amacs-memory-(\d+)-(\d+)\.db")
# A fork's memory.db made ahead: a synced copy of the snapshot of the same name, which the next fork
# takes as its own file (a rename: no byte copied or written on the fork's path); made again after.
READY_NAME = "amacs-memory-ready-{ino}-{top}.db"
_READY = re.compile(r"amacs-memory-ready-(\d+)-(\d+)\.db")
# Made this many item versions behind the memory (a fork of a recent tick, the picker's first
# page, finds it at or before the tick), and again once the memory is SNAPSHOT_EVERY further on.
SNAPSHOT_LAG = 2000
SNAPSHOT_EVERY = 1000
SNAPSHOT_NICE = 10
# A snapshot made while this process rewinds is checked and renamed into place under this lock,
# and a rewind removes those past its tick under it after its rows left.
_SNAPSHOT_LOCK = threading.Lock()
# A row as it reads (its text as TEXT_OF gives it: a snapshot keeps no copy of a content's text).
_ROW = "SELECT base, version, tier, kind, created_at_ms, content, {text_of} FROM {schema}items WHERE id = ?"


def _named(home: Path, pattern: re.Pattern[str]) -> list[tuple[int, int, Path]]:
    """The files of HOME's git folder whose names PATTERN matches whole: (inode, S, path) each, by S."""
    found = []
    for path in (home / ".git").glob("amacs-memory-*.db"):
        name = pattern.fullmatch(path.name)
        if name:
            found.append((int(name[1]), int(name[2]), path))
    return sorted(found, key=lambda f: f[1])


def memory_snapshots(home: Path) -> list[tuple[int, int, Path]]:
    """The memory snapshots kept in HOME's git folder: (inode, S, path) each, by S."""
    return _named(home, _SNAPSHOT)


def ready_copies(home: Path) -> list[tuple[int, int, Path]]:
    """The ready copies of memory snapshots in HOME's git folder (:func:`keep_ready_copy`): (inode,
    S, path) each, as their snapshots are named."""
    return _named(home, _READY)


def _drop_snapshots(home: Path, *, above: int = -1, but: Path | None = None) -> None:
    """Remove HOME's memory snapshots made at a row id past ABOVE (all of them by default), but BUT,
    and their ready copies (all but BUT's); and what a making of one cut short left."""
    for _ino, top, path in memory_snapshots(home):
        if top > above and path != but:
            path.unlink(missing_ok=True)
    for ino, top, path in ready_copies(home):
        if top > above and (but is None or but.name != SNAPSHOT_NAME.format(ino=ino, top=top)):
            path.unlink(missing_ok=True)
    if above < 0:
        _drop_unfinished(home)


def _drop_unfinished(home: Path) -> None:
    """Remove what a making of HOME's memory snapshot cut short left."""
    for path in (home / ".git").glob("amacs-memory.tmp-*"):
        path.unlink(missing_ok=True)


def _same_row(db: sqlite3.Connection, top: int) -> bool:
    """True when DB's memory (main) holds exactly the rows up to TOP and its row TOP is the
    attached home's."""
    from ..memory.ltm import TEXT_OF  # noqa: PLC0415 - sqlite schema, only when a fork runs

    mine = db.execute(_ROW.format(text_of=TEXT_OF, schema="main."), (top,)).fetchone()
    return (mine is not None and mine == db.execute(_ROW.format(text_of=TEXT_OF, schema="home."), (top,)).fetchone()
            and db.execute("SELECT max(id) FROM main.items").fetchone()[0] == top)


def _fits(snapshot: Path, db_path: Path, top: int) -> bool:
    """True when SNAPSHOT holds the rows up to TOP and its row TOP is the one DB_PATH has."""
    try:
        db = sqlite3.connect(f"file:{snapshot}?mode=ro", uri=True)
        try:
            db.execute("ATTACH DATABASE ? AS home", (f"file:{db_path}?mode=ro",))
            with _reading(db):
                return _same_row(db, top)
        finally:
            db.close()
    except sqlite3.Error:
        return False


def keep_memory_snapshot(home: Path, *, lag: int | None = None, every: int | None = None) -> Path | None:
    """Make HOME's memory snapshot anew when its memory.db is EVERY (:data:`SNAPSHOT_EVERY`) item
    versions past the one kept (or none is): memory.db up to the row id LAG (:data:`SNAPSHOT_LAG`)
    behind its newest, made as a fork's is,
    written under a name of its own, synced, then renamed into place; the older one removed.
    Returns the new snapshot, or None when none was due.  Reads the home's memory.db without
    taking its write lock: its server writes on meanwhile.  Its server's packer thread calls this."""
    lag = SNAPSHOT_LAG if lag is None else lag
    every = SNAPSHOT_EVERY if every is None else every
    db_path = home / "memory.db"
    try:
        ino = db_path.stat().st_ino
    except FileNotFoundError:
        return None
    try:
        src = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            newest = int(src.execute("SELECT coalesce(max(id), 0) FROM items").fetchone()[0])
            row = src.execute("SELECT max(id) FROM items WHERE id <= ?", (newest - lag,)).fetchone()[0]
        finally:
            src.close()
    except sqlite3.Error:  # no memory yet (or one its server's start moves aside)
        return None
    kept = [top for have, top, path in memory_snapshots(home) if have == ino and _fits(path, db_path, top)]
    if row is None or (kept and int(row) - kept[-1] < every):
        return None
    top = int(row)
    _drop_unfinished(home)
    tmp = home / ".git" / f"amacs-memory.tmp-{os.getpid()}"
    # Its index merged into one segment; one file (no WAL), which a reader leaves as it is.
    _memory_up_to(db_path, tmp, {"ltm_max_id": top, "active": []}, journal="DELETE", compact=True)
    tmp.with_name(tmp.name + ".clean").unlink(missing_ok=True)
    faults.point("snapshot.written")
    sync_paths([tmp])
    final = home / ".git" / SNAPSHOT_NAME.format(ino=ino, top=top)
    check = sqlite3.connect(f"file:{tmp}?mode=rw", uri=True)  # never a new, empty one
    try:
        check.execute("ATTACH DATABASE ? AS home", (str(db_path),))
        with _SNAPSHOT_LOCK:
            if not _same_row(check, top):  # a rewind took row TOP out meanwhile
                return None
            os.replace(tmp, final)
    finally:
        check.close()
        tmp.unlink(missing_ok=True)
    sync_paths([final.parent])
    faults.point("snapshot.kept")
    _drop_snapshots(home, but=final)
    return final


def keep_ready_copy(home: Path) -> Path | None:
    """Make the ready copy of HOME's newest memory snapshot (:data:`READY_NAME`) unless it is there:
    its bytes copied under a name of its own, synced, then renamed into place, the older ones
    removed.  Returns the copy made, or None.  Off the person's path: its server's packer thread,
    and a thread a fork that took the copy starts."""
    snapshots = memory_snapshots(home)
    if not snapshots:
        return None
    ino, top, snapshot = snapshots[-1]
    final = home / ".git" / READY_NAME.format(ino=ino, top=top)
    if final.exists():
        return None
    tmp = home / ".git" / f"amacs-memory.tmp-ready-{os.getpid()}-{threading.get_ident()}"
    try:
        try:  # its pages left in the page cache (no write_back_soon): the fork that takes it reads some
            _copy_soon_written(snapshot, tmp, cached=True)
        except FileNotFoundError:  # removed meanwhile (a new one made, or a rewind)
            return None
        faults.point("ready.written")
        sync_paths([tmp], folders=False)
        with _SNAPSHOT_LOCK:  # a rewind removes snapshots and their copies under it
            if not snapshot.exists():
                return None
            os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    sync_paths([final.parent])
    for _ino, _top, path in ready_copies(home):
        if path != final:
            path.unlink(missing_ok=True)
    return final


def _take_ready(home: Path, ino: int, top: int, dest: Path) -> bool:
    """DEST as the ready copy of HOME's snapshot (INO, TOP), moved there; False when there is none
    (taken by another fork, not made yet) or DEST is on another file system."""
    try:
        os.rename(home / ".git" / READY_NAME.format(ino=ino, top=top), dest)
    except OSError:  # gone, or EXDEV: the snapshot is copied instead
        return False
    return True


def _ready_again(home: Path) -> None:
    """The ready copy a fork took made again, in a thread of its own at the packer's priority."""
    def make() -> None:
        nice_this_thread(PACK_NICE)
        try:
            keep_ready_copy(home)
        except Exception:  # noqa: BLE001 - the next fork copies the snapshot instead
            log.warning("could not make the memory snapshot's ready copy again", exc_info=True)
    threading.Thread(target=make, name="amacs-ready-copy", daemon=True).start()


def _copy_soon_written(src: Path, dest: Path, *, cached: bool = False) -> None:
    """DEST (made or emptied) with SRC's bytes, their writeback begun (the fork syncs every file once
    made: by then they are mostly on disk), unless CACHED: left to the caller's sync, its pages kept
    in the page cache."""
    fd = os.open(src, os.O_RDONLY)
    try:
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            copy_range(fd, out, os.fstat(fd).st_size)
            if not cached:
                write_back_soon(out)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _memory_from_snapshot(home: Path, dest: Path, state: dict[str, Any]) -> bool:
    """DEST as :func:`_memory_up_to` makes it, from HOME's newest memory snapshot at or before the
    tick STATE is of (copied as it is) and the item versions, tags and active table of the home's
    memory.db after it up to the tick.  False (and no DEST) when there is none such, or it is not
    of this memory.db as it is (another file, or its row S not the one it holds)."""

    from ..memory.ltm import TEXT_OF  # noqa: PLC0415 - sqlite schema, only when a fork runs

    top, src = int(state["ltm_max_id"]), home / "memory.db"
    ino = src.stat().st_ino
    usable = [(at, path) for have, at, path in memory_snapshots(home) if have == ino and at <= top]
    if not usable:
        return False
    at, snapshot = usable[-1]
    took = _take_ready(home, ino, at, dest)
    if not took:
        try:
            _copy_soon_written(snapshot, dest)
        except FileNotFoundError:  # removed meanwhile (a new one made)
            return False
    ltm = _beside(dest, src)
    fits = False
    try:
        db = ltm.db
        with _reading(db):
            fits = _same_row(db, at)
            if fits:
                db.execute("INSERT INTO items SELECT * FROM home.items WHERE id > ? AND id <= ?", (at, top))
                db.execute(f"INSERT INTO items_fts (rowid, text) SELECT id, {TEXT_OF} FROM items WHERE id > ?", (at,))
                _copy_tags(db, top, at)
                db.executemany("INSERT INTO active (brain, base, status, version) VALUES (?,?,?,?)", state["active"])
        db.execute("DETACH DATABASE home")
        if fits:
            faults.point("fork.copied")
            db.execute("PRAGMA journal_mode=WAL")  # as every memory.db is opened
    finally:
        ltm.close()
    if not fits:
        for path in (dest, *(dest.with_name(dest.name + end) for end in ("-wal", "-shm", ".clean"))):
            path.unlink(missing_ok=True)
    return fits


_TICK_FIELD = re.compile(rb'"tick": (\d+|null)')
_TS_FIELD = re.compile(rb'"ts": ([0-9.eE+-]+)')
_LOG_STAMP = re.compile(rb"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
# The server's own log (its stderr) and the one its start-up rotated: lines stamped with the
# local time (``logging``'s asctime), to the millisecond.  Cut by these stamps only for a tick
# state older than log marks (:func:`log_marks`).
SERVER_LOGS = ("logs/server.log.1", "logs/server.log")
# A transcript's lines are stamped, then written, by the server's threads: in the order written
# to within this many seconds.
STAMP_SLACK = 5.0
LOGS_FOLDER = "logs"
# A file's mtime is the kernel's coarse clock, behind time.time() by up to a clock tick: a file whose
# mtime is this much before a time was not written after it.
MTIME_SLACK = 1.0
# The bytes just before a log file's recorded size whose digest the tick state keeps with it: a
# file begun again since (rotated, removed, a fork's own) does not pass for the one recorded.
MARK_TAIL = 64
# The person's files beside the logs, marked and cut as they are (gitignored, written by Emacs): the
# shell's input history (M-p; an entry appended at each input, each ended by HISTORY_END, the whole
# file rewritten once the ring drops its oldest) and the input typed and not yet sent.
PERSON_FILES = ("shell-history", "shell-draft")
HISTORY = "shell-history"
HISTORY_END = b"\0\n"


def _tail_digest(tail: bytes) -> str:
    """What a mark keeps of the MARK_TAIL bytes before its size."""
    return hashlib.sha256(tail).hexdigest()[:16]


def _mark(fd: int) -> list[Any]:
    size = os.fstat(fd).st_size
    tail = os.pread(fd, min(size, MARK_TAIL), max(0, size - MARK_TAIL))
    return [size, _tail_digest(tail)]


def log_marks(home: Path) -> dict[str, list[Any] | None]:
    """Where each file of HOME's ``logs/`` stands now (every program's: the server's stderr, the
    tool servers', the local model's, their rotations), and each of :data:`PERSON_FILES`: its size
    and the digest of its bytes just before it, by its path in the home (None: a person's file
    absent now; a tick state older than these marks has no key for them, and its rewind leaves them).
    Recorded in each tick's state: a rewind to the tick moves what each file holds beyond its mark."""
    marks: dict[str, list[Any] | None] = dict.fromkeys(PERSON_FILES)
    try:
        entries = [(f"{LOGS_FOLDER}/{e.name}", e.path) for e in os.scandir(home / LOGS_FOLDER)
                   if e.is_file(follow_symlinks=False)]  # a folder (a damaged git moved aside) is not a log
    except OSError:
        entries = []
    for rel, path in [*entries, *((rel, str(home / rel)) for rel in PERSON_FILES)]:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            marks[rel] = _mark(fd)
        finally:
            os.close(fd)
    return marks


def _future_of_transcript(data: bytes, tick: int, ended: float | None) -> int | None:
    """Where a transcript's lines written after TICK start (None: it has none).  Transcripts are
    append-only, so the future starts at the first line of a later tick or, for a line of no
    tick (a session's start, a subagent's message), the first written after tick TICK ended at
    ENDED (the tick state's time; None for a tick state older than that field: such lines are
    kept).  A line's first ``"tick":`` and ``"ts":`` are its own: a string value cannot hold a
    bare quote, and both come before ``data``."""
    at = 0
    while at < len(data):  # each line searched where it lies, not copied: a line can be a whole request
        end = data.find(b"\n", at) + 1 or len(data)
        found = _TICK_FIELD.search(data, at, end)
        if found and found[1] != b"null":
            if int(found[1]) > tick:
                return at
        elif ended is not None:
            ts = _TS_FIELD.search(data, at, end)
            if ts and float(ts[1]) > ended:
                return at
        at = end
    return None


def _transcript_future(path: Path, tick: int, ended: float | None) -> tuple[int, bytes] | None:
    """Where the transcript PATH's lines written after TICK start, and those lines (None: it has
    none): :func:`_future_of_transcript` of the file, which reads only its end.  A line of the
    future was written after TICK ended (ENDED); the lines are stamped in the order written, to
    within :data:`STAMP_SLACK`: so no line before the first stamped later than ENDED less that
    is of the future, and a bisection finds it in a few reads however long the file.  A tick
    state older than ``ended_at`` keeps the lines of no tick: such a file is read whole."""
    with path.open("rb") as fh:
        lo = 0  # a line start; every line before it was stamped before ENDED less the slack
        if ended is not None:
            hi = fh.seek(0, os.SEEK_END)
            while hi - lo > 65536:
                fh.seek((lo + hi) // 2)
                fh.readline()  # to the next line's start
                start = fh.tell()
                if start >= hi:
                    break
                line = fh.readline()
                ts = _TS_FIELD.search(line)
                if ts is None or float(ts[1]) >= ended - STAMP_SLACK:
                    hi = start
                else:
                    lo = start + len(line)
        fh.seek(lo)
        rest = fh.read()
    at = _future_of_transcript(rest, tick, ended)
    return None if at is None else (lo + at, rest[at:])


def _future_of_log(data: bytes, ended: float) -> int | None:
    """Where the server log's lines written after ENDED start: its first line stamped later
    (a line with no stamp, a traceback's, goes with the stamped line before it)."""
    at = 0
    for line in data.splitlines(keepends=True):
        stamp = _LOG_STAMP.match(line)
        if stamp:
            when = datetime.strptime(stamp[1].decode(), "%Y-%m-%d %H:%M:%S").timestamp() * 1000 + int(stamp[2])
            if when > int(ended * 1000):
                return at
        at += len(line)
    return None


def _log_futures(home: Path, state: dict[str, Any], begun: set[str] | None = None,
                 rotated: dict[str, str] | None = None) -> dict[str, tuple[int, bytes]]:
    """What each file of HOME's ``logs/`` holds written after the tick STATE records: the bytes
    beyond the file's mark in it (:func:`log_marks`); the whole of a file the tick did not know
    as it is (begun since, or rotated: ``NAME.1`` is checked against NAME's mark too), whose
    path is added to BEGUN, empty or not.  ROTATED gets each ``NAME.1`` that was NAME at the
    tick (NAME.1's path -> NAME's).  A tick state without marks: the server log's lines stamped
    after the tick ended, and no other file."""
    out: dict[str, tuple[int, bytes]] = {}
    marks = state.get("logs")
    if not isinstance(marks, dict):
        ended = state.get("ended_at")
        for rel in SERVER_LOGS:
            if ended is None:
                break
            try:
                data = (home / rel).read_bytes()
            except FileNotFoundError:
                continue
            at = _future_of_log(data, float(ended))
            if at is not None:
                out[rel] = (at, data[at:])
        return out
    folder = home / LOGS_FOLDER
    known: dict[str, tuple[Path, str | None]] = {}  # path in the home -> (file, the name whose mark it passes)
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if path.is_file():
            rel = f"{LOGS_FOLDER}/{path.name}"
            known[rel] = (path, _passes(path, marks, rel))
    for rel in PERSON_FILES:
        if rel in marks and (home / rel).is_file():  # a tick state that marked them
            known[rel] = (home / rel, _passes(home / rel, marks, rel))
    for rel, (_path, name) in list(known.items()):
        if name is not None and name != rel:  # NAME.1 was NAME at the tick: the NAME there now was begun
            if name in known:  # since, whatever bytes it begins with
                known[name] = (known[name][0], None)
            if rotated is not None:
                rotated[rel] = name
    for rel, (path, name) in known.items():
        at = 0 if name is None else int(marks[name][0])
        if name is None and rel == HISTORY and marks[rel] is not None:  # rewritten whole since: the entries kept
            found = _history_end(path, marks[rel])
            at, name = (0, None) if found is None else (found, rel)
        if name is None and begun is not None:
            begun.add(rel)
        try:
            with path.open("rb") as fh:
                fh.seek(at)
                data = fh.read()
        except FileNotFoundError:
            continue
        if data:
            out[rel] = (at, data)
    return out


def _passes(path: Path, marks: dict[str, Any], rel: str) -> str | None:
    """Which tick's mark the log file PATH (REL in the home) passes, its own or, for ``NAME.1``,
    NAME's (a rotation since): it holds the bytes the mark's digest is of, at its size; None: neither."""
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return None
    with fh:
        for name in dict.fromkeys((rel, rel.removesuffix(".1"))):
            mark = marks.get(name)
            if isinstance(mark, list) and len(mark) == 2:
                size = int(mark[0])
                fh.seek(max(0, size - MARK_TAIL))
                tail = fh.read(min(size, MARK_TAIL))
                if len(tail) == min(size, MARK_TAIL) and _tail_digest(tail) == mark[1]:
                    return name
    return None


def _history_end(path: Path, mark: list[Any]) -> int | None:
    """Where the entries of the input history PATH that its MARK saw end, in a file rewritten whole
    since (the ring dropped its oldest entries, so theirs is not the mark's size): the last end of
    an entry, no further than that size, whose bytes before it the mark's digest is of; None: none."""
    size, digest = int(mark[0]), str(mark[1])
    if size == 0:
        return 0
    data = path.read_bytes()
    end = data.rfind(HISTORY_END, 0, size)
    while end >= 0:
        at = end + len(HISTORY_END)
        if at >= min(size, MARK_TAIL) and _tail_digest(data[at - min(size, MARK_TAIL):at]) == digest:
            return at
        end = data.rfind(HISTORY_END, 0, end)
    return None


RESULTS = "transcripts/results"  # tool results too long for the agent, each kept whole in a file


def _results_after(home: Path, ended: float | None) -> dict[str, bytes]:
    """The files of HOME's kept tool results written after a tick ended at ENDED (None: a tick
    state older than that time, none), by path in the home."""
    folder = home / RESULTS
    if ended is None or not folder.is_dir():
        return {}
    return {f"{RESULTS}/{p.name}": p.read_bytes() for p in sorted(folder.iterdir())
            if p.is_file() and p.stat().st_mtime > ended}


def _futures(home: Path, tick: int, state: dict[str, Any], begun: set[str] | None = None,
             rotated: dict[str, str] | None = None) -> dict[str, tuple[int, bytes]]:
    """The lines of HOME's transcripts and logs written after TICK (its STATE), by file (its
    path in the home): where they start, and those lines.  The log files and transcripts begun
    after TICK are added to BEGUN, those rotated since to ROTATED (:func:`_log_futures`)."""
    out: dict[str, tuple[int, bytes]] = {}
    ended = state.get("ended_at")
    folder = home / "transcripts"
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        if ended is not None and path.stat().st_mtime < float(ended) - MTIME_SLACK:
            continue  # not written since the tick ended: a session's before it
        if path.stem.endswith(HOME_STEPS):
            continue  # a step of the home's history (:func:`_record`), none of any tick's future
        found = _transcript_future(path, tick, ended)
        if found is not None:
            out[f"transcripts/{path.name}"] = found
            if found[0] == 0 and begun is not None:  # a session wholly after the tick: no run of the home now
                begun.add(f"transcripts/{path.name}")
    return out | _log_futures(home, state, begun, rotated)


def _mktree(home: Path, blobs: dict[str, str]) -> str:
    """The git tree of BLOBS (path in it -> blob sha, folders nested)."""
    entries: list[str] = []
    folders: dict[str, dict[str, str]] = {}
    for rel, blob in blobs.items():
        head, nested, rest = rel.partition("/")
        if nested:
            folders.setdefault(head, {})[rest] = blob
        else:
            entries.append(f"100644 blob {blob}\t{head}\n")
    entries += [f"040000 tree {_mktree(home, inner)}\t{folder}\n" for folder, inner in folders.items()]
    return _git(home, "mktree", stdin="".join(entries).encode()).decode().strip()


def _commit_beside(repo: HomeRepo, parent: str, files: dict[str, bytes], message: str) -> str:
    """A commit on PARENT of its tree with FILES (path -> bytes, in folders PARENT's tree does
    not have) added; its sha.  No index, ref or working file is touched."""
    home = repo.home
    folders: dict[str, dict[str, str]] = {}
    loose: dict[str, str] = {}  # a file at the top (one of PERSON_FILES) -> its blob
    for rel, data in files.items():
        folder, _, name = rel.partition("/")
        blob = repo.write_blob(data)  # zlib at git's loose level, in this process: a future's lines are long
        if name:
            folders.setdefault(folder, {})[name] = blob
        else:
            loose[folder] = blob
    top = [line for line in _git(home, "ls-tree", parent).decode().splitlines()
           if line.partition("\t")[2] not in folders and line.partition("\t")[2] not in loose]
    for folder, blobs in folders.items():
        top.append(f"040000 tree {_mktree(home, blobs)}\t{folder}")
    top += [f"100644 blob {blob}\t{name}" for name, blob in loose.items()]
    root = _git(home, "mktree", stdin=("\n".join(top) + "\n").encode())
    return _git(home, "commit-tree", root.decode().strip(), "-p", parent, "-m", message).decode().strip()


# The ends of the names of the files :func:`_record` writes: a rewind keeps them whatever tick it goes
# back to (the home was forked, and rewound, whatever its mind is now).
HOME_STEPS = (f"-{Rewind.kind}", f"-{Fork.kind}")


def _record(home: Path, tick: int, heading: str, text: str, event: Record, run_id: str | None = None) -> None:
    """Say what was done in agent-chat.org (a part the chat's reader skips) and in a transcript
    (RUN_ID's: made anew, when the step is done again)."""
    from .chat_log import ChatLog  # noqa: PLC0415

    ChatLog(home / "agent-chat.org").log.append(f"** {heading}\n{text}\n\n")
    run_id = run_id or datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + f"-{event.kind}"
    (home / "transcripts" / f"{run_id}.jsonl").unlink(missing_ok=True)
    transcript = Transcript(home / "transcripts", run_id)
    try:
        transcript.write(event, tick=tick)
    finally:
        transcript.close()


# -- a rewind, crash-safe -----------------------------------------------------------------
#
# A rewind first decides everything and changes nothing the home shows: the checks, the commit
# of the home as it is (an object no ref names yet), the lines of the future to move; then it
# writes them in REWIND_JOURNAL, synced.  From there on every step is one that, done again,
# gives the same home, so a rewind killed at any moment is finished by the next start (or
# rewind, or fork) from its journal; killed before the journal, it changed nothing.

REWIND_JOURNAL = ".git/amacs-rewind.json"
# Written in a home's git folder before a rewind makes its first object: the time (whole seconds) of
# the commit of the earliest tick a rewind of the home went back to.  Every object of a future a
# rewind abandoned was made after it: a pack whose newest object was made before it holds none (:func:`_packs_before`).
REWOUND_MARK = ".git/amacs-rewound"


def _commit_time(home: Path, commit: str) -> int:
    """COMMIT's time, in whole seconds (rounded down)."""
    return int(_git(home, "log", "-1", "--format=%ct", commit).decode().strip())


def _rewound_before(home: Path) -> int | None:
    """:data:`REWOUND_MARK`'s time; None when no rewind was begun in HOME; 0 when one was but when
    is not known (the mark is not readable, or the home was rewound before marks were kept: it has
    an abandoned future's ref and no mark)."""
    try:
        return int((home / REWOUND_MARK).read_text().split()[0])
    except FileNotFoundError:
        found = _git(home, "for-each-ref", "--count=1", "--format=%(refname)", ABANDONED)
        return 0 if found.strip() else None
    except (OSError, ValueError, IndexError):
        return 0


def _quick_check(db_path: Path) -> str:
    """``ok``, or what SQLite finds wrong in the database at DB_PATH (it reads every page)."""
    try:
        db = sqlite3.connect(db_path)
        try:
            return str(db.execute("PRAGMA quick_check").fetchone()[0])
        finally:
            db.close()
    except sqlite3.DatabaseError as err:
        return str(err)


def _refuse_damaged_memory(home: Path, doing: str, *, served: bool = False) -> None:
    """HistoryError, in one line, if HOME's memory.db is damaged (before anything is done).  A
    database sealed by a clean close and not written since is not read again (as at start:
    ``ltm.check_database``): its pages were checked when it was opened, or it was sealed then;
    nor one SERVED by the server asking (it opened it after that check, and alone wrote it since)."""
    from ..memory.ltm import sealed  # noqa: PLC0415 - sqlite schema, only when a rewind or fork runs

    db_path = home / "memory.db"
    if served or not db_path.exists() or sealed(db_path):
        return
    problem = _quick_check(db_path)
    if problem != "ok":
        raise HistoryError(f"refused: {db_path} is damaged ({' '.join(str(problem).split())[:120]}); nothing "
                           "was changed. Start AMACS on this home once (it moves a damaged memory.db aside and "
                           f"rebuilds it), then {doing} again")


def _refuse_damaged(home: Path, repo: HomeRepo, *, served: bool) -> str | None:
    """HistoryError, in one line, if HOME's tick state or memory.db is damaged or git is busy in
    it; checked before anything changes.  Returns the note of a stale git lock removed, or None."""
    state = home / STATE_FILE
    if state.exists() and read_state(home) is None:
        raise HistoryError(f"refused: {state} is damaged (it does not read as a tick state); nothing was "
                           f"changed. Restore it (git -C {home} checkout HEAD -- {STATE_FILE}), then rewind again")
    _refuse_damaged_memory(home, "rewind", served=served)
    try:
        return repo.clear_stale_lock()
    except CommitError as err:
        busy = str(err).partition("; the tick")[0]
        raise HistoryError(f"refused: {busy}; nothing was changed. Let that git finish, then rewind "
                           "again") from err


def _prepare(home: Path, tick: int, limit: float | None, *,
             served: bool) -> tuple[dict[str, Any], dict[str, Any], HomeRepo, str | None]:
    """Everything a rewind of HOME to TICK will do, decided, with nothing the home shows changed:
    the journal, the tick state it returns to, the home's repository, and the note of a stale git
    lock removed."""
    commit = tick_commit(home, tick)
    state = state_at(home, commit, tick)
    repo = HomeRepo(home)
    note = _refuse_damaged(home, repo, served=served)
    now = read_state(home)
    last = now["tick"] if now else last_tick(home)
    head = _git(home, "rev-parse", "HEAD").decode().strip()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%f")[:-3]  # to the millisecond: the rewinds of one second sort in order
    back_to, before = _commit_time(home, commit), _rewound_before(home)
    if before is None or back_to < before:  # before the first object of the future it abandons
        atomic_write(home / REWOUND_MARK, f"{back_to}\n")
        sync_paths([home / REWOUND_MARK])
    try:
        kept = repo.commit_aside(tracked(home), f"[TICK {last}][abandoned] the home as it was before a rewind to "
                                                f"tick {tick}", head)
    except CommitError as err:
        raise HistoryError(f"refused: {err}; nothing was changed") from err
    faults.point("rewind.kept")
    begun: set[str] = set()
    rotated: dict[str, str] = {}
    cut = _futures(home, tick, state, begun, rotated)
    results = _results_after(home, state.get("ended_at"))
    if cut or results:
        kept = _commit_beside(repo, kept, {**{rel: data for rel, (_at, data) in cut.items()}, **results},
                              f"[TICK {last}][abandoned] the transcripts' and logs' lines after tick {tick}")
    left = 0
    if (home / "memory.db").exists():
        db = sqlite3.connect(home / "memory.db")
        try:
            left = int(db.execute("SELECT count(*) FROM items WHERE id > ?", (int(state["ltm_max_id"]),)).fetchone()[0])
        finally:
            db.close()
    journal = {"version": 1, "tick": tick, "from_tick": last, "commit": commit, "kept": kept,
               "ref": f"{ABANDONED}/{stamp}-tick-{last}-to-{tick}", "run_id": f"{stamp}-rewind",
               "cut": {rel: [at, at + len(data), hashlib.sha256(data).hexdigest()] for rel, (at, data) in cut.items()},
               "removed": {rel: hashlib.sha256(data).hexdigest() for rel, data in results.items()},
               "begun": sorted(begun),
               "rotated": rotated,
               "left": left,
               "spent": rewound_spend.total(home),
               "limit": person_limit.current(home) if limit is None else limit}
    path = home / REWIND_JOURNAL
    atomic_write(path, json.dumps(journal))
    sync_paths([path])
    faults.point("rewind.journaled")
    return journal, state, repo, note


def _cut_out(path: Path, at: int, end: int, digest: str) -> None:
    """PATH without its bytes AT to END, the lines moved onto the abandoned ref, if it still holds
    them (DIGEST is theirs: done again, this changes nothing).  What was written after END (a
    live server's lines, a killed rewind's last words, the next start's) stays.  In place: a
    live server's descriptor appends on."""
    try:
        fh = path.open("r+b")
    except FileNotFoundError:
        return
    with fh:
        fh.seek(at)
        data = fh.read()
        if len(data) >= end - at and hashlib.sha256(data[:end - at]).hexdigest() == digest:
            fh.seek(at)
            fh.write(data[end - at:])
            fh.truncate(at + len(data) - (end - at))


def _held_open(paths: list[Path]) -> set[Path]:
    """Which of PATHS a descriptor of this process holds open: a program of this server still
    writing it (the server's own stderr, the thread that copies a tool server's stderr, the
    local model's log, kept open while llama.cpp runs).  All of them where this process's
    descriptors cannot be listed."""
    try:
        fds = os.listdir("/dev/fd")
    except OSError:
        return set(paths)
    held: set[tuple[int, int]] = set()
    for fd in fds:
        try:
            st = os.fstat(int(fd))
        except (OSError, ValueError):
            continue  # the descriptor that listed the folder, closed since
        held.add((st.st_dev, st.st_ino))
    out = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in held:
            out.add(path)
    return out


def _drop_begun(home: Path, begun: list[str]) -> None:
    """Remove each log file or transcript of BEGUN (begun after the tick, its bytes moved onto the abandoned
    ref) that is empty and that no program of this process writes: one written to since the
    rewind looked, or held open, stays (a live writer's descriptor appends on).  Done again,
    this changes nothing."""
    paths = [home / rel for rel in begun]
    held = _held_open(paths)
    for path in paths:
        try:
            if path not in held and path.stat().st_size == 0:
                path.unlink()
        except FileNotFoundError:
            continue


def _unrotate(home: Path, rotated: dict[str, str]) -> None:
    """Give each log file rotated since the tick (``NAME.1`` -> NAME, in ROTATED, cut to what NAME
    held at the tick) its name back, where NAME is gone (it was begun later and no program writes
    it): the folder is then as at the tick, but for the ``NAME.1`` the rotation wrote over.  Done
    again, this changes nothing."""
    for rel, name in rotated.items():
        if (home / rel).exists() and not (home / name).exists():
            os.replace(home / rel, home / name)


def _remove_if(path: Path, digest: str) -> None:
    """Remove PATH if it holds the bytes of DIGEST (done again, this changes nothing)."""
    try:
        if hashlib.sha256(path.read_bytes()).hexdigest() == digest:
            path.unlink()
    except FileNotFoundError:
        return


# Commits read at once where the newest few of a line are looked for (a whole line of 20,000 ticks: 0.2 s).
LOG_PAGE = 16


def _futures_before(home: Path, tick: int, commit: str, ref: str) -> str:
    """The words that name the futures earlier rewinds to TICK of the mind COMMIT holds left, but
    REF: their notes, in the chat log after the tick's end, are cut from it by this rewind.  (A
    future of a rewind to a later tick is named by the note of the future it is in.)  COMMIT may
    be an earlier rewind's to the tick: the tick's own commit is the first before it."""
    own, skip = commit, 0
    while True:  # the newest commits, a page at a time: not the whole line of a long history
        subjects = _git(home, "log", "--first-parent", f"--skip={skip}", f"--max-count={LOG_PAGE}", "--format=%H %s",
                        commit).decode(errors="replace").splitlines()
        found = next((line.split(" ", 1)[0] for line in subjects
                      if not line.split(" ", 1)[-1].startswith(f"[TICK {tick}][rewind]")), None)
        if found is not None or len(subjects) < LOG_PAGE:
            own = found or commit
            break
        skip += LOG_PAGE
    out = _git(home, "for-each-ref", "--sort=refname", f"--contains={own}", "--format=%(refname)", ABANDONED)
    earlier = [name for name in out.decode(errors="replace").split()
               if name != ref and (to := _ABANDONED_NAME.search(name)) and int(to[2]) == tick]
    if not earlier:
        return ""
    if len(earlier) == 1:
        return f" An earlier rewind left a future after this tick too: it is kept on git ref {earlier[0]}."
    return f" Earlier rewinds left futures after this tick too: they are kept on git refs {', '.join(earlier)}."


def _final_message(j: dict[str, Any]) -> str:
    return (f"[TICK {j['tick']}][rewind] back to tick {j['tick']} from tick {j['from_tick']}; the abandoned "
            f"future is {j['ref']}")


def _finish(home: Path, j: dict[str, Any], state: dict[str, Any] | None = None, repo: HomeRepo | None = None) -> str:
    """Do (or do again: each step gives the same home) the rewind journal J describes (STATE: the
    tick state of its commit, and REPO the home's repository, when there already); the sha of its
    last commit.  The journal is removed at the end."""
    tick, commit, ref = int(j["tick"]), str(j["commit"]), str(j["ref"])
    head = _git(home, "rev-parse", "HEAD").decode().strip()
    subject = _git(home, "log", "-1", "--format=%s%x00%P", head).decode().strip().split("\0")
    if subject[0] == _final_message(j) and subject[1:] == [commit]:  # only the journal was left
        sha = head
    else:
        _git(home, "update-ref", ref, str(j["kept"]))
        faults.point("rewind.ref")
        if head != commit:
            _git(home, "update-ref", "-m", f"rewind to tick {tick}", "HEAD", commit)
        faults.point("rewind.head")
        try:
            (repo or HomeRepo(home)).clear_stale_lock()  # a git killed in the check-out below left its lock
        except CommitError as err:
            raise HistoryError(f"the rewind to tick {tick} is not finished: {str(err).partition('; the tick')[0]}; "
                               "run it again once that git is done") from err
        state = state or state_at(home, commit, tick)
        repo = _check_out(home, commit, state, repo)
        faults.point("rewind.checked-out")
        for rel, (at, end, digest) in j["cut"].items():
            _cut_out(home / rel, at, end, digest)
        faults.point("rewind.cut")
        for rel, digest in j.get("removed", {}).items():  # a tool result kept after the tick: on the ref
            _remove_if(home / rel, digest)
        _drop_begun(home, list(j.get("begun", [])))
        _unrotate(home, dict(j.get("rotated", {})))
        faults.point("rewind.removed")
        # The mind's budget is tick TICK's; the money paid stays counted, the person's limit stays.
        rewound_spend.keep(home, float(j["spent"]), rewound_spend.mind_spent(home))
        if j["limit"] is not None:
            person_limit.write(home, float(j["limit"]))
        faults.point("rewind.spend")
        if (home / "memory.db").exists():
            _memory_at(home / "memory.db", state, ref)
        faults.point("rewind.memory")
        _record(home, tick, "Rewound",
                f"Rewound to this tick from tick {j['from_tick']}. The abandoned future is kept on git ref {ref} "
                f"({j['left']} memory item versions of it in memory.db's abandoned_items).{_futures_before(home, tick, commit, ref)}",
                Rewind(to_tick=tick, from_tick=j["from_tick"], ref=ref, abandoned_versions=int(j["left"])),
                run_id=str(j["run_id"]))
        faults.point("rewind.recorded")
        sha, _ = repo.commit(tracked(home), _final_message(j))
        faults.point("rewind.committed")
    path = home / REWIND_JOURNAL
    path.unlink()
    sync_paths([path.parent / "HEAD"])
    return sha


def finish_unfinished(home: Path) -> str | None:
    """Finish the rewind of HOME a kill cut short, if one was (its journal is there); the line
    that says so, or None.  At every start, and before a rewind or fork of HOME."""
    path = home / REWIND_JOURNAL
    if not path.exists():
        return None
    try:
        j = json.loads(path.read_text(encoding="utf-8"))
        tick, ref = int(j["tick"]), str(j["ref"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise HistoryError(f"{path} (the record of a rewind cut short) cannot be read ({err}); move it aside "
                           "and check the home's git log before going on") from err
    _finish(home, j)
    return (f"a rewind to tick {tick} was cut short (its process was killed) and is now finished: {home} is at "
            f"tick {tick}; the abandoned future is kept on git ref {ref}")


def rewind(home: Path, tick: int, *, locked: bool = False, limit: float | None = None) -> Done:
    """Return HOME to just after tick TICK, keeping the future it leaves on a git ref, and the
    budget limit LIMIT (default: the one HOME has now).  Crash-safe: killed at any moment, HOME
    is as before, or the next start finishes it (:func:`finish_unfinished`).

    Refused (HistoryError) while a live server serves HOME, unless LOCKED (the
    server itself rewinds, holding the lock)."""
    t0 = time.perf_counter()
    home = home.expanduser().resolve()
    held = None if locked else lock(home)
    try:
        earlier = finish_unfinished(home)
        faults.point("rewind.start")
        journal, state, repo, stale = _prepare(home, tick, limit, served=locked)
        sha = _finish(home, journal, state, repo)
        notes = [n for n in (earlier, stale) if n]
        return Done(home, tick, sha, str(journal["ref"]), time.perf_counter() - t0, notes)
    finally:
        if held is not None:
            held.release()


# -- a fork, crash-safe: made in a folder of its own, renamed into place whole -------------

_FORKING = ".{}.forking-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clear_cut_short(dest: Path) -> str | None:
    """Remove what forks into DEST that were killed left (their folders beside it); the note
    saying so, or None.  A fork into DEST still being made by a live process is refused."""
    removed = []
    for folder in sorted(dest.parent.glob(_FORKING.format(dest.name) + "*")) if dest.parent.is_dir() else []:
        pid = folder.name.rpartition("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
            raise HistoryError(f"refused: a fork into {dest} is being made (pid {pid}); wait for it, or name "
                               "another folder")
        shutil.rmtree(folder)
        removed.append(folder.name)
    if not removed:
        return None
    return f"removed {', '.join(removed)} beside {dest}: a fork into it that was cut short (its process was killed)"




def _link(src: Path, dest: Path) -> bool:
    """DEST as a hard link of SRC (a copy across file systems); False if SRC is gone."""
    try:
        os.link(src, dest)
    except FileExistsError:
        pass
    except FileNotFoundError:
        return False
    except OSError:
        try:
            shutil.copyfile(src, dest)
        except FileNotFoundError:
            return False
    return True


def _made_at(objects: Path, commit: str, when: int) -> float:
    """When COMMIT was made: WHEN (its time, in whole seconds), or within that second its file's
    time while it is a loose object in the object folder OBJECTS (written once, as it was made, by
    the file clock that dates packs too: a pack dated before it was written before COMMIT was made).
    A file time outside COMMIT's second is not its making's (a copy of the home): not used."""
    try:
        written = (objects / commit[:2] / commit[2:]).stat().st_mtime
    except FileNotFoundError:  # packed
        return when
    return written if when <= written < when + 1 else when


def _packs_before(home: Path, made: float) -> dict[str, float]:
    """HOME's packs that hold only objects of the past of a commit made at MADE (:func:`_made_at`),
    each with the time its newest object was made: every one whose newest object was made
    before that commit was (as HOME's packer noted it, :func:`~.git_repo.pack_times`; else the
    pack file's time: a pack holds what existed when it was written, and git only ever sets a
    pack's time later) and before the commit of the earliest
    tick a rewind went back to, if any (:data:`REWOUND_MARK`): the objects made before it are of
    one line of ticks, the past every later line shares; so such a pack holds nothing of a tick
    after that commit's, nor of a future any rewind abandoned."""
    rewound = _rewound_before(home)
    if rewound is not None:
        made = min(made, rewound)
    noted = pack_times(home)
    clean = {}
    for pack in (home / ".git" / "objects" / "pack").glob("pack-*.pack"):
        try:
            newest = noted.get(pack.name) or pack.stat().st_mtime
        except FileNotFoundError:
            continue
        if newest < made:
            clean[pack.name] = newest
    return clean


def _alternate(folder: Path) -> str:
    """FOLDER as GIT_ALTERNATE_OBJECT_DIRECTORIES names one folder: C-quoted if it holds the list's
    separator or starts with a quote (git reads an entry that starts with one so)."""
    text = str(folder)
    if os.pathsep not in text and not text.startswith('"'):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _loose_before(objects: Path, before: int) -> bool:
    """Whether the object folder OBJECTS holds a loose object written before BEFORE (in seconds): a
    commit made before then may reach it (one made then reaches none written after)."""
    for folder in os.scandir(objects):
        if len(folder.name) != 2 or not folder.is_dir():
            continue
        for entry in os.scandir(folder.path):
            try:
                if len(entry.name) == 38 and entry.stat().st_mtime < before:
                    return True
            except FileNotFoundError:  # packed and pruned meanwhile
                continue
    return False


def _link_loose(source: Path, target: Path, listed: bytes) -> tuple[list[bytes], set[str]]:
    """Of the objects LISTED (``git rev-list --objects`` lines), those loose in the object folder
    SOURCE hard-linked into TARGET (a loose object is named by its hash and never written again, so
    a link is a copy): the lines of the others, and the folders linked into.  An object the packer
    packed and pruned meanwhile (its link finds it gone) is among the others: it is in a pack now."""
    rest, folders = [], set()
    for line in listed.splitlines(keepends=True):
        sha = line[:40].decode()
        src = source / sha[:2] / sha[2:]
        if src.exists():
            (target / sha[:2]).mkdir(exist_ok=True)
            if _link(src, target / sha[:2] / sha[2:]):
                folders.add(sha[:2])
                continue
        rest.append(line)
    return rest, folders


def _history_up_to(home: Path, commit: str, made: Path) -> None:
    """The git objects of HOME's history up to COMMIT, and no other, in MADE's repository.

    The packs that hold only COMMIT's past (:func:`_packs_before`) are linked into MADE, whole (git
    never changes a pack in place: a repack writes new packs and deletes old ones, so a link is a
    copy).  git walks the history from COMMIT down to the newest commit HOME's packer noted as
    packed whole in packs kept here (:data:`~.git_repo.PACKED_FILE`), not further: O(ticks since),
    not O(history).  What the walk reaches that is loose in HOME (the ticks since its packer's last
    repack) is linked too, each object (:func:`_link_loose`), when HOME has a loose object older
    than COMMIT; the rest is made into one pack beside them, read from HOME's objects (git's
    alternates, for that one command: MADE keeps no reference to HOME), reusing the packed data as
    it is (no object is compressed or hashed again: a fetch hashes every version of every file;
    a loose object packed would be compressed again).  Made while HOME's packer may roll packs up
    and prune the objects it packed: git finds an object moved meanwhile in the pack that took it
    in; if one is still missing, the packing fails and the history is fetched."""
    source, target = home / ".git" / "objects", made / ".git" / "objects"
    when = _commit_time(home, commit)
    dated = _packs_before(home, _made_at(source, commit, when))
    kept = set()
    for whole in dated:  # linked only if whole here (a pack the packer removed meanwhile is not kept)
        pack, index = source / "pack" / whole, (source / "pack" / whole).with_suffix(".idx")
        if _link(pack, target / "pack" / pack.name) and _link(index, target / "pack" / index.name):
            kept.add(whole)
        else:
            for gone in (pack, index):
                (target / "pack" / gone.name).unlink(missing_ok=True)
    for whole in kept:  # what these hold is not packed again
        (target / "pack" / whole).with_suffix(".keep").touch()
    # The walk stops at the newest commit HOME's packer found packed whole in packs kept here: what
    # it reaches is here already (and what COMMIT reaches beyond it is walked and packed).
    whole_in_kept = [(sha, names) for sha, names in packed_records(home) if names and names <= kept]
    revs = f"{commit}\n" + (f"^{whole_in_kept[-1][0]}\n" if whole_in_kept else "")
    alternates = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": _alternate(source)}
    # One thread: the memory's copy runs beside it, and git's threads for so small a pack cost more CPU.
    packing = ("pack-objects", "--threads=1", "--honor-pack-keep", "--non-empty", DELTA_WINDOW, "-q",
               str(target / "pack" / "pack"))
    name: str | None
    linked: set[str] = set()
    try:
        if _loose_before(source, when + 1):
            rest, linked = _link_loose(source, target, _git(home, "rev-list", "--objects", "--stdin",
                                                            stdin=revs.encode()))
            name = _git(made, *packing, stdin=b"".join(rest), env=alternates).decode().strip()
        else:
            name = _git(made, *packing, "--revs", stdin=revs.encode(), env=alternates).decode().strip()
    except HistoryError:  # an object is not found: fetch the history instead
        name, linked = None, set()
    stays = {f"pack-{name}.pack", f"pack-{name}.idx"} if name else set()
    stays |= {f"{whole[:-len('.pack')]}{suffix}" for whole in kept if name is not None for suffix in (".pack", ".idx")}
    for path in target.iterdir():  # all but the new pack, those kept (not their .keep files) and the links
        if path.name == "pack":
            for packed in path.iterdir():
                if packed.name not in stays:
                    packed.unlink()
        elif path.name != "info" and path.name not in linked:
            shutil.rmtree(path)
    if name is None:
        _git(made, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", str(home), commit)
        return
    # What a fork of this fork may take as held whole by its packs: COMMIT when it is packed whole
    # here; when objects of it were linked loose, only what was packed whole in the packs kept
    # (a fork of this fork walks no further down than what this says, so it must not say more).
    held = ([[commit, sorted(pack for pack in stays if pack.endswith(".pack"))]] if not linked
            else [[whole_in_kept[-1][0], sorted(whole_in_kept[-1][1])]] if whole_in_kept else [])
    atomic_write(made / ".git" / PACKED_FILE, json.dumps({
        "packed": held, "newest": {whole: dated[whole] for whole in sorted(kept)}}))


def _fork_memory(home: Path, dest: Path, state: dict[str, Any]) -> None:
    """DEST, a fork's memory.db: HOME's memory as at the tick STATE is of (none when HOME has none)."""
    if (home / "memory.db").exists():
        if not _memory_from_snapshot(home, dest, state):
            _memory_up_to(home / "memory.db", dest, state, rewound=_rewound_before(home) is not None)
        faults.point("fork.memory")


def fork(home: Path, tick: int, dest: Path, *, locked: bool = False, limit: float | None = None,
         commit: str | None = None) -> Done:
    """A new AMACS home DEST holding HOME's mind just after tick TICK (its history up to there),
    with the budget limit LIMIT (default: the one HOME has now).  COMMIT, when given, is the commit
    of tick TICK to fork (:func:`origin_commit` checked it), not the newest of that tick on HOME's line.  Crash-safe: the fork is made in
    a folder beside DEST and renamed to DEST once whole, so a kill leaves no DEST (and HOME as it
    was); the next fork into DEST removes what it left.

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
        earlier = finish_unfinished(home)  # HOME's mind as a rewind cut short meant it
        commit = tick_commit(home, tick) if commit is None else commit
        state = state_at(home, commit, tick)
        _refuse_damaged_memory(home, "fork", served=locked)
        dest.parent.mkdir(parents=True, exist_ok=True)
        cleared = _clear_cut_short(dest)
        made = dest.parent / f"{_FORKING.format(dest.name)}{os.getpid()}"
        made.mkdir(mode=0o700)
        try:
            # Until the fork is whole: no server starts on the folder it is made in.
            (made / FORK_UNFINISHED).write_text(f"a fork of {home} at tick {tick}, being made\n")
            faults.point("fork.made")
            # memory.db is made beside the git work, in a thread: copying and syncing its bytes
            # waits mostly on the kernel (the copy, the disk), git's commands on their processes;
            # and so are the tick's files the home's server vouches for (its past months).  Both
            # start first: neither needs the fork's repository.
            memory = _Beside(lambda: _fork_memory(home, made / "memory.db", state), "memory")
            vouched = _Beside(lambda: _copy_vouched(home, commit, made), "files")
            try:
                _git(made, "init", "--quiet")
                # A repository of its own holding the history up to the tick only: no later object, ref
                # or reflog entry of HOME (a clone would share them all).
                _history_up_to(home, commit, made)
                _git(made, "update-ref", "-m", f"fork of {home} at tick {tick}", "HEAD", commit)
                faults.point("fork.fetched")
                repo = _check_out(made, commit, state, vouched=vouched)
                faults.point("fork.checked-out")
                limit = person_limit.current(home) if limit is None else limit
                if limit is not None:
                    person_limit.write(made, limit)
                for name in SETTINGS:
                    if (home / name).exists():
                        shutil.copy2(home / name, made / name)
                faults.point("fork.settings")
            except BaseException:
                memory.wait()  # nothing writes in MADE once it is removed
                vouched.wait()
                raise
            memory.result()  # memory.db whole (or its error raised) before the fork records itself
            atomic_write(made / FORK_ORIGIN, json.dumps({"from": str(home), "tick": tick, "commit": commit}))
            _record(made, tick, "Forked", f"Forked from {home} at this tick.",
                    Fork(from_home=str(home), at_tick=tick, from_commit=commit))
            faults.point("fork.recorded")
            sha, _ = repo.commit(tracked(made), f"[TICK {tick}][fork] forked from {home} at tick {tick}\n\n"
                                                f"Its commit there: {commit}")
            faults.point("fork.committed")
            (made / FORK_UNFINISHED).unlink()
            sync_paths([p for p in made.rglob("*") if p.is_file()])
        except BaseException:
            shutil.rmtree(made, ignore_errors=True)  # failed (not killed): nothing of it is left
            raise
        os.rename(made, dest)  # whole, at once (over DEST when it is an empty folder)
        sync_paths([dest])
        faults.point("fork.renamed")
        _ready_again(home)  # for the next fork, if this one took the ready copy
        notes = [n for n in (earlier, cleared) if n]
        return Done(dest, tick, sha, None, time.perf_counter() - t0, notes)
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


# ``amacs-server ticks``: how many inputs it lists unless told, and the width of an input's line
# (the picker's, amacs-history--label-width).
TICKS_PAGE = 20
LABEL_WIDTH = 70


def _label(text: str) -> str:
    """TEXT, an input, on one line of :data:`LABEL_WIDTH` characters at most."""
    said = " ".join(text.split())
    return said if len(said) <= LABEL_WIDTH else said[:LABEL_WIDTH - 1] + "…"


def _local(stamp: str) -> str:
    """STAMP, an ISO 8601 time as the chat log writes it, in this machine's time to the second."""
    try:
        return datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return stamp or "-"


def _ticks(argv: list[str]) -> int:
    """``amacs-server ticks HOME``: the inputs of HOME's history, newest first, each with its tick,
    when it was typed and its first words; a page at a time, as M-x amacs-rewind offers them."""
    import argparse  # noqa: PLC0415

    from .chat_log import ChatLog  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="amacs-server ticks", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The person's inputs in HOME's history, newest first (what M-x amacs-rewind offers):\n"
                    "one line each, its tick, when it was typed (this machine's time) and its first words.\n"
                    "TICK is the tick the input began (agent-chat.org's `* Tick N`, git's `[TICK N]`):\n"
                    "`amacs-server rewind HOME --tick N-1` goes back to before it was typed (as the\n"
                    "picker does), `--tick N` to the end of that tick. A rewind's abandoned inputs are\n"
                    "not listed (they are on its git ref). Reads only the chat log's end, as far as the\n"
                    "page takes; it changes nothing, and may run while a server serves HOME.")
    parser.add_argument("home", help="the AMACS home")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("-n", type=int, default=TICKS_PAGE, metavar="N",
                      help=f"list the N newest (default {TICKS_PAGE})")
    size.add_argument("--all", action="store_true", help="list every input")
    parser.add_argument("--before", type=int, metavar="TICK",
                        help="only the inputs before tick TICK (the next page: the oldest tick listed)")
    parser.add_argument("--json", action="store_true",
                        help='one JSON object: {"inputs": [{"tick", "time" (ISO 8601, as the chat log '
                             'has it), "input" (whole)}, ...] newest first, "more": older ones are left}')
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("-n wants a number above 0 (--all: every input)")
    home = Path(args.home).expanduser()
    if not (home / ".git").is_dir():
        print(f"amacs-server ticks: {home} has no git history: is it an AMACS home?", file=sys.stderr)
        return 1
    try:
        page, more = ChatLog(home / "agent-chat.org").input_page(sys.maxsize if args.all else args.n, args.before)
    except OSError as err:
        print(f"amacs-server ticks: {' '.join(str(err).split())}", file=sys.stderr)
        return 1
    if args.json:
        out = json.dumps({"home": str(home.resolve()), "more": more,
                          "inputs": [{"tick": e.tick, "time": e.timestamp, "input": e.human} for e in page]},
                         ensure_ascii=False) + "\n"
    else:
        width = len(str(page[0].tick)) if page else 0
        out = "".join(f"{e.tick:>{width}}  {_local(e.timestamp)}  {_label(e.human or '')}\n" for e in page)
    try:
        sys.stdout.write(out)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the flush at exit is quiet
        return 0
    if (home / REWIND_JOURNAL).exists():
        print(f"amacs-server ticks: a rewind of {home} was cut short: its next start (or rewind, or fork) "
              "finishes it, and the inputs after the tick it went to leave the list", file=sys.stderr)
    if not page:
        where = f"before tick {args.before} " if args.before is not None else ""
        print(f"amacs-server ticks: no input {where}in {home}", file=sys.stderr)
    elif more and not args.json:
        print(f"amacs-server ticks: older inputs: --before {page[-1].tick} (or -n N, --all)", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    """``amacs-server rewind HOME --tick N``, ``amacs-server fork HOME --tick N|now DEST`` and
    ``amacs-server ticks HOME`` (which tick was which input)."""
    import argparse  # noqa: PLC0415

    command, rest = argv[0], argv[1:]
    if command == "ticks":
        return _ticks(rest)
    listing = "which tick was which input: amacs-server ticks HOME (newest first; -n, --all, --json)"
    parser = argparse.ArgumentParser(prog=f"amacs-server {command}", epilog=listing)
    parser.add_argument("home", help="the AMACS home")
    if command == "fork":
        parser.add_argument("--tick", type=_tick, required=True,
                            help="the tick whose end to fork at, or now: the last one; N-1 forks from "
                                 "before the input of tick N")
        parser.add_argument("dest", help="the new home")
    else:
        parser.add_argument("--tick", type=int, required=True,
                            help="the tick to return to (its end); N-1 goes back to before the input of tick N")
    args = parser.parse_args(rest)
    os.umask(0o077)
    home = Path(args.home).expanduser().resolve()
    try:
        tick = last_tick(home) if args.tick == "now" else args.tick
        inside = mid_turn(home, tick, "a fork there would start" if command == "fork" else
                          "rewound there, it would go on", lambda n: f"`--tick {n}`", "a new home",
                          now=None if command == "fork" else "the mind is there now: a rewind there changes nothing")
        if inside is not None:
            print(f"amacs-server {command}: refused: {inside}; `amacs-server ticks {args.home}` lists the inputs "
                  "and the tick each began", file=sys.stderr)
            return 1
        if command == "fork":
            done = fork(home, tick, Path(args.dest))
        else:
            done = rewind(home, tick)
            atomic_write(home / UNTOLD_REWIND, json.dumps({"tick": tick, "ref": done.abandoned, "at": time.time()}))
    except NoSuchTick as err:
        print(f"amacs-server {command}: {' '.join(str(err).split())}; `amacs-server ticks {args.home}` "
              "lists the inputs and their ticks", file=sys.stderr)
        return 1
    except (HistoryError, OSError, sqlite3.Error) as err:
        print(f"amacs-server {command}: {' '.join(str(err).split())}", file=sys.stderr)
        return 1
    for note in done.notes:
        print(f"amacs-server {command}: {note}", file=sys.stderr)
    print(done.line())
    return 0
