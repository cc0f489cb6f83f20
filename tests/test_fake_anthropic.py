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


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("extra", "words"), [
    ({"extra_body": {"temperature": 0.5}}, "extra_body: Extra inputs are not permitted"),
    ({"thinking": {"type": "adaptive", "budget": 5}}, "thinking"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "colour": "red"}]}]},
     "messages"),
    ({"output_config": {"format": {"type": "json_schema", "schema": {}, "strict": True}}}, "output_config"),
    ({"max_tokens": "ten"}, "max_tokens"),
])
def test_the_fake_refuses_what_the_sdks_types_do_not_declare_with_the_apis_400(fake, stream, extra, words):
    """Every request, streamed or not, is held to the SDK's own request types, unknown keys refused
    at every level (the body's, a block's, a nested config's) with a 400 like the API's."""
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], **extra,
            **({"stream": True} if stream else {})}
    status, error = post(fake, body)
    assert status == 400, error
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert words in error["error"]["message"], error
    fake.strict = False  # what every fake accepted before
    assert post(fake, body)[0] == 200


def post(fake, body):
    """POST BODY to the fake's /v1/messages: the status, and the JSON answer (None: a stream)."""
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{fake.url}/v1/messages", json.dumps(body).encode(),
                                     {"content-type": "application/json", "x-api-key": "k"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            raw = answer.read()
            return answer.status, None if body.get("stream") else json.loads(raw)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_fake_takes_what_the_sdk_sends_and_the_sampling_the_api_takes_beside_it(fake):
    """The SDK's own calls pass, with ``extra_body``'s temperature merged into the body (the SDK has
    no sampling parameters; the API takes them)."""
    client = anthropic.Anthropic(api_key="k", base_url=fake.url, max_retries=0)
    client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}],
                           system=[{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
                           thinking={"type": "enabled", "budget_tokens": 1024}, extra_body={"temperature": 0.2})
    assert fake.requests[-1]["body"]["temperature"] == 0.2
