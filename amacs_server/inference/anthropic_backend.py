"""Inference through the async ``anthropic`` client, streamed."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from ..errors import AmacsError
from ..scrub import Scrubber
from ..text.clean import storable
from . import sdk
from .backend import Completing, ModelResult, Piece, Text, Thought
from .pricing import Usage
from .request import build_request
from .retry import (
    InvalidRequest,
    Retrying,
    RetryPolicy,
    retried,
    server_words,
    validation_refusal,
)

if TYPE_CHECKING:
    import anthropic
else:
    anthropic = sdk.anthropic  # imported after the port is printed, in a thread (sdk.py)

class StreamError(AmacsError):
    """The API's ``error`` event in the middle of a stream (the HTTP status was already 200)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class StreamOverloaded(StreamError):
    """A mid-stream error worth retrying: overloaded, rate limited, or an API-side failure."""


class StreamBrokeOff(StreamOverloaded):
    """A 200 stream that broke off, ended before ``message_stop``, or ended with no answer at all
    (no text, no thinking): the same request is asked again unstreamed before anything
    else, where a server says why (a proxy in front of llama.cpp ends an over-long prompt's
    stream empty, and refuses it unstreamed with a 400 naming the window)."""


log = logging.getLogger("amacs")


THINKING_BLOCKS = ("thinking", "redacted_thinking")
RETRYABLE_STREAM_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})


def _transport_errors() -> tuple[type[Exception], ...]:
    """What the SDK's HTTP library raises when a connection breaks (loaded with the SDK)."""
    import httpx2

    return (httpx2.TransportError,)


def _stream_cut(err: Exception | None) -> StreamBrokeOff:
    """The connection broke off, or the stream ended without ``message_stop``."""
    return StreamBrokeOff("connection_error", f"the stream broke off ({err!r})" if err else
                     "the stream ended before the answer did")


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def wire(request: dict[str, Any]) -> dict[str, Any]:
    """REQUEST as the SDK sends it: ``extra_body``'s fields merged into the body's top level
    (the API refuses a field it does not know, ``extra_body`` among them)."""
    extra = request.get("extra_body")
    if "extra_body" not in request:
        return request
    return {**{k: v for k, v in request.items() if k != "extra_body"}, **(extra or {})}


def body(request: dict[str, Any]) -> bytes:
    """REQUEST as the JSON bytes of a Messages API call (the SDK's own encoding: UTF-8, no spaces)."""
    return _ENCODER.encode(wire(request)).encode("utf-8")


def _retryable() -> tuple[type[Exception], ...]:
    return (anthropic.RateLimitError, anthropic.InternalServerError, anthropic.APITimeoutError,
            anthropic.APIConnectionError, StreamOverloaded)


__all__ = ["AnthropicBackend", "build_request"]


# What a mid-stream error event (or a cut stream) is called in the retry line, "Model API ... (mid-stream)".
STREAM_ERROR_WORDS = {"connection_error": "connection lost", "empty": "answered nothing", "api_error": "server error",
                      "rate_limit_error": "rate limited", "overloaded_error": "overloaded"}


def _short(err: Exception) -> str:
    if isinstance(err, StreamError):
        words = STREAM_ERROR_WORDS.get(err.kind, err.kind.removesuffix("_error").replace("_", " "))
        return f"{words} (mid-stream)"
    if isinstance(err, anthropic.APIStatusError):
        names = {429: "rate limited", 529: "overloaded"}
        return f"{names.get(err.status_code, 'server error')} ({err.status_code})"
    if isinstance(err, anthropic.APITimeoutError):
        return "timed out"
    return "connection failed"


TOO_LARGE = ("the request is too large for the API (413): the context is too big; shorten the "
             "thread's buffers or start a new thread, then send again")


