"""What a model backend is, as everything above the backends sees it.

Both backends (``anthropic_backend``, ``openai_backend``) return a
:class:`ModelResult`, and every caller (the primary's turn, a subagent's run,
the local model) holds a backend as a :class:`ModelBackend`: nothing above
this module imports a backend to learn its types (docs/ARCHITECTURE.md, Layers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .pricing import Usage
    from .retry import StatusSink

TextSink = Callable[[str], None]


@dataclass
class ModelResult:
    """What one model call returned."""

    text: str
    usage: Usage
    latency_ms: float
    stop_reason: str | None
    request: dict[str, Any] = field(default_factory=dict)
    thinking: str = ""  # the model's thinking text, as it came ("" when it did not think)
    # The thinking blocks as the API returned them (signatures included): sent back with the
    # reply in later requests, unmodified, as the API requires.
    thinking_blocks: list[dict[str, Any]] = field(default_factory=list)

    def assistant_content(self) -> str | list[dict[str, Any]]:
        """The reply as an assistant message's content: its text, after its thinking blocks."""
        if not self.thinking_blocks:
            return self.text or "(empty)"
        return [*self.thinking_blocks, {"type": "text", "text": self.text or "(empty)"}]


class ModelBackend(Protocol):
    """A model backend as its callers use it: one request in, one :class:`ModelResult` out.

    STREAM false: nothing is shown as it comes (a subagent's reply); ON_TEXT hears the
    reply's text as it streams, ON_THINKING its thinking, ON_STATUS each retry."""

    async def complete(self, request: dict[str, Any], on_text: TextSink | None = None, *, stream: bool = True,
                       on_status: StatusSink | None = None, on_thinking: TextSink | None = None) -> ModelResult: ...
