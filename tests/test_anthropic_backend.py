"""The Anthropic backend over the SDK's aiohttp transport (issue 11, the pool bound), against
the fake API: a subagent's unstreamed call reads the message's JSON, retries what is worth
retrying and fails at once on the rest; a stream broken off mid-answer is retried; the
client's aiohttp session is closed when the runtime's loop ends (never reported unclosed)."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from collections.abc import Iterator

import pytest

from amacs_server.config import DEFAULT_MODEL
from amacs_server.inference.anthropic_backend import AnthropicBackend
from amacs_server.inference.openai_backend import OpenAIBackend
from amacs_server.inference.retry import InferenceError, Retrying, RetryPolicy
from tests.fake_anthropic import FakeAnthropic, Reply

ANSWER = json.dumps({"reply": "The answer.", "mood": "calm", "confidence": 0.9, "monologue": "", "eval": None})
REQUEST = {"model": DEFAULT_MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


def backend(fake: FakeAnthropic) -> AnthropicBackend:
    return AnthropicBackend("sk-ant-test", fake.url, 10, RetryPolicy(attempts=3, base=0.01))


async def stop_like_the_runtime() -> None:
    """What Runtime.stop does at the end: cancel every other task of the loop, and wait for them."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for other in others:
        other.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def test_unstreamed_call_retries_an_overload_then_reads_the_message(fake):
    fake.script(Reply(status=529), Reply(ANSWER, usage={"input_tokens": 7, "output_tokens": 3,
                                                        "cache_read_input_tokens": 5}))
    said: list[str] = []

    async def go() -> None:
        result = await backend(fake).complete(REQUEST, stream=False, on_status=lambda r: said.append(r.text))
        assert result.text == ANSWER
        assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cache_read_tokens,
                result.usage.cache_write_tokens) == (7, 3, 5, 0)
        assert result.stop_reason == "end_turn"
        await stop_like_the_runtime()

    asyncio.run(go())
    assert len(fake.requests) == 2 and "stream" not in fake.requests[1]["body"]
    assert len(said) == 1 and "overloaded (529)" in said[0]


def test_unstreamed_unauthorized_fails_at_once_with_what_to_fix(fake):
    fake.script(Reply(status=401))

    async def go() -> None:
        with pytest.raises(InferenceError, match="API key was refused"):
            await backend(fake).complete(REQUEST, stream=False)
        await stop_like_the_runtime()

    asyncio.run(go())
    assert len(fake.requests) == 1


def test_stream_broken_off_by_an_overload_is_retried_whole(fake):
    fake.script(Reply(ANSWER, chunks=10, stream_error="overloaded_error"), Reply(ANSWER, chunks=5))
    deltas: list[str] = []

    async def go() -> None:
        result = await backend(fake).complete(REQUEST, deltas.append)
        assert result.text == ANSWER
        await stop_like_the_runtime()

    asyncio.run(go())
    assert len(fake.requests) == 2 and fake.requests[1]["body"]["stream"] is True
    assert "".join(deltas).endswith(ANSWER)  # the broken half first, then the whole answer


def test_an_error_mid_stream_that_is_not_worth_retrying_fails_at_once(fake):
    fake.script(Reply(ANSWER, chunks=4, stream_error="invalid_request_error"))

    async def go() -> None:
        with pytest.raises(InferenceError, match="broke off its answer"):
            await backend(fake).complete(REQUEST, lambda _text: None)
        await stop_like_the_runtime()

    asyncio.run(go())
    assert len(fake.requests) == 1


