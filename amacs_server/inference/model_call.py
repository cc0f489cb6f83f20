"""The one model call every agent makes: the primary's tick, a subagent's step, a judge's score.

    capabilities -> request -> adapting -> retries -> parse -> window learning

Room card: owns a model call from the request's making to its parsed answer; calls only the
backend, the catalog and the parser below it; every agent calls it, it calls no agent.

An agent says what it asks as data (:class:`Ask`: its backend and catalog, its model, system
prompt and settings, how its answer is read, whether it streams) with its :class:`Messages`
(what the next request shows; they keep each answer and leave their oldest part to long-term
memory when the model's window is too small) and hears what happens through one narrow
:class:`Caller` (its transcript, the person's screen, its cost).  The call decides everything
else itself, once for every agent, and returns one :class:`Reply`:

- the request is built for what the model accepts, and a parameter the model refuses is
  dropped and the call made once more (:class:`~amacs_server.inference.catalog.Adapting`);
- the backend retries what is worth retrying (:mod:`~amacs_server.inference.retry`);
- a request past the model's window by the calibrated estimate is compacted before it is
  sent; one the model refuses as too long is compacted and sent again, at most
  MAX_COMPACTIONS times; refused still, or with nothing left to leave out, the call fails
  in one plain line (:class:`CallFailed`), never with the server's raw 400;
- an answer that does not read is asked again READER.retries times, with the reader's prompt;
- what the answer showed of the window (a cut answer, the tokens counted) is learned.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, NoReturn, Protocol, TypeVar

from .. import faults
from ..errors import AmacsError
from .capabilities import TooLong, too_long
from .catalog import Adapting, prepare, request_chars
from .parse import (
    CUT_REASONS,
    CUT_RETRY_PROMPT,
    MAX_PARSE_RETRIES,
    RETRY_PROMPT,
    AgentResponse,
    parse_response,
)
from .request import UNKNOWN, RequestSpec, constrained
from .retry import InferenceError
from .stream import ReplyStreamer

if TYPE_CHECKING:
    from ..state.consciousness import ApiSettings
    from .backend import ModelBackend, ModelResult
    from .catalog import ModelCatalog
    from .pricing import Usage
    from .retry import Retrying

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
MAX_COMPACTIONS = 3  # refusals as too long one call compacts for before it fails
# The transcript events the call writes, by kind: each is a record of records.py, which
# sits above this layer; the agent writes ``KINDS[kind].of(data)`` (tests/test_model_call.py).
CallEvent = Literal["model_request", "model_response", "model_error", "model_retry", "model_adapted",
                    "context_compacted", "parse_error"]


class Messages(Protocol):
    """An agent's messages as the call reads and grows them."""

    def now(self) -> list[dict[str, Any]]:
        """The messages the next request shows (without the system prompt)."""

    def answered(self, result: ModelResult, retry: str | None, cut: bool) -> None:
        """The model answered RESULT.  RETRY: it did not read, and RETRY is the prompt that asks
        again (CUT: it stopped at its length limit); keep the answer and the prompt for the next
        request as the agent keeps them.  None: the last answer of this call."""

    def compact(self, window: int | None) -> dict[str, Any] | None:
        """Leave the oldest part to long-term memory so the messages fit WINDOW tokens; what was
        done, for the transcript (None: nothing more can be left out)."""


class Caller:
    """The agent a call is made for, as the call tells it what happens.  Each method records or
    shows what happened and decides nothing the call does next (``ready`` may stop it); each
    does nothing here: an agent's own says what it does with it."""

    async def ready(self) -> None:
        """Before each model call of this call: wait while the agent may not call, or raise to
        stop it (its budget is spent, it was cancelled)."""

    def note(self, event: CallEvent, data: dict[str, Any]) -> None:
        """Write EVENT, its DATA, to the agent's transcript."""

    def sending(self, request: dict[str, Any]) -> None:
        """REQUEST is about to leave: its ``model_request`` event, with what the agent adds."""
        self.note("model_request", {"request": request})

    def working(self, doing: str) -> None:
        """What the agent is doing now (waiting for the model pool, thinking), for the hub."""

    def status(self, line: str) -> None:
        """A line the person reads: the model adapted, a window learned, a compaction."""

    def retrying(self, retry: Retrying) -> None:
        """The backend retries the call after a failure worth retrying."""

    def streamed(self, gained: str, last: bool = False) -> None:
        """The reply (streamed) gained GAINED; LAST: it is complete (GAINED may be empty)."""

    def thinking(self, delta: str) -> None:
        """The model's thinking (streamed) gained DELTA."""

    def abandon(self, why: str) -> None:
        """The reply streamed so far will not be the reply (WHY)."""

    def rejected(self, attempt: int, error: Exception, cut: bool, again: bool) -> None:
        """Answer ATTEMPT did not read (ERROR; CUT: cut at its length limit); AGAIN: it is asked again."""

    def paid(self, usage: Usage) -> float | None:
        """The call used USAGE: charge it to the one budget; its dollars (None: unpriced)."""
        return None


