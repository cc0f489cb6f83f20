"""The request built for each kind of model, checked whole and against the SDKs' own request types.

For every combination of capabilities (structured output yes/no; thinking adaptive,
enabled or none; effort yes/no) and backend (Anthropic, OpenAI-compatible) the exact
request is written out here, and each built request is validated against the
SDK's TypedDicts (``MessageCreateParamsStreaming``, ``CompletionCreateParamsStreaming``),
unknown keys refused at every level: a parameter the SDK would not send fails.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from anthropic.types.message_create_params import MessageCreateParamsStreaming
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
from pydantic import TypeAdapter, ValidationError

from amacs_server.inference.capabilities import (
    Capabilities,
    TooLong,
    from_model_info,
    refused_param,
    too_long,
)
from amacs_server.inference.openai_backend import to_chat
from amacs_server.inference.parse import (
    NOT_BLANK_MAX,
    ResponseFormatError,
    not_blank_pattern,
    parse_response,
    response_schema,
    with_lengths,
)
from amacs_server.inference.request import build_request, ignored_settings
from amacs_server.inference.response_model import not_blank
from amacs_server.state.consciousness import ApiSettings
from tests.fake_anthropic import extra_keys, model_info

MESSAGES = [{"role": "user", "content": [{"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]}]
SYSTEM = [{"type": "text", "text": "core", "cache_control": {"type": "ephemeral"}}]
SETTINGS = ApiSettings(thinking=True, effort="high", max_tokens=8192)


def _caps(structured: bool, thinking: str, effort: bool) -> Capabilities:
    return Capabilities(structured=structured, thinking=frozenset() if thinking == "none" else frozenset({thinking}),
                        effort=frozenset({"low", "medium", "high", "max"}) if effort else frozenset(),
                        source="models-api")


def _expected_anthropic(structured: bool, thinking: str, effort: bool) -> dict[str, Any]:
    request: dict[str, Any] = {"model": "m", "max_tokens": 8192, "system": SYSTEM, "messages": MESSAGES}
    if thinking == "adaptive":
        request["thinking"] = {"type": "adaptive"}
    elif thinking == "enabled":
        request["thinking"] = {"type": "enabled", "budget_tokens": 4096}
    output: dict[str, Any] = {}
    if effort:
        output["effort"] = "high"
    if structured:
        output["format"] = {"type": "json_schema", "schema": response_schema()}
    if output:
        request["output_config"] = output
    return request


def _expected_openai(structured: bool, thinking: str, effort: bool) -> dict[str, Any]:
    chat: dict[str, Any] = {"model": "m", "max_tokens": 8192,
                            "messages": [{"role": "system", "content": "core"}, {"role": "user", "content": "hello"}]}
    if structured:
        chat["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "agent_response", "strict": True, "schema": response_schema()}}
    if effort or thinking != "none":  # the agent's effort, else thinking's default
        chat["reasoning_effort"] = "high" if effort else "medium"
    return chat


def sdk_accepts(params: dict[str, Any], tp: Any) -> None:
    """PARAMS (with ``stream``) pass TP, the SDK's request TypedDict, types and keys."""
    valid = TypeAdapter(tp).validate_python(params)
    for key in ("messages",):  # Iterable fields validate lazily: iterate them
        list(valid[key])
    found = extra_keys(params, tp)
    assert found is None, found


COMBINATIONS = list(itertools.product([True, False], ["adaptive", "enabled", "none"], [True, False]))


@pytest.mark.parametrize(("structured", "thinking", "effort"), COMBINATIONS)
def test_anthropic_request_for_each_kind_of_model(structured: bool, thinking: str, effort: bool) -> None:
    request = build_request("m", "core", MESSAGES, SETTINGS, _caps(structured, thinking, effort))
    assert request == _expected_anthropic(structured, thinking, effort)
    sdk_accepts({**request, "stream": True}, MessageCreateParamsStreaming)


@pytest.mark.parametrize(("structured", "thinking", "effort"), COMBINATIONS)
def test_openai_request_for_each_kind_of_model(structured: bool, thinking: str, effort: bool) -> None:
    request = build_request("m", "core", MESSAGES, SETTINGS, _caps(structured, thinking, effort))
    chat = to_chat(request)
    assert chat == _expected_openai(structured, thinking, effort)
    sdk_accepts({**chat, "stream": True}, CompletionCreateParamsStreaming)


