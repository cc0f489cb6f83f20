"""Parse the model's JSON response (docs/ARCHITECTURE.md, The tick: parse)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import AmacsError
from ..text.clean import printable, storable

RETRY_PROMPT = "Your response was not valid JSON. Please retry."
CUT_RETRY_PROMPT = ("Your response was cut off at the length limit before its JSON object ended. "
                    "Answer again with the whole JSON object, shorter.")
# Why an answer stopped when it stopped at its length limit: OpenAI's finish_reason, Anthropic's stop_reason.
CUT_REASONS = frozenset({"length", "max_tokens"})
CUT_KEPT = 300  # characters of a cut answer kept in the messages that ask again
MAX_PARSE_RETRIES = 2
FALLBACK_MOOD = "uncertain"

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)\n?```", re.DOTALL)


class ResponseFormatError(AmacsError, ValueError):
    """The model's text is not a valid response; the message says what is wrong."""


class AnswerCut(ResponseFormatError):
    """The model's answer stopped at its length limit before its JSON ended."""


def cut_stand_in(text: str) -> str:
    """What the messages keep of an answer cut at the length limit, when the model is asked again:
    its start, marked as cut (the whole of it would take the room the next answer needs)."""
    return f"{text[:CUT_KEPT]} [... cut off at the length limit]"


@dataclass(frozen=True)
class Scratchpad:
    """A note the agent appends under a heading (``scratchpad.org``)."""

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


@functools.cache
def response_schema() -> dict[str, Any]:
    """The response's JSON schema, generated from :class:`~.response_model.Response` (the one
    declaration the parser validates with), in the form structured outputs accept on every backend: every
    field required (an optional one as nullable), no other fields, no ``$ref``, no titles or
    defaults.  A reply that follows it parses.

    Generated once (pydantic takes ~3 ms of the event loop for it; imported here, not at start-up) and shared by every
    request: the dict is never changed, only read or copied."""
    from .response_model import Response

    schema = Response.model_json_schema()
    strict: dict[str, Any] = _strict(schema, schema.get("$defs", {}))
    return strict


# The longest string a field the parser refuses blank (a mood, a heading) may be in llama.cpp's grammar.
NOT_BLANK_MAX = 100


@functools.cache
def not_blank_pattern() -> str:
    """A string the parser takes as not blank, as llama.cpp's grammar can say it: a first character
    that is not white space, at most NOT_BLANK_MAX characters, none a quote, a backslash or a
    control character.  llama-cpp-python copies a pattern's ``[...]`` classes into its grammar as
    they are (its ``.`` would let a quote through), so each class must keep the JSON string whole
    by itself: no escapes are needed in it, and none is possible."""
    never = '"\\\\\\x00-\\x1F'  # the regex text  "\\\x00-\x1F
    spaces = " " + "".join(f"\\u{code:04X}" for code in range(0x21, 0x10000) if chr(code).isspace())
    return f"^[^{never}{spaces}][^{never}]{{0,{NOT_BLANK_MAX - 1}}}$"


def with_lengths(schema: dict[str, Any]) -> dict[str, Any]:
    """SCHEMA with every string the parser refuses blank (the mood, a scratchpad's heading) held to
    :func:`not_blank_pattern`, for backends whose grammar takes patterns (llama.cpp's); Anthropic's
    and OpenAI's strict schemas refuse them, so :func:`response_schema` leaves them out."""
    from .response_model import Response

    return _not_blank(schema, Response)


def _not_blank(schema: dict[str, Any], model: Any) -> dict[str, Any]:
    """The object SCHEMA, declared by the pydantic MODEL, with its not-blank strings patterned, and
    those of the objects in it."""
    from .response_model import nested_model, not_blank

    props = dict(schema.get("properties", {}))
    for name, field in model.model_fields.items():
        if name not in props:
            continue
        if any(getattr(m, "func", None) is not_blank for m in field.metadata):
            props[name] = {"type": "string", "pattern": not_blank_pattern()}
        inner = nested_model(field.annotation)
        if inner is not None:
            prop = props[name]
            props[name] = ({**prop, "anyOf": [_not_blank(branch, inner) if branch.get("type") == "object" else branch
                                              for branch in prop["anyOf"]]} if "anyOf" in prop
                           else _not_blank(prop, inner))
    return {**schema, "properties": props}


def _strict(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_strict(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _strict(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    out = {k: _strict(v, defs) for k, v in node.items() if k not in ("title", "default", "description", "$defs")}
    if out.get("type") == "object":
        out["required"] = list(out.get("properties", {}))
        out["additionalProperties"] = False
    return out


def parse_response(text: str) -> AgentResponse:
    """Validate TEXT as an agent response or raise :class:`ResponseFormatError`."""
    try:
        # strict=False: a raw control character inside a string (a newline) is read as itself; the
        # grammar llama-cpp-python's server constrains replies with lets one through, and it is unambiguous.
        data = json.loads(extract_json_text(text), strict=False)
    except json.JSONDecodeError as err:
        raise ResponseFormatError(f"invalid JSON: {err.msg} at line {err.lineno} column {err.colno}") from err
    except RecursionError as err:  # hostile or broken: arrays nested thousands deep
        raise ResponseFormatError("invalid JSON: nested too deeply") from err
    if not isinstance(data, dict):
        raise ResponseFormatError("the response must be a JSON object")
    from .response_model import Response, ValidationError, explain

    try:
        valid = Response.model_validate(data)
    except ValidationError as err:
        raise ResponseFormatError(explain(err)) from None
    pad = valid.scratchpad
    return AgentResponse(
        mood=printable(valid.mood),  # kept exactly, emoji included
        confidence=_unit(valid.confidence),
        monologue=printable(" ".join(valid.monologue.split())),
        reply=_text(valid.reply, printable),
        eval=_text(valid.eval, storable),  # a NUL is Emacs's to read (or refuse)
        scratchpad=None if pad is None else Scratchpad(
            heading=printable(pad.heading.strip()), content=printable(pad.content),
            thread=None if pad.thread is None else printable(pad.thread)),
        done=bool(valid.done),
    )


def _unit(number: float) -> float:
    """NUMBER clamped to [0, 1]; NaN is 0."""
    return min(1.0, max(0.0, number)) if number == number else 0.0


def _text(value: str | None, clean: Callable[[str], str]) -> str | None:
    return clean(value) if value is not None and value.strip() else None


def fallback_response(raw: str) -> AgentResponse:
    """The record kept when the model never produced valid JSON: its text as the thought, mood uncertain."""
    first_line = printable(" ".join(raw.split())[:200]) or "(empty response)"
    return AgentResponse(
        mood=FALLBACK_MOOD,
        confidence=0.0,
        monologue=f"[unparsed response] {first_line}",
        reply=None,
        eval=None,
        fallback=True,
    )
