"""Read an assembled context back into its items (for tests).

The context is an append-only conversation (amacs_server/context/assemble.py):
the base, then one user message per tick with what is new.  These helpers read
the whole conversation as the model sees it at its newest tick: every section's
items merged, the latest version of each item in the place it first appeared;
the per-tick sections (events, the last eval result) only from the newest tick.
"""

from __future__ import annotations

import json
import re
from typing import Any

from amacs_server.context.assemble import MESSAGE_BREAK
from amacs_server.memory.memid import MemId

_SECTION = re.compile(r"^<([a-z-]+)>\n(.*?)^</\1>", re.S | re.M)


TEXT_SECTIONS = {"skills": "body", "buffers": "content"}
PER_TICK = ("events", "last-eval-result")
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


def text_of(content: str | list[dict[str, Any]]) -> str:
    """A message's content as one text."""
    return content if isinstance(content, str) else "\n\n".join(b["text"] for b in content)


def request_text(body: dict[str, Any]) -> str:
    """The context of one request: its user messages, oldest first, as Context.text joins them."""
    return MESSAGE_BREAK.join(text_of(m["content"]) for m in body["messages"] if m["role"] == "user")


def context_texts(fake: Any) -> list[str]:
    """The context of each request the fake received (what ``fake.user_texts()`` should return)."""
    return [request_text(r["body"]) for r in fake.requests]


def _newest_index(segments: list[str]) -> int:
    return next((i for i in range(len(segments) - 1, -1, -1) if "<agent-consciousness>" in segments[i]),
                len(segments) - 1)


def newest_message(text: str) -> str:
    """The newest tick's user message of context TEXT."""
    segments = text.split(MESSAGE_BREAK)
    return segments[_newest_index(segments)]


def _sections(text: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for tag, body in _SECTION.findall(text):
        if tag in TEXT_SECTIONS:
            items = _text_items(body, TEXT_SECTIONS[tag])
        else:
            items = [json.loads(line) for line in body.splitlines() if line.strip()]
        for item in items:
            MemId.parse(item["mem_id"])
        out.setdefault(tag, []).extend(items)
    return out


def parse_context(text: str) -> dict[str, list[dict[str, Any]]]:
    """Every section's items, by tag; fails if any line is not an item with a valid MemId."""
    segments = text.split(MESSAGE_BREAK)
    newest = _newest_index(segments)
    merged: dict[str, dict[str, dict[str, Any]]] = {}
    for i, segment in enumerate(segments):
        for tag, items in _sections(segment).items():
            if tag in PER_TICK and i != newest:
                continue
            by_base = merged.setdefault(tag, {})
            for item in items:
                by_base[MemId.parse(item["mem_id"]).base] = item
    return {tag: list(items.values()) for tag, items in merged.items()}


ITEM_KEYS = {"mem_id", "tier", "version", "kind", "mutable", "evictable", "created_at_ms", "content"}


def _checked(item: dict[str, Any]) -> dict[str, Any]:
    MemId.parse(item["mem_id"])
    assert set(item) >= ITEM_KEYS - {"content"} and ("content" in item or "body" in item), item
    assert item["tier"] in ("ram", "rom") and type(item["version"]) is int and item["version"] >= 1, item
    assert item["tier"] == "ram" or not item["mutable"], item
    return item


def every_item(text: str) -> list[dict[str, Any]]:
    """Every item of context TEXT (each message's, in order of its sections); fails on any text
    outside a section (no text without an address reaches a brain) and on any line of a section
    that is not an item with a valid MemId, a tier and a version."""
    items = []
    for segment in text.split(MESSAGE_BREAK):
        outside = _SECTION.sub("", segment).strip()
        assert not outside, f"text outside every section, not an item: {outside[:300]!r}"
        for found in _sections(segment).values():
            items.extend(_checked(item) for item in found)
    return items


def message_items(content: str) -> list[dict[str, Any]]:
    """The items of one message of a subagent's request: each part an item's JSON line or a
    section of items (a notice joined to a user message as ``[system] ...`` on the Messages
    API); fails on any part that is neither."""
    items = []
    for part in content.split("\n\n"):
        part = part.removeprefix("[system] ")
        if part.startswith("<"):
            items += every_item(part)
            continue
        try:
            item = json.loads(part)
        except ValueError:
            item = None
        assert isinstance(item, dict) and "mem_id" in item, f"a part that is not an item: {part[:300]!r}"
        items.append(_checked(item))
    return items


def name_of(item: dict[str, Any]) -> str:
    """The item name inside its MemId."""
    return MemId.parse(item["mem_id"]).name


def state(text: str, name: str) -> Any:
    """The content of consciousness field NAME in context TEXT (its latest version)."""
    for item in parse_context(text)["agent-consciousness"]:
        if name_of(item) == name:
            return item["content"]
    raise KeyError(name)


def chat_lines(text: str) -> list[str]:
    """The chat section as Human:/Agent: lines, the way RFC v4 §4 writes it."""
    lines = []
    for item in parse_context(text).get("chat", []):
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
    """The lastEvalResult of context TEXT (its newest tick)."""
    return parse_context(text)["last-eval-result"][0]["content"]["lastEvalResult"]


def said(text):
    """TEXT of a message with each item it received (a line of JSON with a mem_id and content
    {"said": ...}) replaced by what was said, and each notice of the harness (an item of kind
    notice with a text, alone, as ``[system] ITEM``, or in a ``<notices>`` section) by its
    text; a handle (evicted) stays as it is."""
    chunks = []
    for chunk in text.split("\n\n"):
        marked = chunk.startswith("[system] ")
        body = chunk.removeprefix("[system] ")
        if body.startswith("<notices>\n") and body.endswith("\n</notices>"):
            lines = body.split("\n")[1:-1]
        else:
            lines = [body]
        words = [_words(line) for line in lines]
        if all(w is not None for w in words):
            chunks.append(("[system] " if marked else "") + "\n".join(str(w) for w in words))
        else:
            chunks.append(chunk)
    return "\n\n".join(chunks)


def _words(line):
    """What the item on LINE said (a message's ``said``, a notice's text), or None."""
    try:
        item = json.loads(line)
    except ValueError:
        return None
    content = item.get("content") if isinstance(item, dict) and "mem_id" in item else None
    if isinstance(content, dict) and "said" in content:
        return content["said"]
    if item is not None and isinstance(item, dict) and item.get("kind") == "notice" and isinstance(content, str):
        return content
    return None
