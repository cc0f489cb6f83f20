"""Transcripts: typed events as JSON lines, one file per session.

The design: docs/ARCHITECTURE.md, Persistence and git.

Every line has the same top-level columns so DuckDB's ``read_json_auto`` or
pandas load thousands of files without a custom parser; event-specific data is
under ``data``.  The API key is scrubbed from every line before it is written.

A transcript keeps one file descriptor open for appending: each event
is one ``write`` to it, not an open, a write and a close.  Nothing is buffered in
the process, so a reader (the hub, a test) sees every event written so far.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..records import Line, Record, parse

if TYPE_CHECKING:
    from ..scrub import Scrubber


@dataclass(frozen=True)
class AgentIdentity:
    """Who an event belongs to."""

    agent_id: str = "primary"
    parent_id: str | None = None
    agent_type: str = "primary"
    template: str = "core"


class Transcript:
    """Appends events for one session, through one open file (:meth:`close` it at the end)."""

    def __init__(self, folder: Path, run_id: str, secrets: tuple[str, ...] = (), scrub: Scrubber | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{run_id}.jsonl"
        self.run_id = run_id
        self._secrets = tuple(s for s in secrets if s)
        self._scrub = scrub  # the server's scrubber, whose secrets grow as mcp.json is read
        self._seq = 0
        self._lock = threading.Lock()
        self._encoder = json.JSONEncoder(ensure_ascii=False, default=str)  # what json.dumps makes per call
        self._fd: int | None = None
        self._closer: weakref.finalize[[int], Transcript] | None = None  # closes the descriptor if close() is never called

    def read(self, agent_id: str) -> list[dict[str, Any]]:
        """Every event of AGENT_ID in this session, in order."""
        if not self.path.exists():
            return []
        with self._lock:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        return [r for r in map(json.loads, lines) if r["agent_id"] == agent_id]

    def lines(self, agent_id: str) -> list[Line]:
        """Every event of AGENT_ID in this session, in order, as records."""
        return [parse(r) for r in self.read(agent_id)]

    def write(self, event: Record, *, tick: int | None = None, agent: AgentIdentity = AgentIdentity()) -> None:
        """Append one EVENT (its kind is the line's ``event``, its fields the line's ``data``)."""
        with self._lock:
            self._seq += 1
            record = {
                "run_id": self.run_id,
                "session_id": self.run_id,
                "agent_id": agent.agent_id,
                "parent_id": agent.parent_id,
                "agent_type": agent.agent_type,
                "template": agent.template,
                "seq": self._seq,
                "ts": time.time(),
                "tick": tick,
                "event": event.kind,
                "data": event.data(),
            }
            line = self._encoder.encode(record)
            if self._scrub is not None:
                line = self._scrub.text(line)
            for secret in self._secrets:
                line = line.replace(secret, "[REDACTED]")
            try:
                data_bytes = (line + "\n").encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: kept exactly, as a JSON escape
                data_bytes = (json.dumps(record, ensure_ascii=True, default=str) + "\n").encode("ascii")
                for secret in self._secrets:
                    data_bytes = data_bytes.replace(secret.encode("utf-8"), b"[REDACTED]")
                if self._scrub is not None:
                    data_bytes = self._scrub.data(data_bytes)
            os.write(self._open(), data_bytes)

    def _open(self) -> int:
        """The file's descriptor, opened for appending at the first write (or the first after close)."""
        if self._fd is None:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._fd, self._closer = fd, weakref.finalize(self, os.close, fd)
        return self._fd

    def close(self) -> None:
        """Close the file (the runtime's stop); a later write opens it again."""
        with self._lock:
            if self._closer is not None:
                self._closer()  # os.close, once
            self._fd, self._closer = None, None


_CHUNK = 1 << 16
_TS = re.compile(rb'"ts": ([0-9.eE+-]+)')
# A line is stamped, then written, by one of the server's threads: the lines of a file are in
# the order of their stamps to within this many seconds.
_SLACK = 5.0


def written_since(folder: Path, since: float) -> list[dict[str, Any]]:
    """The lines of FOLDER's transcripts stamped after SINCE (their ``ts``), newest first within
    each file: each file touched since is read from its end back to its first line stamped
    :data:`_SLACK` seconds before SINCE.  A line's stamp is read from its first bytes (a
    model_request line holds the whole request: 300 KB at 20,000 ticks); only the lines after
    SINCE are read whole."""
    found: list[dict[str, Any]] = []
    for path in folder.glob("*.jsonl") if folder.is_dir() else []:
        try:
            if path.stat().st_mtime < since - _SLACK:
                continue
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            for start, stop in _lines_back(fd, os.fstat(fd).st_size):
                head = os.pread(fd, min(_HEAD, stop - start), start)
                ts = _TS.search(head)
                line = None
                if stop - start > len(head) and (ts is None or ts.end() == len(head)):
                    line = os.pread(fd, stop - start, start)  # no whole stamp in its first bytes
                    ts = _TS.search(line)
                if ts is None:
                    continue
                if float(ts[1]) < since - _SLACK:
                    break
                if float(ts[1]) <= since:
                    continue
                try:
                    found.append(json.loads(line if line is not None else os.pread(fd, stop - start, start)))
                except ValueError:
                    continue  # a line a kill cut short
        except OSError:
            continue
        finally:
            os.close(fd)
    return found


_HEAD = 1 << 12  # a line's first bytes, where its stamp is


def _lines_back(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """Where each line of the file FD's first SIZE bytes starts and ends (before its newline),
    the last first; the file is read once, from its end."""
    stop, pos = size, size
    while pos > 0:
        step = min(_CHUNK, pos)
        pos -= step
        chunk = os.pread(fd, step, pos)
        at = len(chunk)
        while (nl := chunk.rfind(b"\n", 0, at)) >= 0:
            yield pos + nl + 1, stop
            stop, at = pos + nl, nl
    yield 0, stop