class Reader(Protocol[T_co]):
    """How an answer is read: :meth:`read` its text, and the prompt that asks again after an
    error (:meth:`again`), RETRIES times at most."""

    @property
    def retries(self) -> int:
        """How many times an answer that does not read is asked again."""

    def read(self, text: str) -> T_co:
        """TEXT read (raises ValueError when it does not read)."""

    def again(self, error: Exception, cut: bool) -> str:
        """The prompt that asks again after ERROR (CUT: the answer stopped at its length limit)."""


class AgentReader:
    """An agent's answer: its JSON response, asked again as every agent is."""

    retries = MAX_PARSE_RETRIES

    def read(self, text: str) -> AgentResponse:
        return parse_response(text)

    def again(self, error: Exception, cut: bool) -> str:
        return CUT_RETRY_PROMPT if cut else RETRY_PROMPT


AGENT_READER = AgentReader()


@dataclass
class Ask(Generic[T]):
    """One model call as data: who answers (BACKEND, CATALOG: the session's model's
    capabilities and window; None for a caller of its own, a judge), what is asked (MODEL,
    SYSTEM, SETTINGS), how the answer is read (READER) and shown (STREAM, SHOW: the reply's
    text as it comes), and the pool of calls it waits a slot of (POOL, with ANSWERS: the lane answers
    go on through, :func:`answer_turn`)."""

    backend: ModelBackend
    catalog: ModelCatalog | None
    model: str
    system: str
    settings: ApiSettings
    reader: Reader[T]
    stream: bool = False  # the answer streams (its thinking shown as it comes)
    show: bool = False  # and its reply's text is shown as it comes
    agent_reply: bool = True
    openai_room: bool = False  # the server's window holds the answer too (an OpenAI-compatible one)
    pool: asyncio.Semaphore | None = None
    answers: asyncio.Lock | None = None
    extra_body: dict[str, Any] | None = None  # fields of the body the request does not make (a judge's reply form)


@dataclass(frozen=True)
class Reply(Generic[T]):
    """What a call came to: VALUE, the answer read (None: never read after the reader's
    retries), TEXT, the model's last raw text, ATTEMPT (0: the first), RESULT, the last model
    result, and SHOWN, the reply's text streamed to the person."""

    value: T | None
    text: str
    attempt: int
    result: ModelResult
    shown: str = ""


class CallFailed(InferenceError):
    """The call failed; the message says why in one plain line (the transcript's
    ``model_error`` has the server's own words)."""


def too_long_line(model: str, window: int | None) -> str:
    """Why a call failed on a context too long for the model, in one plain line."""
    return (f"the context is too long for {model}'s window"
            f"{f' ({window:,} tokens)' if window else ''} even with its oldest part left to long-term memory: "
            "a shorter input, fewer MCP tools (mcp.json), or a model with a larger window will do")


class WindowRefusal(AmacsError):
    """The model refused a request as too long for its window (REFUSAL, what it said of it):
    the call compacts and asks again."""

    def __init__(self, request: dict[str, Any], refusal: TooLong, detail: str) -> None:
        super().__init__(detail)
        self.request, self.refusal, self.detail = request, refusal, detail


