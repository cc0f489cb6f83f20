"""The one model call every agent makes: the primary's tick, a subagent's step, a judge's score.

    capabilities -> request -> adapting -> retries -> parse -> window learning

Room card: owns a model call from the request's making to its parsed answer; calls only the
backend, the catalog and the parser below it; every agent drives it, it calls no agent.

An agent says what it asks as data (:class:`Ask`: its backend and catalog, its model, system
prompt and settings, how often an answer that does not read is asked again, whether it streams)
and drives the call: it reads
what the call yields, each in its own frame, and the call goes on when it asks for the next.
What the call yields says what happened or what it needs (:data:`Step`): the transcript's
records to write (:mod:`~amacs_server.records`), the reply's text and thinking as they stream,
a line for the person, a retry; :class:`Ready` before each model call (the agent waits, or stops
the call by raising in its own frame), :class:`Show` (the agent sets the messages the request
shows), :class:`Compact` (it leaves their oldest part to long-term memory), :class:`Answered`
(it keeps the answer), :class:`Read` (it reads the answer, or says why it does not read and the
prompt that asks again), :class:`Charge` (it charges the cost and says the dollars); and last the
:class:`Reply`.  No function or object of the agent's is handed down to be called back: a
tick's control goes down into the call and comes back up with each step.  The call decides
everything else itself, once for every agent:

- the request is built for what the model accepts, and a parameter the model refuses is
  dropped and the call made once more (:class:`~amacs_server.inference.catalog.Adapting`);
- the backend retries what is worth retrying (:mod:`~amacs_server.inference.retry`);
- a request past the model's window by the calibrated estimate is compacted before it is
  sent; one the model refuses as too long is compacted and sent again, at most
  MAX_COMPACTIONS times; refused still, or with nothing left to leave out, the call fails
  in one plain line (:class:`CallFailed`), never with the server's raw 400;
- an answer that does not read (the agent reads it) is asked again RETRIES times, with the agent's prompt;
- what the answer showed of the window (a cut answer, the tokens counted) is learned.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import faults
from ..errors import AmacsError
from ..records import (
    ContextCompacted,
    ModelAdapted,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelRetry,
    ParseError,
    Record,
)
from .backend import ModelResult, Text, Thought
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
from .retry import InferenceError, Retrying
from .stream import ReplyStreamer

if TYPE_CHECKING:
    from ..state.consciousness import ApiSettings
    from .backend import ModelBackend
    from .catalog import ModelCatalog
    from .pricing import Usage

T = TypeVar("T")
MAX_COMPACTIONS = 3  # refusals as too long one call compacts for before it fails
@dataclass(frozen=True)
class Ready:
    """Before each model call of this call: the agent waits while it may not call, or stops the
    call (it raises in its own frame: its budget is spent, it was cancelled)."""


@dataclass
class Show:
    """The call needs the messages the next request shows (without the system prompt): the
    agent sets MESSAGES before it asks for the next step."""

    messages: list[dict[str, Any]] | None = None


@dataclass
class Compact:
    """The messages do not fit WINDOW tokens: the agent leaves their oldest part to long-term
    memory and sets SQUEEZE, how many times they have been squeezed, for the transcript (left
    None: nothing more can be left out)."""

    window: int | None
    squeeze: int | None = None


@dataclass(frozen=True)
class Answered:
    """The model answered RESULT.  RETRY: it did not read, and RETRY is the prompt that asks
    again (CUT: it stopped at its length limit); the agent keeps the answer and the prompt for
    the next request as it keeps them.  None: the last answer of this call."""

    result: ModelResult
    retry: str | None
    cut: bool


@dataclass
class Charge:
    """The call used USAGE: the agent charges it to the one budget and sets DOLLARS (left
    None: unpriced)."""

    usage: Usage
    dollars: float | None = None


@dataclass(frozen=True)
class Status:
    """A LINE the person reads: the model adapted, a window learned, a compaction."""

    line: str


@dataclass(frozen=True)
class Working:
    """What the agent is doing now (DOING: waiting for the model pool, thinking), for the hub."""

    doing: str


@dataclass(frozen=True)
class Streamed:
    """The reply (streamed) gained GAINED; LAST: it is complete (GAINED may be empty)."""

    gained: str
    last: bool = False


@dataclass(frozen=True)
class Thinking:
    """The model's thinking (streamed) gained DELTA."""

    delta: str