def test_the_sdk_check_refuses_what_the_sdk_would():
    """The check is not a formality: a made-up thinking type, an unknown key, a stray field fail it."""
    base = build_request("m", "core", MESSAGES, SETTINGS, _caps(True, "adaptive", True))
    for bad in ({"thinking": {"type": "sometimes"}}, {"reasoning": "high"},
                {"output_config": {"effort": "high", "schema": {}}},
                {"thinking": {"type": "adaptive", "budget_tokens": 2048, "extra": 1}}):
        with pytest.raises((AssertionError, ValidationError)):
            sdk_accepts({**base, **bad, "stream": True}, MessageCreateParamsStreaming)


def test_llama_cpp_json_object_form_and_sampling_reach_the_chat_request():
    """llama-cpp-python's server takes the schema beside ``json_object``; temperature and top-p go as set."""
    settings = ApiSettings(temperature=0.3, top_p=0.9)
    request = build_request("m", "core", MESSAGES, settings, Capabilities())
    chat = to_chat(request, "json_object")
    schema = chat["response_format"]["schema"]
    assert chat["response_format"]["type"] == "json_object"
    assert schema == with_lengths(response_schema()) != response_schema()
    assert (chat["temperature"], chat["top_p"]) == (0.3, 0.9)
    assert "reasoning_effort" not in chat


def test_strings_refused_blank_are_patterned_only_for_a_grammar_that_keeps_patterns():
    """A reply the grammar allows must parse: the parser refuses a blank mood or scratchpad heading, so
    llama.cpp's grammar is told a pattern for them (the nested heading too); the strict schemas of
    Anthropic and OpenAI refuse patterns and lengths."""
    for plain in (json.dumps(response_schema()),
                  json.dumps(to_chat(build_request("m", "core", MESSAGES, SETTINGS, _caps(True, "none", False))))):
        assert "minLength" not in plain and "pattern" not in plain
    grammar = with_lengths(response_schema())
    patterned = {"mood": grammar["properties"]["mood"],
                 "scratchpad.heading": grammar["properties"]["scratchpad"]["anyOf"][0]["properties"]["heading"]}
    assert patterned == {name: {"type": "string", "pattern": not_blank_pattern()} for name in patterned}
    assert "pattern" not in json.dumps({k: v for k, v in grammar["properties"].items() if k not in ("mood", "scratchpad")})
    for blank in ('"mood": ""', '"mood": " \\n"'):
        with pytest.raises(ResponseFormatError):
            parse_response('{"eval": null, "reply": "hi", ' + blank + ', "confidence": 0.5, "monologue": "m",'
                           ' "scratchpad": null, "done": null}')
    with pytest.raises(ResponseFormatError, match="scratchpad.heading"):
        parse_response('{"eval": null, "reply": "hi", "mood": "ok", "confidence": 0.5, "monologue": "m",'
                       ' "scratchpad": {"heading": "", "content": "", "thread": null}, "done": null}')


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=NOT_BLANK_MAX + 5))
def test_a_string_the_not_blank_pattern_allows_is_one_the_parser_takes_and_json_needs_no_escape_in(text):
    """llama-cpp-python copies the pattern's character classes into its grammar as they are: what
    they allow between the quotes must be a whole JSON string, and one the parser takes."""
    if re.fullmatch(not_blank_pattern(), text):
        assert not_blank(text) == text and len(text) <= NOT_BLANK_MAX
        assert json.dumps(text, ensure_ascii=False) == f'"{text}"'
    elif text[:1] and not text[0].isspace() and len(text) <= NOT_BLANK_MAX:
        assert re.search(r'["\\\x00-\x1f]', text)  # refused only for a character that needs an escape


