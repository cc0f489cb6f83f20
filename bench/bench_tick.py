"""Harness overhead per tick with a zero-latency fake model (issue 2).

Everything but the model call and the agent's eval is timed: context assembly,
parsing, org appends with fsync, consciousness.el, transcript, git commit.
The model call (the real SDK against the fake API) is timed separately and
subtracted.  Reports the median around tick 10 and around tick 1,000.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amacs_server.config import load_config  # noqa: E402
from amacs_server.loop.primary import run_tick  # noqa: E402
from amacs_server.runtime import Runtime  # noqa: E402
from amacs_server.state.consciousness import EvalResult  # noqa: E402
from bench.common import save, summary  # noqa: E402
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json  # noqa: E402

TICKS = 1000
WINDOW = 20


class NullFace:
    """A face that shows nothing: the benchmark measures the server alone."""

    def reply(self, text: str, streamed: bool = False) -> None: ...
    def reply_delta(self, text: str) -> None: ...
    def reply_abandon(self, reason: str) -> None: ...
    def annotate(self, text: str, kind: str = "info") -> None: ...
    def turn_started(self) -> None: ...
    def turn_done(self, tick: int) -> None: ...
    def ticked(self, tick: int, usage: dict) -> None: ...

    async def evaluate(self, form: str, agent: str = "primary") -> EvalResult:
        return EvalResult(True, result="nil")

    async def hydrate(self, buffers):
        return [{"name": b, "error": "no Emacs here"} for b in buffers]


def main() -> None:
    fake = FakeAnthropic(default=lambda _b: Reply(agent_json("A reply of ordinary length, a sentence or two.",
                                                             monologue="Answered the question."))).start()
    home = Path(tempfile.mkdtemp()) / "agent"
    rt = Runtime(load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": fake.url}),
                 NullFace())
    rt.start()
    model_ms: list[float] = []
    original = rt.backend.complete

    async def timed_complete(request, on_text=None, **options):
        t0 = time.perf_counter()
        try:
            return await original(request, on_text, **options)
        finally:
            model_ms.append((time.perf_counter() - t0) * 1000)

    rt.backend.complete = timed_complete  # type: ignore[method-assign]
    overhead: list[float] = []
    for i in range(TICKS):
        before = len(model_ms)
        t0 = time.perf_counter()
        asyncio.run_coroutine_threadsafe(run_tick(rt, f"question {i}"), rt.loop).result()
        total = (time.perf_counter() - t0) * 1000
        overhead.append(total - sum(model_ms[before:]))
    fake.stop()
    early, late = summary(overhead[:WINDOW]), summary(overhead[-WINDOW:])
    save("tick_overhead", {
        "ticks": TICKS,
        f"ticks 1-{WINDOW} (around tick 10)": early,
        f"ticks {TICKS - WINDOW + 1}-{TICKS} (around tick 1000)": late,
        "ratio_late_over_early": round(late["median_ms"] / early["median_ms"], 2),
        "model_call_ms (SDK + fake, not counted)": summary(model_ms),
        "agent-chat.org bytes at the end": (home / "agent-chat.org").stat().st_size,
    })


if __name__ == "__main__":
    main()
