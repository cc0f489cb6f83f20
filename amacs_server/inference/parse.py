"""Parse the model's JSON response (RFC v4 §2.3-2.4, EPIC-002 IMP-017)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import AmacsError
from ..text.clean import printable, storable

RETRY_PROMPT = "Your response was not valid JSON. Please retry."
MAX_PARSE_RETRIES = 2
FALLBACK_MOOD = "uncertain"

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)\n?```", re.DOTALL)


class ResponseFormatError(AmacsError, ValueError):
    """The model's text is not a valid response; the message says what is wrong."""


@dataclass(frozen=True)
class Scratchpad:
    """A note the agent appends under a heading (RFC §4.2)."""

    heading: str
    content: str
    thread: str | None = None


@dataclass(frozen=True)
class AgentResponse:
    """One validated response.  ``fallback`` marks the record made after failed retries."""

    mood: str
    confidence: float
    monologue: str
    reply: str | None = None
    eval: str | None = None
    scratchpad: Scratchpad | None = None
    fallback: bool = False
    done: bool = False  # a subagent talking to the person: hand back to its caller

    def to_dict(self) -> dict[str, Any]:
        """The response as JSON-ready data, for transcripts."""
        data: dict[str, Any] = {
            "mood": self.mood,
            "confidence": self.confidence,
            "monologue": self.monologue,
            "reply": self.reply,
            "eval": self.eval,
            "fallback": self.fallback,
            "done": self.done,
        }
        if self.scratchpad:
            data["scratchpad"] = {
                "heading": self.scratchpad.heading,
                "thread": self.scratchpad.thread,
                "content": self.scratchpad.content,
            }
        return data


def extract_json_text(text: str) -> str:
    """Return the JSON object text in TEXT: the whole text, a fenced block, or the outer braces."""
    stripped = text.strip()
    if stripped.startswith("{"):
        return stripped
    fence = _FENCE.search(text)
    if fence:
        return fence.group(1).strip()
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        return text[start : end + 1]
    raise ResponseFormatError("no JSON object found in the response")


def parse_response(text: str) -> AgentResponse:
    """Validate TEXT as an agent response or raise :class:`ResponseFormatError`."""
    try:
        data = json.loads(extract_json_text(text))
    except json.JSONDecodeError as err:
        raise ResponseFormatError(f"invalid JSON: {err.msg} at line {err.lineno} column {err.colno}") from err
    except RecursionError as err:  # hostile or broken: arrays nested thousands deep
        raise ResponseFormatError("invalid JSON: nested too deeply") from err
    if not isinstance(data, dict):
        raise ResponseFormatError("the response must be a JSON object")
    missing = [k for k in ("mood", "confidence", "monologue") if k not in data]
    if missing:
        raise ResponseFormatError(f"missing mandatory field(s): {', '.join(missing)}")
    mood = data["mood"]
    if not isinstance(mood, str) or not mood:
        raise ResponseFormatError("mood must be a non-empty string")
    mood = printable(mood)
    confidence = data["confidence"]
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        raise ResponseFormatError("confidence must be a number")
    monologue = data["monologue"]
    if not isinstance(monologue, str):
        raise ResponseFormatError("monologue must be a string")
    return AgentResponse(
        mood=mood,  # kept exactly, emoji included (IMP-017)
        confidence=_unit(confidence),
        monologue=printable(" ".join(monologue.split())),
        reply=_optional_text(data, "reply", printable),
        eval=_optional_text(data, "eval", storable),  # a NUL is Emacs's to read (or refuse)
        scratchpad=_scratchpad(data.get("scratchpad")),
        done=_flag(data, "done"),
    )


def _unit(number: int | float) -> float:
    """NUMBER clamped to [0, 1]; NaN is 0, an integer too large for a float is 1."""
    try:
        value = float(number)
    except OverflowError:  # 10**400 as JSON: an int, not a float
        return 1.0 if number > 0 else 0.0
    return min(1.0, max(0.0, value)) if value == value else 0.0


def _flag(data: dict[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ResponseFormatError(f"{key} must be true or false")
    return value


def _optional_text(data: dict[str, Any], key: str, clean: Callable[[str], str]) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ResponseFormatError(f"{key} must be a string or null")
    return clean(value) if value.strip() else None


def _scratchpad(value: Any) -> Scratchpad | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ResponseFormatError("scratchpad must be an object or null")
    heading, content = value.get("heading"), value.get("content")
    thread = value.get("thread")
    if not isinstance(heading, str) or not heading.strip():
        raise ResponseFormatError("scratchpad.heading must be a non-empty string")
    if not isinstance(content, str):
        raise ResponseFormatError("scratchpad.content must be a string")
    if thread is not None and not isinstance(thread, str):
        raise ResponseFormatError("scratchpad.thread must be a string or null")
    return Scratchpad(heading=printable(heading.strip()), content=printable(content),
                      thread=None if thread is None else printable(thread))


def fallback_response(raw: str) -> AgentResponse:
    """The record kept when the model never produced valid JSON (IMP-017)."""
    first_line = printable(" ".join(raw.split())[:200]) or "(empty response)"
    return AgentResponse(
        mood=FALLBACK_MOOD,
        confidence=0.0,
        monologue=f"[unparsed response] {first_line}",
        reply=None,
        eval=None,
        fallback=True,
    )
