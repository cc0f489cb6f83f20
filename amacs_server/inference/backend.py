"""What a model backend is, as everything above the backends sees it.

Both backends (``anthropic_backend``, ``openai_backend``) return a
:class:`ModelResult`, and every caller (the primary's turn, a subagent's run,
the local model) holds a backend as a :class:`ModelBackend`: nothing above
this module imports a backend to learn its types (docs/ARCHITECTURE.md, Layers).

A backend's answer comes as what it yields (:meth:`ModelBackend.answer`): the reply's text and
its thinking as they stream (:class:`Text`, :class:`Thought`), each retry
(:class:`~.retry.Retrying`), and last the :class:`ModelResult`.  Whoever asks reads them in its
own frame: nothing is handed down to be called back.  :class:`Completing` gives a backend
``complete``, the same answer read into sinks, for the callers that only wait for the result.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .retry import Retrying

if TYPE_CHECKING:
    from .pricing import Usage

TextSink = Callable[[str], None]
StatusSink = Callable[[Retrying], None]


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


@dataclass(frozen=True)
class Text:
    """The reply's text gained PIECE, as it streamed (or whole, asked again unstreamed)."""

    piece: str


@dataclass(frozen=True)
class Thought:
    """The model's thinking gained PIECE, as it streamed."""

    piece: str


Piece = Text | Thought | Retrying | ModelResult  # what a backend's answer yields, the result last


class ModelBackend(Protocol):
    """A model backend as its callers use it: one request in, what comes of it out.

    :meth:`answer` yields the answer as it comes; :meth:`complete` waits for it (STREAM false:
    nothing streams, a subagent's reply; ON_TEXT hears the reply's text as it streams,
    ON_THINKING its thinking, ON_STATUS each retry)."""

    def answer(self, request: dict[str, Any], *, stream: bool = True) -> AsyncGenerator[Piece, None]: ...

    async def complete(self, request: dict[str, Any], on_text: TextSink | None = None, *, stream: bool = True,
                       on_status: StatusSink | None = None, on_thinking: TextSink | None = None) -> ModelResult: ...


class Completing:
    """A backend's ``complete``: its :meth:`answer` read to the end, each piece to its sink."""

    def answer(self, request: dict[str, Any], *, stream: bool = True) -> AsyncGenerator[Piece, None]:
        raise NotImplementedError

    async def complete(self, request: dict[str, Any], on_text: TextSink | None = None, *, stream: bool = True,
                       on_status: StatusSink | None = None, on_thinking: TextSink | None = None) -> ModelResult:
        """REQUEST's answer; its text streamed to ON_TEXT, its thinking to ON_THINKING, each retry
        to ON_STATUS (STREAM false: nothing streams)."""
        async with aclosing(self.answer(request, stream=stream)) as pieces:
            async for piece in pieces:
                if isinstance(piece, ModelResult):
                    return piece
                if isinstance(piece, Text):
                    if on_text is not None:
                        on_text(piece.piece)
                elif isinstance(piece, Thought):
                    if on_thinking is not None:
                        on_thinking(piece.piece)
                elif on_status is not None:
                    on_status(piece)
        raise RuntimeError("the backend's answer ended without its result")
