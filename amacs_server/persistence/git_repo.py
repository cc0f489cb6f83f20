"""The AMACS home as a git repository: one commit per tick (docs/ARCHITECTURE.md, Persistence and git).

A tick's commit is that tick: at the tick's end the loop thread takes a
:class:`Snapshot`, the bytes of every tracked file (a file not there is not in
it), and the commit is built from the snapshot alone, however late it is made.
Commits are made off the loop thread by one :class:`CommitWorker` per home, in
tick order: the prompt returns without waiting for git.
The first commit makes the repository and sets its configuration with git
itself.  Blobs are written by the worker as loose objects (zlib, in this
process); the index, tree, commit and ref by git plumbing commands, each in a
session of its own, started out of reach of the signals that stop the server
(:func:`start_git`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import faults
from ..errors import AmacsError
from ..files import atomic_write, copy_range, deferred_sync, sync_paths, write_back_soon
from ..memory.memid import DELIM, for_person

log = logging.getLogger("amacs.git")

# shell-history is Emacs's input ring (M-p) and shell-draft the input typed and not yet sent:
# the person's, not the agent's mind; neither is committed.  model-capabilities.json is the server's
# cache of what each model can do (a setting a fork copies, history.SETTINGS): not the mind either.
GITIGNORE = ("memory.db*\ntranscripts/\nlogs/\nserver.json\nserver.pid\n.*.tmp\nshell-history\n.server.lock\n"
             "rewound-spend\nshell-draft\nbudget-limit\n.uncommitted-tick\nmodel-capabilities.json\n")
# The home's own git attributes (.git/info/attributes, not a tracked file): the shell's input
# history, which a rewind commits onto an abandoned future's ref, ends each entry with a NUL; git
# would take it for binary and show no diff of the inputs abandoned.  Its diff driver (the home's
# git config) shows each entry on a line of its own (git runs the command by the shell, the file's
# name after it) without the NUL (^@) that ends it: Emacs writes each as INPUT, NUL, newline.
ATTRIBUTES = "shell-history diff=amacs-inputs\n"
ATTRIBUTES_BEFORE = ("shell-history diff\n",)  # written by earlier versions: made anew
INPUTS_DIFF = (("diff.amacs-inputs.textconv", "tr -d '\\000' <"), ("diff.amacs-inputs.binary", "false"))
# Lines added to GITIGNORE after homes were made with it: appended to an existing home's file.
GITIGNORE_ADDED = ("shell-history", ".server.lock", "rewound-spend", "shell-draft", "budget-limit",
                   ".uncommitted-tick", "model-capabilities.json")
# The newest commit asked for and not yet made, in the home (JSON): its message and each file's
# digest, size and mode in its snapshot.  Written as the commit is asked for (at the tick's end),
# removed once it is made: a server stopped or killed in between leaves it, and the next start
# commits that tick from the files, if they still hold the bytes it ended with (:class:`Uncommitted`).
UNCOMMITTED = ".uncommitted-tick"
# Without /proc (so no way to see which processes use the repository), a lock this old is stale.
STALE_LOCK_SECONDS = 10.0
# How long a commit waits for a live git (the person's own, or one a killed server left running)
# to release its lock.
LOCK_WAIT_SECONDS = 5.0
# Loose objects are packed every PACK_EVERY commits, in a thread of its own so
# commits never wait for it (git allows both at once: `repack -d' deletes only
# loose objects it packed).  git's own `gc --auto' is off: it waits for 6,700
# loose objects, which for a growing agent-chat.org is gigabytes.
PACK_EVERY = 25
# Consecutive versions of a file are the best delta bases; they sort next to
# each other, so a small window finds them and keeps `repack' cheap.
# One thread at low priority: the loop thread keeps the other core (measured: a
# roll-up at ~5,000 ticks took 26 s with every core).
# (A fork's pack of the objects its tick reaches beyond the packs it keeps searches as narrow a
# window: those whose delta base came after the tick are deltified again, 60 ms less CPU at 20,000
# ticks than git's 10, the pack 4 % bigger.)
DELTA_WINDOW = "--window=4"
_PACK_OBJECTS = ("-c", "pack.threads=1", "pack-objects", "--stdin-packs", "--delta-base-offset", "--non-empty", "-q",
                 DELTA_WINDOW, "--depth=50")
# The loose objects, every one (as git's geometric repack takes them), into a pack of their own.
PACK_ARGS = (*_PACK_OBJECTS, "--unpacked")
# The packs named on its input, whole (no loose object: the pack holds nothing newer than they do).
ROLL_ARGS = _PACK_OBJECTS
PACK_NICE = 10
# The packer rolls packs up geometrically (each at least twice the objects of all smaller ones
# together, as git's --geometric=2), but never its PACK_RECENT newest ones (by when their newest
# object was made): a roll-up holds only objects older than the last PACK_RECENT repacks, so a
# fork to a tick within them keeps every pack made before the tick, and its walk is the ticks
# since the last repack before it.  250 ticks: the rewind picker's first page (200 inputs), the
# ticks not yet packed, and a few ticks that were not inputs.
PACK_RECENT = 10
PACK_FACTOR = 2
# Kept by the packer in a home's git folder, JSON: {"packed": [[commit, [pack file names]], ...],
# "newest": {pack file name: time}}.  Each of "packed", oldest first, says that every object
# COMMIT reaches sits in the packs named.  A pack's objects never change (a repack that rolls
# packs up writes a new one holding theirs; the list names it in their place), so the statement
# stays true while those packs exist.  A fork walks the history only down to such a commit.  Of
# the commits said of the same packs only the newest is kept (it says more), and of the rest the
# newest PACKED_KEEP.  "newest" says, of each pack the packer made, that every object in it was
# made before that time (in seconds): a pack of loose objects, when it was written; a roll-up,
# the newest of the packs it took in (not when it was written).  A pack it does not name: the
# pack file's time (git sets it later, never earlier).  Homes packed before "newest" was kept hold
# the list of "packed" alone.
PACKED_FILE = "amacs-packed"
PACKED_KEEP = 32


# The files of the mind a home tracks (persistence.history lists them on disk): these names,
# and every file under these folders.  One of them gone from the home is gone from the next commit.
TRACKED_NAMES = ("consciousness.el", "agent-chat.org", "monologue.org", "scratchpad.org", "tick-state.json")
TRACKED_FOLDERS = ("chat", "monologue", "skills")
# A file whose stat is as it was when last read is read again unless its change time was at
# least this long before that read: a write within the file system's time granularity of a
# read can leave the stat unchanged (git's "racily clean" entries).
RACY_NS = 3_000_000_000
# Each tracked file's stat when its bytes were read, and their blob, kept in .git for the next
# server (rewritten after a commit when it changed): its first snapshot reads and hashes only
# the files changed since, not every month of the history.  Only a file whose stat cannot hide
# a change (RACY_NS) is kept.
SEEN_FILE = "amacs-seen.json"
# A file that only grew is kept as its earlier chunks and the new bytes (the snapshots of a
# backlog share what they have in common); past this many chunks it is one chunk again.
MAX_CHUNKS = 16
# A commit message's eval form and result are cut at these lengths (git log stays readable;
# the whole of both is in the transcript).
EVAL_FORM_CHARS = 2000
EVAL_RESULT_CHARS = 1000


# The signals that stop the server (the hangup Emacs sends the server's process group when it
# quits, a TERM, a Ctrl-C): blocked in the thread that starts a git, so the git starts with them
# blocked.  A git runs in a session of its own, but from its fork until its setsid it is still in the
# server's group: a hangup sent to the group then was delivered once subprocess unblocked the
# signals, before git ran, and killed it ("git ls-files failed (-1)"), and the tick whose commit the
# server stopped to make had none.  Blocked, the signal stays pending in git, which never unblocks
# it, and goes with git's exit: a stop of the server never stops its git (SIGKILL does).  (A git
# that is a shell script unblocks them, dash does: it would still get such a hangup.)
STOP_SIGNALS = frozenset({signal.SIGHUP, signal.SIGTERM, signal.SIGINT})


def git_env() -> dict[str, str]:
    """The server's environment for a git of the home's own: without what would point it elsewhere."""
    return {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}


def start_git(command: list[str], **options: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(COMMAND, **OPTIONS)`` in a session of its own, with :data:`STOP_SIGNALS`
    blocked (see there)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        return subprocess.Popen(command, start_new_session=True, **options)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def run_git(command: list[str], cwd: Path, *, data: bytes = b"", env: dict[str, str] | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess[bytes]:
    """``subprocess.run(COMMAND, input=DATA, capture_output=True)`` in CWD, started by :func:`start_git`."""
    with start_git(command, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE) as proc:
        try:
            stdout, stderr = proc.communicate(data, timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


class CommitError(AmacsError, RuntimeError):
    """The commit failed; the tick's files are on disk and the next commit will carry them."""