def test_the_client_closes_when_the_loop_ends_and_none_is_reported_unclosed(fake, caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")
    models = [backend(fake)]

    async def go() -> bool:
        await models[0].complete(REQUEST, stream=False)
        client = models[0]._client
        assert client is not None and not client.is_closed()
        await stop_like_the_runtime()
        return client.is_closed()

    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(go())
    finally:
        loop.close()
    models.clear()  # an aiohttp session still open says so when it is collected
    gc.collect()
    assert not [r for r in caplog.records if "Unclosed" in r.getMessage()]


def test_aclose_closes_now_and_a_later_call_opens_a_new_client(fake):
    model = backend(fake)

    async def go() -> None:
        await model.complete(REQUEST, stream=False)
        first = model._client
        await model.aclose()
        assert first is not None and first.is_closed() and model._client is None
        await model.complete(REQUEST, stream=False)
        assert model._client is not None and model._client is not first
        await stop_like_the_runtime()

    asyncio.run(go())
    assert len(fake.requests) == 2


# -- API faults (issue 12, item 2): every transient one retried, permanent ones explained ------


@pytest.mark.parametrize("cut", ["end", "reset"])
def test_a_stream_broken_off_mid_answer_is_retried_whole(fake, cut):
    """The body ends without message_stop, or the connection resets: the shown text is
    abandoned (on_status) and the call is retried; the answer is the second call's."""
    fake.script(Reply(ANSWER, chunks=10, cut=cut), Reply(ANSWER, chunks=10))
    shown: list[str] = []
    said: list[str] = []

    async def go() -> str:
        result = await backend(fake).complete(REQUEST, shown.append, on_status=lambda r: said.append(r.text))
        await stop_like_the_runtime()
        return result.text

    assert asyncio.run(go()) == ANSWER
    assert len(fake.requests) == 2
    assert len(said) == 1 and said[0].startswith("Model API connection lost (mid-stream); retrying"), said
    assert "".join(shown).endswith(ANSWER) and len("".join(shown)) > len(ANSWER)  # half, then all


def test_413_is_explained_and_not_retried(fake):
    fake.script(Reply(status=413))

    async def go() -> None:
        try:
            with pytest.raises(InferenceError, match="too large for the API \\(413\\).*shorten"):
                await backend(fake).complete(REQUEST)
        finally:
            await stop_like_the_runtime()

    asyncio.run(go())
    assert len(fake.requests) == 1


@pytest.mark.parametrize("retry_after", ["0", None])
def test_429_is_retried_with_or_without_retry_after(fake, retry_after):
    fake.script(Reply(status=429, retry_after=retry_after), Reply(ANSWER, chunks=3))
    said: list[str] = []

    async def go() -> str:
        result = await backend(fake).complete(REQUEST, on_status=lambda r: said.append(r.text))
        await stop_like_the_runtime()
        return result.text

    assert asyncio.run(go()) == ANSWER
    assert len(fake.requests) == 2 and "rate limited (429)" in said[0]


def test_slow_headers_time_out_and_are_retried(fake):
    fake.script(Reply(ANSWER, delay=1.5), Reply(ANSWER))
    said: list[str] = []

    async def go() -> str:
        slow = AnthropicBackend("sk-ant-test", fake.url, 0.5, RetryPolicy(attempts=3, base=0.01))
        result = await slow.complete(REQUEST, on_status=lambda r: said.append(r.text))
        await stop_like_the_runtime()
        return result.text

    assert asyncio.run(go()) == ANSWER
    assert len(fake.requests) == 2 and "timed out" in said[0], said


@pytest.mark.parametrize("backend_class, said", [
    pytest.param(AnthropicBackend, "cannot reach the model endpoint", id="anthropic"),
    pytest.param(OpenAIBackend, "cannot reach the OpenAI-compatible endpoint", id="openai"),
])
def test_an_endpoint_nobody_listens_on_is_named_when_the_retries_run_out(backend_class, said):
    """A newcomer could not tell which endpoint "cannot reach the model endpoint" meant."""
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    statuses: list[str] = []

    async def go() -> None:
        gone = backend_class("sk-ant-test", url, 5, RetryPolicy(attempts=2, base=0.01))
        with pytest.raises(InferenceError, match=rf"{said}.*\(tried {url}\)"):
            await gone.complete({**REQUEST, "system": "You answer."}, on_status=lambda r: statuses.append(r.text))
        await stop_like_the_runtime()

    asyncio.run(go())
    assert len(statuses) == 1 and "(attempt 2 of 2)" in statuses[0]


def test_an_unreachable_endpoint_names_both_places_its_url_comes_from():
    """A newcomer set the URL with M-x amacs-set-model and was told to check ANTHROPIC_BASE_URL."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def go() -> None:
        gone = AnthropicBackend("sk-ant-test", url, 5, RetryPolicy(attempts=1, base=0.01))
        with pytest.raises(InferenceError, match=r"base URL \(ANTHROPIC_BASE_URL, or M-x amacs-set-model\)"):
            await gone.complete({**REQUEST, "system": "You answer."})
        local = OpenAIBackend(None, url + "/v1", 5, RetryPolicy(attempts=1, base=0.01))
        with pytest.raises(InferenceError, match=r"base URL \(OPENAI_BASE_URL, or M-x amacs-set-model\)"):
            await local.complete({**REQUEST, "system": "You answer."})
        await stop_like_the_runtime()

    asyncio.run(go())


def test_a_retry_is_announced_as_data_with_its_seconds(fake):
    """The shell's header counts down from the seconds the notice carries, not from its words."""
    fake.script(Reply(status=429, retry_after="0"), Reply(ANSWER, chunks=3))
    said: list[Retrying] = []

    async def go() -> None:
        await backend(fake).complete(REQUEST, on_status=said.append)
        await stop_like_the_runtime()

    asyncio.run(go())
    assert [(r.seconds, r.attempt, r.attempts) for r in said] == [(0.0, 2, 3)]
    assert "retrying now (attempt 2 of 3)" in said[0].text
