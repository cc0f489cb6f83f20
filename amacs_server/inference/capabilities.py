"""What a model accepts: asked of the backend, kept in the home for a day, corrected by its 400s.

A :class:`Capabilities` says, per model, which thinking types, effort levels and
reply formats it accepts, and its window.  ``None`` in a field means the backend
could not say: the request then tries the parameter, and a 400 that names it
adds it to ``refused``, so it is never sent to that model again.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..files import atomic_write
from ..state.consciousness import EFFORTS

DAY = 24 * 3600.0
# The parameters a request may carry that a model can refuse, as a 400 names them.
OPTIONAL_PARAMS = ("thinking", "effort", "format", "temperature", "top_p", "reasoning_effort")


@dataclass(frozen=True)
class Capabilities:
    """What one model accepts (None: unknown, tried and learned)."""

    structured: bool | None = None  # replies constrained to a JSON schema
    schema_form: str | None = None  # OpenAI-compatible: "json_schema" or "json_object" (llama.cpp's)
    thinking: frozenset[str] | None = None  # accepted thinking types: adaptive, enabled
    effort: frozenset[str] | None = None  # accepted effort levels (empty: no effort parameter)
    max_input_tokens: int | None = None  # the window the server reports (its Models API, /v1/models)
    max_tokens: int | None = None
    # The window a server's refusal or cut answer showed (outlives the day: a report may be wrong).
    learned_window: int | None = None
    refused: frozenset[str] = frozenset()  # parameters a 400 refused: not sent again
    source: str = "unknown"  # where the facts came from: "models-api", "v1/models", "unknown"
    fetched: float = 0.0

    def accepts(self, param: str) -> bool:
        """PARAM may be sent: it is not known to be refused."""
        return param not in self.refused

    def refusing(self, param: str) -> Capabilities:
        """These capabilities, with PARAM refused from now on."""
        return replace(self, refused=self.refused | {param})

    def with_window(self, tokens: int) -> Capabilities:
        """These capabilities with TOKENS as the input window a server showed (a refusal, a cut)."""
        return replace(self, learned_window=tokens)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (sets as sorted lists)."""
        data = asdict(self)
        for key in ("thinking", "effort", "refused"):
            if data[key] is not None:
                data[key] = sorted(data[key])
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Capabilities:
        """Read back :meth:`to_json`; a field of the wrong type is unknown."""
        def names(key: str) -> frozenset[str] | None:
            value = data.get(key)
            return frozenset(str(v) for v in value) if isinstance(value, list) else None

        def number(key: str) -> int | None:
            value = data.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

        structured = data.get("structured")
        form = data.get("schema_form")
        fetched = data.get("fetched")
        return cls(structured=structured if isinstance(structured, bool) else None,
                   schema_form=form if form in ("json_schema", "json_object") else None,
                   thinking=names("thinking"), effort=names("effort"),
                   max_input_tokens=number("max_input_tokens"), max_tokens=number("max_tokens"),
                   learned_window=number("learned_window"),
                   refused=names("refused") or frozenset(), source=str(data.get("source") or "unknown"),
                   fetched=float(fetched) if isinstance(fetched, int | float) else 0.0)


def from_model_info(info: dict[str, Any]) -> Capabilities:
    """The Anthropic Models API's answer (``models.retrieve``) as capabilities."""
    caps = info.get("capabilities")

    def supported(node: Any) -> bool:
        return isinstance(node, dict) and node.get("supported") is True

    window = info.get("max_input_tokens") if isinstance(info.get("max_input_tokens"), int) else None
    most = info.get("max_tokens") if isinstance(info.get("max_tokens"), int) else None
    if not isinstance(caps, dict):
        return Capabilities(max_input_tokens=window, max_tokens=most, source="models-api", fetched=time.time())
    thinking = caps.get("thinking") or {}
    types = thinking.get("types") or {} if isinstance(thinking, dict) else {}
    accepted = frozenset(t for t in ("adaptive", "enabled") if supported(types.get(t))) \
        if supported(thinking) else frozenset()
    effort = caps.get("effort") or {}
    levels = frozenset(level for level in EFFORTS if supported(effort.get(level))) if supported(effort) else frozenset()
    return Capabilities(structured=supported(caps.get("structured_outputs")), thinking=accepted, effort=levels,
                        max_input_tokens=window, max_tokens=most, source="models-api", fetched=time.time())