class GitFailed(AmacsError, RuntimeError):
    """A git command exited with an error (its stderr is the message)."""


# What a mood's tag in a subject does not end or start with: the model's list punctuation ("focused,").
_TAG_ENDS = " ,;:.!?-_/|"


# An input, a form or a reply named in a tick's subject: its first this many characters, on one line.
SUBJECT_PART_CHARS = 60


def commit_message(tick: int, thread: str | None, mood: str, monologue: str, *, said: str | None = None,
                   reply: str | None = None, eval_form: str | None = None, eval_result: str | None = None,
                   eval_error: str | None = None, began: str | None = None,
                   blocked: tuple[str, str] | None = None) -> str:
    """``[TICK 42][thread-id][mood] WHAT — monologue`` on one line; after an eval, a body with
    its form and its result or error, each cut at a length a log reads well at (the transcript
    has them whole): the history shows eval -> result -> reply, the reply in agent-chat.org.

    WHAT makes ``git log --oneline`` the story: the input that began the tick (SAID, as
    ``«its first words»``), else the events that began it (BEGAN, as ``on EVENTS:``) and what
    the tick did (``eval FORM``, else ``reply: REPLY``), each cut to :data:`SUBJECT_PART_CHARS`;
    an action a compulsion blocked (BLOCKED: the action, ``reply`` or ``eval``, and the reason
    the agent was given) is named with who blocked it and their words
    (``reply blocked by compulsion-3 (spawn-limiter): …``), after the input that began the tick.  The subject is for a person reading the log: a memory
    address in it reads as the shell shows it, without its delimiters, and the mood's tag has
    no punctuation or space at its ends (the transcript keeps what the model wrote); so do
    the body's result and error, while its form is the code as it ran."""
    tag = " ".join(mood.split()).strip(_TAG_ENDS) or " ".join(mood.split())
    evaled = f"eval {_one_line(eval_form)}" if eval_form is not None else ""
    did = evaled or (f"reply: {_one_line(reply)}" if reply else "")
    if blocked is not None:
        action, why = blocked
        did = (f"{evaled} {_blocked_part(why)}" if action == "eval" and evaled
               else f"{action} {_blocked_part(why)}")
    what = (" ".join(p for p in (f"«{_one_line(said)}»", did if blocked else "") if p) if said is not None
            else f"on {_one_line(began)}" + (f": {did}" if did else "") if began else did)
    thought = _one_line(monologue, None)
    story = f"{what} — {thought}" if what and thought else what or thought
    subject = f"[TICK {tick}][{thread or 'no-thread'}][{tag}] {story}"
    if eval_form is None:
        return subject
    outcome = (f"error: {_cut(for_person(eval_error), EVAL_RESULT_CHARS)}" if eval_error is not None
               else f"result: {_cut(for_person(eval_result or '(none)'), EVAL_RESULT_CHARS)}")
    body = f"eval: {_cut(eval_form, EVAL_FORM_CHARS)}\n{outcome}"
    return f"{subject}\n\n" + body.replace("\0", "\ufffd")  # a NUL cannot be in git's arguments


# The reason a compulsion's block gives the agent (agents/world.py), read back for a subject.
_BLOCKED = re.compile(r"\Ablocked by compulsion (\S+) \(([^)]*)\): (.*)\Z", re.DOTALL)


def _blocked_part(reason: str) -> str:
    """``blocked by ID (TEMPLATE): WORDS`` of a block's REASON, WORDS cut to a subject's part."""
    parts = _BLOCKED.match(reason.strip())
    if parts is None:
        return f"blocked: {_one_line(reason)}"
    return f"blocked by {parts[1]} ({parts[2]}): {_one_line(parts[3])}"


def _one_line(text: str, limit: int | None = SUBJECT_PART_CHARS) -> str:
    """TEXT on one line without memory addresses' delimiters, cut to LIMIT characters (None: whole)."""
    line = " ".join(text.replace(DELIM, "").replace("\0", "\ufffd").split())
    return line if limit is None or len(line) <= limit else line[:limit - 1] + "…"


def _cut(text: str, limit: int) -> str:
    """TEXT, or its first LIMIT characters and how many more there are."""
    text = text.strip()
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit:,} more characters]"


def _ignore_also(ignore: Path, names: Iterable[str]) -> None:
    """Append to the .gitignore IGNORE each of NAMES it lacks (a line of its own); the rest stays."""
    try:
        text = ignore.read_text(encoding="utf-8", errors="replace")
        lines = set(text.splitlines())
        missing = [name for name in names if name not in lines]
        if missing:
            with ignore.open("a", encoding="utf-8") as fh:
                fh.write(("" if text.endswith("\n") or not text else "\n") + "".join(f"{n}\n" for n in missing))
    except OSError as err:  # a read-only home: git status shows the file, nothing worse
        log.warning("could not add %s to %s: %s", ", ".join(names), ignore, err)


_ignored_cache: dict[Path, tuple[object, frozenset[Path]]] = {}


def ignored(home: Path, paths: list[Path]) -> frozenset[Path]:
    """Those of PATHS (in HOME) that the home's ``.gitignore`` files leave out, as git reads
    them (``git check-ignore``); asked again only when PATHS or an ignore file changed.  Nothing
    before the repository exists, or when git cannot say."""
    if not paths or not (home / ".git").is_dir():
        return frozenset()
    rules = [home / ".gitignore", home / ".git" / "info" / "exclude", *(p for p in paths if p.name == ".gitignore")]
    stamps = []
    for rule in rules:
        try:
            st = rule.stat()
            stamps.append((str(rule), st.st_mtime_ns, st.st_size))
        except OSError:
            pass
    key = (tuple(paths), tuple(stamps))
    cached = _ignored_cache.get(home)
    if cached is not None and cached[0] == key:
        return cached[1]
    names = "\0".join(str(p.relative_to(home)) for p in paths) + "\0"
    try:
        run = run_git(["git", "check-ignore", "--no-index", "-z", "--stdin"], home, data=names.encode(), timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    if run.returncode not in (0, 1):
        return frozenset()
    found = frozenset(home / n for n in run.stdout.decode(errors="surrogateescape").split("\0") if n)
    _ignored_cache[home] = (key, found)
    return found


def managed(name: str) -> bool:
    """Whether NAME (a path in the home) is one of the files the server commits each tick."""
    return name in TRACKED_NAMES or name == ".gitignore" or name.partition("/")[0] in TRACKED_FOLDERS and "/" in name


@dataclass(frozen=True)
class Content:
    """A file's bytes (the CHUNKS joined), SIZE long; MODE as git writes it."""

    chunks: tuple[bytes, ...]
    size: int
    mode: str = "100644"
    blob: str | None = None  # set for bytes not read (no chunks): git has them as this blob

    def data(self) -> bytes:
        """The bytes (of a Content read from the file)."""
        if self.blob is not None:
            raise ValueError("the bytes of a file not read are its blob's")
        return self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)


@dataclass(frozen=True)
class Snapshot:
    """The tracked files as they were at one moment: FILES (path in the home -> bytes); PATHS
    are the files asked for, on disk (synced before the commit)."""

    files: dict[str, Content]
    paths: tuple[Path, ...]
    marks: dict[str, tuple[tuple[int, int, int, int], int]] = field(default_factory=dict)  # name -> stat, read at


@dataclass(frozen=True)
class _Seen:
    key: tuple[int, int, int, int]  # inode, size, mtime, ctime (ns)
    read_ns: int  # the clock when the file was read
    content: Content


