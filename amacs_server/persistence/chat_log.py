"""``agent-chat.org``: chat history in the structure of RFC v4 §8.3.

Each tick is a ``* Tick N`` heading with a ``:TIMESTAMP:`` property, then
``** Human`` (the person's input, written before the model is called) and
``** Agent`` (the reply).

The human's text is plain: lines that would start an org heading are escaped
with a leading comma, as org does in source blocks.  The reply is org (issue 9):
its headings are demoted two levels (``* H`` becomes ``*** H``) so they nest and
fold under ``** Agent``, and the lines of its src and example blocks are
comma-escaped as org escapes them.  :func:`unnest_reply` undoes both.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orgparse

from .files import append_durably
from .recovery import decode_utf8


@dataclass
class ChatEntry:
    """One tick of the chat: the human part, the agent part, or both."""

    tick: int
    timestamp: str
    human: str | None = None
    agent: str | None = None

    @property
    def interrupted(self) -> bool:
        """A human message that never got its agent part (the server stopped)."""
        return self.human is not None and self.agent is None


def escape_org(text: str) -> str:
    """Protect lines that org would read as headings (``*``) or as escapes (``,*``)."""
    out = []
    for line in text.split("\n"):
        stripped = line.lstrip(",")
        out.append("," + line if stripped.startswith("*") else line)
    return "\n".join(out)


def unescape_org(text: str) -> str:
    """Undo :func:`escape_org`."""
    out = []
    for line in text.split("\n"):
        stripped = line.lstrip(",")
        out.append(line[1:] if line.startswith(",") and stripped.startswith("*") else line)
    return "\n".join(out)


# Blocks whose lines org reads verbatim, comma-escaped; and the line ending one.
_VERBATIM_BLOCK = re.compile(r"^[ \t]*#\+begin_(src|example|export|comment)\b", re.IGNORECASE)
# A line of a verbatim block that org escapes, and an escaped one: ``*``, ``#+``.
_CODE_TO_ESCAPE = re.compile(r"^([ \t]*)(,*(?:\*|#\+))")
_ESCAPED_CODE = re.compile(r"^([ \t]*,*),((?:\*|#\+))")
# Outside blocks: a heading line, a demoted one, and a line that needs a comma
# so it is not mistaken for an escaped heading from the old format.
_HEADING = re.compile(r"^\*+(?:[ \t]|$)")
_NESTED_HEADING = re.compile(r"^\*\*\*+(?:[ \t]|$)")
_COMMA_STAR = re.compile(r"^,+\*")


def _block_end(line: str) -> re.Pattern[str] | None:
    """If LINE begins a verbatim block, the pattern of the line that ends it."""
    begin = _VERBATIM_BLOCK.match(line)
    if begin is None:
        return None
    return re.compile(rf"^[ \t]*#\+end_{begin[1]}[ \t]*$", re.IGNORECASE)


def _map_reply_lines(text: str, *, code: Callable[[str], str], prose: Callable[[str], str]) -> str:
    """TEXT with CODE applied to the lines inside verbatim blocks, PROSE to the others.

    The lines that begin and end blocks are kept as they are."""
    out: list[str] = []
    end: re.Pattern[str] | None = None
    for line in text.split("\n"):
        if end is None:
            end = _block_end(line)
            out.append(line if end is not None else prose(line))
        elif end.match(line):
            end = None
            out.append(line)
        else:
            out.append(code(line))
    return "\n".join(out)


def nest_reply(text: str) -> str:
    """The reply (org) as the body of ``** Agent``: headings two levels down, block
    lines escaped as org escapes them (``,*``, ``,#+``)."""

    def prose(line: str) -> str:
        if _HEADING.match(line):
            return "**" + line
        return "," + line if _COMMA_STAR.match(line) else line

    return _map_reply_lines(text, code=lambda line: _CODE_TO_ESCAPE.sub(r"\1,\2", line), prose=prose)


def unnest_reply(body: str) -> str:
    """Undo :func:`nest_reply`.

    Also reads the old format, in which every line starting with ``*`` had a comma."""

    def prose(line: str) -> str:
        if _NESTED_HEADING.match(line):
            return line[2:]
        return line[1:] if _COMMA_STAR.match(line) else line

    return _map_reply_lines(body, code=lambda line: _ESCAPED_CODE.sub(r"\1\2", line), prose=prose)


class ChatLog:
    """Appends ticks to ``agent-chat.org`` and reads the history back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bad_utf8: int | None = None  # offset of the first byte read that is not UTF-8, if any

    def _decode(self, data: bytes, offset: int = 0) -> str:
        """DATA (read from OFFSET) as text; bytes that are not UTF-8 read as U+FFFD and are noted."""
        text, bad = decode_utf8(data)
        if bad is not None and self.bad_utf8 is None:
            self.bad_utf8 = offset + bad
        return text

    def write_human(self, tick: int, timestamp: str, text: str) -> None:
        """Write-ahead: the heading and the human's input, before any model call."""
        append_durably(
            self.path,
            f"* Tick {tick}\n:PROPERTIES:\n:TIMESTAMP: {timestamp}\n:END:\n\n"
            f"** Human\n{escape_org(text)}\n\n",
        )

    def write_agent(self, tick: int, timestamp: str, reply: str, *, with_heading: bool) -> None:
        """Append the agent's part; a tick with no human input gets its heading here."""
        head = (
            f"* Tick {tick}\n:PROPERTIES:\n:TIMESTAMP: {timestamp}\n:END:\n\n"
            if with_heading
            else ""
        )
        append_durably(self.path, f"{head}** Agent\n{nest_reply(reply)}\n\n")

    def read(self) -> list[ChatEntry]:
        """Every tick in the file, oldest first, parsed with orgparse."""
        if not self.path.exists():
            return []
        return _entries(orgparse.loads(self._decode(self.path.read_bytes())))

    def read_tail(self, count: int, chunk: int = 1 << 16) -> list[ChatEntry]:
        """The last COUNT ticks, oldest first: the file is read from its end only as far
        as they need (start-up reads the windows the context shows, issue 10).

        A tick starts at a ``* Tick`` line; the human's text cannot start one
        (:func:`escape_org`) and the reply's headings are demoted, so the ticks
        are found by that line alone."""
        if not self.path.exists() or count <= 0:
            return []
        with self.path.open("rb") as f:
            end = f.seek(0, 2)
            data = b""
            start = end
            while True:
                start = max(0, start - chunk)
                f.seek(start)
                data = f.read(end - start)
                heads = [m.start() + 1 for m in re.finditer(rb"\n\* Tick ", data)]
                if start == 0 and data.startswith(b"* Tick "):
                    heads.insert(0, 0)
                if len(heads) > count or start == 0:
                    break
        cut = heads[-count] if len(heads) >= count else 0
        return _entries(orgparse.loads(self._decode(data[cut:], start + cut)))


def _entries(root: orgparse.node.OrgRootNode) -> list[ChatEntry]:
    """The ``* Tick N`` entries under ROOT."""
    entries: list[ChatEntry] = []
    for node in root.children:
        title = node.heading.split()
        if len(title) != 2 or title[0] != "Tick" or not title[1].isdigit():
            continue
        entry = ChatEntry(tick=int(title[1]), timestamp=str(node.properties.get("TIMESTAMP", "")))
        for child in node.children:
            if child.heading == "Human":
                entry.human = unescape_org(child.body.strip("\n"))
            elif child.heading == "Agent":
                entry.agent = unnest_reply(_section_text(child))
        entries.append(entry)
    return entries


def _section_text(node: orgparse.node.OrgNode) -> str:
    """The raw text under NODE's heading, its sub-headings included, as written.

    orgparse puts the reply's (demoted) headings in child nodes, and takes
    planning lines and drawers out of bodies; the raw lines of the subtree keep
    everything.  The blank line that ends each part is not part of the text."""
    text = "\n".join(str(part) for part in node[:]).partition("\n")[2]
    return text[:-1] if text.endswith("\n") else text
