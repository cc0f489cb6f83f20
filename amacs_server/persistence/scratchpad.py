"""``scratchpad.org``: the agent's notes under headings, with thread scope."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..files import append_durably, atomic_write
from .chat_log import escape_org, unescape_org
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

    @staticmethod
    def format(entry: ScratchpadEntry) -> str:
        """ENTRY as its org text: a heading with :THREAD: and :TICK: properties, then the content."""
        heading = " ".join(entry.heading.split())
        return (f"* {heading}\n:PROPERTIES:\n:THREAD: {entry.thread or 'null'}\n:TICK: {entry.tick}\n:END:\n"
                f"{escape_org(entry.content.rstrip())}\n\n")

    def append(self, entry: ScratchpadEntry) -> None:
        """One heading with :THREAD: and :TICK: properties, then the content."""
        append_durably(self.path, self.format(entry))

    def replace(self, entry: ScratchpadEntry) -> None:
        """Rewrite the heading of ENTRY's tick with ENTRY (the agent mutated it).
        The rest of the file stays byte for byte; the file is replaced atomically.  A heading
        no longer in the file (removed by hand) is appended again."""
        text = self.path.read_text(encoding="utf-8", errors="replace") if self.path.exists() else ""
        starts = [m.start() for m in re.finditer(r"^\* ", text, re.M)]
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else len(text)
            block = text[start:end]
            drawer = re.search(r"^:PROPERTIES:\n(.*?)^:END:", block, re.M | re.S)
            if drawer and re.search(rf"^:TICK:\s+{entry.tick}\s*$", drawer.group(1), re.M):
                atomic_write(self.path, text[:start] + self.format(entry) + text[end:])
                return
        self.append(entry)

    def read(self) -> list[ScratchpadEntry]:
        """Every heading in the file, oldest first."""
        if not self.path.exists():
            return []
        text, bad = decode_utf8(self.path.read_bytes())
        if bad is not None and self.bad_utf8 is None:
            self.bad_utf8 = bad
        import orgparse  # ~8 ms: imported by the first read of a scratchpad, not at start-up

        out = []
        for node in orgparse.loads(text).children:
            tick = str(node.properties.get("TICK", ""))
            if not tick.isdigit():
                continue
            thread = str(node.properties.get("THREAD", "null"))
            out.append(ScratchpadEntry(int(tick), node.heading, None if thread == "null" else thread,
                                       unescape_org(node.body.strip("\n"))))
        return out
