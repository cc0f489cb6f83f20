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
        """Every heading in the file, oldest first: as orgparse reads it (:func:`read_org`), by
        :func:`read_plain` when the file is as AMACS writes it."""
        if not self.path.exists():
            return []
        text, bad = decode_utf8(self.path.read_bytes())
        if bad is not None and self.bad_utf8 is None:
            self.bad_utf8 = bad
        entries = read_plain(text)
        return entries if entries is not None else read_org(text)


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
