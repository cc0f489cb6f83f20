"""``monologue.org``: one line per tick, the agent's episodic memory."""

from __future__ import annotations

import re
from pathlib import Path

from .files import append_durably
from .recovery import decode_utf8

_LINE = re.compile(r"^- \[TICK (\d+)\]\[([^\]]*)\] (.*)$")


class MonologueLog:
    """Appends monologue lines to ``monologue.org`` and reads them back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bad_utf8: int | None = None  # offset of the first byte read that is not UTF-8, if any

    def read(self) -> list[tuple[int, str]]:
        """Every (tick, line) in the file, oldest first."""
        if not self.path.exists():
            return []
        text, bad = decode_utf8(self.path.read_bytes())
        if bad is not None and self.bad_utf8 is None:
            self.bad_utf8 = bad
        out = []
        for line in text.splitlines():
            match = _LINE.match(line)
            if match:
                out.append((int(match.group(1)), match.group(3)))
        return out

    def append(self, tick: int, timestamp: str, text: str) -> str:
        """Record TEXT for TICK as one line; return the line."""
        line = " ".join(text.split())
        if not self.path.exists():
            append_durably(self.path, "#+TITLE: Monologue\n\n")
        append_durably(self.path, f"- [TICK {tick}][{timestamp}] {line}\n")
        return line
