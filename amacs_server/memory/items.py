"""Active memory items: the contract of memid-active-memory.md (Active Memory Contract)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from enum import StrEnum
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
    HANDLE = "handle"  # what stays in active memory of an evicted item
    THREAD = "thread"  # a thread of work (RFC §5)
    SKILL = "skill"  # a skill bound to the active thread (RFC §6)
    BUFFER = "buffer"  # an Emacs buffer of the active thread, as last read


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

    @property
    def version(self) -> int:
        """The explicit version of this item."""
        assert self.mem_id.version is not None
        return self.mem_id.version

    @property
    def mutable(self) -> bool:
        """RAM items are mutable through the brain tools; ROM items are not."""
        return self.tier is Tier.RAM

    def next_version(self, content: Any) -> MemoryItem:
        """Copy-on-write: the same item with CONTENT at version + 1."""
        return replace(self, mem_id=self.mem_id.at(self.version + 1), content=content, created_at_ms=now_ms())

    def to_contract(self, *, with_time: bool = False) -> dict[str, Any]:
        """The item as the brain sees it: mem_id, tier, version, kind, mutable, content."""
        data: dict[str, Any] = {
            "mem_id": self.mem_id.format(),
            "tier": self.tier.value,
            "version": self.version,
            "kind": self.kind.value,
            "mutable": self.mutable,
        }
        if with_time:
            data["created_at_ms"] = self.created_at_ms
        if self.tags:
            data["tags"] = list(self.tags)
        data["content"] = self.content
        return data

    def render(self) -> str:
        """One line of context: the contract as compact JSON."""
        return json.dumps(self.to_contract(), ensure_ascii=False, separators=(", ", ": "))

    def text(self) -> str:
        """The content as plain text, for full-text search."""
        if isinstance(self.content, str):
            return self.content
        return json.dumps(self.content, ensure_ascii=False)
