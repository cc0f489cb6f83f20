"""Active memory items: the contract every item shown keeps.

The design: docs/ARCHITECTURE.md, Memory and MemIds.

Every item shown has ``mem_id``, ``tier``, ``version``, ``kind``, ``mutable``,
``evictable``, ``created_at_ms`` (then ``tags`` and ``page`` when it has them)
and ``content``.  ``mutable`` and ``evictable`` say what the brain that sees
the item may do with it (:class:`Access`, set by the active memory from where
the item is shown); an item without an access says it by its tier.  ``page``
is there when ``content`` is one part of a long text (:func:`page_of`).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import Any

from .memid import MemId


class Tier(StrEnum):
    """RAM items the agent may change; ROM items only the harness changes."""

    RAM = "ram"
    ROM = "rom"


class Kind(StrEnum):
    """What an item holds."""

    STATE = "state"  # a consciousness field
    MESSAGE = "message"  # a chat exchange
    MONOLOGUE = "monologue"  # one line of the agent's monologue
    TOOL_RESULT = "tool_result"  # an eval result
    NOTE = "note"  # something the agent wrote down
    SUMMARY = "summary"  # what the agent wrote down as a summary of other items
    HANDLE = "handle"  # what stays in active memory of an evicted item
    THREAD = "thread"  # a thread of work
    SKILL = "skill"  # a skill bound to the active thread
    BUFFER = "buffer"  # an Emacs buffer of the active thread, as last read
    EVENT = "event"  # an event delivered to the brain (User, Agent, Time, Hook)
    NOTICE = "notice"  # what the harness tells the brain once: the model, a compaction, a correction, a join


# Paging (memory.load): an item's text longer than this is shown a page at a time.
DEFAULT_PAGE_CHARS = 8_000
MAX_PAGE_CHARS = 32_000
# The field holding the long text of an item whose content is data, by kind.
TEXT_FIELDS = {Kind.BUFFER: "content", Kind.SKILL: "body", Kind.NOTE: "content", Kind.SUMMARY: "content"}


@dataclass(frozen=True)
class Access:
    """What the brain shown an item may do with it: mutate it, evict it."""

    mutable: bool
    evictable: bool


@dataclass(frozen=True)
class Page:
    """Which part of an item's text its content holds: characters OFFSET.. OFFSET+LIMIT of TOTAL."""

    offset: int
    limit: int
    total_chars: int
    field: str | None = None  # the content's field the text is in (None: the content itself)

    @property
    def next_offset(self) -> int | None:
        """Where the next page starts, or None after the last."""
        end = self.offset + self.limit
        return end if end < self.total_chars else None

    def to_dict(self) -> dict[str, Any]:
        """As the contract shows it."""
        data: dict[str, Any] = {"offset": self.offset, "limit": self.limit, "total_chars": self.total_chars,
                                "next_offset": self.next_offset}
        if self.field is not None:
            data["field"] = self.field
        return data


def now_ms() -> int:
    """Wall-clock milliseconds."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class MemoryItem:
    """One version of one addressable item."""

    mem_id: MemId  # always with an explicit version
    tier: Tier
    kind: Kind
    content: Any
    created_at_ms: int = field(default_factory=now_ms)
    tags: tuple[str, ...] = ()
    access: Access | None = None  # as shown to a brain; None: by tier (not stored)
    page: Page | None = None  # the content is this page of the item's text (not stored)

    @property
    def version(self) -> int:
        """The explicit version of this item."""
        assert self.mem_id.version is not None
        return self.mem_id.version

    @property
    def mutable(self) -> bool:
        """True when agent-memory-mutate works on it (by default: RAM items)."""
        return self.access.mutable if self.access is not None else self.tier is Tier.RAM

    @property
    def evictable(self) -> bool:
        """True when agent-memory-evict works on it (by default: RAM items)."""
        return self.access.evictable if self.access is not None else self.tier is Tier.RAM

    def next_version(self, content: Any) -> MemoryItem:
        """Copy-on-write: the same item with CONTENT at version + 1."""
        return replace(self, mem_id=self.mem_id.at(self.version + 1), content=content, created_at_ms=now_ms(),
                       page=None)

    def to_contract(self) -> dict[str, Any]:
        """The item as the brain sees it: mem_id, tier, version, kind, mutable, evictable,
        created_at_ms, tags and page (when it has them), content."""
        data: dict[str, Any] = {
            "mem_id": self.mem_id.format(),
            "tier": self.tier.value,
            "version": self.version,
            "kind": self.kind.value,
            "mutable": self.mutable,
            "evictable": self.evictable,
            "created_at_ms": self.created_at_ms,
        }
        if self.tags:
            data["tags"] = list(self.tags)
        if self.page is not None:
            data["page"] = self.page.to_dict()
        data["content"] = self.content
        return data

    def render(self) -> str:
        """One line of context: the contract as compact JSON (made once per item: an item,
        its content included, never changes)."""
        return self._rendered

    @cached_property
    def _rendered(self) -> str:
        return json.dumps(self.to_contract(), ensure_ascii=False, separators=(", ", ": "))

    @cached_property
    def digest(self) -> str:
        """A short digest of :meth:`render`: what a conversation keeps of the items it showed
        (its tick state is then a fraction of their text)."""
        return hashlib.blake2b(self._rendered.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()

    def text(self) -> str:
        """The content as plain text, for full-text search."""
        if isinstance(self.content, str):
            return self.content
        return json.dumps(self.content, ensure_ascii=False)


def long_text(item: MemoryItem) -> tuple[str | None, str]:
    """(field, text): the item's long text and the content field it is in (None: the content
    itself, a string, or the content as JSON when no field holds its text)."""
    content = item.content
    if isinstance(content, str):
        return None, content
    key = TEXT_FIELDS.get(item.kind)
    if key is not None and isinstance(content, dict) and isinstance(content.get(key), str):
        return key, content[key]
    return None, json.dumps(content, ensure_ascii=False)


def page_of(item: MemoryItem, offset: int = 0, limit: int = DEFAULT_PAGE_CHARS) -> MemoryItem:
    """ITEM with only characters OFFSET..OFFSET+LIMIT of its long text (:func:`long_text`), and
    a :class:`Page` saying which.  An item whose whole text fits from offset 0 is returned as it is."""
    if offset < 0 or limit < 1:
        raise ValueError(f"offset must be >= 0 and limit >= 1, got {offset} and {limit}")
    key, text = long_text(item)
    if offset == 0 and len(text) <= limit:
        return replace(item, page=None)
    part = text[offset : offset + limit]
    page = Page(offset, limit, len(text), key)
    content = {**item.content, key: part} if key is not None else part
    return replace(item, content=content, page=page)
