"""The one model call on its own (inference/model_call.py), with a scripted backend object: what
it tells its caller, in order, and that every transcript event it names is its record whole.

The call sits below the transcript's records (inference/ may not import persistence/), so it
names its events by kind with their data; each agent writes them as ``KINDS[kind].of(data)``.
A key the record does not declare would be dropped there without a word: these tests make the
call go through each of its events and check each one reads back as it was said.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, get_args

import pytest

from amacs_server.inference.backend import ModelResult
from amacs_server.inference.capabilities import CapabilityStore
from amacs_server.inference.catalog import ModelCatalog
from amacs_server.inference.model_call import (
    AGENT_READER,
    Ask,
    Caller,
    CallEvent,
    CallFailed,
    model_call,
)
from amacs_server.inference.pricing import Usage
from amacs_server.inference.retry import InferenceError, Retrying
from amacs_server.records import KINDS
from amacs_server.state.consciousness import ApiSettings
from tests.fake_anthropic import agent_json

TOO_LONG = "prompt is too long: 2033 tokens > 1999 maximum"
NO_THINKING = "thinking.type: 'enabled' is not supported for this model"


class Scripted:
    """A backend that answers each request with the next of STEPS: a text (the answer), an
    exception (raised), or a Retrying (said through ON_STATUS, then the next step)."""

    def __init__(self, *steps: Any) -> None:
        self.steps, self.sent = list(steps), []  # type: ignore[var-annotated]

    async def complete(self, request: dict[str, Any], on_text: Any = None, *, stream: bool = True,
                       on_status: Any = None, on_thinking: Any = None) -> ModelResult:
        self.sent.append(request)
        step = self.steps.pop(0)
        if isinstance(step, Retrying):
            on_status(step)
            step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return ModelResult(text=step, usage=Usage(input_tokens=1200, output_tokens=40), latency_ms=3.0,
                           stop_reason="end_turn", request=request)


class Told(Caller):
    """An agent whose messages are a list, that compacts COMPACTIONS times, and keeps what it is told."""

    def __init__(self, compactions: int = 0) -> None:
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": "hi " * 400}]
        self.compactions = compactions
        self.told: list[tuple[str, Any]] = []

    def now(self) -> list[dict[str, Any]]:
        return list(self.messages)

    def answered(self, result: ModelResult, retry: str | None, cut: bool) -> None:
        if retry is not None:
            self.messages += [{"role": "assistant", "content": result.text}, {"role": "user", "content": retry}]

    def compact(self, window: int | None) -> dict[str, Any] | None:
        if not self.compactions:
            return None
        self.compactions -= 1
        return {"squeeze": 1}

    async def ready(self) -> None:
        self.told.append(("ready", None))

    def note(self, event: str, data: dict[str, Any]) -> None:
        self.told.append((event, data))

    def status(self, line: str) -> None:
        self.told.append(("status", line))

    def rejected(self, attempt: int, error: Exception, cut: bool, again: bool) -> None:
        self.told.append(("rejected", again))

    def paid(self, usage: Usage) -> float | None:
        return 0.01

    def events(self) -> list[str]:
        return [what for what, _ in self.told]


def call(tmp_path: Path, backend: Scripted, told: Told, settings: ApiSettings | None = None) -> Any:
    catalog = ModelCatalog(CapabilityStore.open(tmp_path / "caps.json"))
    catalog.use("anthropic", None, "m", None)
    ask = Ask(backend, catalog, "m", "You answer in JSON.", settings or ApiSettings(), AGENT_READER)
    return asyncio.run(model_call(ask, told, told))


def read_back_whole(told: Told) -> None:
    for event, data in told.told:
        if event in KINDS:
            assert KINDS[event].of(data).data() == data, f"{event}: a key its record does not declare"


def test_a_refused_parameter_a_retry_and_an_answer_that_does_not_read_then_one_that_does(tmp_path):
    backend = Scripted(InferenceError(f"the API rejected the request (400): {NO_THINKING}", 400, NO_THINKING),
                       Retrying("overloaded (529); retrying in 0.1 s", 0.1, 2, 3), "not JSON at all",
                       agent_json("four"))
    told = Told()
    reply = call(tmp_path, backend, told, ApiSettings(thinking=True))
    assert reply.value.reply == "four" and reply.attempt == 1
    assert "thinking" in backend.sent[0] and all("thinking" not in r for r in backend.sent[1:])
    assert told.events() == [
        "ready", "model_request", "model_adapted", "status", "model_request", "model_retry", "model_response",
        "parse_error", "rejected", "ready", "model_request", "model_response"]
    read_back_whole(told)


def test_a_context_too_long_is_compacted_and_asked_again_then_fails_in_one_line(tmp_path):
    refused = InferenceError(f"the API rejected the request (400): {TOO_LONG}", 400, TOO_LONG)
    told = Told(compactions=1)
    reply = call(tmp_path, Scripted(refused, agent_json("short")), told)
    assert reply.value.reply == "short"
    assert "context_compacted" in told.events() and "model_error" not in told.events()
    read_back_whole(told)

    told = Told(compactions=0)
    with pytest.raises(CallFailed, match="too long for m's window"):
        call(tmp_path, Scripted(refused), told)
    assert told.events()[-1] == "model_error" and told.told[-1][1]["detail"] == TOO_LONG
    read_back_whole(told)


def test_a_failed_call_is_its_model_error(tmp_path):
    told = Told()
    with pytest.raises(InferenceError, match="401"):
        call(tmp_path, Scripted(InferenceError("the API refused the key (401)", 401, "invalid x-api-key")), told)
    assert told.events() == ["ready", "model_request", "model_error"]
    read_back_whole(told)


def test_every_kind_the_call_names_is_a_declared_record():
    assert sorted(set(get_args(CallEvent)) - set(KINDS)) == []


def test_the_check_sees_a_key_no_record_declares():
    told = Told()
    told.note("model_adapted", {"status": "said", "colour": "red"})
    with pytest.raises(AssertionError, match="model_adapted"):
        read_back_whole(told)