def from_openai_models(listing: dict[str, Any], model: str, props: dict[str, Any] | None) -> Capabilities:
    """An OpenAI-compatible ``/v1/models`` listing (and llama.cpp's ``/props``) as capabilities.

    Such servers say nothing of formats or thinking (tried, then learned); the window
    is what llama.cpp reports: the context it serves (``/props``), else the one the
    model was trained with (``meta.n_ctx_train``)."""
    window = None
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        window = n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None
    for entry in listing.get("data") or ():
        if isinstance(entry, dict) and entry.get("id") == model and window is None:
            meta = entry.get("meta")
            n_ctx = meta.get("n_ctx_train") if isinstance(meta, dict) else None
            window = n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None
            for key in ("context_length", "max_model_len"):  # OpenRouter, vLLM
                value = entry.get(key)
                if window is None and isinstance(value, int) and value > 0:
                    window = value
    return Capabilities(max_input_tokens=window, source="v1/models", fetched=time.time())


_PARAM_WORDS = {
    "thinking": ("thinking",),
    "effort": ("effort",),
    # A proxy translates thinking into the upstream's reasoning effort, and its 400 names that.
    "reasoning_effort": ("reasoning_effort", "reasoning effort", "reasoning.effort", "reasoning"),
    "format": ("output_config.format", "output_format", "response_format", "json_schema", "structured output",
               "output_config: extra"),
    "temperature": ("temperature",),
    "top_p": ("top_p", "top-p"),
}


def refused_param(message: str, sent: set[str]) -> str | None:
    """Which of the optional parameters SENT a 400's MESSAGE names, or None.

    ``reasoning_effort`` is checked before ``effort`` (the first contains the second)."""
    low = message.lower()
    for param in ("reasoning_effort", "format", "thinking", "effort", "temperature", "top_p"):
        if param in sent and any(word in low for word in _PARAM_WORDS[param]):
            return param
    return None


# Each server's words for a prompt past the window: (pattern, group of the window, group of the
# prompt's tokens or 0): llama.cpp, llama-cpp-python's formatter and OpenAI, Anthropic.
_TOO_LONG = (
    (re.compile(r"requested tokens \((\d+)\) exceed context window of (\d+)"), 2, 1),
    (re.compile(r"maximum context length is (\d+) tokens.*?\((\d+) in the messages"), 1, 2),
    (re.compile(r"maximum context length is (\d+) tokens.*?messages resulted in (\d+) tokens"), 1, 2),
    (re.compile(r"maximum context length is (\d+)"), 1, 0),
    (re.compile(r"prompt is too long: (\d+) tokens > (\d+)"), 2, 1),
)
_TOO_LONG_WORDS = ("context_length_exceeded", "too long", "context window", "context length", "too large")


@dataclass(frozen=True)
class TooLong:
    """A refusal as too long: the window and the prompt's tokens, as far as the server said them."""

    window: int | None = None
    tokens: int | None = None


def too_long(message: str, status: int | None) -> TooLong | None:
    """What an error (its MESSAGE, HTTP STATUS or None mid-stream) says of a request too long for
    the model, or None when it is about something else."""
    low = message.lower()
    for pattern, window, tokens in _TOO_LONG:
        found = pattern.search(low)
        if found:
            return TooLong(int(found.group(window)), int(found.group(tokens)) if tokens else None)
    if status == 413 or (status in (400, None) and any(word in low for word in _TOO_LONG_WORDS)):
        return TooLong()
    return None


@dataclass
class CapabilityStore:
    """``model-capabilities.json`` in the home: each model's capabilities, by backend, endpoint
    and name.  Fetched ones are good for a day; what a 400 taught is kept with them."""

    path: Path
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path) -> CapabilityStore:
        """The store at PATH (empty when missing or unreadable: it is only a cache)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        return cls(path, {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {})

    @staticmethod
    def key(backend: str, base_url: str | None, model: str) -> str:
        """The entry's name."""
        return f"{backend} {base_url or '-'} {model}"

    def get(self, key: str, now: float | None = None) -> tuple[Capabilities | None, bool]:
        """KEY's capabilities, and whether they are fresh (fetched less than a day ago)."""
        data = self.entries.get(key)
        if data is None:
            return None, False
        caps = Capabilities.from_json(data)
        return caps, (now or time.time()) - caps.fetched < DAY

    def put(self, key: str, caps: Capabilities) -> None:
        """Keep CAPS for KEY, on disk at once (a cache: a failed write is only logged by the caller)."""
        self.entries[key] = caps.to_json()
        atomic_write(self.path, json.dumps(self.entries, indent=1, sort_keys=True) + "\n")
