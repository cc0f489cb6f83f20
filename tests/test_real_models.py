"""Turns against models as they are (issue 22): capabilities asked and kept, thinking kept,
parameters a model refuses dropped once and for good, the window respected.

A real Runtime, the real SDKs, the fake API over HTTP (``tests/fake_anthropic.py``)
holding each model to what its Models API answer says.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amacs_server.config import load_config
from amacs_server.inference.backend import ModelResult
from amacs_server.inference.parse import CUT_KEPT, CUT_RETRY_PROMPT
from amacs_server.inference.pricing import Usage
from amacs_server.loop.primary import run_turn
from amacs_server.runtime import Runtime
from tests.context_items import name_of, parse_context
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json, model_info
from tests.test_memory import SilentFace


class NotingFace(SilentFace):
    """A face that keeps what the shell would show."""

    def __init__(self) -> None:
        self.notes: list[tuple[str, str]] = []
        self.thinking: list[str] = []
        self.replies: list[str] = []

    def annotate(self, text: str, kind: str = "info") -> None:
        self.notes.append((kind, text))

    def thinking_delta(self, text: str) -> None:
        self.thinking.append(text)

    def reply(self, text: str, streamed: bool = False) -> None:
        self.replies.append(text)


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


def _runtime(home: Path, fake: FakeAnthropic, model: str, **env: str) -> tuple[Runtime, NotingFace]:
    face = NotingFace()
    rt = Runtime(load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": fake.url,
                              "OPENAI_BASE_URL": fake.url + "/v1", "AMACS_MODEL": model, **env}), face,
                 turn=run_turn)
    rt.start()
    return rt, face


def _turn(rt: Runtime, text: str) -> None:
    asyncio.run_coroutine_threadsafe(run_turn(rt, text), rt.loop).result(60)


def notice(text: str, about: str) -> Any:
    """The content of the notice ABOUT (an item ``notice.ABOUT``) in the context TEXT."""
    return next(i["content"] for i in parse_context(text)["notices"] if name_of(i) == f"notice.{about}")


def _events(rt: Runtime, name: str) -> list[dict[str, Any]]:
    return [e["data"] for e in rt.transcript.read("primary") if e["event"] == name]


def _calls(fake: FakeAnthropic) -> list[dict[str, Any]]:
    """The requests AMACS made for turns: not its one-token question whether a local server's
    streams count tokens."""
    return [r for r in fake.requests if r["body"].get("max_tokens") != 1]


def _think(rt: Runtime, on: bool = True) -> None:
    rt.loop.call_soon_threadsafe(rt.mind.agent_set, "api-settings", {"thinking": on, "effort": "high"})


def test_capabilities_are_asked_once_kept_a_day_and_shape_the_request(tmp_path, fake):
    fake.models["adaptive-m"] = model_info("adaptive-m", adaptive=True, structured=True, effort=True)
    fake.script(Reply(agent_json("hello"), thinking="Let me think: 2+2 is 4."))
    rt, face = _runtime(tmp_path / "h", fake, "adaptive-m")
    try:
        _think(rt)
        _turn(rt, "what is 2+2?")
        body = fake.requests[-1]["body"]
        assert body["thinking"] == {"type": "adaptive"}
        assert body["output_config"]["effort"] == "high" and "format" in body["output_config"]
        assert fake.gets.count("/v1/models/adaptive-m") == 1
        kept = json.loads((tmp_path / "h" / "model-capabilities.json").read_text())
        assert kept[f"anthropic {fake.url} adaptive-m"]["thinking"] == ["adaptive"]
        # The thinking: shown as it came, kept in the transcript under "thinking", sent back signed.
        assert "".join(face.thinking) == "Let me think: 2+2 is 4."
        response = _events(rt, "model_response")[-1]
        assert response["thinking"] == "Let me think: 2+2 is 4." and response["constrained"] is True
        _turn(rt, "and 3+3?")
        assistant = [m for m in fake.requests[-1]["body"]["messages"] if m["role"] == "assistant"][0]
        assert assistant["content"][0]["type"] == "thinking" and assistant["content"][0]["signature"]
        assert face.replies[-1] == "ok"  # the fake's default reply; nothing failed
        assert _events(rt, "model_response")[-1]["thinking"] == ""  # none this time: "" not missing
    finally:
        rt.stop()
    # A second start within the day asks nothing.
    rt, _face = _runtime(tmp_path / "h", fake, "adaptive-m")
    try:
        _turn(rt, "again")
        assert fake.gets.count("/v1/models/adaptive-m") == 1
    finally:
        rt.stop()


def test_a_new_homes_first_request_does_not_wait_for_the_models_api(tmp_path, fake):
    """Nothing known of the model, no thinking or effort asked for, a small context: the
    first request goes while the Models API is still asked (its answer can change it only
    by the schema or the most tokens, which a 400 names); the answer is kept when it comes."""
    fake.models["slow-m"] = model_info("slow-m", structured=True)
    fake.models_delay = 3.0
    rt, face = _runtime(tmp_path / "h", fake, "slow-m")
    try:
        _turn(rt, "hi")
        assert face.replies[-1] == "ok" and len(_calls(fake)) == 1
        assert rt.slot.catalog.asking  # answered before the Models API did
        assert "format" in fake.requests[-1]["body"]["output_config"]
    finally:
        rt.stop()


def test_a_first_request_refused_before_the_answer_is_made_again_with_it(tmp_path, fake):
    """The early request asks for more tokens than the model gives: its 400 names no parameter
    the request may drop; the answer (the model's most tokens) is awaited and the request made
    again with it, once, and nothing is said as an error."""
    fake.models["short-m"] = model_info("short-m", max_tokens=4096)
    fake.models_delay = 1.0
    rt, face = _runtime(tmp_path / "h", fake, "short-m")
    try:
        _turn(rt, "hi")
        sent = [r["body"]["max_tokens"] for r in _calls(fake)]
        assert sent == [8192, 4096], sent
        assert face.replies[-1] == "ok" and not [n for n in face.notes if n[0] == "error"]
        assert not rt.slot.catalog.asking and rt.slot.catalog.caps.max_tokens == 4096
    finally:
        rt.stop()


def test_a_model_without_thinking_gets_none_and_the_agent_is_told(tmp_path, fake):
    fake.models["plain-m"] = model_info("plain-m", adaptive=False, enabled=False, structured=True, effort=False)
    rt, face = _runtime(tmp_path / "h", fake, "plain-m")
    try:
        _think(rt)
        _turn(rt, "hi")
        body = fake.requests[-1]["body"]
        assert "thinking" not in body and "effort" not in body["output_config"]
        told = body["messages"][-1]["content"][-1]["text"]
        model = notice(told, "model")
        assert model["ignored_settings"] == ["thinking (this model does not think on request)",
                                             "effort high (not a level this model accepts)"]
        assert not [n for n in face.notes if n[0] == "error"]
    finally:
        rt.stop()


def test_a_parameter_refused_with_400_is_dropped_said_once_and_never_sent_again(tmp_path, fake):
    """The Models API cannot say (404): thinking is tried as ``enabled``; the model's 400 names
    it; the call is made again without it, the shell says so in one line, and it is remembered."""
    fake.models["old-m"] = model_info("old-m", adaptive=False, enabled=False, structured=True, effort=False)
    info = fake.models.pop("old-m")
    rt, face = _runtime(tmp_path / "h", fake, "old-m")
    try:
        _turn(rt, "warm up")  # asked: 404, capabilities unknown
        fake.models["old-m"] = info  # the model now holds requests to what it accepts, but the API never said so
        _think(rt)
        _turn(rt, "hi")
        bodies = [r["body"] for r in fake.requests[1:]]
        # Thinking refused, then the effort: each dropped in turn, each said in one line.
        assert bodies[0]["thinking"]["type"] == "enabled" and bodies[0]["output_config"]["effort"] == "high"
        assert "thinking" not in bodies[1] and bodies[1]["output_config"]["effort"] == "high"
        assert "thinking" not in bodies[2] and "effort" not in bodies[2]["output_config"]
        said = [t for k, t in face.notes if "does not take" in t]
        assert len(said) == 2 and "thinking" in said[0] and "effort" in said[1]
        _turn(rt, "again")
        assert "thinking" not in fake.requests[-1]["body"] and len(fake.requests) == 5
        assert not [n for n in face.notes if n[0] == "error"]
        told = fake.requests[-1]["body"]["messages"][-1]["content"][-1]["text"]
        assert "thinking (this model does not think on request)" in told
    finally:
        rt.stop()
    kept = json.loads((tmp_path / "h" / "model-capabilities.json").read_text())
    assert kept[f"anthropic {fake.url} old-m"]["refused"] == ["effort", "thinking"]


def test_a_request_refused_as_too_long_is_compacted_and_sent_once_more(tmp_path, fake):
    """The Models API says nothing of the window; the model's 400 does; the context is compacted
    (the earlier ticks left to long-term memory, the agent told) and the input answered."""
    fake.models["small-m"] = model_info("small-m", max_input_tokens=100_000)
    rt, face = _runtime(tmp_path / "h", fake, "small-m")
    try:
        for n in range(4):
            _turn(rt, f"turn {n}: " + "words " * 800)
        window = len(json.dumps(fake.requests[-1]["body"]["messages"])) // 4 - 200
        fake.models["small-m"]["max_input_tokens"] = window  # smaller than the conversation now is
        _turn(rt, "the last one")
        assert face.replies[-1] == "ok"
        refused, retried = fake.requests[-2]["body"], fake.requests[-1]["body"]
        assert len(retried["messages"]) < len(refused["messages"])
        newest = retried["messages"][-1]["content"][-1]["text"]
        compacted = notice(newest, "context-window")
        assert compacted.startswith("Your context was compacted") and "agent-memory-search" in compacted
        assert "the last one" in newest
        assert _events(rt, "context_compacted")
        assert not [n for n in face.notes if n[0] == "error"]
        assert rt.slot.catalog.window == window  # learned from the refusal: the next request fits before it is sent
    finally:
        rt.stop()


def test_the_window_is_respected_before_sending(tmp_path, fake):
    """A window known ahead (a setting here): the request is compacted before it would not fit."""
    fake.n_ctx = None
    rt, face = _runtime(tmp_path / "h", fake, "fake", AMACS_CONTEXT_WINDOW="6000")
    try:
        for n in range(5):
            _turn(rt, f"turn {n}: " + "words " * 800)
        assert _events(rt, "context_compacted")
        # Each compaction is an event of the tick whose context it made (a study counts them per tick).
        ticks = [e["tick"] for e in rt.transcript.read("primary") if e["event"] == "context_compacted"]
        assert ticks and all(isinstance(t, int) and 1 <= t <= 5 for t in ticks), ticks
        for request in fake.requests:
            assert len(json.dumps(request["body"]["messages"])) // 4 < 6000 * 1.2
        assert len(face.replies) == 5
    finally:
        rt.stop()


def test_openai_compatible_server_learns_format_and_window_and_keeps_reasoning(tmp_path, fake):
    """A llama.cpp-like server: json_schema refused (422) then its json_object form used; no
    reasoning_effort (400, dropped); its window over the limit is an error inside a 200 stream,
    compacted and sent again."""
    fake.openai_formats = {"text", "json_object"}
    fake.openai_refuses = {"reasoning_effort"}
    fake.report_window = False
    rt, face = _runtime(tmp_path / "h", fake, "local", AMACS_BACKEND="openai")
    try:
        _think(rt)
        _turn(rt, "what is 2+2?")
        formats = [r["body"].get("response_format", {}).get("type") for r in _calls(fake)]
        assert formats == ["json_schema", "json_schema", "json_object"]  # reasoning_effort refused first
        assert "reasoning_effort" not in fake.requests[-1]["body"]
        assert len([t for k, t in face.notes if "does not take" in t]) == 2
        assert _events(rt, "model_response")[-1]["constrained"] is True
        for n in range(3):
            _turn(rt, f"turn {n}: " + "words " * 800)
        fake.n_ctx = len(json.dumps(fake.requests[-1]["body"]["messages"])) // 4 - 100
        before = len(fake.requests)
        _turn(rt, "the last one")
        assert len(fake.requests) == before + 2 and face.replies[-1] == "ok"
        assert rt.slot.catalog.window == fake.n_ctx
        # Once the window is known, the answer asked for fits in the eighth the context left it.
        assert fake.requests[-1]["body"]["max_tokens"] == fake.n_ctx // 8
        assert not [n for n in face.notes if n[0] == "error"]
    finally:
        rt.stop()


def test_a_field_refused_with_a_500_as_llama_cpp_python_does_is_not_retried_as_transient(tmp_path, fake):
    """llama-cpp-python answers a request field it does not take (response_format json_schema) with
    a 500 whose words are the validation error: that is a refusal, dropped at once, not a retry."""
    fake.openai_formats = {"text", "json_object"}
    fake.validation_as_500 = True
    rt, face = _runtime(tmp_path / "h", fake, "local", AMACS_BACKEND="openai")
    try:
        _turn(rt, "what is 2+2?")
        assert [r["body"]["response_format"]["type"] for r in _calls(fake)] == ["json_schema", "json_object"]
        assert not _events(rt, "model_retry") and face.replies == ["ok"]
    finally:
        rt.stop()


def test_a_stream_cut_over_the_window_is_asked_again_unstreamed_then_compacted(tmp_path, fake):
    """llama-cpp-python past its window: 200, one chunk, then the stream ends (no finish, no error).
    Not resent as it was: asked once unstreamed, the server names its window in a 400; the context
    is compacted and the input answered."""
    fake.openai_formats = {"text", "json_object"}
    fake.validation_as_500 = True
    fake.window_stream_cut = True
    fake.report_window = False
    rt, face = _runtime(tmp_path / "h", fake, "local", AMACS_BACKEND="openai")
    try:
        for n in range(3):
            _turn(rt, f"turn {n}: " + "words " * 800)
        fake.n_ctx = len(json.dumps(fake.requests[-1]["body"]["messages"])) // 4 - 100
        before = len(fake.requests)
        _turn(rt, "the last one")
        asked = [(r["body"].get("stream", False), len(r["body"]["messages"])) for r in fake.requests[before:]]
        assert [stream for stream, _ in asked] == [True, False, True]  # cut, refused unstreamed, compacted
        assert asked[2][1] < asked[0][1]
        assert face.replies[-1] == "ok" and rt.slot.catalog.window == fake.n_ctx
        assert not _events(rt, "model_retry") and not [n for n in face.notes if n[0] == "error"]
    finally:
        rt.stop()


def test_an_answer_cut_at_the_window_is_asked_again_shorter_and_the_window_learned(tmp_path, fake):
    """llama-cpp-python stops an answer where its window ends (finish_reason "length", fewer tokens
    than asked), its JSON unfinished.  The model is asked again with only the cut answer's start,
    marked, and a prompt for a shorter one (not the whole cut answer: it took the room the next one
    needs); the shell says why; the window is learned from the counts, so the next answer asked
    for fits in it."""
    fake.report_window = False
    cut = '{"eval": null, "reply": "' + "a long story, " * 300
    fake.script(Reply(cut, stop="length", usage={"input_tokens": 3000, "output_tokens": 1096,
                                                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}))
    rt, face = _runtime(tmp_path / "h", fake, "local", AMACS_BACKEND="openai")
    try:
        _turn(rt, "what is 2+2?")
        first, again = _calls(fake)
        assert first["body"]["max_tokens"] > 4096
        asked = again["body"]["messages"]
        assert asked[:-2] == first["body"]["messages"]
        assert asked[-2] == {"role": "assistant", "content": cut[:CUT_KEPT] + " [... cut off at the length limit]"}
        assert asked[-1]["role"] == "user" and notice(asked[-1]["content"], "retry") == CUT_RETRY_PROMPT
        assert face.replies == ["ok"]
        assert [t for k, t in face.notes if k == "warning"] == [
            "The model's answer was cut off at its length limit before its JSON ended; asking again for a shorter "
            "one (1/2)."]
        assert [e["error"].split(":")[0] for e in _events(rt, "parse_error")] == ["cut off at the length limit"]
        assert rt.slot.catalog.window == 3000 + 1096
        assert [t for k, t in face.notes if "window is 4096 tokens" in t]
        assert again["body"]["max_tokens"] == 4096 // 8
        # Not a guess from any cut: an answer that used all the tokens asked for says nothing of the window.
        used = ModelResult("{", Usage(input_tokens=100, output_tokens=1024), 1.0, "length", {"max_tokens": 1024})
        rt.slot.catalog.caps = dataclasses.replace(rt.slot.catalog.caps, max_input_tokens=None, learned_window=None)
        assert rt.slot.catalog.window is None and rt.slot.catalog.learn_from_cut(used) is None
    finally:
        rt.stop()


def test_a_server_that_counts_no_tokens_in_streams_is_not_streamed(tmp_path, fake):
    """llama-cpp-python's server sends no usage in a stream (stream_options is ignored): asked
    once with a one-token call, it gets calls not streamed, and the transcript its real counts."""
    fake.openai_stream_usage = False
    fake.script(Reply(agent_json("four")), Reply(agent_json("six")))
    rt, face = _runtime(tmp_path / "h", fake, "local", AMACS_BACKEND="openai")
    try:
        _turn(rt, "what is 2+2?")
        _turn(rt, "and 3+3?")
        assert [(p["body"]["stream"], p["body"]["max_tokens"]) for p in fake.probes] == [(True, 1)]  # asked once
        chats = [r["body"] for r in fake.requests if r["path"].endswith("/chat/completions")]
        assert all(not b.get("stream") for b in chats) and len(chats) == 2
        usages = [e["usage"] for e in _events(rt, "model_response")]
        assert len(usages) == 2 and all(u["input_tokens"] > 0 and u["output_tokens"] > 0 for u in usages)
        assert face.replies == ["four", "six"]
    finally:
        rt.stop()


def test_a_context_too_long_even_compacted_ends_the_turn_keeping_the_input(tmp_path, fake):
    """Refused again after compaction: the turn ends with what to do, the input stays in
    agent-chat.org, the server goes on (the next turn is answered)."""
    fake.models["tiny-m"] = model_info("tiny-m", max_input_tokens=100_000)
    rt, face = _runtime(tmp_path / "h", fake, "tiny-m")
    try:
        _turn(rt, "warm up")
        fake.models["tiny-m"]["max_input_tokens"] = 50  # nothing fits, not even the core skill
        before = len(fake.requests)
        _turn(rt, "a question that cannot fit")
        assert len(fake.requests) == before + 2  # refused, compacted and refused: not resent again
        errors = [t for k, t in face.notes if k == "error"]
        assert len(errors) == 1 and "input is saved" in errors[0]
        # One plain line, not the server's raw 400.
        assert "too long for tiny-m's window (50 tokens) even with its oldest part left" in errors[0]
        assert "(400)" not in errors[0] and "prompt is too long" not in errors[0]
        assert "a question that cannot fit" in (tmp_path / "h" / "agent-chat.org").read_text()
        fake.models["tiny-m"]["max_input_tokens"] = 100_000
        _turn(rt, "and now?")
        assert face.replies[-1] == "ok"
    finally:
        rt.stop()
