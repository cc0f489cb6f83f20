"""Assemble the user message of a tick from active-memory items (RFC v4 §4, IMP-038, memid spec).

Every line inside a section is one item as JSON, with its ``mem_id``, tier,
version, kind, mutability and content, so the agent can address anything it
sees.  The last eval result keeps IMP-019's camelCase ``lastEvalResult``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..memory.active import Snapshot
from ..memory.items import MemoryItem
from ..transport.lisp import camel_keys


def section(tag: str, items: Sequence[MemoryItem]) -> str:
    """``<tag>`` with one item per line."""
    body = "\n".join(item.render() for item in items)
    return f"<{tag}>\n{body}\n</{tag}>" if body else f"<{tag}>\n</{tag}>"


def eval_result_section(item: MemoryItem) -> str:
    """``<last-eval-result>``: the ROM item, its content as camelCase ``lastEvalResult``."""
    data = item.to_contract()
    data["content"] = camel_keys({"last-eval-result": item.content})
    return "<last-eval-result>\n" + json.dumps(data, ensure_ascii=False, separators=(", ", ": ")) + \
        "\n</last-eval-result>"


@dataclass(frozen=True)
class Context:
    """A tick's user message in two parts: what changes rarely, then what changes every tick.

    DESIGN.md: a stable prefix is what the prompt cache reuses, so the stable
    part carries a cache breakpoint of its own after the cached system prompt.
    """

    stable: str
    volatile: str

    @property
    def text(self) -> str:
        """The whole message as one text."""
        return "\n\n".join(p for p in (self.stable, self.volatile) if p)

    def content(self) -> str | list[dict[str, Any]]:
        """The Messages API content: two text blocks, the first marked for caching."""
        if not self.stable:
            return self.volatile
        return [
            {"type": "text", "text": self.stable, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": self.volatile},
        ]


def text_section(tag: str, items: Sequence[MemoryItem], body_key: str) -> str:
    """A section of long texts (skills, buffers): a header line per item with its address,
    then the text itself, unescaped, as RFC v4 §4 shows buffers (``=== name (mode) ===``)."""
    blocks = []
    for item in items:
        meta = {k: v for k, v in item.content.items() if k != body_key}
        header = json.dumps({**{k: v for k, v in item.to_contract().items() if k != "content"}, **meta},
                            ensure_ascii=False, separators=(", ", ": "))
        label = f"=== {meta.get('name', '')} ({meta.get('mode') or meta.get('kind', '')}) ==="
        blocks.append(f"{label} {header}\n{item.content.get(body_key) or ''}".rstrip())
    return f"<{tag}>\n" + "\n\n".join(blocks) + f"\n</{tag}>"


def assemble(snap: Snapshot) -> Context:
    """The user message for one tick, what changes least first."""
    stable = []
    if snap.skills:
        stable.append(text_section("skills", snap.skills, "body"))
    if snap.threads:
        stable.append(section("threads", snap.threads))
    if snap.scratchpad:
        stable.append(section("scratchpad", snap.scratchpad))
    if snap.memory:
        stable.append(section("memory", snap.memory))
    volatile = []
    if snap.buffers:
        volatile.append(text_section("buffers", snap.buffers, "content"))
    volatile.append(section("monologue", snap.monologue))
    volatile.append(section("agent-consciousness", snap.consciousness))
    volatile.append(section("chat", snap.chat))
    if snap.events:
        volatile.append(section("events", snap.events))
    if snap.eval_result is not None:
        volatile.append(eval_result_section(snap.eval_result))
    return Context("\n\n".join(stable), "\n\n".join(volatile))