def _explain(err: Exception, base_url: str | None = None, scrub: Scrubber | None = None) -> str:
    if isinstance(err, StreamError):
        return f"the API broke off its answer ({err.kind}: {err.message})"
    if isinstance(err, anthropic.AuthenticationError):
        return f"the API key was refused (401): check ANTHROPIC_API_KEY or `amacs-api-key' (it said: {server_words(err, scrub)})"
    if isinstance(err, anthropic.PermissionDeniedError):
        return "the API key may not use this model (403): check AMACS_MODEL"
    if isinstance(err, anthropic.NotFoundError):
        return "model or endpoint not found (404): check AMACS_MODEL and ANTHROPIC_BASE_URL"
    if isinstance(err, anthropic.APIStatusError) and err.status_code == 413:
        return TOO_LARGE
    if isinstance(err, InvalidRequest):
        return f"the API refused the request as invalid (its 500 said: {scrub.text(err.message) if scrub else err.message})"
    if isinstance(err, anthropic.BadRequestError):
        return f"the API rejected the request (400): {server_words(err, scrub)}"
    if isinstance(err, anthropic.APITimeoutError):
        return "the model did not answer in time: try again, or raise AMACS_REQUEST_TIMEOUT"
    if isinstance(err, anthropic.APIConnectionError):
        # Named: a newcomer could not tell which endpoint it was.
        return ("cannot reach the model endpoint: check the network or the base URL"
                " (ANTHROPIC_BASE_URL, or M-x amacs-set-model)"
                f" (tried {base_url or 'https://api.anthropic.com'})")
    if isinstance(err, anthropic.APIStatusError):
        return f"the API failed ({err.status_code}) after retries: try again shortly; it said: {server_words(err, scrub)}"
    return f"the model call failed: {err}"


