"""Assemble the user message of a tick from active-memory items (RFC v4 §4, IMP-038, memid spec).

Every line inside a section is one item as JSON, with its ``mem_id``, tier,
version, kind, mutability and content, so the agent can address anything it
sees.  The last eval result keeps IMP-019's camelCase ``lastEvalResult``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

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


def assemble(snap: Snapshot) -> str:
    """The whole user message for one tick."""
    parts = [section("agent-consciousness", snap.consciousness)]
    if snap.memory:
        parts.append(section("memory", snap.memory))
    if snap.scratchpad:
        parts.append(section("scratchpad", snap.scratchpad))
    parts.append(section("chat", snap.chat))
    parts.append(section("monologue", snap.monologue))
    if snap.eval_result is not None:
        parts.append(eval_result_section(snap.eval_result))
    return "\n\n".join(parts)
