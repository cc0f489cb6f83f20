"""A subagent whose request its model refuses as too long compacts and goes on, as the primary
does, on both backends: its older messages are left out with a notice where they were, the
window the refusal named is learned, and its answer reaches its asker.  A real Runtime, the real
SDKs, the fake API over HTTP holding the model to its window."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from amacs_server.agents.kinds import PRIMARY
from amacs_server.config import load_config
from amacs_server.loop.primary import run_turn
from amacs_server.runtime import Runtime
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json, prompt_tokens
from tests.test_memory import SilentFace

LONG = "a long thought about the question " * 60  # ~2,000 characters: ~500 of the fake's tokens a step


def _runtime(home: Path, fake: FakeAnthropic, backend: str) -> Runtime:
    env = {"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": fake.url}
    if backend == "openai":
        env |= {"AMACS_BACKEND": "openai", "OPENAI_BASE_URL": f"{fake.url}/v1", "AMACS_MODEL": "smollm2",
                "OPENAI_API_KEY": "k"}
    rt = Runtime(load_config(env), SilentFace(), turn=run_turn)
    rt.turns.wake = lambda: None  # type: ignore[method-assign]  # the primary is not woken by its tasks' answers here
    rt.start()
    return rt


async def _task(rt: Runtime, prompt: str) -> tuple[str, list[Any]]:
    """Run one researcher task on PROMPT to its end: its id and the events its asker got."""
    handle = rt.world.task(PRIMARY, None, "researcher", prompt)["handle"]
    while rt.world.tasks_live:
        await asyncio.sleep(0.01)
    return handle, rt.world.bus.drain(PRIMARY)


def _turns(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r["body"] for r in fake.requests if r["body"].get("max_tokens") != 1]


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_a_subagent_refused_as_too_long_compacts_and_goes_on(tmp_path: Path, backend: str) -> None:
    fake = FakeAnthropic(default=lambda _b: Reply(agent_json("the answer, at last"))).start()
    fake.report_window = False  # the server does not say its window: its refusal does
    fake.openai_stream_usage = False
    rt = _runtime(tmp_path / "h", fake, backend)
    window = 0

    async def run() -> tuple[str, list[Any]]:
        nonlocal window
        fake.script(Reply(agent_json("warm-up")))
        await _task(rt, "a first question")
        window = prompt_tokens(_turns(fake)[0]) + 1_200  # two of the next task's long steps fit; not three
        if backend == "openai":
            fake.n_ctx = window
        else:
            fake.window = window
        fake.script(*[Reply(agent_json(None, eval=f"(+ {n} 1)", monologue=LONG)) for n in range(4)])
        return await _task(rt, "think long about it")

    try:
        task_id, events = asyncio.run_coroutine_threadsafe(run(), rt.loop).result(120)
        sent = _turns(fake)[1:]
        refused = [b for b in sent if prompt_tokens(b) > window]
        assert refused, "no request was past the window"
        after = sent[sent.index(refused[0]) + 1:]
        assert after and all(prompt_tokens(b) <= window for b in after[-2:])
        notice = json.dumps(after[0]["messages"])
        assert "Your context was compacted to fit this model's window" in notice
        assert "think long about it" in notice  # its task stays
        said = [str(e.content) for e in events]
        assert any("the answer, at last" in s for s in said), said
        kinds = [e["event"] for e in rt.transcript.read(task_id)]
        assert "context_compacted" in kinds and "model_error" not in kinds
        assert rt.slot.catalog.window is not None and rt.slot.catalog.window <= window
    finally:
        rt.stop()
        fake.stop()
