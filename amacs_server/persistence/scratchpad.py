"""``scratchpad.org``: the agent's notes under headings, with thread scope (RFC v4 §4.2)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orgparse

from .chat_log import escape_org, unescape_org
from .files import append_durably
from .recovery import decode_utf8


@dataclass(frozen=True)
class ScratchpadEntry:
    """One heading: ``thread`` None is a global note, shown whatever thread is active."""

    tick: int
    heading: str
    thread: str | None
    content: str


class ScratchpadLog:
    """Appends headings to ``scratchpad.org`` and reads them back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bad_utf8: int | None = None  # offset of the first byte read that is not UTF-8, if any

    def append(self, entry: ScratchpadEntry) -> None:
        """One heading with :THREAD: and :TICK: properties, then the content."""
        heading = " ".join(entry.heading.split())
        append_durably(
            self.path,
            f"* {heading}\n:PROPERTIES:\n:THREAD: {entry.thread or 'null'}\n:TICK: {entry.tick}\n:END:\n"
            f"{escape_org(entry.content.rstrip())}\n\n",
        )

    def read(self) -> list[ScratchpadEntry]:
        """Every heading in the file, oldest first."""
        if not self.path.exists():
            return []
        text, bad = decode_utf8(self.path.read_bytes())
        if bad is not None and self.bad_utf8 is None:
            self.bad_utf8 = bad
        out = []
        for node in orgparse.loads(text).children:
            tick = str(node.properties.get("TICK", ""))
            if not tick.isdigit():
                continue
            thread = str(node.properties.get("THREAD", "null"))
            out.append(ScratchpadEntry(int(tick), node.heading, None if thread == "null" else thread,
                                       unescape_org(node.body.strip("\n"))))
        return out
