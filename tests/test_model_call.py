"""The one model call on its own (inference/model_call.py), with a scripted backend object: what
it yields to the agent that drives it, in order, and that every transcript event it yields is a
record of amacs_server/records.py, written as it is.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from amacs_server.inference.backend import ModelResult
from amacs_server.inference.capabilities import CapabilityStore
from amacs_server.inference.catalog import ModelCatalog
from amacs_server.inference.model_call import (
    Answered,
    Ask,
    CallFailed,
    Charge,
    Compact,
    Read,
    Ready,
    Rejected,
    Reply,
    Show,
    Status,
    model_call,
    read_as_agent,
)
from amacs_server.inference.pricing import Usage
from amacs_server.inference.retry import InferenceError, Retrying
from amacs_server.records import KINDS, Record
from amacs_server.state.consciousness import ApiSettings
from tests.fake_anthropic import agent_json

TOO_LONG = "prompt is too long: 2033 tokens > 1999 maximum"
NO_THINKING = "thinking.type: 'enabled' is not supported for this model"


class Scripted:
    """A backend that answers each request with the next of STEPS: a text (the answer), an
    exception (raised), or a Retrying (yielded, then the next step)."""

    def __init__(self, *steps: Any) -> None:
        self.steps, self.sent = list(steps), []  # type: ignore[var-annotated]

    async def answer(self, request: dict[str, Any], *, stream: bool = True):  # type: ignore[no-untyped-def]
        self.sent.append(request)
        step = self.steps.pop(0)
        if isinstance(step, Retrying):
            yield step
            step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        yield ModelResult(text=step, usage=Usage(input_tokens=1200, output_tokens=40), latency_ms=3.0,
                          stop_reason="end_turn", request=request)


class Told:
    """An agent driving the call: its messages are a list, it compacts COMPACTIONS times, and it
    keeps what it is told (the transcript's records, the lines it would show, ready, rejected)."""

    def __init__(self, compactions: int = 0) -> None:
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": "hi " * 400}]
        self.compactions = compactions
        self.told: list[tuple[str, Any]] = []

    async def made(self, ask: Ask[Any]) -> Reply[Any]:
        async for step in model_call(ask):
            match step:
                case Reply():
                    return step
                case Ready():
                    self.told.append(("ready", None))
                case Show():
                    step.messages = list(self.messages)
                case Compact() if self.compactions:
                    self.compactions -= 1
                    step.squeeze = 1
                case Answered() if step.retry is not None:
                    self.messages += [{"role": "assistant", "content": step.result.text},
                                      {"role": "user", "content": step.retry}]
                case Read():
                    read_as_agent(step)
                case Charge():
                    step.dollars = 0.01
                case Record():
                    self.told.append((step.kind, step))
                case Status():
                    self.told.append(("status", step.line))
                case Rejected():
                    self.told.append(("rejected", step.again))
        raise AssertionError("no reply")

    def events(self) -> list[str]:
        return [what for what, _ in self.told]


def call(tmp_path: Path, backend: Scripted, told: Told, settings: ApiSettings | None = None) -> Any:
    catalog = ModelCatalog(CapabilityStore.open(tmp_path / "caps.json"))
    catalog.use("anthropic", None, "m", None)
    ask = Ask[Any](backend, catalog, "m", "You answer in JSON.", settings or ApiSettings())
    return asyncio.run(told.made(ask))


def read_back_whole(told: Told) -> None:
    """Every event the call yielded is a declared record, and reads back from its line as it was."""
    for kind, record in told.told:
        if kind in KINDS:
            assert isinstance(record, KINDS[kind]), f"{kind}: not its declared record"
            assert KINDS[kind].of(record.data()) == record, f"{kind}: does not read back as it was written"


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
    assert told.events()[-1] == "model_error" and told.told[-1][1].detail == TOO_LONG
    read_back_whole(told)


def test_a_failed_call_is_its_model_error(tmp_path):
    told = Told()
    with pytest.raises(InferenceError, match="401"):
        call(tmp_path, Scripted(InferenceError("the API refused the key (401)", 401, "invalid x-api-key")), told)
    assert told.events() == ["ready", "model_request", "model_error"]
    read_back_whole(told)


def test_every_event_the_call_yields_is_a_record_it_constructs():
    """The call writes no event as a kind and a dict: each is made by its record's class."""
    import ast

    from amacs_server.inference import model_call as module

    tree = ast.parse(Path(module.__file__).read_text())
    yielded = {node.value.func.id for node in ast.walk(tree) if isinstance(node, ast.Yield)
               and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)}
    assert {cls.__name__ for cls in KINDS.values()} & yielded == {
        "ModelRequest", "ModelResponse", "ModelError", "ModelRetry", "ModelAdapted", "ContextCompacted", "ParseError"}