class AnthropicBackend(Completing):
    """One async client, made on first use, over aiohttp.

    The SDK's own aiohttp transport (``DefaultAioHttpClient``, the ``anthropic[aiohttp]``
    extra) in place of httpx's, whose connection pool (httpcore) costs the loop more per
    request the more connections are open: with 50 subagent calls at once, the loop's CPU
    per call went from 2.65 to 1.95 ms (bench/bench_agents.py).
    """

    def __init__(self, api_key: str | None, base_url: str | None, timeout: float,
                 retry: RetryPolicy | None = None) -> None:
        self._api_key = api_key
        self._base_url = base_url
        self._timeout = timeout
        self.retry = retry or RetryPolicy()
        self._scrub = Scrubber({"ANTHROPIC_API_KEY": api_key})  # the key, were a server to quote it
        self._client: anthropic.AsyncAnthropic | None = None
        self._closer: asyncio.Task[None] | None = None

    def _get_client(self) -> anthropic.AsyncAnthropic:
        """The client, made on the loop's first call (its aiohttp session belongs to that loop).

        The SDK's OpenTelemetry spans are off: nothing here reads them, and each call
        built one.  The client closes with :meth:`aclose`, or when the loop's tasks are
        cancelled at the end (the runtime's stop; also the client of a backend that
        ``amacs-set-model`` replaced): an aiohttp session left open is logged as an error."""
        if self._client is None:
            client = anthropic.AsyncAnthropic(
                api_key=self._api_key, base_url=self._base_url, timeout=self._timeout, max_retries=0,
                http_client=anthropic.DefaultAioHttpClient(timeout=self._timeout, verify=sdk.ssl_context()),
                open_telemetry=False,
            )
            self._client = client
            self._closer = asyncio.get_running_loop().create_task(_close_at_the_end(client))
        return self._client

    async def prepare(self) -> None:
        """Make the client, and a thread of the loop's default executor, before the first call.

        Made by the first call, they were on the path from the person's first question to its
        request (profiled in a fork of the warm server, load 4-11: the client 10-15 ms, the thread
        the SDK's first request resolves its platform in 5-25 ms).  The server calls this once its
        runtime is built, when nothing waits: a key that is missing is said by the first call."""
        await sdk.anthropic.ready()  # the start-up import may still run: wait off the loop
        try:
            self._get_client()
        except Exception:  # noqa: BLE001 - the first call makes it again and says what is wrong
            return
        await asyncio.to_thread(lambda: None)

    async def aclose(self) -> None:
        """Close the client now (a later call makes a new one)."""
        client, closer, self._client, self._closer = self._client, self._closer, None, None
        if closer is not None:
            closer.cancel()
        if client is not None and not client.is_closed():
            await client.close()

    async def answer(self, request: dict[str, Any], *, stream: bool = True) -> AsyncGenerator[Piece, None]:
        """REQUEST's answer as it comes: streamed (its text and thinking as they stream) unless STREAM is false.

        429, 5xx (529 included), time-outs and lost connections are retried with
        backoff and jitter, each retry yielded as its one line;
        401, 400 and the like fail at once with what to fix.
        """
        await sdk.anthropic.ready()  # the start-up import may still run: wait off the loop
        streaming = [stream]  # False once a stream was cut: the rest of this call is not streamed

        async def attempt() -> AsyncGenerator[Piece, None]:
            if streaming[0]:
                try:
                    async with aclosing(self._refusing(request, True)) as pieces:
                        async for piece in pieces:
                            yield piece
                    return
                except StreamBrokeOff as err:
                    streaming[0] = False
                    log.info("the stream was cut (%s): asking again without streaming", err.message)
                    # what was shown of the reply will not be it
                    yield Retrying(f"Model API {_short(err)}; asking again without streaming", 0.0, 1,
                                   self.retry.attempts)
            async with aclosing(self._refusing(request, False)) as pieces:
                async for piece in pieces:
                    if stream and isinstance(piece, ModelResult) and piece.text:
                        yield Text(piece.text)  # asked unstreamed after a cut stream: shown whole
                    yield piece

        async with aclosing(retried(attempt, self.retry, _retryable(), (anthropic.APIError, StreamError, InvalidRequest),
                                    _short, lambda err: _explain(err, self._base_url, self._scrub))) as pieces:
            async for piece in pieces:
                yield piece

    async def _refusing(self, request: dict[str, Any], stream: bool) -> AsyncGenerator[Piece, None]:
        """One call; a 500 whose words say the request did not validate raised as the refusal it is."""
        try:
            async with aclosing(self._once(request, stream)) as pieces:
                async for piece in pieces:
                    yield piece
        except anthropic.InternalServerError as err:
            refusal = validation_refusal(err)
            if refusal is None:
                raise
            raise refusal from err

    async def capabilities(self, model: str) -> dict[str, Any] | None:
        """The Models API's answer for MODEL (``models.retrieve``), or None when it could not be
        asked (no connection); an answer without the model (404) is ``{}``."""
        await sdk.anthropic.ready()
        try:
            raw = await self._get_client().models.with_raw_response.retrieve(model)
        except (anthropic.APIConnectionError, anthropic.APITimeoutError, anthropic.AuthenticationError):
            return None
        except anthropic.APIStatusError:
            return {}
        data = json.loads(await raw.read())
        return data if isinstance(data, dict) else {}

    async def _once(self, request: dict[str, Any], stream: bool) -> AsyncGenerator[Piece, None]:
        started = time.perf_counter()
        if stream:
            async with aclosing(self._stream(request, started)) as pieces:
                async for piece in pieces:
                    yield piece
            return
        # The message's JSON as it came, as the stream's events are read: the SDK's typed
        # Message (pydantic) costs ~0.15 ms of the loop per call.  The request goes as its
        # JSON bytes through the client's own ``post`` (its auth, headers, time-out and status
        # errors, as ``create``'s): ``create`` copied the whole body and encoded the copy,
        # ~0.3 of its ~1.4 ms of loop CPU per call (bench/bench_agents.py, 16 at once).
        import httpx2

        raw = await self._get_client().post("/v1/messages", cast_to=httpx2.Response, content=body(request))
        message = json.loads(await raw.aread())
        text = storable("".join(b.get("text", "") for b in message.get("content") or ()
                                if b.get("type") == "text"))
        blocks = [b for b in message.get("content") or () if b.get("type") in THINKING_BLOCKS]
        yield _result(request, started, text, _usage(message.get("usage") or {}), message.get("stop_reason"), blocks)

    async def _stream(self, request: dict[str, Any], started: float) -> AsyncGenerator[Piece, None]:
        """The SDK's raw HTTP stream (as ``with_streaming_response`` has it), its SSE read here.

        The SDK's client posts the request's JSON bytes (auth, headers, time-out, the status errors);
        the events are read as JSON lines.  Its typed events cost ~60 us each
        (pydantic), which for 100 deltas left the reply ~4 ms behind the last
        byte; its ``messages.stream`` helper, which rebuilds the
        whole message on every event, ~10 times that.  An ``error`` event
        raises :class:`StreamError` (retried when the API is overloaded).  Thinking blocks
        are kept whole in the result (their text and signature), their text yielded as it comes.
        """
        blocks: list[dict[str, Any]] = []
        parts: list[str] = []
        usage = Usage()
        stop_reason: str | None = None
        stopped = False
        broken: tuple[type[Exception], ...] = (OSError, anthropic.APIConnectionError, *_transport_errors())
        import httpx2
        from anthropic._constants import RAW_RESPONSE_HEADER

        # As the unstreamed call above: the request's JSON bytes through the client's own post,
        # its body streamed as ``with_streaming_response`` has it (its header).  ``create`` walked
        # the whole request against the SDK's parameter types and copied it before encoding it:
        # for a returning home's first request (~75 KB) ~7 ms of the ~30 before its bytes left
        # (load 10), between the person's RET and the request.
        response = await self._get_client().post(
            "/v1/messages", cast_to=httpx2.Response, content=body({**request, "stream": True}),
            options={"headers": {RAW_RESPONSE_HEADER: "stream"}})
        try:
            lines = response.aiter_lines()
            while True:
                try:
                    line = await anext(lines)
                except StopAsyncIteration:
                    break
                except broken as err:
                    raise _stream_cut(err) from err  # reset or cut mid-answer: retried whole
                if not line.startswith("data:"):
                    continue  # "event:" names repeat the data's type; blank lines end events
                try:
                    event = json.loads(line[5:])
                except json.JSONDecodeError as err:  # a line cut off where the connection broke
                    raise _stream_cut(err) from err
                kind = event.get("type")
                if kind == "content_block_delta":
                    delta = event["delta"]
                    if delta.get("type") == "text_delta":
                        piece = storable(delta["text"])  # a lone surrogate (from a \ud800 escape) cannot
                        parts.append(piece)              # be written or sent on: U+FFFD
                        yield Text(piece)
                    elif delta.get("type") == "thinking_delta" and blocks:
                        blocks[-1]["thinking"] += delta["thinking"]
                        yield Thought(storable(delta["thinking"]))
                    elif delta.get("type") == "signature_delta" and blocks:
                        blocks[-1]["signature"] = blocks[-1].get("signature", "") + delta["signature"]
                elif kind == "content_block_start":
                    block = event.get("content_block") or {}
                    if block.get("type") in THINKING_BLOCKS:
                        blocks.append(dict(block))
                elif kind == "message_start":
                    usage = _usage(event["message"].get("usage") or {})
                elif kind == "message_delta":
                    stop_reason = (event.get("delta") or {}).get("stop_reason")
                    usage = _counted(usage, _usage(event.get("usage") or {}))
                elif kind == "message_stop":
                    stopped = True
                elif kind == "error":
                    error = event.get("error") or {}
                    err_kind, message = str(error.get("type", "api_error")), str(error.get("message", ""))
                    raise (StreamOverloaded if err_kind in RETRYABLE_STREAM_ERRORS else StreamError)(
                        err_kind, message)
        finally:
            await response.aclose()
        if not stopped:
            raise _stream_cut(None)
        if not "".join(parts) and not blocks:
            raise StreamBrokeOff("empty", "the stream ended with no answer (no text, no thinking)")
        yield _result(request, started, "".join(parts), usage, stop_reason, blocks)


