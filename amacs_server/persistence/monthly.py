"""Append-only org logs split by month, so that history costs nothing per tick.

The design: docs/ARCHITECTURE.md, Persistence and git.

A log (``agent-chat.org``, ``monologue.org``) is a current file, to which each
tick appends, and an archive folder beside it (``chat/``, ``monologue/``)
holding the earlier entries, one file a month: ``chat/2026-10.org``.

- When a tick starts an entry in a month other than the current file's, or the
  current file has grown past :data:`ROTATE_BYTES`, the current file's entries
  move to the archive first (:meth:`MonthlyLog.rotate`).  The current file
  then holds only a line linking to the archive.  A month with more than
  ROTATE_BYTES of entries has parts: ``2026-10.org``, ``2026-10-2.org``, ...
- An archive file is written once and never changed: each tick's git commit
  hashes only the current file (at most ROTATE_BYTES and one tick), and an
  archived month stays the one blob it was (git_repo: unchanged files are not
  hashed again).
- Start-up reads the tail (:meth:`MonthlyLog.tail`), newest file first, only as
  far as the entries it needs, and never more than a byte budget; a full read
  (:meth:`MonthlyLog.entries`) sees every file in order.
- A rotation writes the archive files (temp file, fsync, rename) before it
  empties the current file.  A crash between the two leaves the moved entries
  in both; readers keep them once (where the older file ends with the very
  entries the newer one starts with) and the next rotation does not archive
  them again.  Entries are told apart by their bytes, not their tick alone:
  an old home may have numbered its ticks from 1 again.

A home made before the split (one big ``agent-chat.org``) is split at its
first new tick, by the months of its entries.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..files import append_durably, sync_paths
from .recovery import decode_utf8

log = logging.getLogger("amacs.persistence")
# The current file moves to the archive once it is this big, even within a month: a
# tick's commit writes it as a new blob (~40 % of this once compressed, a delta once
# packed), so this bounds what a tick adds to .git whatever the history.
ROTATE_BYTES = 256 << 10
# Start-up reads at most this much of a log's end (and always its newest entry whole).
TAIL_BYTES = 1 << 20
HEAD_ROOM = 256  # bytes after a line start enough to match a head
_MONTH = re.compile(r"^(\d{4}-\d\d)")
_ARCHIVE = re.compile(r"^(\d{4}-\d\d)(?:-(\d+))?\.org$")


def month_of(timestamp: str) -> str | None:
    """``2026-10`` for a timestamp ``2026-10-14T...``; None if it does not start with a date."""
    match = _MONTH.match(timestamp.strip())
    return match[1] if match else None


@dataclass(frozen=True)
class Span:
    """One entry's bytes in a file: from START to END; its tick and month (None if not dated)."""

    tick: int
    month: str | None
    start: int
    end: int


