"""Tasks through the model pool (issue 5): N tasks with a fake model of fixed latency L
and a pool of P must finish within 1.2 x ceil(N/P) x L (the runtime adds no serialization),
and never have more than P model calls in flight at once (issue 10: the bound from below).

The fake model is this file run with ``--fake L``: the tests' fake Anthropic API whose
responder counts the requests it is answering (a request is counted from its arrival
until its answer is about to be sent, so the count can only understate concurrency,
never overstate it).  It reports on stdin's ``reset`` / ``stats``.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amacs_server.agents.world import PRIMARY  # noqa: E402
from amacs_server.config import load_config  # noqa: E402
from bench.bench_tick import NullFace  # noqa: E402
from bench.common import save  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

CASES = [(50, 8, 0.2), (64, 16, 0.1), (24, 4, 0.25), (200, 50, 0.2)]


class Face(NullFace):
    """The null face, with the calls the agent world makes too."""

    def agents(self, working: object) -> None: ...

    def input_taken(self) -> None: ...


def serve_fake(latency: float) -> None:
    """The fake model: answer after LATENCY seconds, counting requests in flight."""
    from tests.fake_anthropic import FakeAnthropic, Reply

    lock = threading.Lock()
    state = {"in_flight": 0, "max_in_flight": 0, "calls": 0}

    def respond(_body: dict[str, object]) -> Reply:
        with lock:
            state["in_flight"] += 1
            state["calls"] += 1
            state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
        time.sleep(latency)
        with lock:
            state["in_flight"] -= 1
        return Reply()

    fake = FakeAnthropic(default=respond).start()
    print(fake.url, flush=True)
    for line in sys.stdin:
        with lock:
            if line.strip() == "reset":
                state.update(max_in_flight=state["in_flight"], calls=0)
            print(json.dumps(state), flush=True)
    fake.stop()


def ask(fake: subprocess.Popen[str], command: str) -> dict[str, int]:
    """Send COMMAND to the fake model's process; its counters."""
    assert fake.stdin is not None and fake.stdout is not None
    fake.stdin.write(command + "\n")
    fake.stdin.flush()
    return dict(json.loads(fake.stdout.readline()))


def run_case(n: int, pool: int, latency: float) -> dict[str, object]:
    from amacs_server.runtime import Runtime

    # The fake model runs in its own process, as a real one would: its work must not
    # share this process's interpreter lock with the runtime being measured.
    fake = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--fake", str(latency)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert fake.stdout is not None
    url = fake.stdout.readline().strip()
    home = Path(tempfile.mkdtemp()) / "agent"
    rt = Runtime(load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": url,
                              "AMACS_AGENT_POOL": str(pool), "AMACS_MAX_TASKS": str(n),
                              "AMACS_MAX_AGENTS": str(n + 1), "AMACS_EVENT_QUEUE": str(n)}), Face())
    rt.start()

    async def go() -> float:
        # Open the client's connections first: the bench measures the runtime, not TCP set-up.
        await asyncio.gather(*(rt.backend.complete({"model": rt.model, "max_tokens": 10, "messages": [
            {"role": "user", "content": "warm"}]}, stream=False) for _ in range(pool)))
        ask(fake, "reset")  # count the tasks' calls only
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
    stats = ask(fake, "stats")
    fake.kill()
    fake.wait()
    ideal = math.ceil(n / pool) * latency
    return {"n": n, "pool": pool, "latency_s": latency, "seconds": round(took, 3), "ideal_s": round(ideal, 3),
            "bound_s": round(1.2 * ideal, 3), "ratio_to_ideal": round(took / ideal, 3),
            "within_bound": took <= 1.2 * ideal, "finished": done,
            "model_calls": stats["calls"], "max_calls_in_flight": stats["max_in_flight"],
            "never_more_than_pool": stats["max_in_flight"] <= pool}


def main() -> None:
    if sys.argv[1:2] == ["--fake"]:
        serve_fake(float(sys.argv[2]))
        return
    cases = [run_case(*case) for case in CASES]
    save("agents", {"cases": cases, "all_within_bound": all(c["within_bound"] for c in cases),
                    "never_more_than_pool": all(c["never_more_than_pool"] for c in cases)})


if __name__ == "__main__":
    main()
