"""Inference through any OpenAI-compatible chat endpoint (Ollama, llama.cpp, vLLM, LM Studio).

The same JSON protocol as with Anthropic: the request built by
:func:`~amacs_server.inference.anthropic_backend.build_request` is translated to
``/v1/chat/completions`` (the core skill becomes the system message), streamed
with usage, and retried like the Anthropic backend.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from ..errors import AmacsError
from ..scrub import Scrubber
from ..text.clean import storable
from . import sdk
from .backend import Completing, ModelResult, Piece, Text, Thought
from .parse import with_lengths
from .pricing import Usage
from .retry import (
    InvalidRequest,
    RetryPolicy,
    retried,
    server_words,
    validation_refusal,
)

if TYPE_CHECKING:
    import openai
else:
    openai = sdk.openai  # imported only for this backend, in a thread (sdk.py)


class StreamCut(AmacsError):  # noqa: N818 - named as the SDK names its errors
    """A streamed answer ended (or broke off) before its finish reason."""


async def _until_cut(chunks: Any) -> Any:
    """CHUNKS, a broken connection after the 200 raised as :class:`StreamCut`."""
    import httpx2

    try:
        async for chunk in chunks:
            yield chunk
    except (openai.APIConnectionError, httpx2.TransportError) as err:
        raise StreamCut(f"the stream broke off ({err!r})") from err


log = logging.getLogger("amacs")


def _retryable() -> tuple[type[Exception], ...]:
    return (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError, openai.APIConnectionError)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n\n".join(block.get("text", "") for block in content if isinstance(block, dict))


SCHEMA_NAME = "agent_response"


def to_chat(request: dict[str, Any], schema_form: str | None = None) -> dict[str, Any]:
    """An Anthropic-shaped REQUEST as chat-completions arguments.

    Its reply schema becomes ``response_format``: OpenAI's ``json_schema`` form, or with
    SCHEMA_FORM ``json_object``, the form llama-cpp-python's server takes (``schema`` beside
    the type, with the string lengths its grammar keeps).  Thinking and effort become ``reasoning_effort`` (the effort set, else
    ``medium``); sampling goes as set."""
    messages = [{"role": "system", "content": _text(request["system"])}]
    messages += [{"role": m["role"], "content": _text(m["content"])} for m in request["messages"]]
    chat: dict[str, Any] = {"model": request["model"], "messages": messages, "max_tokens": request["max_tokens"]}
    output = request.get("output_config") or {}
    if "format" in output:
        schema = output["format"]["schema"]
        chat["response_format"] = (
            {"type": "json_object", "schema": with_lengths(schema)} if schema_form == "json_object" else
            {"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "strict": True, "schema": schema}})
    if "effort" in output or "thinking" in request:
        chat["reasoning_effort"] = output.get("effort") or "medium"
    chat.update(request.get("extra_body") or {})  # temperature, top_p when the agent set them
    return chat


def _short(err: Exception) -> str:
    if isinstance(err, openai.APIStatusError):
        return f"{'rate limited' if err.status_code == 429 else 'server error'} ({err.status_code})"
    if isinstance(err, openai.APITimeoutError):
        return "timed out"
    return "connection failed"


def _explain(err: Exception, base_url: str | None = None, scrub: Scrubber | None = None) -> str:
    if isinstance(err, InvalidRequest):
        return f"the endpoint refused the request as invalid (its 500 said: {scrub.text(err.message) if scrub else err.message})"
    if isinstance(err, openai.AuthenticationError):
        return f"the endpoint refused the key (401): check OPENAI_API_KEY (it said: {server_words(err, scrub)})"
    if isinstance(err, openai.NotFoundError):
        return "model or endpoint not found (404): check AMACS_MODEL and OPENAI_BASE_URL"
    if isinstance(err, openai.BadRequestError):
        return f"the endpoint rejected the request (400): {server_words(err, scrub)}"
    if isinstance(err, openai.APIConnectionError):
        return ("cannot reach the OpenAI-compatible endpoint: is it running? check the base URL"
                " (OPENAI_BASE_URL, or M-x amacs-set-model)"
                f" (tried {base_url or 'https://api.openai.com/v1'})")
    if isinstance(err, openai.APIStatusError):
        return f"the endpoint failed ({err.status_code}) after retries: try again shortly; it said: {server_words(err, scrub)}"
    return f"the model call failed: {err}"


class OpenAIBackend(Completing):
    """One async OpenAI client, made on first use."""

    def __init__(self, api_key: str | None, base_url: str | None, timeout: float,
                 retry: RetryPolicy | None = None) -> None:
        self._api_key = api_key or "not-needed"  # local servers take any key
        self._base_url = base_url
        self._timeout = timeout
        self.retry = retry or RetryPolicy()
        self._scrub = Scrubber({"OPENAI_API_KEY": api_key})  # the key, were a server to quote it
        self._client: openai.AsyncOpenAI | None = None
        # Whether the server counts tokens in a stream (stream_options.include_usage): None until
        # asked.  OpenAI's own API does; llama-cpp-python's server does not, and a call there is
        # not streamed, so that the transcript holds its counts.
        self.streams_usage: bool | None = None if base_url else True

    # The response_format form the server takes, as the runtime's catalog knows it (None: json_schema).
    schema_form_of: Callable[[], str | None] | None = None

    def _get_client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = openai.AsyncOpenAI(api_key=self._api_key, base_url=self._base_url,
                                              timeout=self._timeout, max_retries=0)
        return self._client

    async def aclose(self) -> None:
        """Close the client now (a later call makes a new one)."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def answer(self, request: dict[str, Any], *, stream: bool = True) -> AsyncGenerator[Piece, None]:
        """REQUEST's answer from the chat endpoint as it comes; streamed unless STREAM is false.

        Reasoning text (``reasoning_content``, as vLLM and llama.cpp stream it, or
        ``reasoning``) is the thinking, yielded as it comes."""
        await sdk.openai.ready()  # imported in a thread since the backend was made: wait off the loop
        async with aclosing(retried(lambda: self._refusing(request, stream), self.retry, _retryable(),
                                    (openai.APIError, InvalidRequest), _short,
                                    lambda err: _explain(err, self._base_url, self._scrub))) as pieces:
            async for piece in pieces:
                yield piece

    async def capabilities(self, model: str) -> dict[str, Any] | None:
        """What the server says of its models: ``{"models": /v1/models, "props": llama.cpp's /props}``
        (each None when it has no such route); None when it could not be reached."""
        await sdk.openai.ready()
        client = self._get_client()
        try:
            listing = await client.get("/models", cast_to=object)
        except (openai.APIConnectionError, openai.APITimeoutError):
            return None
        except openai.APIError:
            listing = None
        root = str(client.base_url).rstrip("/").removesuffix("/v1")
        try:
            props = await client.get(f"{root}/props", cast_to=object)
        except openai.APIError:
            props = None
        return {"models": listing if isinstance(listing, dict) else None,
                "props": props if isinstance(props, dict) else None}

    async def _refusing(self, request: dict[str, Any], stream: bool) -> AsyncGenerator[Piece, None]:
        try:
            async with aclosing(self._once(request, stream)) as pieces:
                async for piece in pieces:
                    yield piece
        except openai.InternalServerError as err:
            refusal = validation_refusal(err)
            if refusal is None:
                raise
            raise refusal from err
        except StreamCut:
            if not stream:
                raise
            # Asked again without streaming, the server answers, or says why it could not: llama-cpp-python
            # cuts a 200 stream when the prompt is past its window, and answers the same request
            # unstreamed with a 400 that names the window.  Not resent as it was.
            log.info("the stream was cut before its end: asking again without streaming")
            async with aclosing(self._once(request, False)) as pieces:
                async for piece in pieces:
                    yield piece

    async def _ask_streams_usage(self, model: str) -> bool:
        """Ask the server with a one-token streamed call whether its streams carry usage; a
        server that cannot be asked is taken at its word (True): the real call then says."""
        try:
            chunks = await self._get_client().chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=1, stream=True,
                stream_options={"include_usage": True})
            counted = False
            async for chunk in chunks:
                counted = counted or chunk.usage is not None
            return counted
        except openai.APIError as err:
            log.info("could not ask whether %s counts tokens in a stream: %r", self._base_url, err)
            return True

    async def _once(self, request: dict[str, Any], stream: bool) -> AsyncGenerator[Piece, None]:
        if stream and self.streams_usage is None:
            self.streams_usage = await self._ask_streams_usage(request["model"])
            if not self.streams_usage:
                log.info("%s sends no token counts in a stream: its calls are not streamed", self._base_url)
        stream = stream and self.streams_usage is not False
        started = time.perf_counter()
        chat = to_chat(request, self.schema_form_of() if self.schema_form_of is not None else None)
        client = self._get_client()
        usage = Usage()
        thought: list[str] = []
        if stream:
            parts: list[str] = []
            finish = None
            chunks = await client.chat.completions.create(**chat, stream=True,
                                                          stream_options={"include_usage": True})
            async for chunk in _until_cut(chunks):
                if chunk.usage is not None:
                    usage = _usage(chunk.usage)
                for choice in chunk.choices:
                    delta = storable(choice.delta.content or "")  # as the Anthropic backend: a lone surrogate becomes U+FFFD
                    if delta:
                        parts.append(delta)
                        yield Text(delta)
                    thinking = storable(_reasoning(choice.delta))
                    if thinking:
                        thought.append(thinking)
                        yield Thought(thinking)
                    finish = choice.finish_reason or finish
            if finish is None:
                raise StreamCut("the stream ended before the answer did")
            text = "".join(parts)
        else:
            reply = await client.chat.completions.create(**chat)
            text = storable(reply.choices[0].message.content or "")
            thought.append(storable(_reasoning(reply.choices[0].message)))
            finish = reply.choices[0].finish_reason
            if reply.usage is not None:
                usage = _usage(reply.usage)
        yield ModelResult(text=text, usage=usage, latency_ms=(time.perf_counter() - started) * 1000,
                          stop_reason=finish, request=request, thinking="".join(thought))


def _reasoning(message: Any) -> str:
    """The reasoning text a server added to a message or delta (not in the SDK's types)."""
    extra = getattr(message, "model_extra", None) or {}
    value = extra.get("reasoning_content") or extra.get("reasoning")
    return value if isinstance(value, str) else ""


def _usage(u: Any) -> Usage:
    details = getattr(u, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return Usage(input_tokens=(u.prompt_tokens or 0) - cached, output_tokens=u.completion_tokens or 0,
                 cache_read_tokens=cached)
