"""Assemble the user message of a tick (RFC v4 §4, IMP-038, IMP-019)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ..persistence.chat_log import INTERRUPTED_REPLY, ChatEntry
from ..state.consciousness import Consciousness
from ..transport.lisp import alist_dumps, camel_keys

NO_REPLY = "(no reply)"


@dataclass(frozen=True)
class ContextInput:
    """Everything one tick's context is built from."""

    consciousness: Consciousness
    chat: Sequence[ChatEntry]
    monologue: Sequence[str]
    pending: str | None = None


def consciousness_section(c: Consciousness) -> str:
    """``<agent-consciousness>``: the §3.1 alist; the eval result has its own section."""
    fields = c.to_dict()
    fields.pop("last_eval_result")
    return f"<agent-consciousness>\n{alist_dumps(fields)}\n</agent-consciousness>"


def chat_lines(entries: Sequence[ChatEntry], depth: int, pending: str | None) -> list[str]:
    """The last DEPTH completed exchanges, then the pending message (IMP-038)."""
    shown: list[ChatEntry] = []
    for entry in reversed(entries):  # walk back only as far as DEPTH needs
        if len(shown) >= depth:
            break
        if entry.agent is not None or entry.interrupted:
            shown.append(entry)
    shown.reverse()
    lines: list[str] = []
    for entry in shown:
        if entry.human is not None:
            lines.append(f"Human: {entry.human}")
        agent = INTERRUPTED_REPLY if entry.interrupted else (entry.agent or NO_REPLY)
        lines.append(f"Agent: {agent}")
    if pending is not None:
        lines.append(f"Human: {pending}")
    return lines


def chat_section(entries: Sequence[ChatEntry], depth: int, pending: str | None) -> str:
    """``<chat>`` with depth limiting and the pending message last."""
    return "<chat>\n" + "\n".join(chat_lines(entries, depth, pending)) + "\n</chat>"


def monologue_section(lines: Sequence[str], depth: int) -> str:
    """``<monologue>``: the last DEPTH lines."""
    shown = list(lines)[-depth:] if depth > 0 else []
    return "<monologue>\n" + "\n".join(shown) + "\n</monologue>"


def eval_result_section(c: Consciousness) -> str | None:
    """``<last-eval-result>`` as camelCase JSON; omitted when there was no eval (IMP-019)."""
    result = c.last_eval_result
    if result is None or result.skipped:
        return None
    payload = camel_keys({"last-eval-result": result.to_dict()})
    return "<last-eval-result>\n" + json.dumps(payload, ensure_ascii=False) + "\n</last-eval-result>"


def assemble(ctx: ContextInput) -> str:
    """The whole user message for one tick."""
    c = ctx.consciousness
    sections = [
        consciousness_section(c),
        chat_section(ctx.chat, c.chat_context_depth, ctx.pending),
        monologue_section(ctx.monologue, c.monologue_context_depth),
        eval_result_section(c),
    ]
    return "\n\n".join(s for s in sections if s)