def _result(request: dict[str, Any], started: float, text: str, usage: Usage, stop_reason: str | None,
            blocks: list[dict[str, Any]]) -> ModelResult:
    return ModelResult(text=text, usage=usage, latency_ms=(time.perf_counter() - started) * 1000,
                       stop_reason=stop_reason, request=request,
                       thinking=storable("".join(b.get("thinking", "") for b in blocks)), thinking_blocks=blocks)


async def _close_at_the_end(client: anthropic.AsyncAnthropic) -> None:
    """Wait until cancelled (the runtime's stop cancels every task of its loop), then close CLIENT."""
    try:
        await asyncio.get_running_loop().create_future()
    finally:
        if not client.is_closed():
            await client.close()


def _counted(start: Usage, delta: Usage) -> Usage:
    """The usage of a stream: ``message_start``'s, then ``message_delta``'s (cumulative counts:
    a server may put any of them there, the input's too), each the larger of the two."""
    return Usage(input_tokens=max(start.input_tokens, delta.input_tokens),
                 output_tokens=max(start.output_tokens, delta.output_tokens),
                 cache_read_tokens=max(start.cache_read_tokens, delta.cache_read_tokens),
                 cache_write_tokens=max(start.cache_write_tokens, delta.cache_write_tokens))


def _usage(u: Any) -> Usage:
    """The API's usage (the SDK's object, or the JSON of a streamed event) as our Usage.

    Cache fields may be missing or None."""
    def get(name: str) -> Any:
        return u.get(name) if isinstance(u, dict) else getattr(u, name, None)

    return Usage(
        input_tokens=get("input_tokens") or 0,
        output_tokens=get("output_tokens") or 0,
        cache_read_tokens=get("cache_read_input_tokens") or 0,
        cache_write_tokens=get("cache_creation_input_tokens") or 0,
    )
