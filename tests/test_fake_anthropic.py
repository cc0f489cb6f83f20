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
