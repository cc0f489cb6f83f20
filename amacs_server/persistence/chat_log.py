"""``agent-chat.org``: chat history in the structure of RFC v4 §8.3.

Each tick is a ``* Tick N`` heading with a ``:TIMESTAMP:`` property, then
``** Human`` (the person's input, written before the model is called) and
``** Agent`` (the reply).  Lines of text that would start an org heading are
escaped with a leading comma, as org does in source blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orgparse

from .files import append_durably


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


class ChatLog:
    """Appends ticks to ``agent-chat.org`` and reads the history back."""

    def __init__(self, path: Path) -> None:
        self.path = path

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
        append_durably(self.path, f"{head}** Agent\n{escape_org(reply)}\n\n")

    def read(self) -> list[ChatEntry]:
        """Every tick in the file, oldest first, parsed with orgparse."""
        if not self.path.exists():
            return []
        root = orgparse.load(str(self.path))
        entries: list[ChatEntry] = []
        for node in root.children:
            title = node.heading.split()
            if len(title) != 2 or title[0] != "Tick" or not title[1].isdigit():
                continue
            entry = ChatEntry(tick=int(title[1]), timestamp=str(node.properties.get("TIMESTAMP", "")))
            for child in node.children:
                body = unescape_org(child.body.strip("\n"))
                if child.heading == "Human":
                    entry.human = body
                elif child.heading == "Agent":
                    entry.agent = body
            entries.append(entry)
        return entries