class MonthlyLog:
    """A log of entries, each starting at a line :attr:`head` matches (group 1 the tick,
    group 2, optional, the month), split by month into PATH and the folder ARCHIVE."""

    def __init__(self, path: Path, archive: Path, head: re.Pattern[bytes], *, title: str, noun: str,
                 rotate_bytes: int = ROTATE_BYTES) -> None:
        self.path = path
        self.archive = archive
        self.head = head
        self.title = title  # of the current file (after a rotation) and the archive's
        self.noun = noun  # what the entries are, for the link to the archive: "ticks"
        self.rotate_bytes = rotate_bytes
        self.bad_utf8: int | None = None  # offset of the first byte read that is not UTF-8, if any
        self._lock = threading.RLock()
        self._archives: list[Path] | None = None  # oldest first; listed once, kept up to date
        self._month: tuple[int, int, str | None] | None = None  # (inode, size read, month) of the current file

    # -- files -----------------------------------------------------------------

    def archives(self) -> list[Path]:
        """The archive files, oldest first."""
        with self._lock:
            if self._archives is None:
                found = []
                if self.archive.is_dir():
                    for entry in os.scandir(self.archive):
                        match = _ARCHIVE.match(entry.name)
                        if match and entry.is_file():
                            found.append((match[1], int(match[2] or 1), Path(entry.path)))
                self._archives = [p for _m, _n, p in sorted(found)]
            return list(self._archives)

    def files(self) -> list[Path]:
        """Every file of the log, oldest first: the archive's, then the current one."""
        return [*self.archives(), self.path]

    def _decode(self, data: bytes, offset: int) -> str:
        text, bad = decode_utf8(data)
        if bad is not None and self.bad_utf8 is None:
            self.bad_utf8 = offset + bad
        return text

    # -- reading ---------------------------------------------------------------

    def _heads(self, data: bytes, base: int, from_start: bool) -> list[re.Match[bytes]]:
        """The heads in DATA (read from offset BASE of a file); one at DATA's very start only if
        it is the file's start or FROM_START says DATA begins at a line start."""
        return [m for m in self.head.finditer(data) if m.start() or not base or from_start]

    def spans(self, data: bytes, base: int = 0, *, from_start: bool = True) -> list[Span]:
        """The entries in DATA (read from offset BASE of a file), each to the next one's start
        (see :meth:`_heads`).  Each Span is made once: a returning home's start read its logs'
        tails with two made per entry, and counted entries by making them (~6 ms of its ~35 ms
        build at load 4, 1,000 ticks)."""
        heads = self._heads(data, base, from_start)
        dated = self.head.groups >= 2
        out: list[Span] = []
        for i, match in enumerate(heads):
            month = match.group(2) if dated else None
            end = heads[i + 1].start() if i + 1 < len(heads) else len(data)
            out.append(Span(int(match[1]), month.decode("ascii") if month else None, base + match.start(), base + end))
        return out

    def _tail_of(self, path: Path, count: int, budget: int, chunk: int,
                 at_least_one: bool) -> tuple[bytes, int, list[Span], bool]:
        """The end of PATH holding its last COUNT entries, or only those that begin within BUDGET
        bytes of its end (AT_LEAST_ONE: the last entry whatever its size): (the bytes read,
        their offset in PATH, the entries, whether they are all of PATH's entries)."""
        try:
            f = path.open("rb")
        except FileNotFoundError:
            return b"", 0, [], True
        with f:
            end = f.seek(0, os.SEEK_END)
            pieces: list[bytes] = []  # newest first
            start, size, found = end, chunk, 0
            while start > 0:
                size = min(size, start)
                start -= size
                f.seek(start)
                piece = f.read(size)
                # Heads that begin in this piece (one at its very start is counted with the
                # piece before it, once the byte before it is known).
                window = piece + (pieces[-1][:HEAD_ROOM] if pieces else b"")
                found += sum(1 for m in self._heads(window, start, start == 0) if m.start() <= size)
                pieces.append(piece)
                if found >= count or ((found or not at_least_one) and end - start >= budget):
                    break
                size *= 2  # each byte is read once; few reads for a long way back
            data = b"".join(reversed(pieces))
        spans = self.spans(data, start, from_start=start == 0)
        whole = start == 0 and len(spans) <= count
        spans = spans[-count:]
        while spans and end - spans[0].start > budget and (len(spans) > 1 or not at_least_one):
            spans.pop(0)
            whole = False
        return data, start, spans, whole

    def tail(self, count: int, *, budget: int = TAIL_BYTES, chunk: int = 1 << 16) -> list[tuple[Span, str]]:
        """The last COUNT entries of the log, oldest first, as (span, text): read from the end
        of the newest file, then of the archive's if they are needed, and never from more
        than BUDGET bytes before the end (the newest entry is always read whole)."""
        if count <= 0:
            return []
        with self._lock:
            out: list[tuple[Span, str]] = []
            newer: dict[int, str] = {}  # the entries of the newer file read, by tick
            for path in reversed(self.files()):
                data, base, spans, whole = self._tail_of(path, count - len(out), budget, chunk, not out)
                got = [(s, self._decode(data[s.start - base:s.end - base], s.start)) for s in spans]
                while got and newer.get(got[-1][0].tick) == got[-1][1]:
                    got.pop()  # moved by a rotation cut short: read from the newer file already
                out[:0] = got
                budget -= sum(s.end - s.start for s in spans)
                if not whole or len(out) >= count or budget <= 0:
                    break
                newer = {s.tick: text for s, text in got}
            return out[-count:]

    def entries(self) -> Iterator[tuple[Span, str]]:
        """Every entry of the log, oldest first (file by file)."""
        older: dict[int, str] = {}  # the entries of the file before, by tick
        for path in self.files():
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            read: dict[int, str] = {}
            leading = True
            for span in self.spans(data):
                text = self._decode(data[span.start:span.end], span.start)
                if leading and older.get(span.tick) == text:
                    continue  # moved by a rotation cut short: read from the older file already
                leading = False
                read[span.tick] = text
                yield span, text
            older = read

    def _moved_already(self, spans: list[Span], data: bytes) -> int:
        """How many of the current file's first SPANS (of DATA) the newest archive file ends
        with, byte for byte: a rotation was cut short after writing it."""
        archives = self.archives()
        if not archives or not spans:
            return 0
        tail, base, archived, _whole = self._tail_of(archives[-1], len(spans), 1 << 62, 1 << 16, True)
        by_tick = {s.tick: tail[s.start - base:s.end - base] for s in archived}
        moved = 0
        for span in spans:
            if by_tick.get(span.tick) != data[span.start:span.end]:
                break
            moved += 1
        return moved

    # -- writing ---------------------------------------------------------------

    def append(self, text: str, *, new_entry: str | None = None) -> None:
        """Append TEXT to the current file in one durable write.  NEW_ENTRY: TEXT starts an
        entry stamped with this timestamp, so the current file may move to the archive first."""
        with self._lock:
            if new_entry is not None:
                self._maybe_rotate(new_entry)
            append_durably(self.path, text)

    def _current_month(self, st: os.stat_result) -> str | None:
        """The month of the current file's first entry (read once per file)."""
        cached = self._month
        if cached is not None and cached[0] == st.st_ino and cached[1] <= st.st_size:
            return cached[2]
        with self.path.open("rb") as f:
            data = f.read(1 << 16)
        spans = self.spans(data)
        if not spans:  # a file of no entry yet (a title, a link) is read again at the next one
            return None
        month = spans[0].month
        self._month = (st.st_ino, st.st_size, month)
        return month

    def _maybe_rotate(self, timestamp: str) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return
        month = month_of(timestamp)
        current = self._current_month(st) if st.st_size else None
        if st.st_size > self.rotate_bytes or (month is not None and current is not None and current != month):
            try:
                self.rotate()
            except OSError:  # the tick goes on: it is appended to the current file
                log.exception("could not move %s to %s; the current file goes on", self.path, self.archive)

    def rotate(self) -> list[Path]:
        """Move every entry of the current file to the archive; return the files written."""
        with self._lock:
            data = self.path.read_bytes()
            spans = self.spans(data)
            spans = spans[self._moved_already(spans, data):]  # a rotation cut short: archived already
            archives = self.archives()
            named = _ARCHIVE.match(archives[-1].name) if archives else None
            written: list[Path] = []
            for month, group in _by_month(spans, named[1] if named else ""):
                target = self._free_name(month)
                self.archive.mkdir(mode=0o700, exist_ok=True)
                _write_atomically(target, self._archive_title(target).encode("utf-8")
                                  + data[group[0].start:group[-1].end])
                written.append(target)
                assert self._archives is not None
                self._archives.append(target)
            newest = self._archives[-1] if self._archives else None
            _write_atomically(self.path, self._preamble(newest).encode("utf-8"))
            self._month = None
            return written

    def _free_name(self, month: str) -> Path:
        part = 1
        while True:
            path = self.archive / (f"{month}.org" if part == 1 else f"{month}-{part}.org")
            if not path.exists():
                return path
            part += 1

    def _archive_title(self, path: Path) -> str:
        return f"#+TITLE: {self.title} ({path.stem})\n\n" if self.title else ""

    def _preamble(self, newest: Path | None) -> str:
        """The current file's text after a rotation: its title and a link to the archive."""
        head = f"#+TITLE: {self.title}\n\n" if self.title else ""
        if newest is None:
            return head
        folder = self.archive.name
        return (f"{head}Earlier {self.noun} are in [[file:{folder}/][{folder}/]], one file a month (a long "
                f"month in parts); the last: [[file:{folder}/{newest.name}][{newest.stem}]].\n\n")


def _by_month(spans: list[Span], floor: str) -> Iterator[tuple[str, list[Span]]]:
    """SPANS in runs of one month each.  An undated entry belongs to the run before it; a
    month is never earlier than FLOOR or the run before (archive names keep tick order)."""
    run: list[Span] = []
    label = ""
    for span in spans:
        month = max(span.month or label or floor or _now_month(), floor, label)
        if run and month != label:
            yield label, run
            run = []
        label = month
        run.append(span)
    if run:
        yield label, run


def _now_month() -> str:
    return datetime.now(UTC).strftime("%Y-%m")


def _write_atomically(path: Path, data: bytes) -> None:
    """PATH holds DATA, whole or not at all: a temp file, fsynced, renamed; then its folder fsynced."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    sync_paths([path], folders=True)
