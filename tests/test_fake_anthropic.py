"""The fake Messages API speaks the real protocol: the real SDK reads it (JSON and SSE)."""

import asyncio

import anthropic
import pytest

from tests.fake_anthropic import FakeAnthropic, Reply, agent_json


@pytest.fixture
def fake():
    server = FakeAnthropic().start()
    yield server
    server.stop()


def test_json_reply_through_real_sdk(fake):
    fake.script(Reply(agent_json("hello")))
    client = anthropic.Anthropic(api_key="sk-test", base_url=fake.url)
    msg = client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].text == agent_json("hello")
    assert msg.usage.input_tokens == 100
    assert fake.requests[0]["body"]["messages"][0]["content"] == "hi"
    assert fake.api_key_of(0) == "sk-test"


def test_sse_stream_arrives_in_deltas(fake):
    text = agent_json("a reply long enough to split into many pieces")
    fake.script(Reply(text, chunks=12))

    async def run():
        client = anthropic.AsyncAnthropic(api_key="k", base_url=fake.url)
        deltas = []
        async with client.messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]) as s:
            async for d in s.text_stream:
                deltas.append(d)
            final = await s.get_final_message()
        return deltas, final

    deltas, final = asyncio.run(run())
    assert len(deltas) == 12
    assert "".join(deltas) == text
    assert final.usage.output_tokens == 20


def test_scripted_error_status(fake):
    fake.script(Reply(status=401))
    client = anthropic.Anthropic(api_key="bad", base_url=fake.url, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])


def test_models_api_and_a_model_held_to_what_it_accepts(fake):
    """GET /v1/models/{id} answers what the SDK's ModelInfo reads; a model named there gets a 400 for
    a thinking type or format it does not take, and its replies follow output_config.format."""
    import json

    import jsonschema

    from amacs_server.inference.parse import response_schema
    from tests.fake_anthropic import model_info

    fake.models["m"] = model_info("m", adaptive=False, enabled=True, structured=True, effort=False)
    fake.models["plain"] = model_info("plain", adaptive=False, enabled=False, structured=False, effort=False)
    client = anthropic.Anthropic(api_key="k", base_url=fake.url)
    info = client.models.retrieve("m")
    assert info.capabilities is not None and info.capabilities.thinking.types.enabled.supported
    assert not info.capabilities.thinking.types.adaptive.supported
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("nobody")
    hello = [{"role": "user", "content": "hi"}]
    with pytest.raises(anthropic.BadRequestError, match="thinking.type"):
        client.messages.create(model="m", max_tokens=2000, messages=hello, thinking={"type": "adaptive"})
    with pytest.raises(anthropic.BadRequestError, match="effort"):
        client.messages.create(model="m", max_tokens=10, messages=hello, output_config={"effort": "high"})
    fmt = {"format": {"type": "json_schema", "schema": response_schema()}}
    with pytest.raises(anthropic.BadRequestError, match="output_config.format"):
        client.messages.create(model="plain", max_tokens=10, messages=hello, output_config=fmt)
    fake.script(Reply("not JSON at all"), Reply("not JSON at all"))
    held = client.messages.create(model="m", max_tokens=10, messages=hello, output_config=fmt)
    jsonschema.validate(json.loads(held.content[0].text), response_schema())
    free = client.messages.create(model="m", max_tokens=10, messages=hello)
    assert free.content[0].text == "not JSON at all"