@dataclass(frozen=True)
class Abandon:
    """The reply streamed so far will not be the reply (WHY)."""

    why: str


@dataclass(frozen=True)
class Rejected:
    """Answer ATTEMPT did not read (ERROR; CUT: cut at its length limit); AGAIN: it is asked again."""

    attempt: int
    error: Exception
    cut: bool
    again: bool


# What a call yields before its Reply: a Record is an event for the agent's transcript, written
# as it is (a ModelRequest with what the agent adds); a Retrying, the backend retries the call.
Step = (Ready | Show | Compact | Answered | Charge | Record | Status | Working | Retrying | Streamed | Thinking
        | Abandon | Rejected)


@dataclass
class Read(Generic[T]):
    """The model answered TEXT (CUT: it stopped at its length limit): the agent reads it and sets
    VALUE, what it read; or, when it does not read, ERROR, why, and AGAIN, the prompt that asks again."""

    text: str
    cut: bool
    value: T | None = None
    error: ValueError | None = None
    again: str = ""


def read_as_agent(read: Read[AgentResponse]) -> None:
    """READ as every agent's answer is read: its JSON response, asked again with the harness's prompt."""
    try:
        read.value = parse_response(read.text)
    except ValueError as err:
        read.error, read.again = err, CUT_RETRY_PROMPT if read.cut else RETRY_PROMPT


@dataclass
class Ask(Generic[T]):
    """One model call as data, T what its answer is read as (the agent reads it, :class:`Read`):
    who answers (BACKEND, CATALOG: the session's model's capabilities and window; None for a
    caller of its own, a judge), what is asked (MODEL, SYSTEM, SETTINGS), how many times an
    answer that does not read is asked again (RETRIES), how it is shown (STREAM, SHOW: the
    reply's text as it comes), and the pool of calls it waits a slot of (POOL, with ANSWERS: the
    lane answers go on through, :func:`answer_turn`)."""

    backend: ModelBackend
    catalog: ModelCatalog | None
    model: str
    system: str
    settings: ApiSettings
    retries: int = MAX_PARSE_RETRIES
    stream: bool = False  # the answer streams (its thinking shown as it comes)
    show: bool = False  # and its reply's text is shown as it comes
    agent_reply: bool = True
    openai_room: bool = False  # the server's window holds the answer too (an OpenAI-compatible one)
    pool: asyncio.Semaphore | None = None
    answers: asyncio.Lock | None = None
    extra_body: dict[str, Any] | None = None  # fields of the body the request does not make (a judge's reply form)


@dataclass(frozen=True)
class Reply(Generic[T]):
    """What a call came to: VALUE, the answer read (None: never read after the call's
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


async def model_call(ask: Ask[T]) -> AsyncGenerator[Step | Read[T] | Reply[T], None]:
    """Make ASK's call: see the module's doc.  Yields each :data:`Step` for the agent to act on,
    and last its :class:`Reply`; raises :class:`CallFailed` or the backend's InferenceError."""
    catalog = ask.catalog
    same = catalog is not None and ask.model == catalog.model  # the catalog knows this model
    async for step in _fit(ask, "estimate"):
        yield step
    compactions = 0
    attempt = 0
    while True:
        yield Ready()
        show = Show()
        yield show
        streamer = ReplyStreamer()
        result: ModelResult | None = None
        try:
            async with aclosing(_one(ask, _messages(show), streamer, same)) as going:
                async for made in going:
                    if isinstance(made, ModelResult):
                        result = made
                    else:
                        yield made
        except WindowRefusal as err:
            compactions += 1
            async for step in _compact(ask, err, compactions):
                yield step
            continue
        if result is None:
            raise AssertionError("a model call ended without its result")
        if same and catalog is not None:
            for learned in _learn(catalog, result):
                yield learned
        read: Read[T] = Read(result.text, result.stop_reason in CUT_REASONS)
        yield read
        failed, cut = read.error, read.cut
        if failed is not None:
            again = attempt < ask.retries
            if streamer.shown:
                yield Abandon("cut off at the length limit" if cut else "not valid JSON")
            yield ParseError(attempt=attempt, error=f"cut off at the length limit: {failed}" if cut else str(failed))
            yield Rejected(attempt, failed, cut, again)
            if again:
                yield Answered(result, read.again, cut)
                attempt += 1
                continue
            yield Answered(result, None, cut)
            yield Reply(None, result.text, attempt, result)
            return
        if read.value is None:
            raise TypeError("the agent did not read the answer (Read.value or Read.error)")
        yield Answered(result, None, False)
        yield Reply(read.value, result.text, attempt, result, streamer.shown)
        return


