"""The catalog's window and what a refusal teaches it: the person's window beats a server's report,
a refusal as too long that contradicts a report corrects it, and a 400 naming the reasoning effort
a proxy made of thinking drops thinking once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from amacs_server.inference.capabilities import Capabilities, CapabilityStore, TooLong
from amacs_server.inference.catalog import Adapting, ModelCatalog, prepare
from amacs_server.inference.request import RequestSpec
from amacs_server.inference.retry import InferenceError
from amacs_server.state.consciousness import ApiSettings


def catalog(tmp_path: Path, reported: int | None = 1_000_000) -> ModelCatalog:
    made = ModelCatalog(CapabilityStore.open(tmp_path / "caps.json"))
    made.use("anthropic", "http://127.0.0.1:4000", "claude-sonnet-5-5", None)
    made.caps = Capabilities(max_input_tokens=reported, source="models-api")
    return made


def test_the_persons_window_beats_what_the_server_reports(tmp_path: Path) -> None:
    """LiteLLM reports its price list's window for the alias (1,000,000), not its model's (8,192)."""
    made = catalog(tmp_path)
    assert made.window == 1_000_000
    made.setting_window = 8192  # AMACS_CONTEXT_WINDOW, or M-x amacs-set-model's window
    assert made.window == 8192
    made.setting_window = 2_000_000  # the person knows better than the report, either way
    assert made.window == 2_000_000


def test_a_refusal_as_too_long_that_contradicts_a_reported_window_corrects_it(tmp_path: Path) -> None:
    made = catalog(tmp_path)
    said = made.learn_refusal(TooLong(8192, 9365), 5000)
    assert made.window == 8192 and said is not None and "1,000,000" in said and "8,192" in said
    # Kept in the home and not undone by the next day's report.
    again = catalog(tmp_path)
    again.caps = Capabilities.from_json(again.store.entries[again.key])
    assert again.window == 8192


def test_a_refusal_without_a_window_takes_a_reported_one_below_the_request(tmp_path: Path) -> None:
    made = catalog(tmp_path)
    said = made.learn_refusal(TooLong(None, None), 9000)
    assert made.window == 8100 and said is not None
    # Below the known window already: the estimate was off, not the window.
    below = catalog(tmp_path / "b", reported=10_000)
    assert below.learn_refusal(TooLong(None, 12_000), 9000) is None and below.window == 10_000


def test_a_refusal_may_take_the_persons_window_down_too(tmp_path: Path) -> None:
    made = catalog(tmp_path)
    made.setting_window = 16_384
    made.learn_refusal(TooLong(8192, 9000), 9000)
    assert made.window == 8192


@pytest.mark.parametrize("words", [
    "litellm.BadRequestError: OpenAIException - Unrecognized request argument supplied: reasoning.effort",
    "reasoning_effort is not supported by this model",
    "thinking.type: 'enabled' is not supported for this model",
])
def test_a_400_naming_reasoning_or_thinking_drops_thinking_once(tmp_path: Path, words: str) -> None:
    """Behind LiteLLM, thinking becomes the upstream's reasoning effort and its refusal names that:
    thinking is dropped (and the effort with it when the words are the reasoning effort's), said once,
    and the call made again; the next turn does not send it."""
    made = ModelCatalog(CapabilityStore.open(tmp_path / "caps.json"))
    made.use("anthropic", "http://127.0.0.1:4000", "claude-sonnet-5-5", None)
    settings = ApiSettings(thinking=True, effort="high")
    sent: list[dict[str, Any]] = []
    said: list[str] = []
    spec = RequestSpec("claude-sonnet-5-5", "core", [{"role": "user", "content": "hi"}], settings)

    async def call() -> None:  # as the one model call sends an Adapting's request
        adapting = Adapting(made, spec, await prepare(made, spec))
        while True:
            sent.append(adapting.request)
            if "thinking" not in adapting.request:
                return
            line = await adapting.refused(InferenceError(f"the API rejected the request (400): {words}", 400, words))
            if line is not None:
                said.append(line)

    async def go() -> None:
        await call()
        await call()

    asyncio.run(go())
    assert ["thinking" in r for r in sent] == [True, False, False]
    assert len(said) == 1 and "does not take" in said[0]