async def model_call(ask: Ask[T], messages: Messages, caller: Caller) -> Reply[T]:
    """Make ASK's call with MESSAGES for CALLER: see the module's doc."""
    catalog = ask.catalog
    same = catalog is not None and ask.model == catalog.model  # the catalog knows this model
    fit(ask, messages, caller, "estimate")
    compactions = 0
    attempt = 0
    while True:
        await caller.ready()
        streamer = ReplyStreamer()
        try:
            result = await _one(ask, messages.now(), caller, streamer, same)
        except WindowRefusal as err:
            compactions += 1
            _compact(ask, messages, caller, err, compactions)
            continue
        if same and catalog is not None:
            _learn(catalog, result, caller)
        try:
            value = ask.reader.read(result.text)
        except ValueError as err:
            cut = result.stop_reason in CUT_REASONS
            again = attempt < ask.reader.retries
            if streamer.shown:
                caller.abandon("cut off at the length limit" if cut else "not valid JSON")
            caller.note("parse_error", {"attempt": attempt, "error": f"cut off at the length limit: {err}"
                                        if cut else str(err)})
            caller.rejected(attempt, err, cut, again)
            if again:
                messages.answered(result, ask.reader.again(err, cut), cut)
                attempt += 1
                continue
            messages.answered(result, None, cut)
            return Reply(None, result.text, attempt, result)
        messages.answered(result, None, False)
        return Reply(value, result.text, attempt, result, streamer.shown)


def fit(ask: Ask[Any], messages: Messages, caller: Caller, why: str) -> None:
    """MESSAGES compacted until the request they make fits the model's window by the calibrated
    estimate, with room for the answer (an OpenAI-compatible server's window holds it too)."""
    catalog = ask.catalog
    if catalog is None or ask.model != catalog.model or catalog.window is None:
        return
    window = catalog.window
    room = window - catalog.answer_tokens(ask.settings.max_tokens) if ask.openai_room else window
    while catalog.estimate(len(ask.system) + request_chars({"messages": messages.now()})) > room:
        done = messages.compact(window)
        if done is None:
            return
        caller.note("context_compacted", {**done, "window": window, "why": why})


def _compact(ask: Ask[Any], messages: Messages, caller: Caller, err: WindowRefusal, compactions: int) -> None:
    """The model refused ERR's request as too long: learn its window, compact, and fit again;
    past MAX_COMPACTIONS or with nothing left to leave out, the call fails in one plain line."""
    catalog = ask.catalog
    window = None
    if catalog is not None and ask.model == catalog.model:
        if err.refusal.tokens:  # the server counted this request: the estimate learns from it
            catalog.calibrate(request_chars(err.request), err.refusal.tokens)
        contradicted = catalog.learn_refusal(err.refusal, catalog.estimate(request_chars(err.request)))
        if contradicted:
            caller.note("model_adapted", {"status": contradicted})
            caller.status(contradicted)
        window = catalog.window
    else:
        window = err.refusal.window
    done = messages.compact(window) if compactions <= MAX_COMPACTIONS else None
    if done is None:
        _fail(caller, too_long_line(ask.model, window), err.detail)
    caller.status(f"The context was too long for the model's window{f' ({window:,} tokens)' if window else ''}; "
                  "its oldest part is left to long-term memory and the model is asked again.")
    caller.note("context_compacted", {**done, "window": window, "why": err.detail})
    fit(ask, messages, caller, "estimate")


def _fail(caller: Caller, line: str, detail: str = "") -> NoReturn:
    caller.note("model_error", {"error": line, **({"detail": detail} if detail and detail != line else {})})
    raise CallFailed(line, None, detail or line)


