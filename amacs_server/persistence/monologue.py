"""``monologue.org``: one line per tick, the agent's episodic memory.

The file holds the current month; earlier months are in ``monologue/``, one
file each (:mod:`.monthly`, as the chat log)."""

from __future__ import annotations

import re
from pathlib import Path

from .monthly import ROTATE_BYTES, MonthlyLog

_LINE = re.compile(r"^- \[TICK (\d+)\]\[([^\]]*)\] (.*)$")
_HEAD = re.compile(rb"^- \[TICK (\d+)\]\[(\d{4}-\d\d)?", re.MULTILINE)
TITLE = "Monologue"


class MonologueLog:
    """Appends monologue lines to ``monologue.org`` and reads them back."""

    def __init__(self, path: Path, *, rotate_bytes: int = ROTATE_BYTES) -> None:
        self.path = path
        self.log = MonthlyLog(path, path.parent / "monologue", _HEAD, title=TITLE, noun="lines",
                              rotate_bytes=rotate_bytes)

    @property
    def bad_utf8(self) -> int | None:
        """Offset of the first byte read that is not UTF-8 (read as U+FFFD), if any."""
        return self.log.bad_utf8

    def files(self) -> list[Path]:
        """Every file of the monologue, oldest first (the months in ``monologue/``, then this one)."""
        return self.log.files()

    def read(self) -> list[tuple[int, str]]:
        """Every (tick, line) of the monologue, oldest first."""
        return [line for _span, text in self.log.entries() if (line := _parse(text)) is not None]

    def read_tail(self, count: int) -> list[tuple[int, str]]:
        """The last COUNT (tick, line), oldest first, read from the end."""
        return [line for _span, text in self.log.tail(count) if (line := _parse(text)) is not None]

    def append(self, tick: int, timestamp: str, text: str) -> str:
        """Record TEXT for TICK as one line; return the line."""
        line = " ".join(text.split())
        if not self.path.exists():
            self.log.append(f"#+TITLE: {TITLE}\n\n")
        self.log.append(f"- [TICK {tick}][{timestamp}] {line}\n", new_entry=timestamp)
        return line


def _parse(text: str) -> tuple[int, str] | None:
    match = _LINE.match(text.partition("\n")[0])
    return (int(match[1]), match[3]) if match else None
