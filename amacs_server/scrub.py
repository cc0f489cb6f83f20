"""One scrubber for every secret the server knows: no key reaches a log, a transcript or git.

The secrets are the API keys, the EPC token and what ``mcp.json`` gives its
servers (learnt when the file is read: :meth:`Scrubber.learn`).  Emacs is where a secret can
enter the server's data: an eval that reads ``(getenv "ANTHROPIC_API_KEY")``,
a person who pastes a key.  So the transport scrubs every message from Emacs
before it is read (after hello, which carries the token), and nothing
downstream — org files, git, memory.db, transcripts, the model API, the
shell — ever holds one.  The log and the transcripts scrub again, for what the
server itself might write (an exception that quotes a header).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

MIN_SECRET = 8  # shorter values (a test's "k") would redact ordinary words


class Scrubber:
    """Replaces each secret's text with ``[redacted NAME]``."""

    def __init__(self, secrets: Mapping[str, str | None]) -> None:
        self._own = {value: f"[redacted {name}]" for name, value in secrets.items()
                     if value and len(value) >= MIN_SECRET}
        self._learnt: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self._build()

    def learn(self, source: str, secrets: Iterable[tuple[str, str]]) -> None:
        """From now on, also redact SECRETS (name, value) as ``[redacted NAME]``; they replace what
        SOURCE (``mcp.json``) gave before.  A value shorter than MIN_SECRET is kept only when it
        cannot be an ordinary word (it has ``:`` and ``@``, a URL's password part)."""
        pairs = {value: f"[redacted {name}]" for name, value in secrets
                 if value and (len(value) >= MIN_SECRET or (value.startswith(":") and value.endswith("@")))}
        with self._lock:
            if self._learnt.get(source) == pairs:
                return
            self._learnt[source] = pairs
            self._build()

    def _build(self) -> None:
        every = dict(self._own)
        for pairs in self._learnt.values():
            for value, mark in pairs.items():
                every.setdefault(value, mark)
        # As JSON and elisp quote them too (a value with a quote or a backslash).
        for value, mark in list(every.items()):
            for quoted in (json.dumps(value, ensure_ascii=False)[1:-1],
                           value.replace("\\", "\\\\").replace('"', '\\"')):
                every.setdefault(quoted, mark)
        # Longest first: a URL holding a password goes whole before its password alone.
        ordered = tuple(sorted(every.items(), key=lambda p: -len(p[0])))
        # Encoded once: data() runs on every message from Emacs.  One assignment each: readers
        # on other threads see the old pairs or the new, never a mix.
        self._raw_pairs = tuple((value.encode("utf-8"), mark.encode("utf-8")) for value, mark in ordered)
        self._pairs = ordered

    @property
    def values(self) -> tuple[str, ...]:
        """The secrets themselves."""
        return tuple(value for value, _ in self._pairs)

    def text(self, text: str) -> str:
        """TEXT with every secret replaced."""
        for value, mark in self._pairs:
            if value in text:
                text = text.replace(value, mark)
        return text

    def data(self, data: bytes) -> bytes:
        """DATA (UTF-8 bytes) with every secret replaced."""
        for raw, mark in self._raw_pairs:
            if raw in data:
                data = data.replace(raw, mark)
        return data

    def file(self, path: Path, chunk: int = 1 << 20) -> None:
        """PATH's bytes with every secret replaced, a CHUNK at a time (a file too big to hold)."""
        pairs = self._raw_pairs
        if not pairs:
            return
        marks = dict(pairs)
        pattern = re.compile(b"|".join(re.escape(raw) for raw, _ in pairs))
        keep = max(len(raw) for raw, _ in pairs) - 1  # bytes that may begin a secret cut by the chunk
        temp = path.with_name(path.name + ".scrub")
        with path.open("rb") as src, temp.open("wb") as out:
            os.chmod(temp, path.stat().st_mode & 0o777)
            carry = b""
            while data := src.read(chunk):
                data = carry + data
                split, done, parts = max(len(data) - keep, 0), 0, []
                for found in pattern.finditer(data):
                    if found.start() >= split:
                        break
                    parts += [data[done:found.start()], marks[found.group(0)]]
                    done = found.end()
                split = max(split, done)
                parts.append(data[done:split])
                out.write(b"".join(parts))
                carry = data[split:]
            out.write(self.data(carry))
        os.replace(temp, path)

    def value(self, value: Any) -> Any:
        """VALUE (strings, lists, tuples and dicts within) with every secret replaced."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list | tuple):
            return type(value)(self.value(v) for v in value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value


class LogScrubber(logging.Filter):
    """A log filter: each record's message, formatted, passes the scrubber."""

    def __init__(self, scrub: Scrubber) -> None:
        super().__init__()
        self.scrub = scrub

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = self.scrub.text(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and not record.exc_text:  # the traceback's text, formatted once here
            record.exc_text = self.scrub.text(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = self.scrub.text(record.exc_text)
        return True
