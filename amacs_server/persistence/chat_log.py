"""``agent-chat.org``: chat history in the structure of RFC v4 §8.3.

Each tick is a ``* Tick N`` heading with a ``:TIMESTAMP:`` property, then
``** Human`` (the person's input, written before the model is called) and
``** Agent`` (the reply).

The human's text is plain: lines that would start an org heading are escaped
with a leading comma, as org does in source blocks.  The reply is org (issue 9):
its headings are demoted two levels (``* H`` becomes ``*** H``) so they nest and
fold under ``** Agent``, and the lines of its src and example blocks are
comma-escaped as org escapes them.  :func:`unnest_reply` undoes both.

The file holds the current month; the earlier ticks are in ``chat/``, one file
a month, written once (:mod:`.monthly`, issue 12): a tick's commit adds the
current file to git, not the history, and start-up reads only the log's end.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .monthly import ROTATE_BYTES, TAIL_BYTES, MonthlyLog


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


# A tick's first line, and the month of its :TIMESTAMP: when it follows (monthly.MonthlyLog).
_TICK_HEAD = re.compile(rb"^\* Tick (\d+)[ \t]*(?:\n|\Z)(?::PROPERTIES:[ \t]*\n:TIMESTAMP:[ \t]*(\d{4}-\d\d))?",
                        re.MULTILINE)
_TICK = re.compile(r"\A\* Tick (\d+)[ \t]*$\n?(?::PROPERTIES:[ \t]*\n(.*?)^:END:[ \t]*$)?", re.MULTILINE | re.DOTALL)
_TIMESTAMP = re.compile(r"^:TIMESTAMP:[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_PART = re.compile(r"^\*\* (Human|Agent)[ \t]*$", re.MULTILINE)


class ChatLog:
    """Appends ticks to ``agent-chat.org`` and reads the history back.

    The file holds the current month; earlier months are in ``chat/``, one
    file each (:mod:`.monthly`: a tick's commit then hashes only the current
    month, and start-up reads only the tail)."""

    def __init__(self, path: Path, *, rotate_bytes: int = ROTATE_BYTES) -> None:
        self.path = path
        self.log = MonthlyLog(path, path.parent / "chat", _TICK_HEAD, title="AMACS chat", noun="ticks",
                              rotate_bytes=rotate_bytes)

    @property
    def bad_utf8(self) -> int | None:
        """Offset of the first byte read that is not UTF-8 (read as U+FFFD), if any."""
        return self.log.bad_utf8

    def files(self) -> list[Path]:
        """Every file of the chat log, oldest first (the months in ``chat/``, then this one)."""
        return self.log.files()

    def write_human(self, tick: int, timestamp: str, text: str) -> None:
        """Write-ahead: the heading and the human's input, before any model call."""
        self.log.append(
            f"* Tick {tick}\n:PROPERTIES:\n:TIMESTAMP: {timestamp}\n:END:\n\n"
            f"** Human\n{escape_org(text)}\n\n",
            new_entry=timestamp,
        )

    def write_agent(self, tick: int, timestamp: str, reply: str, *, with_heading: bool) -> None:
        """Append the agent's part; a tick with no human input gets its heading here."""
        head = (
            f"* Tick {tick}\n:PROPERTIES:\n:TIMESTAMP: {timestamp}\n:END:\n\n"
            if with_heading
            else ""
        )
        self.log.append(f"{head}** Agent\n{nest_reply(reply)}\n\n", new_entry=timestamp if with_heading else None)

    def read(self) -> list[ChatEntry]:
        """Every tick of the log (``chat/`` and this file), oldest first."""
        return [entry for _span, text in self.log.entries() if (entry := parse_tick(text)) is not None]

    def read_tail(self, count: int, chunk: int = 1 << 16, budget: int = TAIL_BYTES) -> list[ChatEntry]:
        """The last COUNT ticks, oldest first, of those that begin within BUDGET bytes of the
        log's end (the newest always): the files are read from their end only as far as
        they need (start-up reads the windows the context shows, issues 10 and 12).

        A tick starts at a ``* Tick`` line; the human's text cannot start one
        (:func:`escape_org`) and the reply's headings are demoted, so the ticks
        are found by that line alone."""
        return [entry for _span, text in self.log.tail(count, budget=budget, chunk=chunk)
                if (entry := parse_tick(text)) is not None]


def parse_tick(text: str) -> ChatEntry | None:
    """The tick whose org text (``* Tick N`` to the next tick) is TEXT; None if it is not one.

    The structure is the one :class:`ChatLog` writes, so it is read line by line,
    not with an org parser (orgparse took ~10 s for 50 MB, issue 12): the
    human's part is its text up to the next part, blank lines around it
    dropped; the agent's is the raw text up to the tick's end, its demoted
    headings included, without the blank line that ends it."""
    head = _TICK.match(text)
    if head is None:
        return None
    stamp = _TIMESTAMP.search(head[2]) if head[2] is not None else None
    entry = ChatEntry(tick=int(head[1]), timestamp=stamp[1] if stamp else "")
    parts = list(_PART.finditer(text, head.end()))
    for i, part in enumerate(parts):
        body = text[part.end() + 1:parts[i + 1].start() if i + 1 < len(parts) else len(text)]
        if part[1] == "Human":
            entry.human = unescape_org(body.strip("\n"))
        else:
            entry.agent = unnest_reply(body[:-2] if body.endswith("\n\n") else body.removesuffix("\n"))
    return entry
