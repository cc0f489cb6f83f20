"""Tasks through the model pool (issue 5): N tasks with a fake model of fixed latency L
and a pool of P must finish within 1.2 x ceil(N/P) x L (the runtime adds no serialization).
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amacs_server.agents.world import PRIMARY  # noqa: E402
from amacs_server.config import load_config  # noqa: E402
from bench.bench_tick import NullFace  # noqa: E402
from bench.common import save  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

CASES = [(50, 8, 0.2), (64, 16, 0.1), (24, 4, 0.25), (200, 50, 0.2)]


def run_case(n: int, pool: int, latency: float) -> dict[str, object]:
    from amacs_server.runtime import Runtime

    # The fake model runs in its own process, as a real one would: its work must not
    # share this process's interpreter lock with the runtime being measured.
    fake = subprocess.Popen([sys.executable, "-m", "tests.fake_anthropic", "--delay", str(latency)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    url = fake.stdout.readline().strip()
    home = Path(tempfile.mkdtemp()) / "agent"
    rt = Runtime(load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": url,
                              "AMACS_AGENT_POOL": str(pool), "AMACS_MAX_TASKS": str(n),
                              "AMACS_MAX_AGENTS": str(n + 1), "AMACS_EVENT_QUEUE": str(n)}), NullFace())
    rt.start()

    async def go() -> float:
        # Open the client's connections first: the bench measures the runtime, not TCP set-up.
        await asyncio.gather(*(rt.backend.complete({"model": rt.model, "max_tokens": 10, "messages": [
            {"role": "user", "content": "warm"}]}, stream=False) for _ in range(pool)))
        # The tasks' parent is an agent, not the primary: their results must not wake the
        # primary, whose turns would make model calls of their own and muddle the measure.
        parent = rt.world.viewpoint(PRIMARY, "bench", "debater")["handle"]
        started = time.perf_counter()
        for i in range(n):
            rt.world.task(parent, None, "researcher", f"question {i}", {})
        while rt.world.tasks_live:
            await asyncio.sleep(0.002)
        return time.perf_counter() - started

    took = asyncio.run_coroutine_threadsafe(go(), rt.loop).result(300)
    done = sum(1 for a in rt.world.agents.values() if a.state == "done")
    fake.kill()
    fake.wait()
    ideal = math.ceil(n / pool) * latency
    return {"n": n, "pool": pool, "latency_s": latency, "seconds": round(took, 3), "ideal_s": round(ideal, 3),
            "bound_s": round(1.2 * ideal, 3), "ratio_to_ideal": round(took / ideal, 3),
            "within_bound": took <= 1.2 * ideal, "finished": done}


def main() -> None:
    save("agents", {"cases": [run_case(*case) for case in CASES]})


if __name__ == "__main__":
    main()
