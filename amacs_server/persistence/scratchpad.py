"""``scratchpad.org``: the agent's notes under headings, with thread scope."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """Appends headings to ``scratchpad.org`` and reads them back.

    It keeps the digest of the bytes the file holds as far as this log knows (those it last
    read, and what it wrote since), while every heading it wrote reads back as written, by
    :func:`read_plain` and :func:`index_of` alike (:meth:`digest`); memory.db records it when
    it is level with those bytes, so a start that finds the same bytes need not read the
    headings (``Mind._restore_memory``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bad_utf8: int | None = None  # offset of the first byte read that is not UTF-8, if any
        self._sum: Any = None  # blake2b of the bytes known to be in the file; None: unknown

    @staticmethod
    def format(entry: ScratchpadEntry) -> str:
        """ENTRY as its org text: a heading with :THREAD: and :TICK: properties, then the content."""
        heading = " ".join(entry.heading.split())
        return (f"* {heading}\n:PROPERTIES:\n:THREAD: {entry.thread or 'null'}\n:TICK: {entry.tick}\n:END:\n"
                f"{escape_org(entry.content.rstrip())}\n\n")

    def append(self, entry: ScratchpadEntry) -> None:
        """One heading with :THREAD: and :TICK: properties, then the content."""
        text = self.format(entry)
        append_durably(self.path, text)
        if self._sum is not None and reads_back(entry, text):
            self._sum.update(text.encode("utf-8"))
        else:
            self._sum = None

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
                data = self.path.read_bytes() if self._sum is not None else b"\r"
                # the rest of the file stays as this log knew it: no hand edit, no \r read as \n
                known = b"\r" not in data and hashlib.blake2b(data).digest() == self._sum.digest()
                new = text[:start] + self.format(entry) + text[end:]
                atomic_write(self.path, new)
                ok = known and reads_back(entry, self.format(entry))
                self._sum = hashlib.blake2b(new.encode("utf-8")) if ok else None
                return
        self.append(entry)

    def digest(self) -> str | None:
        """The digest of the bytes the file holds, as far as this log knows; None when it does not
        know them, or a heading it wrote may read back otherwise (:meth:`distrust`)."""
        return None if self._sum is None else str(self._sum.hexdigest())

    def distrust(self) -> None:
        """Know no digest (until the next :meth:`load`): the file's bytes are not all as read."""
        self._sum = None

    def load(self) -> str:
        """The file's text (bytes that are not UTF-8 read as U+FFFD: :attr:`bad_utf8`); its digest
        is known from here (:meth:`digest`)."""
        data = self.path.read_bytes() if self.path.exists() else b""
        self._sum = hashlib.blake2b(data)
        if data and not data.endswith(b"\n"):
            self._sum = None  # a heading appended would join the last line
        text, bad = decode_utf8(data)
        if bad is not None and self.bad_utf8 is None:
            self.bad_utf8 = bad
        return text

    def read(self) -> list[ScratchpadEntry]:
        """Every heading in the file, oldest first: as orgparse reads it (:func:`read_org`), by
        :func:`read_plain` when the file is as AMACS writes it."""
        return entries_of(self.load())


def entries_of(text: str) -> list[ScratchpadEntry]:
    """The headings of TEXT, by :func:`read_plain`, else as orgparse reads them."""
    entries = read_plain(text)
    return entries if entries is not None else read_org(text)


# The headings as ScratchpadLog.format writes them: what index_of finds.
_INDEXED = re.compile(r"^\* .*\n:PROPERTIES:\n:THREAD: (.*)\n:TICK: (\d+)\n:END:$", re.M)


def index_of(text: str) -> list[tuple[int, str | None]]:
    """The tick and thread of each heading of TEXT written as :meth:`ScratchpadLog.format`
    writes it, oldest first, without reading the rest (~1 ms for 2,000 headings, against ~50
    for :func:`read_plain`): what read_plain reads, for a text :func:`indexed` said so of."""
    out = []
    for match in _INDEXED.finditer(text):
        thread = match.group(1).strip()
        out.append((int(match.group(2)), None if thread == "null" else thread))
    return out


def indexed(text: str, entries: list[ScratchpadEntry]) -> bool:
    """True when ENTRIES, what :func:`read_plain` read from TEXT, are what :func:`index_of` finds
    there: each of another tick, each tick and thread as index_of reads them."""
    ticks = [(e.tick, e.thread) for e in entries]
    return len({t for t, _ in ticks}) == len(ticks) and index_of(text) == ticks


def reads_back(entry: ScratchpadEntry, text: str) -> bool:
    """True when TEXT, ENTRY as written, reads back as ENTRY (its heading's spaces and its
    content's trailing spaces aside) by read_plain and by index_of."""
    want = ScratchpadEntry(entry.tick, " ".join(entry.heading.split()), entry.thread, entry.content.rstrip())
    return read_plain(text) == [want] and index_of(text) == [(entry.tick, entry.thread)]


def _entry(tick: str, heading: str, thread: str, body: str) -> ScratchpadEntry | None:
    """The entry of a heading with :TICK: TICK and :THREAD: THREAD; None when TICK is no number."""
    if not tick.isdigit():
        return None
    return ScratchpadEntry(int(tick), heading, None if thread == "null" else thread, unescape_org(body.strip("\n")))


def read_org(text: str) -> list[ScratchpadEntry]:
    """The headings of TEXT as orgparse reads them: any org text (a file edited by hand)."""
    import orgparse  # ~8 ms: imported when a scratchpad is read that read_plain cannot

    out = []
    for node in orgparse.loads(text).children:
        entry = _entry(str(node.properties.get("TICK", "")), node.heading, str(node.properties.get("THREAD", "null")),
                       node.body)
        if entry is not None:
            out.append(entry)
    return out


# read_plain reads what orgparse reads, line by line as orgparse splits them (str.splitlines), for
# text holding none of what orgparse reads into something other than the heading, the property
# drawer and the body: an org setting (#+), a heading below the first level, a link (its
# description is read), a CLOCK or repeated-task line (dropped), a timestamp (parsed: a date that
# is none raises; SCHEDULED, DEADLINE and CLOSED are read only with one), the Effort property
# (parsed), tags, a TODO keyword or a priority cookie in a heading (cut off).
_CHUNK = re.compile(r"\*+ ")  # a line orgparse starts a node at
_NOT_PLAIN = re.compile(r'^\s*#\+|^\*\*+ |\[\[|CLOCK:|-\s+State\s+"|[<\[]\d{4}-\d{2}-\d{2}')
# The same over a whole text whose only line break is \n (its lines as str.splitlines cuts them,
# their whitespace all but \n), one part at a time, each searched for only when a text it
# needs is in it (a search of a 500 KB file costs ~10 ms, a look for a text ~0.5 ms).
_NOT_PLAIN_PARTS = (
    (("#+",), re.compile(r"^[^\S\n]*#\+", re.M)), (("**",), re.compile(r"^\*\*+ ", re.M)),
    (("[[",), None), (("CLOCK:",), None), (("State",), re.compile(r'-[^\S\n]+State[^\S\n]+"')),
    (("<", "["), re.compile(r"[<\[]\d{4}-\d{2}-\d{2}")))
_OTHER_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")  # str.splitlines cuts at these too
_STARS = re.compile(r"^(\*+)\s+(.*?)\s*$")  # orgparse's heading: what follows the stars, stripped
_TAGS = re.compile(r"(.*?)\s*:([\w@:]+):\s*$")
_PRIORITY = re.compile(r"^\s*\[#([A-Z0-9])\] ?(.*)$")
_PROPERTY = re.compile(r"^\s*:(.*?):\s*(.*?)\s*$")


def read_plain(text: str) -> list[ScratchpadEntry] | None:
    """The headings of TEXT as :func:`read_org` reads them, ~20x faster; None when TEXT holds
    anything orgparse reads otherwise than plain text (the caller reads it with orgparse)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if _CHUNK.match(line)]
    if any(line.strip() for line in lines[:starts[0] if starts else len(lines)]):
        return None  # text before the first heading: org settings, whatever orgparse makes of it
    if _OTHER_BREAKS.search(text) is None:
        if any(any(part in text for part in parts) and (pattern is None or pattern.search(text))
               for parts, pattern in _NOT_PLAIN_PARTS):
            return None
    elif any(_NOT_PLAIN.search(line) for line in lines):
        return None
    out = []
    for k, start in enumerate(starts):
        match = _STARS.match(lines[start])
        if match is None:
            return None
        heading = match.group(2)
        if (_TAGS.search(heading) or _PRIORITY.search(heading) or heading in ("TODO", "DONE")
                or heading.startswith(("TODO ", "DONE "))):
            return None
        body = iter(lines[start + 1:starts[k + 1] if k + 1 < len(starts) else len(lines)])
        kept: list[str] = []
        properties: dict[str, str] = {}
        drawer = False
        for line in body:
            if drawer:
                if ":END:" in line:
                    break
                prop = _PROPERTY.search(line)
                if prop is not None:
                    if prop.group(1) == "Effort":
                        return None
                    properties[prop.group(1)] = prop.group(2)
            elif ":PROPERTIES:" in line:
                drawer = True
            else:
                kept.append(line)
        kept.extend(body)
        entry = _entry(properties.get("TICK", ""), heading, properties.get("THREAD", "null"), "\n".join(kept))
        if entry is not None:
            out.append(entry)
    return out
