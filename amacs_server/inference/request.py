"""The model request, built for what the model accepts (its :class:`Capabilities`).

One Anthropic-shaped request for both backends (the OpenAI-compatible one
translates it, :func:`~amacs_server.inference.openai_backend.to_chat`):

- the reply's JSON schema (:func:`~amacs_server.inference.parse.response_schema`)
  as ``output_config.format`` wherever the model may take it: replies parse by construction;
- thinking as the model does it: ``adaptive`` (with ``output_config.effort``) where it
  accepts that, ``enabled`` with a budget where that is what it accepts, nothing where
  it accepts neither; a model whose capabilities are unknown is sent ``enabled`` (the
  one every thinking model of the Messages API took) and a 400 teaches otherwise;
- temperature and top-p (in ``extra_body``: the SDK has no sampling parameters) when the
  agent moved them, never with thinking (the API refuses both together);
- nothing a 400 has refused for this model.

What the agent set and the model will not get is said by :func:`ignored_settings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..state.consciousness import ApiSettings
from .capabilities import Capabilities
from .parse import response_schema

UNKNOWN = Capabilities()


def thinking_budget(max_tokens: int) -> int:
    """The ``enabled`` thinking budget for MAX_TOKENS: half of it, 1,024 .. 16,000."""
    return max(1024, min(max_tokens // 2, 16_000))


def thinking_type(caps: Capabilities) -> str | None:
    """The thinking type to send this model when the agent turns thinking on (None: none)."""
    if not caps.accepts("thinking"):
        return None
    if caps.thinking is None:
        return "enabled"
    return "adaptive" if "adaptive" in caps.thinking else "enabled" if "enabled" in caps.thinking else None


def sends_effort(caps: Capabilities, settings: ApiSettings) -> bool:
    """The agent's effort goes to this model (known to take that level, or not known not to)."""
    if settings.effort is None or not caps.accepts("effort"):
        return False
    return caps.effort is None or settings.effort in caps.effort


def sends_schema(caps: Capabilities) -> bool:
    """The reply's schema goes to this model (it takes structured outputs, or may)."""
    return caps.structured is not False and caps.accepts("format")


def build_request(model: str, system: str, messages: list[dict[str, Any]], settings: ApiSettings,
                  caps: Capabilities = UNKNOWN, *, agent_reply: bool = True) -> dict[str, Any]:
    """The Messages API request: the core skill as a cached system block, then MESSAGES,
    with what this model accepts of the reply schema (an agent's: AGENT_REPLY; a caller
    whose model answers in another form, a judge, sends none), thinking, effort and sampling."""
    max_tokens = settings.max_tokens if caps.max_tokens is None else min(settings.max_tokens, caps.max_tokens)
    request: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
    }
    output: dict[str, Any] = {}
    kind = thinking_type(caps) if settings.thinking else None
    if kind == "adaptive":
        request["thinking"] = {"type": "adaptive"}
    elif kind == "enabled":
        budget = thinking_budget(max_tokens)
        request["max_tokens"] = max(max_tokens, budget + 1024)
        request["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if sends_effort(caps, settings):
        output["effort"] = settings.effort
    if agent_reply and sends_schema(caps):
        output["format"] = {"type": "json_schema", "schema": response_schema()}
    if output:
        request["output_config"] = output
    if kind is None:
        sampling: dict[str, float] = {}
        if settings.temperature != 1.0 and caps.accepts("temperature"):
            sampling["temperature"] = settings.temperature
        if settings.top_p != 1.0 and caps.accepts("top_p"):
            sampling["top_p"] = settings.top_p
        if sampling:
            request["extra_body"] = sampling
    return request


@dataclass(frozen=True)
class RequestSpec:
    """A request as data, before it is built for a model's capabilities: MODEL, SYSTEM,
    MESSAGES and SETTINGS as :func:`build_request` takes them, EXTRA_BODY the fields of the
    body it does not make (a judge's reply form), and ANY_MODEL: built for what any model
    takes, whatever the capabilities (a model the session's catalog does not know)."""

    model: str
    system: str
    messages: list[dict[str, Any]]
    settings: ApiSettings
    agent_reply: bool = True
    extra_body: dict[str, Any] | None = None
    any_model: bool = False

    def built(self, caps: Capabilities) -> dict[str, Any]:
        """The request for a model of CAPS."""
        request = build_request(self.model, self.system, self.messages, self.settings,
                                UNKNOWN if self.any_model else caps, agent_reply=self.agent_reply)
        if self.extra_body:
            request["extra_body"] = {**request.get("extra_body", {}), **self.extra_body}
        return request


def sent_params(request: dict[str, Any]) -> set[str]:
    """The optional parameters REQUEST carries (what a 400 may name)."""
    output = request.get("output_config") or {}
    sampling = request.get("extra_body") or {}
    sent = {name for name in ("effort", "format") if name in output} | set(sampling)
    if "thinking" in request:
        sent.add("thinking")
    return sent


def constrained(request: dict[str, Any]) -> bool:
    """REQUEST asks for replies that follow the schema."""
    return "format" in (request.get("output_config") or {})


def ignored_settings(caps: Capabilities, settings: ApiSettings, request: dict[str, Any]) -> list[str]:
    """The api-settings the agent moved from their defaults that REQUEST does not carry,
    each with why, for the agent's context (data, not a failure)."""
    said: list[str] = []
    if settings.thinking and "thinking" not in request:
        said.append("thinking (this model does not think on request)")
    if settings.effort is not None and "effort" not in (request.get("output_config") or {}):
        said.append(f"effort {settings.effort} (not a level this model accepts)")
    sampling = request.get("extra_body") or {}
    for name, value, default in (("temperature", settings.temperature, 1.0), ("top_p", settings.top_p, 1.0)):
        if value != default and name not in sampling:
            why = "not with thinking on" if "thinking" in request else "this model refuses it"
            said.append(f"{name.replace('_', '-')} ({why})")
    if request.get("max_tokens", settings.max_tokens) < settings.max_tokens:
        said.append(f"max-tokens above {request['max_tokens']} (this model's most)")
    return said
