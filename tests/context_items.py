"""Read an assembled context back into its items (for tests)."""

from __future__ import annotations

import json
import re
from typing import Any

from amacs_server.memory.memid import MemId

_SECTION = re.compile(r"^<([a-z-]+)>\n(.*?)^</\1>", re.S | re.M)


TEXT_SECTIONS = {"skills": "body", "buffers": "content"}
_HEADER = re.compile(r"^=== .* \((.*?)\) === (\{.*\})$", re.M)


def _text_items(body: str, key: str) -> list[dict[str, Any]]:
    """Items of a section of long texts: a header line with the address, then the text."""
    heads = list(_HEADER.finditer(body))
    assert body.strip() == "" or (heads and heads[0].start() == 0), f"text before the first header: {body[:80]!r}"
    items = []
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(body)
        item = json.loads(head.group(2))
        item[key] = body[head.end() + 1 : end].strip("\n")
        items.append(item)
    return items


def parse_context(text: str) -> dict[str, list[dict[str, Any]]]:
    """Every section's items, by tag; fails if any line is not an item with a valid MemId."""
    out: dict[str, list[dict[str, Any]]] = {}
    for tag, body in _SECTION.findall(text):
        if tag in TEXT_SECTIONS:
            items = _text_items(body, TEXT_SECTIONS[tag])
        else:
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
