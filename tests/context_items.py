"""Read an assembled context back into its items (for tests)."""

from __future__ import annotations

import json
import re
from typing import Any

from amacs_server.memory.memid import MemId

_SECTION = re.compile(r"^<([a-z-]+)>\n(.*?)^</\1>", re.S | re.M)


def parse_context(text: str) -> dict[str, list[dict[str, Any]]]:
    """Every section's items, by tag; fails if any line is not an item with a valid MemId."""
    out: dict[str, list[dict[str, Any]]] = {}
    for tag, body in _SECTION.findall(text):
        items = [json.loads(line) for line in body.splitlines() if line.strip()]
        for item in items:
            MemId.parse(item["mem_id"])
        out[tag] = items
    return out


def name_of(item: dict[str, Any]) -> str:
    """The item name inside its MemId."""
    return MemId.parse(item["mem_id"]).name


def state(text: str, name: str) -> Any:
    """The content of consciousness field NAME in context TEXT."""
    for item in parse_context(text)["agent-consciousness"]:
        if name_of(item) == name:
            return item["content"]
    raise KeyError(name)


def chat_lines(text: str) -> list[str]:
    """The chat section as Human:/Agent: lines, the way RFC v4 §4 writes it."""
    lines = []
    for item in parse_context(text)["chat"]:
        content = item["content"]
        if item["kind"] == "handle":
            lines.append(f"[evicted {name_of(item)}]")
            continue
        if content.get("human") is not None:
            lines.append(f"Human: {content['human']}")
        if "agent" in content:
            lines.append(f"Agent: {content['agent'] if content['agent'] is not None else '(' + content.get('status', 'no reply') + ')'}")
    return lines


def eval_result(text: str) -> dict[str, Any]:
    """The lastEvalResult of context TEXT."""
    return parse_context(text)["last-eval-result"][0]["content"]["lastEvalResult"]