def _messages(show: Show) -> list[dict[str, Any]]:
    if show.messages is None:
        raise TypeError("the agent did not say what the request shows (Show.messages)")
    return show.messages


async def _fit(ask: Ask[Any], why: str) -> AsyncGenerator[Step, None]:
    """The messages compacted until the request they make fits the model's window by the
    calibrated estimate, with room for the answer (an OpenAI-compatible server's window holds it too)."""
    catalog = ask.catalog
    if catalog is None or ask.model != catalog.model or catalog.window is None:
        return
    window = catalog.window
    room = window - catalog.answer_tokens(ask.settings.max_tokens) if ask.openai_room else window
    while True:
        show = Show()
        yield show
        if catalog.estimate(len(ask.system) + request_chars({"messages": _messages(show)})) <= room:
            return
        compact = Compact(window)
        yield compact
        if compact.squeeze is None:
            return
        yield ContextCompacted(squeeze=compact.squeeze, window=window, why=why)


async def _compact(ask: Ask[Any], err: WindowRefusal, compactions: int) -> AsyncGenerator[Step, None]:
    """The model refused ERR's request as too long: learn its window, compact, and fit again;
    past MAX_COMPACTIONS or with nothing left to leave out, the call fails in one plain line."""
    catalog = ask.catalog
    window = None
    if catalog is not None and ask.model == catalog.model:
        if err.refusal.tokens:  # the server counted this request: the estimate learns from it
            catalog.calibrate(request_chars(err.request), err.refusal.tokens)
        contradicted = catalog.learn_refusal(err.refusal, catalog.estimate(request_chars(err.request)))
        if contradicted:
            yield ModelAdapted(status=contradicted)
            yield Status(contradicted)
        window = catalog.window
    else:
        window = err.refusal.window
    compact = Compact(window)
    if compactions <= MAX_COMPACTIONS:
        yield compact
    if compact.squeeze is None:
        line = too_long_line(ask.model, window)
        yield ModelError(error=line, detail=err.detail if err.detail and err.detail != line else None)
        raise CallFailed(line, None, err.detail or line)
    yield Status(f"The context was too long for the model's window{f' ({window:,} tokens)' if window else ''}; "
                 "its oldest part is left to long-term memory and the model is asked again.")
    yield ContextCompacted(squeeze=compact.squeeze, window=window, why=err.detail)
    async for step in _fit(ask, "estimate"):
        yield step