class Snapshotter:
    """Takes a home's snapshots; an unchanged file shares its bytes with the last snapshot
    (thread-safe)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._seen: dict[str, _Seen] = {}
        self._names: dict[Path, str] = {}  # each file's path in the home
        self._stored: dict[str, _Seen] | None = None  # SEEN_FILE's entries, read at the first snapshot
        self._lock = threading.Lock()

    def seen(self, name: str, entry: _Seen) -> None:
        """Keep ENTRY as what the next snapshot knows of NAME (a path in the home)."""
        with self._lock:
            self._seen[name] = entry

    def take(self, files: Iterable[Path], *, known: Snapshot | None = None) -> Snapshot:
        """The bytes of .gitignore and each of FILES that exists, now; a file KNOWN (a snapshot
        taken a moment before by this snapshotter, this one completes) holds is as it has it."""
        out: dict[str, Content] = {}
        marks: dict[str, tuple[tuple[int, int, int, int], int]] = {}
        paths = tuple(files)
        with self._lock:
            if self._stored is None:
                self._stored = self._load()
            seen: dict[str, _Seen] = {}
            for path in (self.home / ".gitignore", *paths):
                name = self._names.get(path)
                if name is None:
                    name = self._names[path] = str(path.relative_to(self.home))
                if name in out:
                    continue
                last = self._seen.get(name) or self._stored.pop(name, None)
                if known is not None and last is not None and known.files.get(name) is last.content:
                    entry: _Seen | None = last
                else:
                    entry = self._read(path, last)
                if entry is not None:
                    seen[name] = entry
                    out[name] = entry.content
                    marks[name] = (entry.key, entry.read_ns)
            self._seen = seen
        return Snapshot(out, paths, marks)

    def _load(self) -> dict[str, _Seen]:
        """SEEN_FILE's entries whose blob git has (one ``cat-file``); none when it cannot be read."""
        stored = read_seen(self.home)
        if not stored:
            return {}
        asked = "".join(f"{entry.content.blob}\n" for entry in stored.values())
        try:
            done = run_git(["git", "cat-file", "--batch-check"], self.home, data=asked.encode(), env=git_env(),
                           timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return {}
        held = set(done.stdout.decode(errors="replace").splitlines()) if done.returncode == 0 else set()
        return {name: entry for name, entry in stored.items()
                if f"{entry.content.blob} blob {entry.content.size}" in held}

    @staticmethod
    def _read(path: Path, last: _Seen | None) -> _Seen | None:
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if last is not None and last.key == key and max(st.st_mtime_ns, st.st_ctime_ns) + RACY_NS < last.read_ns:
            return last
        now = time.time_ns()
        try:
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        mode = "100755" if st.st_mode & 0o100 else "100644"
        if last is not None and last.content.mode == mode and _grew(data, last.content):
            old = last.content
            chunks = (*old.chunks, data[old.size:]) if len(data) > old.size else old.chunks
            if len(chunks) > MAX_CHUNKS:
                chunks = (data,)
            content = Content(chunks, len(data), mode)
        else:
            content = Content((data,), len(data), mode)
        if last is not None and content == last.content:
            content = last.content  # the same object: the commit knows its blob
        return _Seen(key, now, content)


def read_seen(home: Path) -> dict[str, _Seen]:
    """HOME's :data:`SEEN_FILE`: each file (path in the home) as the server last read it, its stat
    then and its blob ({} when it cannot be read)."""
    try:
        data = json.loads((home / ".git" / SEEN_FILE).read_text(encoding="utf-8"))
        return {str(name): _Seen((int(ino), int(size), int(mtime), int(ctime)), int(read_ns),
                                 Content((), int(size), str(mode), str(blob)))
                for name, (ino, size, mtime, ctime, read_ns, mode, blob) in data.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def _unchanged_since(st: os.stat_result, seen: _Seen) -> bool:
    """Whether the file whose stat is ST holds the bytes SEEN read: its stat is as it was then,
    and was so long enough before that read that no write can hide behind it (RACY_NS)."""
    return ((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == seen.key
            and max(st.st_mtime_ns, st.st_ctime_ns) + RACY_NS < seen.read_ns)


def _index_entries(listed: bytes) -> dict[str, tuple[str, str]]:
    """The entries ``git ls-files -s -z`` LISTED: path -> (mode, blob)."""
    out: dict[str, tuple[str, str]] = {}
    for record in listed.split(b"\0"):
        if record:
            info, _, name = record.partition(b"\t")
            mode, blob, _stage = info.decode().split()
            out[name.decode("utf-8", "surrogateescape")] = (mode, blob)
    return out


def vouched_in_index(home: Path) -> dict[str, tuple[int, int, int, int]]:
    """The files of HOME that hold the blob of their index entry by the server's own record
    (:data:`SEEN_FILE`, as its next snapshot trusts it: :func:`_unchanged_since`): path -> their
    stat (inode, size, mtime, ctime), for :func:`settle_checkout`.  A commit writes its entries
    with no stat data (``update-index --index-info``), and a checkout over such an index takes
    every file for changed: it writes them all again (12 MB of chat months at 20,000 ticks)."""
    seen = read_seen(home)
    if not seen:
        return {}
    done = run_git(["git", "ls-files", "-s", "-z"], home, env=git_env(), timeout=60)
    if done.returncode:
        return {}
    out: dict[str, tuple[int, int, int, int]] = {}
    for name, indexed in _index_entries(done.stdout).items():
        entry = seen.get(name)
        if entry is None or indexed != (entry.content.mode, entry.content.blob):
            continue
        try:
            st = (home / name).lstat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and _unchanged_since(st, entry):
            out[name] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return out


def copy_vouched(home: Path, dest: Path, wanted: dict[str, tuple[str, str]]) -> dict[str, tuple[int, int, int, int]]:
    """Copy from HOME into the folder DEST each file of WANTED (path -> mode, blob) whose bytes in
    HOME are that blob by the server's own record (:data:`SEEN_FILE`, as its next snapshot trusts
    it: :func:`_unchanged_since`), before and after the copy: a file written meanwhile is not
    copied (nor left half copied).  Each copy's stat in DEST (inode, size, mtime, ctime) is
    returned; the files not copied are git's to write.  A file is created as git creates it (mode
    0666 or 0777, less the umask).  Copying takes no inflating of git's objects: the 12 MB of
    chat months of a 20,000-tick home are copied in a few milliseconds, not unpacked."""
    copied: dict[str, tuple[int, int, int, int]] = {}
    seen = read_seen(home) if wanted else {}
    for name, (mode, blob) in wanted.items():
        entry = seen.get(name)
        if entry is None or (entry.content.mode, entry.content.blob) != (mode, blob) or mode not in ("100644", "100755"):
            continue
        target = dest / name
        try:
            src = os.open(home / name, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if not (stat.S_ISREG(os.fstat(src).st_mode) and _unchanged_since(os.fstat(src), entry)):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o777 if mode == "100755" else 0o666)
            try:
                copy_range(src, out, entry.content.size)
                write_back_soon(out)
                good = _unchanged_since(os.fstat(src), entry) and os.fstat(out).st_size == entry.content.size
                st = os.fstat(out)
            finally:
                os.close(out)
            if good:
                copied[name] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            else:  # written to during the copy: git writes it
                target.unlink()
        except OSError:
            target.unlink(missing_ok=True)
        finally:
            os.close(src)
    return copied


def _grew(data: bytes, old: Content) -> bool:
    """Whether DATA starts with OLD's bytes (read: a blob's are not at hand)."""
    if len(data) < old.size or old.blob is not None:
        return False
    view, at = memoryview(data), 0
    for chunk in old.chunks:
        if view[at:at + len(chunk)] != chunk:
            return False
        at += len(chunk)
    return True


class Digests:
    """Each file's digest in a snapshot, its bytes hashed once: an unchanged file's digest is the
    one it had, a file that grew hashes only its new bytes, and a file not read (its bytes are a
    blob git has) is named by that blob (``git:SHA``); else ``sha256:HEX``."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[Content, Any, str]] = {}  # name -> content, its hash's state, digest

    def of(self, snap: Snapshot) -> dict[str, list[object]]:
        """Each file of SNAP: [digest, size, mode]."""
        out: dict[str, list[object]] = {}
        last: dict[str, tuple[Content, Any, str]] = {}
        for name, content in snap.files.items():
            entry = self._digest(content, self._last.get(name))
            last[name] = entry
            out[name] = [entry[2], content.size, content.mode]
        self._last = last
        return out

    @staticmethod
    def _digest(content: Content, last: tuple[Content, Any, str] | None) -> tuple[Content, Any, str]:
        if content.blob is not None:
            return content, None, f"git:{content.blob}"
        if last is not None and last[0] is content:
            return last
        state = None
        if last is not None and last[1] is not None:
            rest = _added(content, last[0])
            if rest is not None:
                state = last[1].copy()
                for part in rest:
                    state.update(part)
        if state is None:
            state = hashlib.sha256()
            for chunk in content.chunks:
                state.update(chunk)
        return content, state, f"sha256:{state.hexdigest()}"


def _added(new: Content, old: Content) -> list[bytes | memoryview] | None:
    """The bytes NEW holds after OLD's, if NEW starts with OLD's bytes (both read); else None."""
    if new.size < old.size or new.blob is not None or old.blob is not None:
        return None
    count = len(old.chunks)
    if new.chunks[:count] == old.chunks:  # the chunks a grown file shares are the same objects
        return list(new.chunks[count:])
    data = memoryview(new.data())
    return [data[old.size:]] if data[:old.size] == old.data() else None


def _blob_header(data: bytes) -> bytes:
    """What git puts before DATA in a blob, hashed and compressed with it."""
    return b"blob %d\0" % len(data)


def blob_id(data: bytes, algorithm: str) -> str:
    """The id git gives DATA as a blob, in a repository hashing with ALGORITHM (sha1 or sha256)."""
    digest = hashlib.new(algorithm, _blob_header(data))
    digest.update(data)
    return digest.hexdigest()


def _digest_matches(data: bytes, digest: str) -> bool:
    """Whether DATA has DIGEST (as :class:`Digests` names it)."""
    kind, _, value = digest.partition(":")
    if kind == "sha256":
        return hashlib.sha256(data).hexdigest() == value
    if kind == "git":
        return blob_id(data, "sha1" if len(value) == 40 else "sha256") == value
    return False


@dataclass(frozen=True)
class Uncommitted:
    """The commit a server asked for and never made (:data:`UNCOMMITTED`): its MESSAGE, and each
    file's [digest, size, mode] as its snapshot held it (FILES)."""

    message: str
    files: dict[str, list[Any]]

    @property
    def tick(self) -> int | None:
        """The tick the message names (``[TICK N]...``); None if it names none."""
        head, _, _ = self.message.partition("]")
        return int(head[6:]) if head.startswith("[TICK ") and head[6:].isdigit() else None

    @classmethod
    def read(cls, home: Path) -> Uncommitted | None:
        """HOME's record, or None when it has none (or it does not read)."""
        try:
            data = json.loads((home / UNCOMMITTED).read_text(encoding="utf-8"))
            message, files = str(data["message"]), dict(data["files"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return cls(message, files)

    def snapshot(self, home: Path) -> tuple[Snapshot | None, list[str]]:
        """The files of HOME as the snapshot held them, and []; or None and the files that no longer
        hold those bytes.  A file that only grew since holds them: its first bytes are taken (a
        tick's write-ahead was made after, say).  A file the snapshot lacked is not in it."""
        files: dict[str, Content] = {}
        changed = []
        for name, (digest, size, mode) in sorted(self.files.items()):
            try:
                data = (home / name).read_bytes()
            except OSError:
                changed.append(name)
                continue
            if len(data) > size:
                data = data[:size]
            if len(data) != size or not _digest_matches(data, str(digest)):
                changed.append(name)
                continue
            files[name] = Content((data,), size, str(mode))
        if changed:
            return None, changed
        return Snapshot(files, tuple(home / name for name in files)), []


class HomeRepo:
    """Git operations on the AMACS home (thread-safe: one lock around every git call)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        ignore = home / ".gitignore"
        if not ignore.exists():
            ignore.write_text(GITIGNORE, encoding="utf-8")
        else:
            _ignore_also(ignore, GITIGNORE_ADDED)
        self._lock = threading.RLock()
        self._prepared = False
        self._parent: str | None = None  # HEAD as this process last set it (None: read it)
        self._running: set[int] = set()  # pids of the git commands this object runs now
        self.snapshots = Snapshotter(home)
        self._indexed: dict[str, tuple[str, str]] | None = None  # the index as this object left it
        self._committed: set[str] = set()  # the files of the last snapshot committed
        self._blobs: dict[str, tuple[Content, str]] = {}  # each file's last content and its blob
        self._kept: dict[str, list[object]] | None = None  # SEEN_FILE as this object last wrote it
        self._trust_index = True  # a blob the index names is in git (until a write-tree says otherwise)
        self._algorithm = "sha1"
        self._env = {**git_env(), "GIT_TERMINAL_PROMPT": "0"}

    def prepare(self) -> None:
        """Make (or open) the repository and set what commits need; once, before the first commit."""
        with self._lock:
            if self._prepared:
                return
            try:
                self._set_aside_half_made()
                if not (self.home / ".git").exists():
                    self._git("init", "--quiet")
                if self._config("user.name") is None:  # commits work on a machine with no git identity
                    self._git("config", "--local", "user.name", "AMACS")
                    self._git("config", "--local", "user.email", "amacs@localhost")
                for key, value in (("gc.auto", "0"), ("maintenance.auto", "false")):  # the worker packs
                    if self._config(key) is None:
                        self._git("config", "--local", key, value)
                self._algorithm = (self._config("extensions.objectformat") or "sha1").lower()
                attributes = self.home / ".git" / "info" / "attributes"
                if not attributes.exists() or attributes.read_text(encoding="utf-8") in ATTRIBUTES_BEFORE:
                    for key, value in INPUTS_DIFF:  # before the file that names them: done again if cut short
                        self._git("config", "--local", key, value)
                    attributes.parent.mkdir(exist_ok=True)
                    attributes.write_text(ATTRIBUTES, encoding="utf-8")
            except (GitFailed, OSError, ValueError) as err:
                raise CommitError(f"cannot set up the git repository in {self.home}: {err}; "
                                  "the tick is saved on disk") from err
            self._prepared = True

    def _config(self, key: str) -> str | None:
        """The home's own git config value of KEY (None: not set there)."""
        try:
            return self._git("config", "--local", "--get", key) or None
        except GitFailed:
            return None

    def _set_aside_half_made(self) -> None:
        """A ``.git`` whose making was cut short (no HEAD, or no object in it: the process died in
        ``git init``) is moved to ``logs/git-half-made-TIME`` (never committed) and made again;
        said in the log.  One
        with any object is left as it is: it may hold history."""
        dot = self.home / ".git"
        if not dot.is_dir():
            return
        objects = dot / "objects"
        has_objects = objects.is_dir() and any(
            p.is_file() for sub in objects.iterdir() if sub.is_dir() for p in sub.iterdir())
        if has_objects or (dot / "packed-refs").exists():
            return
        head = dot / "HEAD"
        made = head.is_file() and (dot / "config").is_file() and (dot / "refs").is_dir() and objects.is_dir()
        if made:
            return
        aside = self.home / "logs" / f"git-half-made-{time.strftime('%Y%m%dT%H%M%S')}"
        aside.parent.mkdir(exist_ok=True)
        os.replace(dot, aside)
        log.warning("the git repository in %s was half made (its set-up was cut short): moved to %s and "
                    "made again", self.home, aside)

    # git is out of reach of the signals that stop the server (start_git): the hangup Emacs sends
    # the server's group when it quits must not kill the commit of the tick the server stops to finish.
    def _git(self, *args: str, nice: int = 0, data: str | None = None) -> str:
        command = ["nice", "-n", str(nice), "git", *args] if nice and shutil.which("nice") else ["git", *args]
        with start_git(command, cwd=self.home, env=self._env, stdin=subprocess.DEVNULL if data is None else subprocess.PIPE,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
            self._running.add(proc.pid)  # this server's own: no lock of theirs is stale (clear_stale_lock)
            try:
                stdout, stderr = proc.communicate(data)
            finally:
                self._running.discard(proc.pid)
        if proc.returncode != 0:
            raise GitFailed(f"git {args[0]} failed ({proc.returncode}): {stderr.strip()}")
        return str(stdout).strip()

    def _git_bytes(self, *args: str, data: bytes = b"", env: dict[str, str] | None = None) -> bytes:
        """git ARGS's output, as bytes (paths as they are), with DATA on its standard input (in ENV,
        default the repository's)."""
        done = run_git(["git", *args], self.home, data=data, env=env or self._env)
        if done.returncode != 0:
            raise GitFailed(f"git {args[0]} failed ({done.returncode}): "
                            f"{done.stderr.decode(errors='replace').strip()}")
        return done.stdout

    def _git_input(self, data: bytes, *args: str) -> str:
        """git ARGS with DATA on its standard input; its output."""
        return self._git_bytes(*args, data=data).decode().strip()

    def _locks(self) -> list[Path]:
        """The lock files a commit can leave: the index's, config's, HEAD's and the refs'."""
        git_dir = self.home / ".git"
        found = [git_dir / name for name in ("index.lock", "config.lock", "HEAD.lock", "packed-refs.lock")]
        found = [lock for lock in found if lock.exists()]
        refs = git_dir / "refs"
        if refs.is_dir():
            found += sorted(refs.rglob("*.lock"))
        return found

    def clear_stale_lock(self) -> str | None:
        """Remove the lock files no live process holds; return a note for the shell, or None.

        A git killed mid-commit (with the server: Emacs kills its process group,
        and a machine that stops kills everything) leaves ``index.lock`` or a
        ref's ``.lock``, and every later commit fails on it.  Git
        writes no owner into its locks: a lock is held while a git process
        works in this repository.  This server's own commits run under the
        repository's lock and its repack takes none of these, so a lock is
        stale when no other git process has the home as its working folder
        (read from /proc; without /proc, when it is older than
        STALE_LOCK_SECONDS).  A live one (the person's git, or one a killed
        server left running) is waited for, up to LOCK_WAIT_SECONDS.
        """
        locks = self._locks()
        if not locks:
            return None
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        unheld = 0  # looks in a row that found the locks and no git at work
        while locks:
            users = git_processes_in(self.home, ignore=self._running)
            if users is None:  # no /proc: the age decides
                if min(_age(lock) for lock in locks) >= STALE_LOCK_SECONDS:
                    break
            elif not users:
                # Stale only when seen so twice, a pause apart: a git about to rename its
                # lock into place was once not seen in /proc under load (CI), and its
                # lock, 0 s old, was taken for stale.
                unheld += 1
                if unheld >= 2:
                    break
            else:
                unheld = 0
            if time.monotonic() >= deadline and users != []:  # none at work: one more look decides
                who = f"git (pid {', '.join(map(str, users))}) is working in it" if users else "it is recent"
                raise CommitError(f"git is busy: {locks[0]} exists and {who}; the tick is saved on disk "
                                  "and the next tick's commit will include it")
            time.sleep(0.05)
            locks = self._locks()
        if not locks:
            return None
        removed = []
        for lock in locks:
            age = _age(lock)
            lock.unlink(missing_ok=True)
            removed.append(f"{lock.relative_to(self.home)} ({age:.0f} s old)")
        log.warning("removed stale git locks: %s", ", ".join(removed))
        return f"removed a stale {', '.join(removed)} that no running git held (a git killed mid-commit left it)"

    def _head(self) -> str | None:
        try:
            return self._git("rev-parse", "-q", "--verify", "HEAD^{commit}") or None
        except GitFailed:
            return None

    def commit(self, what: Iterable[Path] | Snapshot, message: str) -> tuple[str, str | None]:
        """Commit WHAT: a snapshot, or files as they are now (snapshotted at once); return the
        commit hexsha and a note (or None).

        The commit's tree is the snapshot's: each tracked file with its bytes, and
        a tracked file the snapshot lacks removed (:func:`managed`, or in the last
        snapshot committed); files the person added by hand stay as the index
        has them.  Blobs are hashed once per content (an unchanged file is the
        same object as in the last snapshot) and written as loose objects here;
        then ``update-index --index-info`` (the changed entries), ``write-tree``,
        ``commit-tree``, ``update-ref``.  Always a new commit, even if nothing
        changed (one commit per tick).
        """
        snap = what if isinstance(what, Snapshot) else self.snapshots.take(what)
        with self._lock:
            note = self.clear_stale_lock()  # before prepare: a config.lock stops it too
            self.prepare()
            try:
                if faults.armed("commit.index-lock"):
                    faults.kill_holding_lock("commit.index-lock", ["git", "update-index", "--add", "--stdin"],
                                             self.home, self.home / ".git" / "index.lock",
                                             stdin=b".gitignore\n", env=self._env)
                self._index(snap)
                faults.point("commit.indexed")
                try:
                    tree = self._git("write-tree")
                except GitFailed:  # a blob the index names is gone (a damaged .git): written again
                    if not self._trust_index:
                        raise
                    self._trust_index, self._indexed = False, None
                    self._blobs.clear()
                    self._index(snap)
                    tree = self._git("write-tree")
                faults.point("commit.tree")
                try:
                    sha = self._commit_tree(tree, message, self._parent or self._head())
                except GitFailed:  # HEAD moved under us (a person's own commit): once more
                    sha = self._commit_tree(tree, message, self._head())
            except (GitFailed, OSError, ValueError) as err:
                self._parent = None
                self._indexed = None
                raise CommitError(f"git commit failed: {err}; the tick is saved on disk") from err
            self._parent = sha
            self._keep_seen(snap)
            return sha, note

    def assume(self, entries: Iterable[tuple[str, str, str]]) -> None:
        """Take each file of ENTRIES (its path in the home, mode, blob) to hold that blob as it is on
        disk now, as if a snapshot had just read it; the caller knows it does (git wrote it, or
        found it unchanged since).  The next snapshot reads such a file only once its inode, size,
        mtime or ctime changed, and no commit hashes it again."""
        with self._lock:
            for name, mode, blob in entries:
                try:
                    st = (self.home / name).stat()
                except (FileNotFoundError, NotADirectoryError):
                    continue
                content = Content((), st.st_size, mode, blob)
                key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                self.snapshots.seen(name, _Seen(key, max(st.st_mtime_ns, st.st_ctime_ns) + RACY_NS + 1, content))

    def unchanged(self, index: Path | None = None) -> list[tuple[str, str, str]]:
        """The files of the index (INDEX, default the home's) that git finds as it left them
        (stat unchanged since it wrote or read them, the racy ones compared): path, mode, blob."""
        env = None if index is None else {**self._env, "GIT_INDEX_FILE": str(index)}
        changed = set(self._git_bytes("diff-files", "--name-only", "-z", env=env).split(b"\0"))
        out = []
        for record in self._git_bytes("ls-files", "-s", "-z", env=env).split(b"\0"):
            info, _, name = record.partition(b"\t")
            if record and name not in changed:
                mode, blob, stage = info.decode().split()
                if stage == "0":
                    out.append((name.decode("utf-8", "surrogateescape"), mode, blob))
        return out

    def _keep_seen(self, snap: Snapshot) -> None:
        """Write SEEN_FILE for SNAP, just committed (when it changed): each file's stat, when it
        was read and its blob, but those whose stat could hide a later change (RACY_NS)."""
        kept: dict[str, list[object]] = {}
        for name, content in snap.files.items():
            mark = snap.marks.get(name)
            known = self._blobs.get(name)
            blob = content.blob or (known[1] if known is not None and known[0] is content else None)
            if mark is None or blob is None or max(mark[0][2], mark[0][3]) + RACY_NS >= mark[1]:
                continue
            kept[name] = [*mark[0], mark[1], content.mode, blob]
        if kept == self._kept:
            return
        try:
            with deferred_sync():  # lost, it costs the next server one read of each file
                atomic_write(self.home / ".git" / SEEN_FILE, json.dumps(kept, separators=(",", ":")))
        except OSError as err:
            log.warning("could not write %s: %s", SEEN_FILE, err)
        self._kept = kept

    def commit_aside(self, what: Iterable[Path], message: str, parent: str) -> str:
        """A commit of the files WHAT as they are now, on PARENT, and its sha; no ref moves and
        the home's index is not touched (the tree is built in an index of its own, removed after):
        until a ref names it, the commit is an unreachable object, as if never made.  A file git
        finds as the index has it (:meth:`unchanged`) is not read: what is hashed is what changed
        since git last wrote or read it."""
        with self._lock:
            self.prepare()
            index = self.home / ".git" / "amacs-aside.index"
            saved = self._env, self._indexed, self._committed
            try:
                real = self.home / ".git" / "index"
                if real.exists():
                    shutil.copy2(real, index)  # its time too: git compares the racy files' bytes by it
                    self.assume(self.unchanged(index))
                else:
                    index.unlink(missing_ok=True)
                snap = self.snapshots.take(what)
                self._env = {**self._env, "GIT_INDEX_FILE": str(index)}
                if not real.exists():
                    self._git("read-tree", parent)
                self._indexed, self._committed = None, set()
                self._index(snap)
                tree = self._git("write-tree")
                return self._git("commit-tree", tree, "-p", parent, "-m", message)
            except (GitFailed, OSError) as err:
                raise CommitError(f"git commit failed: {err}") from err
            finally:
                self._env, self._indexed, self._committed = saved
                index.unlink(missing_ok=True)

    def _index(self, snap: Snapshot) -> None:
        """The index as SNAP has the tracked files (one ``update-index``, only if anything changed)."""
        indexed = self._indexed if self._indexed is not None else self._ls_files()
        self._indexed = None  # until the index is written
        lines: list[bytes] = []
        for name, content in snap.files.items():
            entry = (content.mode, self._blob(name, content, indexed.get(name)))
            if indexed.get(name) != entry:
                lines.append(f"{entry[0]} {entry[1]}\t{name}\0".encode("utf-8", "surrogateescape"))
                indexed[name] = entry
        for name in [n for n in indexed if n not in snap.files and (managed(n) or n in self._committed)]:
            lines.append(f"0 {'0' * len(indexed.pop(name)[1])}\t{name}\0".encode("utf-8", "surrogateescape"))
        if lines:
            self._git_input(b"".join(lines), "update-index", "-z", "--index-info")
        self._indexed = indexed
        self._committed = set(snap.files)
        gone = [name for name in self._blobs if name not in snap.files]
        for name in gone:
            del self._blobs[name]

    def _ls_files(self) -> dict[str, tuple[str, str]]:
        """The index's entries: path -> (mode, blob)."""
        return _index_entries(self._git_bytes("ls-files", "-s", "-z"))

    def _blob(self, name: str, content: Content, indexed: tuple[str, str] | None = None) -> str:
        """CONTENT's blob id, the object written if it is new (as git would: a loose object);
        INDEXED is the index's entry for NAME (mode, blob): git has that blob already."""
        if content.blob is not None:
            return content.blob
        known = self._blobs.get(name)
        if known is not None and known[0] is content:
            return known[1]
        sha = self.write_blob(content.data(), have=indexed[1] if indexed and self._trust_index else None)
        self._blobs[name] = (content, sha)
        return sha

    def write_blob(self, data: bytes, *, have: str | None = None) -> str:
        """DATA's blob id, the object written if it is new (as git would: a loose object).  A
        blob whose id is HAVE (one the index or a tree names: in a pack, maybe) is not written
        again: the first commit after a start does not compress the whole history anew."""
        self.prepare()  # the repository's hash
        sha = blob_id(data, self._algorithm)
        path = self.home / ".git" / "objects" / sha[:2] / sha[2:]
        if sha != have and not path.exists():
            packer = zlib.compressobj(1)  # git's core.looseCompression
            packed = packer.compress(_blob_header(data)) + packer.compress(data) + packer.flush()
            tmp = path.parent / f"tmp_obj_{os.getpid()}_{threading.get_ident()}"
            for attempt in range(3):
                path.parent.mkdir(exist_ok=True)
                try:
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o444)
                    break
                except FileNotFoundError:  # the packer's repack removed the folder, empty, meanwhile
                    if attempt == 2:
                        raise
            _write_then_replace(fd, tmp, path, packed)
        return sha

    def _commit_tree(self, tree: str, message: str, parent: str | None) -> str:
        """A commit of TREE on PARENT, and HEAD moved to it only if HEAD is still PARENT."""
        sha = self._git("commit-tree", tree, *(("-p", parent) if parent else ()), "-m", message)
        faults.point("commit.object")
        if faults.armed("commit.ref-lock"):
            faults.kill_holding_lock("commit.ref-lock", ["git", "update-ref", "--stdin"], self.home,
                                     self.home / ".git" / "HEAD.lock", env=self._env,
                                     stdin=f"start\nupdate HEAD {sha} {parent or ''}".rstrip().encode() + b"\nprepare\n")
        subject = message.partition("\n")[0]  # the reflog's line
        self._git("update-ref", "-m", f"commit: {subject}", "HEAD", sha, parent or "")
        faults.point("commit.done")
        return sha

    def forget_head(self) -> None:
        """HEAD and the index were changed by another (a rewind): the next commit reads them again."""
        with self._lock:
            self._parent = None
            self._indexed = None

    def pack(self) -> None:
        """Pack the loose objects into a pack of their own, then roll up geometrically the packs
        older than the PACK_RECENT newest (:func:`roll_up`).  Runs beside commits.  Then
        :data:`PACKED_FILE` says that the commit HEAD was at before the repack is packed whole (its
        objects were all made then, and a repack leaves no object loose nor in a pack it removes),
        and when each pack's newest object was made.  The packs rolled up are removed after that."""
        head, before = self._head(), pack_names(self.home)
        kept = self.home / ".git" / PACKED_FILE
        records = packed_records(self.home) if kept.exists() else self._packed_before(before)
        newest = pack_times(self.home)
        folder = self.home / ".git" / "objects" / "pack"
        self._git(*PACK_ARGS, str(folder / "pack"), nice=PACK_NICE)
        self._git("prune-packed", "-q", nice=PACK_NICE)
        for name in pack_names(self.home) - before:  # the loose objects' pack: none was made after it
            newest[name] = (folder / name).stat().st_mtime
        gone, made = self._roll_up(newest)
        try:
            if head is not None:
                self._note_packed(head, records, newest, gone, made)
        except (GitFailed, OSError, ValueError, IndexError) as err:  # only a fork's walk is longer without it
            log.warning("which commits the packs hold whole was not noted: %s", err)
        for name in gone:  # the index first: a pack no index names is not read
            for suffix in (".idx", ".pack", ".rev"):
                (folder / name).with_suffix(suffix).unlink(missing_ok=True)

    def _roll_up(self, newest: dict[str, float]) -> tuple[set[str], str | None]:
        """Roll up (:func:`roll_up`) the packs not among the PACK_RECENT newest: the packs taken in and the
        pack made of them (noted in NEWEST: the newest of theirs), or nothing."""
        folder = self.home / ".git" / "objects" / "pack"
        dated = {}
        for name in pack_names(self.home):
            if (folder / name).with_suffix(".keep").exists():  # a person's: git leaves it as it is
                continue
            try:
                dated[name] = (newest.get(name) or (folder / name).stat().st_mtime, _count((folder / name).with_suffix(".idx")))
            except (OSError, ValueError):
                continue
        old = sorted(dated, key=lambda name: dated[name][0])[:max(0, len(dated) - PACK_RECENT)]
        rolled = roll_up({name: dated[name][1] for name in old})
        if len(rolled) < 2:
            return set(), None
        listed = "".join(f"{name}\n" for name in sorted(rolled))
        name = f"pack-{self._git(*ROLL_ARGS, str(folder / 'pack'), nice=PACK_NICE, data=listed)}.pack"
        newest[name] = max(dated[n][0] for n in rolled)
        return rolled - {name}, name  # (one of them, if it held all the others' objects: it stays)

    def _note_packed(self, head: str, records: list[tuple[str, set[str]]], newest: dict[str, float],
                     gone: set[str], made: str | None) -> None:
        """:data:`PACKED_FILE` after a repack that made a pack MADE of the packs GONE (those still
        there): HEAD is packed whole; NEWEST, each pack's newest object."""
        after = (pack_names(self.home) - gone) | ({made} if made else set())
        kept = []
        for sha, names in records:
            if made and names & gone:  # rolled up: their objects are in the pack this repack made
                names = (names - gone) | {made}
            if names <= after:  # a pack removed by another (a person's gc): not known to hold them
                kept.append((sha, names))
        kept.append((head, after))
        last: dict[frozenset[str], str] = {}  # of notes naming the same packs the newest commit says all
        for sha, names in kept:
            last.pop(frozenset(names), None)
            last[frozenset(names)] = sha
        atomic_write(self.home / ".git" / PACKED_FILE, json.dumps({
            "packed": [[sha, sorted(names)] for names, sha in list(last.items())[-PACKED_KEEP:]],
            "newest": {name: newest[name] for name in sorted(after) if name in newest}}))

    def _packed_before(self, packs: set[str]) -> list[tuple[str, set[str]]]:
        """What :data:`PACKED_FILE` would say of PACKS, packed before it was kept: for each, the
        newest commit whose every object (and every older commit's) is in it or in an older pack,
        checked against the packs' indexes.  A commit's objects are those of its parent, itself,
        its tree and what it changed (git's raw diff, trees too); a merge's are not: [] then."""
        folder = self.home / ".git" / "objects" / "pack"
        dated = []
        for name in packs:
            try:
                dated.append(((folder / name).stat().st_mtime, name))
            except FileNotFoundError:
                continue
        log_text = self._git("log", "--reverse", "--root", "-t", "--raw", "--no-abbrev", "--no-renames",
                             "--format=%x00%H %T %P", nice=PACK_NICE)
        made: list[tuple[str, list[bytes]]] = []  # each commit, oldest first, with the objects it made
        for chunk in log_text.split("\0")[1:]:
            head, *changes = chunk.strip().splitlines()
            sha, tree, *parents = head.split()
            if len(parents) > 1:
                return []
            new = [line.partition("\t")[0].split()[3] for line in changes if line.startswith(":")]
            made.append((sha, [bytes.fromhex(x) for x in (sha, tree, *new) if x.strip("0")]))
        held: set[bytes] = set()
        older: set[str] = set()
        found: list[tuple[str, set[str]]] = []
        whole = 0  # made[:whole] are held whole
        for _mtime, name in sorted(dated):
            try:
                held |= _indexed((folder / name).with_suffix(".idx"))
            except (OSError, ValueError):  # gone, or of a kind not read here: no older commit is known whole
                return found
            older.add(name)
            while whole < len(made) and all(obj in held for obj in made[whole][1]):
                whole += 1
            if whole and (not found or found[-1][0] != made[whole - 1][0]):
                found.append((made[whole - 1][0], set(older)))
        return found

    def file_versions(self, name: str, count: int) -> list[str]:
        """The shas of the last COUNT commits that changed NAME, newest first ([] without history)."""
        if not (self.home / ".git").exists() or self._head() is None:
            return []
        return self._git("log", f"--max-count={count}", "--format=%H", "--", name).split()

    def show(self, sha: str, name: str) -> str:
        """NAME as commit SHA has it (GitFailed if it has none)."""
        return self._git_bytes("show", f"{sha}:{name}").decode("utf-8")

    def log(self, count: int = 20) -> list[str]:
        """The subjects of the last COUNT commits, newest first."""
        return [subject for _sha, subject in self.recent(count)]

    def recent(self, count: int = 20) -> list[tuple[str, str]]:
        """(sha, subject) of the last COUNT commits, newest first (does not wait for a commit
        being made: git updates HEAD atomically)."""
        if self._head() is None:
            return []
        out = self._git("log", f"--max-count={count}", "--format=%H %s")
        return [(line[:40], line[41:]) for line in out.splitlines()]


def nice_this_thread(nice: int) -> None:
    """Run the calling thread (only it, where the system allows: Linux) at niceness NICE or lower
    priority, so the loop thread keeps the other core; nothing where it cannot be set."""
    if not sys.platform.startswith("linux"):  # elsewhere the call would name a process
        return
    try:
        now = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        if now < nice:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (OSError, AttributeError):
        pass


def pack_names(home: Path) -> set[str]:
    """The names of HOME's pack files (``pack-<sha>.pack``)."""
    return {path.name for path in (home / ".git" / "objects" / "pack").glob("pack-*.pack")}


def _packed_file(home: Path) -> Any:
    try:
        return json.loads((home / ".git" / PACKED_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def packed_records(home: Path) -> list[tuple[str, set[str]]]:
    """:data:`PACKED_FILE`'s statements, oldest first ([] without it, or if it does not read)."""
    data = _packed_file(home)
    try:
        listed = data["packed"] if isinstance(data, dict) else data
        return [(str(sha), {str(name) for name in names}) for sha, names in listed]
    except (KeyError, ValueError, TypeError):
        return []


def pack_times(home: Path) -> dict[str, float]:
    """:data:`PACKED_FILE`'s time of each pack's newest object, of the packs it names ({} for a
    file of the older form, or none)."""
    data = _packed_file(home)
    try:
        return {str(name): float(made) for name, made in data["newest"].items()} if isinstance(data, dict) else {}
    except (KeyError, ValueError, TypeError, AttributeError):
        return {}


def roll_up(counts: dict[str, int], factor: int = PACK_FACTOR) -> set[str]:
    """Of packs with COUNTS objects, those to roll into one so that the rest and it form a
    geometric progression (each pack FACTOR times the objects of all smaller ones, at least): the
    smallest up to the largest that breaks it, then as many of the next as the new pack would
    outweigh (git repack's --geometric)."""
    order = sorted(counts, key=lambda name: (counts[name], name))
    split = 0
    for i in range(len(order) - 1, 0, -1):
        if counts[order[i]] < factor * counts[order[i - 1]]:
            split = i + 1
            break
    total = sum(counts[name] for name in order[:split])
    while split < len(order) and counts[order[split]] < factor * total:
        total += counts[order[split]]
        split += 1
    return set(order[:split])


def _count(idx: Path) -> int:
    """How many objects a pack index (version 2) lists; ValueError for another kind."""
    with idx.open("rb") as file:
        head = file.read(8 + 256 * 4)
    if head[:8] != b"\xfftOc\x00\x00\x00\x02" or len(head) < 8 + 256 * 4:
        raise ValueError(f"{idx} is not a version 2 pack index")
    return int.from_bytes(head[8 + 255 * 4:], "big")


def _indexed(idx: Path) -> set[bytes]:
    """The object names a pack index (version 2, SHA-1) lists; ValueError for another kind."""
    data = idx.read_bytes()
    if data[:8] != b"\xfftOc\x00\x00\x00\x02":
        raise ValueError(f"{idx} is not a version 2 pack index")
    count = int.from_bytes(data[8 + 255 * 4:8 + 256 * 4], "big")
    names = data[8 + 256 * 4:8 + 256 * 4 + 20 * count]
    return {names[i:i + 20] for i in range(0, len(names), 20)}


def _write_then_replace(fd: int, tmp: Path, path: Path, data: bytes | bytearray) -> None:
    """DATA written to FD (the file TMP, just made), then TMP renamed over PATH; TMP removed if
    either fails."""
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# An index entry's stat data (git's index format, versions 2 and 3): ctime and mtime (seconds,
# nanoseconds), dev, ino, mode, uid, gid, size; the object name and the flags follow.
_STAT = struct.Struct(">10I")


def settle_checkout(home: Path, copied: dict[str, tuple[int, int, int, int]] | None = None) -> int:
    """Let git trust, by their stat data, the files a checkout just wrote in HOME, and those of
    COPIED (path -> inode, size, mtime, ctime: files put there with the bytes of their index
    entry's blob, :func:`copy_vouched`); how many.

    git reads a file again (and hashes it) unless its stat is as the index has it and its mtime
    is before the index's, in whole seconds: a file written in the index's second is *racily
    clean*, and every later write of the index hashes it again (a fork's commit writes the index
    twice: its 12 MB of chat months hashed twice at 20,000 ticks).  So each such file whose stat
    is still the index's, as git wrote it (a copied one: as it was copied), gets an mtime one
    second before the index's, and its entry the new stat; the index is written again (under
    git's lock, then renamed).  Only for a checkout into a folder no one else writes while this
    runs: a write after it sets a later mtime, which git sees as a change.  An index of another
    kind than this reads (version 4, a split index, no checksum) is left as it is: git then
    hashes those files, as before."""
    copied = copied or {}
    index = home / ".git" / "index"
    try:
        data = bytearray(index.read_bytes())
        second = int(index.stat().st_mtime)
    except OSError:
        return 0
    width = next((len(h.digest()) for h in (hashlib.sha1(), hashlib.sha256())
                  if len(data) > 12 + h.digest_size
                  and hashlib.new(h.name, data[:-h.digest_size]).digest() == data[-h.digest_size:]), 0)
    if not width or data[:4] != b"DIRC":
        return 0
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3):
        return 0
    back = (second - 1) * 1_000_000_000
    at, settled = 12, 0
    for _ in range(count):
        fields = list(_STAT.unpack_from(data, at))
        flags = int.from_bytes(data[at + 40 + width:at + 42 + width], "big")
        start = at + 42 + width + (2 if version == 3 and flags & 0x4000 else 0)
        end = data.index(b"\0", start) if flags & 0xFFF == 0xFFF else start + (flags & 0xFFF)
        name = data[start:end].decode("utf-8", "surrogateescape")
        fresh = copied.get(name)
        if (fields[2] >= second or fresh is not None) and stat.S_ISREG(fields[6]):
            path = home / name
            try:
                st = path.lstat()
                if fresh is not None:
                    same = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == fresh
                else:
                    same = (st.st_ctime_ns // 10**9, st.st_mtime_ns // 10**9, st.st_ino & 0xFFFFFFFF,
                            st.st_size) == (fields[0], fields[2], fields[5], fields[9])
                if same:
                    if st.st_mtime_ns >= second * 1_000_000_000:
                        os.utime(path, ns=(st.st_atime_ns, back), follow_symlinks=False)
                        st = path.lstat()
                    fields[0:6] = [st.st_ctime_ns // 10**9, st.st_ctime_ns % 10**9, st.st_mtime_ns // 10**9,
                                   st.st_mtime_ns % 10**9, st.st_dev & 0xFFFFFFFF, st.st_ino & 0xFFFFFFFF]
                    fields[7:10] = [st.st_uid & 0xFFFFFFFF, st.st_gid & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF]
                    _STAT.pack_into(data, at, *fields)
                    settled += 1
            except OSError:
                pass
        at += ((end - at) + 8) & ~7
    if not settled:
        return 0
    data[-width:] = hashlib.new("sha1" if width == 20 else "sha256", data[:-width]).digest()
    lock = index.with_name("index.lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:  # a git of someone's holds the index: its files stay hashed as before
        return 0
    _write_then_replace(fd, lock, index, data)
    return settled


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def git_processes_in(folder: Path, ignore: Collection[int] = ()) -> list[int] | None:
    """The pids of git processes working in FOLDER or below it, but those in IGNORE;
    None where /proc cannot tell (not Linux)."""
    proc = Path("/proc")
    if not (proc / "self" / "cwd").exists():
        return None
    try:
        target = folder.resolve()
    except OSError:
        return None
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if not (entry / "comm").read_text().startswith("git"):
                continue
            cwd = (entry / "cwd").resolve(strict=True)
        except OSError:  # gone, or another user's: not ours to wait for
            continue
        if int(entry.name) in ignore:
            continue
        if cwd == target or target in cwd.parents:
            found.append(int(entry.name))
    return found


Report = Callable[[str, str], None]


class CommitWorker:
    """One thread that makes the home's commits, in the order they were asked for.

    :meth:`submit` snapshots the files (on the caller's thread: the tick's end)
    and returns.  Before each commit the worker fsyncs the files (the loop
    thread wrote them without fsync, see :func:`~.files.deferred_sync`), so a
    tick is durable once its commit is made.  If the worker falls behind (ticks
    faster than commits), each commit still holds its own tick's snapshot: one
    commit per tick, in order.  Failures and notes go to REPORT(text, kind)
    (from the worker thread).  With RECORD, the newest commit asked for and not
    yet made is kept in the home (:data:`UNCOMMITTED`) until it is made.
    """

    def __init__(self, repo: HomeRepo, report: Report | None = None, *, record: bool = False,
                 chores: Iterable[Callable[[], object]] = ()) -> None:
        self.repo = repo
        self.chores = list(chores)  # run after each repack, in its thread, at its priority
        self.report: Report = report or (lambda text, kind: log.warning("%s: %s", kind, text))
        self._queue: queue.Queue[tuple[Snapshot, str, int] | None] = queue.Queue()
        self._cond = threading.Condition()
        self._record = repo.home / UNCOMMITTED if record else None
        self._digests = Digests()
        self._asked = 0  # commits asked for since the start; the newest's number
        self._pending = 0
        self._pending_subjects: list[str] = []  # oldest first
        self._since_pack = 0
        self._synced: dict[Path, tuple[int, int, int]] = {}  # (inode, size, mtime) at the last fsync
        self._thread: threading.Thread | None = None
        self._packer: threading.Thread | None = None
        self.commit_ms: list[float] = []  # each commit's time, fsyncs included (for benchmarks)
        self.snapshot_ms: list[float] = []  # each snapshot's time (and its record's), on the caller's thread
        self.pack_ms: list[float] = []

    def submit(self, files: Iterable[Path], message: str, *, known: Snapshot | None = None) -> None:
        """Commit FILES as they are now with MESSAGE, after every commit submitted before
        (the files are read now, but those KNOWN holds: :meth:`Snapshotter.take`; git runs later)."""
        t0 = time.perf_counter()
        snap = self.repo.snapshots.take(files, known=known)
        self._ask(snap, message, keep=True)
        self.snapshot_ms.append((time.perf_counter() - t0) * 1000)

    def submit_snapshot(self, snap: Snapshot, message: str) -> None:
        """Commit SNAP with MESSAGE, after every commit submitted before; the home's record of
        the commit not yet made (:data:`UNCOMMITTED`) is the one SNAP was made from, if any."""
        self._ask(snap, message, keep=False)

    def _ask(self, snap: Snapshot, message: str, *, keep: bool) -> None:
        with self._cond:
            self._asked += 1
            if keep and self._record is not None:
                self._keep_record(snap, message)
            self._pending += 1
            self._pending_subjects.append(message.partition("\n")[0])
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="amacs-git", daemon=True)
                self._thread.start()
            self._queue.put((snap, message, self._asked))

    def _keep_record(self, snap: Snapshot, message: str) -> None:
        """Write :data:`UNCOMMITTED` for SNAP, to be committed with MESSAGE (not synced: the
        tick's files are not either until their commit; a record lost with them names nothing)."""
        assert self._record is not None
        text = json.dumps({"message": message, "files": self._digests.of(snap)}, ensure_ascii=False,
                          separators=(",", ":"))
        try:
            with deferred_sync():
                atomic_write(self._record, text)
        except OSError as err:  # the commit is made all the same; only a stop before it loses the tick's
            log.warning("could not write %s: %s", self._record, err)

    @property
    def pending(self) -> int:
        """Commits asked for and not yet made."""
        return self._pending

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted commit is made; False if TIMEOUT passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    def recent(self, count: int = 20, wait: float = 2.0) -> list[tuple[str, str]]:
        """(sha, subject) of the last COUNT commits, newest first, after waiting up to WAIT
        seconds for the submitted ones; those still pending then have the sha ``pending``."""
        if wait > 0:
            self.flush(wait)
        with self._cond:
            pending = [("pending", subject) for subject in reversed(self._pending_subjects)]
        return (pending + self.repo.recent(count))[:count]

    def stop(self, timeout: float = 30.0) -> bool:
        """Make the pending commits, then end the thread; False if TIMEOUT passed first."""
        done = self.flush(timeout)
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join(max(0.0, timeout))
        return done

    def wait_packed(self, timeout: float | None = None) -> None:
        """Wait for a running repack (stop does not: an interrupted repack loses nothing)."""
        packer = self._packer
        if packer is not None:
            packer.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            snap, message, number = item
            t0 = time.perf_counter()
            try:
                self._sync_changed(snap.paths)
                faults.point("commit.synced")
                _sha, note = self.repo.commit(snap, message)
            except CommitError as err:
                self.report(str(err), "warning")
            except Exception as err:  # the worker must outlive any one commit
                log.exception("commit failed")
                self.report(f"git commit failed: {err!r}; the tick is saved on disk", "warning")
            else:
                self._made(number)
                if note:
                    self.report(note, "info")
            finally:
                self.commit_ms.append((time.perf_counter() - t0) * 1000)
                self._since_pack += 1
                try:
                    if self._since_pack >= PACK_EVERY and (self._packer is None or not self._packer.is_alive()):
                        self._since_pack = 0
                        packer = threading.Thread(target=self._pack, name="amacs-git-pack", daemon=True)
                        packer.start()
                        self._packer = packer  # before the commit counts as made: a flush, then wait_packed, joins it
                finally:
                    with self._cond:
                        self._pending -= 1
                        self._pending_subjects.pop(0)
                        self._cond.notify_all()

    def _made(self, number: int) -> None:
        """Commit NUMBER is made: the record goes if it was the newest asked for."""
        with self._cond:
            if self._record is not None and number == self._asked:
                try:
                    self._record.unlink(missing_ok=True)
                except OSError as err:  # the next start finds the tick committed and removes it
                    log.warning("could not remove %s: %s", self._record, err)

    def _sync_changed(self, files: Iterable[Path]) -> None:
        """fsync the files that changed since the last sync; their folder too if one was replaced."""
        changed, replaced = [], False
        for path in files:
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            old = self._synced.get(path)
            if old != key:
                changed.append(path)
                replaced = replaced or old is None or old[0] != st.st_ino
                self._synced[path] = key
        if changed:
            sync_paths(changed, folders=replaced)

    def _pack(self) -> None:
        t0 = time.perf_counter()
        try:
            self.repo.pack()
        except (GitFailed, OSError) as err:
            log.warning("git repack failed: %s", err)
        self.pack_ms.append((time.perf_counter() - t0) * 1000)
        if self.chores:
            nice_this_thread(PACK_NICE)
        for chore in self.chores:
            try:
                chore()
            except Exception:  # the packer must outlive any one chore
                log.exception("a chore of the packer failed")
