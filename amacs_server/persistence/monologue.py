"""``monologue.org``: one line per tick, the agent's episodic memory."""

from __future__ import annotations

import re
from pathlib import Path

from .files import append_durably

_LINE = re.compile(r"^- \[TICK (\d+)\]\[([^\]]*)\] (.*)$")


class MonologueLog:
    """Appends monologue lines to ``monologue.org`` and reads them back."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[tuple[int, str]]:
        """Every (tick, line) in the file, oldest first."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
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