async def _one(ask: Ask[Any], shown: list[dict[str, Any]], streamer: ReplyStreamer,
               same: bool) -> AsyncGenerator[Step | ModelResult, None]:
    """One model call: the request built for what the model accepts (adapting to its
    refusals), sent, its cost charged and recorded; its result yielded last."""
    catalog = ask.catalog
    # The catalog knows the session's model; another one is sent what any model takes.
    spec = RequestSpec(ask.model, ask.system, shown, ask.settings, ask.agent_reply, ask.extra_body, any_model=not same)
    chars = len(ask.system) + request_chars({"messages": shown})  # whether it may go before the capabilities
    sent: dict[str, Any] = {}  # the last request sent
    result: ModelResult | None = None
    try:
        if catalog is None:
            steps = _sent(ask, spec.built(UNKNOWN), streamer)
            pool = None
        else:
            pool = ask.pool
            if pool is not None and pool.locked():
                # The request is made before the wait for a slot of the pool: from a slot's release to the
                # next call's request on the wire, only that call's sending stands in the way.  A call that
                # will wait makes it a turn of the loop later: the calls under way send their bodies first
                # (aiohttp writes a body from a task of its own), not after 200 tasks started at once have
                # each made a request (~0.28 ms each: the first answers came ~40 ms late).
                await asyncio.sleep(0)
            steps = _adapted(ask, Adapting(catalog, spec, await prepare(catalog, spec, chars)), streamer)
        if pool is not None:
            yield Working("waiting for the model pool")
            await pool.acquire()
        try:
            if pool is not None:
                yield Working("thinking")
            async with aclosing(steps) as going:
                async for made in going:
                    if isinstance(made, ModelRequest):
                        sent = made.request
                    if isinstance(made, ModelResult):
                        result = made
                    else:
                        yield made
        finally:
            if pool is not None:
                pool.release()
    except InferenceError as err:
        refusal = too_long(err.detail, err.status)
        if refusal is not None:
            raise WindowRefusal(sent, refusal, err.detail) from err
        yield ModelError(error=str(err))
        raise
    if result is None:
        raise AssertionError("a backend's answer ended without its result")
    faults.point("infer.response")
    charge = Charge(result.usage)
    yield charge
    yield ModelResponse(raw=result.text, thinking=result.thinking, constrained=constrained(result.request),
                        stop_reason=result.stop_reason, usage=result.usage.__dict__, cost=charge.dollars,
                        latency_ms=result.latency_ms)
    if ask.answers is not None:
        await answer_turn(ask.answers)
    yield result


async def _adapted(ask: Ask[Any], adapting: Adapting, streamer: ReplyStreamer) -> AsyncGenerator[Step | ModelResult, None]:
    """ADAPTING's request sent, and made again while the model's refusals teach it."""
    while True:
        try:
            async with aclosing(_sent(ask, adapting.request, streamer)) as steps:
                async for step in steps:
                    yield step
            return
        except InferenceError as err:
            line = await adapting.refused(err)  # raises ERR when asking again will not help
            if line is not None:
                yield ModelAdapted(status=line)
                yield Status(line)


async def _sent(ask: Ask[Any], request: dict[str, Any], streamer: ReplyStreamer) -> AsyncGenerator[Step | ModelResult, None]:
    """REQUEST on its way to ASK's backend and its answer back: the request is in the transcript
    before it leaves; what streams is shown; a retry abandons what was shown."""
    yield ModelRequest(request=request)
    async with aclosing(ask.backend.answer(request, stream=ask.stream)) as pieces:
        async for piece in pieces:
            if isinstance(piece, Text):
                if ask.show:
                    streamed = gained(streamer, piece.piece)
                    if streamed is not None:
                        yield streamed
            elif isinstance(piece, Thought):
                if ask.stream:
                    yield Thinking(piece.piece)
            elif isinstance(piece, Retrying):
                if streamer.shown:  # the stream restarts: what was shown will not be the reply
                    yield Abandon("the call is retried")
                streamer.reset()
                yield ModelRetry(status=piece.text, seconds=piece.seconds)
                yield piece
            else:
                yield piece


def gained(streamer: ReplyStreamer, delta: str) -> Streamed | None:
    """What the reply shown gained with the streamed text DELTA (None: nothing to show)."""
    was_complete = streamer.complete
    more = streamer.feed(delta)
    if more and faults.ARMED is not None and len(streamer.shown) == len(more):  # the first text shown
        faults.point("infer.first-text")
        faults.point_later("infer.mid-stream", 0.2)
    if more or (streamer.complete and not was_complete):
        return Streamed(more, last=streamer.complete and not was_complete)
    return None


def _learn(catalog: ModelCatalog, result: ModelResult) -> list[Step]:
    """What RESULT showed of the window: a cut short of the tokens asked, the tokens counted."""
    learned = catalog.learn_from_cut(result)
    usage = result.usage
    catalog.calibrate(request_chars(result.request), usage.input_tokens + usage.cache_read_tokens
                      + usage.cache_write_tokens)
    return [ModelAdapted(status=learned), Status(learned)] if learned else []


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