async def _one(ask: Ask[Any], shown: list[dict[str, Any]], caller: Caller, streamer: ReplyStreamer,
               same: bool) -> ModelResult:
    """One model call: the request built for what the model accepts (adapting to its
    refusals), sent, its cost charged and recorded."""
    catalog = ask.catalog
    # The catalog knows the session's model; another one is sent what any model takes.
    spec = RequestSpec(ask.model, ask.system, shown, ask.settings, ask.agent_reply, ask.extra_body, any_model=not same)
    wire = _Wire(ask, caller, streamer)
    chars = len(ask.system) + request_chars({"messages": shown})  # whether it may go before the capabilities
    try:
        if catalog is None:
            result = await wire.send(spec.built(UNKNOWN))
        else:
            if ask.pool is not None and ask.pool.locked():
                # The request is made before the wait for a slot of the pool: from a slot's release to the
                # next call's request on the wire, only that call's sending stands in the way.  A call that
                # will wait makes it a turn of the loop later: the calls under way send their bodies first
                # (aiohttp writes a body from a task of its own), not after 200 tasks started at once have
                # each made a request (~0.28 ms each: the first answers came ~40 ms late).
                await asyncio.sleep(0)
            adapting = Adapting(catalog, spec, await prepare(catalog, spec, chars))
            if ask.pool is None:
                result = await _adapted(adapting, wire, caller)
            else:
                caller.working("waiting for the model pool")
                async with ask.pool:
                    caller.working("thinking")
                    result = await _adapted(adapting, wire, caller)
    except InferenceError as err:
        refusal = too_long(err.detail, err.status)
        if refusal is not None:
            raise WindowRefusal(wire.sent or {}, refusal, err.detail) from err
        caller.note("model_error", {"error": str(err)})
        raise
    faults.point("infer.response")
    dollars = caller.paid(result.usage)
    caller.note("model_response", {
        "raw": result.text, "thinking": result.thinking, "constrained": constrained(result.request),
        "stop_reason": result.stop_reason, "usage": result.usage.__dict__, "cost": dollars,
        "latency_ms": result.latency_ms})
    if ask.answers is not None:
        await answer_turn(ask.answers)
    return result


async def _adapted(adapting: Adapting, wire: _Wire, caller: Caller) -> ModelResult:
    """ADAPTING's request sent on WIRE, and made again while the model's refusals teach it."""
    while True:
        try:
            return await wire.send(adapting.request)
        except InferenceError as err:
            line = await adapting.refused(err)  # raises ERR when asking again will not help
            if line is not None:
                caller.note("model_adapted", {"status": line})
                caller.status(line)


class _Wire:
    """A request of ASK's on its way to the backend and its answer back: the request is in the
    transcript before it leaves; what streams is shown; a retry abandons what was shown."""

    def __init__(self, ask: Ask[Any], caller: Caller, streamer: ReplyStreamer) -> None:
        self.ask, self.caller, self.streamer = ask, caller, streamer
        self.sent: dict[str, Any] | None = None  # the last request sent

    async def send(self, request: dict[str, Any]) -> ModelResult:
        self.sent = request
        ask, caller = self.ask, self.caller
        caller.sending(request)
        if ask.stream:
            return await ask.backend.complete(request, self.text if ask.show else None, on_status=self.retrying,
                                              on_thinking=caller.thinking)
        return await ask.backend.complete(request, stream=False, on_status=self.retrying)

    def text(self, delta: str) -> None:
        streamer = self.streamer
        was_complete = streamer.complete
        gained = streamer.feed(delta)
        if gained:
            if faults.ARMED is not None and len(streamer.shown) == len(gained):  # the first text shown
                faults.point("infer.first-text")
                faults.point_later("infer.mid-stream", 0.2)
        if gained or (streamer.complete and not was_complete):
            self.caller.streamed(gained, last=streamer.complete and not was_complete)

    def retrying(self, retry: Retrying) -> None:
        streamer = self.streamer
        if streamer.shown:  # the stream restarts: what was shown will not be the reply
            self.caller.abandon("the call is retried")
        streamer.reset()
        self.caller.note("model_retry", {"status": retry.text, "seconds": retry.seconds})
        self.caller.retrying(retry)


def _learn(catalog: ModelCatalog, result: ModelResult, caller: Caller) -> None:
    """What RESULT showed of the window: a cut short of the tokens asked, the tokens counted."""
    learned = catalog.learn_from_cut(result)
    if learned:
        caller.note("model_adapted", {"status": learned})
        caller.status(learned)
    usage = result.usage
    catalog.calibrate(request_chars(result.request), usage.input_tokens + usage.cache_read_tokens
                      + usage.cache_write_tokens)


async def answer_turn(lane: asyncio.Lock) -> None:
    """Wait until a subagent's answer, read and recorded, may be taken further (parsed, acted
    on, delivered): after the loop has turned once, so the calls waiting for the slots freed
    meanwhile send their requests first; then one answer at a time through LANE, each after
    two more turns of the loop.

    With P calls answered at once, the P next requests then wait for P answers read, not for
    P agents' whole steps one after another; and an answer read while another goes on frees
    its slot, whose waiting call is sent, before the next answer goes on.  LANE is held across
    those two turns only, never across an agent's own waits: it orders the answers' going on,
    it does not serialize the agents' steps."""
    await asyncio.sleep(0)
    async with lane:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