def test_unknown_model_is_tried_with_enabled_thinking_and_the_schema():
    request = build_request("m", "core", MESSAGES, ApiSettings(thinking=True), Capabilities())
    assert request["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert request["output_config"]["format"]["schema"] == response_schema()


def test_what_a_model_refused_is_not_sent_and_the_agent_is_told():
    caps = _caps(True, "adaptive", True).refusing("thinking").refusing("format")
    settings = ApiSettings(thinking=True, effort="high", temperature=0.2)
    request = build_request("m", "core", MESSAGES, settings, caps)
    assert "thinking" not in request and "format" not in request["output_config"]
    assert request["extra_body"] == {"temperature": 0.2}
    assert ignored_settings(caps, settings, request) == ["thinking (this model does not think on request)"]
    sdk_accepts({**{k: v for k, v in request.items() if k != "extra_body"}, "stream": True},
                MessageCreateParamsStreaming)


def test_temperature_with_thinking_is_said_to_be_ignored():
    settings = ApiSettings(thinking=True, temperature=0.2)
    caps = _caps(False, "adaptive", False)
    request = build_request("m", "core", MESSAGES, settings, caps)
    assert "extra_body" not in request
    assert ignored_settings(caps, settings, request) == ["temperature (not with thinking on)"]


def test_the_schema_is_generated_once_and_shared_by_every_request():
    # pydantic took ~3 ms of the event loop to generate it, at every model call of every agent.
    first = build_request("m", "core", MESSAGES, ApiSettings())["output_config"]["format"]["schema"]
    assert first is response_schema()
    assert build_request("m", "core", MESSAGES, ApiSettings())["output_config"]["format"]["schema"] is first


def test_the_schema_is_the_parsers_and_a_reply_that_follows_it_parses():
    schema = response_schema()
    assert schema["additionalProperties"] is False
    assert schema["required"] == list(schema["properties"])  # OpenAI's strict mode: all required
    assert list(schema["properties"])[:2] == ["eval", "reply"]  # the core skill's order: the reply streams early
    import json

    import jsonschema

    reply = {"eval": None, "reply": "4", "mood": "👌", "confidence": 1, "monologue": "m",
             "scratchpad": {"heading": "h", "content": "c", "thread": None}, "done": None}
    jsonschema.validate(reply, schema)
    assert parse_response(json.dumps(reply)).reply == "4"


def test_capabilities_read_from_the_models_api_answer():
    caps = from_model_info(model_info("a", adaptive=True, enabled=False, structured=True, effort=True,
                                      max_input_tokens=1000, max_tokens=500))
    assert caps.thinking == frozenset({"adaptive"}) and caps.structured is True
    assert caps.effort == frozenset({"low", "medium", "high", "max"})
    assert (caps.max_input_tokens, caps.max_tokens) == (1000, 500)
    old = from_model_info(model_info("b", adaptive=False, enabled=False, structured=False, effort=False))
    assert old.thinking == frozenset() and old.effort == frozenset() and old.structured is False


def test_refusals_and_too_long_read_from_the_servers_words():
    assert refused_param("thinking.type: 'adaptive' is not supported for this model", {"thinking", "format"}) \
        == "thinking"
    assert refused_param("Unrecognized request argument supplied: reasoning_effort", {"reasoning_effort"}) \
        == "reasoning_effort"
    assert refused_param("Error code: 422 - {'detail': [{'loc': ['body', 'response_format', 'type']}]}",
                         {"format"}) == "format"
    assert refused_param("messages: roles must alternate", {"thinking", "format"}) is None
    assert too_long("Requested tokens (8287) exceed context window of 8192", None) == TooLong(8192, 8287)
    assert too_long("This model's maximum context length is 8192 tokens. However, you requested 18539 tokens "
                    "(10347 in the messages, 8192 in the completion).", 400) == TooLong(8192, 10347)
    assert too_long("This model's maximum context length is 8192 tokens. However, your messages resulted in "
                    "9000 tokens.", 400) == TooLong(8192, 9000)
    assert too_long("prompt is too long: 210000 tokens > 200000 maximum", 400) == TooLong(200000, 210000)
    assert too_long("request_too_large", 413) == TooLong()
    assert too_long("overloaded", 529) is None


def test_a_caller_whose_model_answers_otherwise_sends_no_agent_schema():
    """A judge answers with its score: the agent's reply schema would force the wrong form."""
    request = build_request("m", "core", MESSAGES, ApiSettings(), _caps(True, "none", False), agent_reply=False)
    assert "output_config" not in request


def test_a_request_made_before_the_pool_is_made_again_when_the_model_refused_a_parameter_meanwhile(tmp_path):
    # A subagent's request is made before it waits for a slot of the pool; another agent's call
    # may teach the catalog, meanwhile, that the model refuses the reply schema.
    import asyncio

    from amacs_server.inference.capabilities import CapabilityStore
    from amacs_server.inference.catalog import Adapting, ModelCatalog, prepare
    from amacs_server.inference.request import RequestSpec

    catalog = ModelCatalog(CapabilityStore.open(tmp_path / "caps.json"))
    spec = RequestSpec("m", "core", MESSAGES, ApiSettings())

    async def go() -> None:
        kept = await prepare(catalog, spec)
        assert Adapting(catalog, spec, kept).request is kept.request  # nothing learned meanwhile: sent as made
        later = await prepare(catalog, spec)
        catalog.refuse("format")
        assert "format" in later.request["output_config"]
        assert "output_config" not in Adapting(catalog, spec, later).request

    asyncio.run(go())
