"""``monologue.org``: one line per tick, the agent's episodic memory."""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path

from .files import append_durably

_LINE = re.compile(r"^- \[TICK (\d+)\]\[([^\]]*)\] (.*)$")


class MonologueLog:
    """Appends monologue lines and keeps the recent ones in memory."""

    def __init__(self, path: Path, keep: int = 1000) -> None:
        self.path = path
        self.recent: deque[str] = deque(maxlen=keep)
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                match = _LINE.match(line)
                if match:
                    self.recent.append(match.group(3))

    def append(self, tick: int, timestamp: str, text: str) -> None:
        """Record TEXT (one line) for TICK."""
        line = " ".join(text.split())
        if not self.path.exists():
            append_durably(self.path, "#+TITLE: Monologue\n\n")
        append_durably(self.path, f"- [TICK {tick}][{timestamp}] {line}\n")
        self.recent.append(line)

    def last(self, count: int) -> list[str]:
        """The last COUNT lines, oldest first."""
        if count <= 0:
            return []
        return list(self.recent)[-count:]
