"""The pool bound (issue 11): N tasks on a pool of P with model latency L finish within
1.15 x what a bare aiohttp client of the same fake takes for N requests, P at once, in the
same run (issue 28: the bound is a ratio, the floor of these 2 shared cores is in both), for
P = 8, 16 and 50, L = 100 ms, N = 200; and never more than P model calls are in flight at
once, while P are reached (issue 10: the bound from below).  The older bound,
1.2 x ceil(N/P) x L, is reported too.

The fake model is this file run with ``--fake L``: the Messages API on asyncio,
answering each request with the tests' fake message after L, and counting the requests
it is answering (a request is counted from its arrival until its answer is about to be
sent, so the count can only understate concurrency, never overstate it).  It runs in its own process, as a real model would, and reports on
stdin's ``reset`` / ``stats``.

What each side does, so the ratio is fair: a task is one model call (the fake's reply is the
tests' default answer, no eval), so the runtime makes exactly N requests (checked: the fake
counts them); the bare clients send the very request a task sends (its system prompt, its
message, the reply schema: taken from a first, unmeasured run's transcript), P at once over
connections opened first, as the runtime's are.  Two bare clients: aiohttp alone (the
issue's bound), and the anthropic SDK's client made as the runtime makes its own (the stack
the design names for inference), so the SDK's share of the gap is told from the runtime's.

Each pool size runs REPEATS times, each on a fresh runtime, home and fake, each after a run
of each bare client against a fresh fake of its own (alternating, so the machine's load drifts
hit all alike), every run in a process of its own after an unmeasured warm-up run (in one process,
the runs after the first paid for the earlier runtimes' heap: the collector's time per run grew); reported per pool: the bare clients' wall times and the ratio of the medians, the wall time for all N (median / p90 / n) against the bound, the most calls in
flight in each run, the event loop's CPU per model call (the loop thread's CPU time over
the run / N: with one loop, P / L calls a second need less than L / P each), the bare
clients' CPU per request, the fake's CPU, the model latency the runtime saw, the garbage
collector's time, and the machine's load (a shared machine's other work shows in every
number).  Also: one transcript write (the loop makes five per task).  ``--profile P`` adds a
run under cProfile and reports the loop's time per call by library (own time, inflated ~2x
by the profiler).

    .venv/bin/python bench/bench_agents.py               # P = 8, 16, 50; 5 runs each
    .venv/bin/python bench/bench_agents.py --profile 50  # and where the loop's time goes
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import math
import pstats
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amacs_server.agents.kinds import PRIMARY  # noqa: E402
from amacs_server.config import load_config  # noqa: E402
from bench.bench_tick import NullFace, load  # noqa: E402
from bench.common import save, summary  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

TASKS = 200
LATENCY = 0.1
POOLS = (8, 16, 50)
REPEATS = 5


class Face(NullFace):
    """The null face, with the calls the agent world makes too; it sees tasks end."""

    def __init__(self) -> None:
        self.ended = 0
        self.all_ended: asyncio.Event | None = None
        self.expected = 0

    def agent_ended(self, agent_id: str, state: str, ok: bool, text: str) -> None:
        """A task's end, which the agent world shows the person."""
        self.ended += 1
        if self.all_ended is not None and self.ended >= self.expected:
            self.all_ended.set()

    def agents(self, working: object, spending: object = None) -> None: ...

    def input_taken(self, saved: bool = True) -> None: ...


def serve_fake(latency: float) -> None:
    """The fake model: answer after LATENCY seconds, counting requests in flight.

    It speaks HTTP/1.1 (keep-alive, ``content-length``) on asyncio, one coroutine
    per connection, and answers every request with the tests' fake message
    (:func:`tests.fake_anthropic._message`, the default reply).  The tests' fake
    (``http.server``, a thread per connection) spent ~0.6 ms of CPU per call,
    on the same 2 cores as the runtime it serves: a real model's API spends none
    of ours, and the bound is about the runtime, so its model should cost the
    machine as little as can be (a request's bytes parsed, a canned answer sent)."""
    from tests.fake_anthropic import Reply, _message

    state = {"in_flight": 0, "max_in_flight": 0, "calls": 0}

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = json.loads(await reader.readexactly(length)) if length else {}
                state["in_flight"] += 1
                state["calls"] += 1
                state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
                await asyncio.sleep(latency)
                state["in_flight"] -= 1
                data = json.dumps(_message(body, Reply(), Reply().text)).encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nrequest-id: req_fake\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(data), data))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(connection, "127.0.0.1", 0, backlog=256)
        print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
        loop = asyncio.get_running_loop()
        stdin = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
        while line := await stdin.readline():
            if line.strip() == b"reset":
                state.update(max_in_flight=state["in_flight"], calls=0)
            print(json.dumps({**state, "cpu_s": time.process_time()}), flush=True)
        server.close()

    asyncio.run(main())


def ask(fake: subprocess.Popen[str], command: str) -> dict[str, float]:
    """Send COMMAND to the fake model's process; its counters."""
    assert fake.stdin is not None and fake.stdout is not None
    fake.stdin.write(command + "\n")
    fake.stdin.flush()
    return dict(json.loads(fake.stdout.readline()))


class GcClock:
    """Seconds the cyclic garbage collector ran (it holds the interpreter: the loop waits)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started


def start_fake(latency: float) -> tuple[subprocess.Popen[str], str]:
    """The fake model in its own process, as a real one would be: its work must not share
    this process's interpreter lock with the runtime being measured.  Its URL."""
    fake = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--fake", str(latency)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert fake.stdout is not None
    return fake, fake.stdout.readline().strip()


def run_once(n: int, pool: int, latency: float, profile: cProfile.Profile | None = None) -> dict[str, Any]:
    """N tasks on a fresh runtime with a pool of POOL: wall seconds, calls in flight, CPU."""
    from amacs_server.runtime import Runtime

    fake, url = start_fake(latency)
    face = Face()
    home = Path(tempfile.mkdtemp()) / "agent"
    # A key of one letter would be redacted out of every word of the transcript that has it.
    rt = Runtime(load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "sk-ant-bench", "ANTHROPIC_BASE_URL": url,
                              "AMACS_AGENT_POOL": str(pool), "AMACS_MAX_TASKS": str(n),
                              "AMACS_MAX_AGENTS": str(n + 1), "AMACS_EVENT_QUEUE": str(n)}), face)
    rt.start()
    # As the server does once its runtime is built (serve.RuntimeBuilder): what start-up made
    # lives as long as the process, out of the collector's sight.
    gc.freeze()
    gc_clock = GcClock()

    async def go() -> tuple[float, float, float, float]:
        # Open the client's connections first: the bench measures the runtime, not TCP set-up.
        await asyncio.gather(*(rt.slot.backend.complete({"model": rt.slot.model, "max_tokens": 10, "messages": [
            {"role": "user", "content": "warm"}]}, stream=False) for _ in range(pool)))
        fake_cpu = ask(fake, "reset")["cpu_s"]  # count the tasks' calls only
        # The tasks' parent is an agent, not the primary: their results must not wake the
        # primary, whose turns would make model calls of their own and muddle the measure.
        parent = rt.world.viewpoint(PRIMARY, "bench", "debater")["handle"]
        face.all_ended, face.expected = asyncio.Event(), face.ended + n
        gc.collect()
        gc.callbacks.append(gc_clock)
        if profile is not None:
            profile.enable()  # this thread only: the loop's
        started, cpu, process_cpu = time.perf_counter(), time.thread_time(), time.process_time()
        try:
            for i in range(n):
                rt.world.task(parent, None, "researcher", f"question {i}")
            await face.all_ended.wait()  # no polling: a poll's wake-ups cost the loop CPU too
            return (time.perf_counter() - started, time.thread_time() - cpu, time.process_time() - process_cpu,
                    ask(fake, "stats")["cpu_s"] - fake_cpu)
        finally:
            if profile is not None:
                profile.disable()
            gc.callbacks.remove(gc_clock)

    try:
        took, cpu, process_cpu, fake_cpu = asyncio.run_coroutine_threadsafe(go(), rt.loop).result(300)
        stats = ask(fake, "stats")
    finally:
        fake.kill()
        fake.wait()
        # The client's connections close before the loop stops (the fake is gone: no resets to report).
        asyncio.run_coroutine_threadsafe(rt.slot.backend.aclose(), rt.loop).result(10)
        rt.stop()
    done = sum(1 for a in rt.world.agents.values() if a.type == "task" and a.state == "done")
    events = [json.loads(line) for line in rt.transcript.path.read_text(encoding="utf-8").splitlines()]
    latencies = [e["data"]["latency_ms"] for e in events
                 if e["event"] == "model_response" and e["agent_type"] == "task"]
    request = next(e["data"]["request"] for e in events if e["event"] == "model_request" and e["agent_type"] == "task")
    return {"request": request, "seconds": took, "model_latency_ms": statistics.median(latencies), "finished": done,
            "model_calls": stats["calls"], "max_in_flight": stats["max_in_flight"], "loop_cpu_ms_per_call": cpu * 1000 / n,
            "gc_ms": gc_clock.seconds * 1000, "process_cpu_ms_per_call": process_cpu * 1000 / n,
            "fake_cpu_ms_per_call": fake_cpu * 1000 / n}


HEADERS = {"x-api-key": "sk-ant-bench", "anthropic-version": "2023-06-01"}


def bare_once(n: int, pool: int, latency: float, body: dict[str, Any], sdk: bool = False) -> tuple[float, float, float]:
    """Seconds a bare client takes for N requests of BODY, POOL at once, to a fresh fake of
    LATENCY, the CPU milliseconds it spent per request, and the median milliseconds from a
    request's start to its answer read (as the runtime's ``latency_ms``).

    BODY is the request a task sends (its system prompt, its message, the reply schema).  The
    client is aiohttp alone or, with SDK, the anthropic SDK's client made as the runtime makes
    its own (its aiohttp transport, no retries, no tracing), its raw response read as JSON as
    the runtime reads it; its connections are opened first, as the runtime's are.  Nothing
    else: no runtime, no agent, no transcript."""
    import aiohttp

    fake, url = start_fake(latency)

    async def timed(call: Callable[[], Awaitable[object]]) -> tuple[float, float, float]:
        await asyncio.gather(*(call() for _ in range(pool)))
        gate = asyncio.Semaphore(pool)
        latencies: list[float] = []

        async def one() -> None:
            async with gate:
                begun = time.perf_counter()
                await call()
                latencies.append((time.perf_counter() - begun) * 1000)

        gc.collect()
        gc.freeze()  # the client and its imports, as the runtime's start-up and SDK are (run_once)
        started, cpu = time.perf_counter(), time.thread_time()
        await asyncio.gather(*(one() for _ in range(n)))
        return (time.perf_counter() - started, (time.thread_time() - cpu) * 1000 / n,
                statistics.median(latencies))

    async def with_aiohttp() -> tuple[float, float, float]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=pool)) as session:
            async def call() -> None:
                async with session.post(f"{url}/v1/messages", json=body, headers=HEADERS) as response:
                    await response.json()

            return await timed(call)

    async def with_sdk() -> tuple[float, float, float]:
        import anthropic

        client = anthropic.AsyncAnthropic(api_key=HEADERS["x-api-key"], base_url=url, timeout=60, max_retries=0,
                                          http_client=anthropic.DefaultAioHttpClient(timeout=60),
                                          open_telemetry=False)
        try:
            async def call() -> None:
                raw = await client.messages.with_raw_response.create(**body)
                json.loads(await raw.read())

            return await timed(call)
        finally:
            await client.close()

    try:
        return asyncio.run(with_sdk() if sdk else with_aiohttp())
    finally:
        fake.kill()
        fake.wait()


RATIO = 1.15  # the runtime's N tasks within this times the bare client's N requests, same run


def in_own_process(kind: str, n: int, pool: int, latency: float, body: dict[str, Any] | None = None) -> Any:
    """``run_once`` (KIND ``runtime``) or ``bare_once`` (``bare``, ``sdk``) in a process of its own,
    as each would run alone: no runtime, heap or collector's work left by the runs before it.
    A runtime's process first makes a run of POOL tasks, unmeasured (its imports, a warm
    interpreter); a bare client warms up on its own (its connections opened first)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(body, f)
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one", kind, str(n), str(pool),
                          str(latency), f.name], capture_output=True, text=True, cwd=ROOT, timeout=600, check=False)
    Path(f.name).unlink()
    if out.returncode:
        raise RuntimeError(f"the {kind} run failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def one(kind: str, n: int, pool: int, latency: float, body_file: str) -> None:
    """The child of :func:`in_own_process`: its result as the last line of stdout."""
    if kind == "runtime":
        run_once(pool, pool, latency)
        result = run_once(n, pool, latency)
        result.pop("request")
        print(json.dumps(result))
        return
    body = json.loads(Path(body_file).read_text(encoding="utf-8"))
    print(json.dumps(bare_once(n, pool, latency, body, sdk=kind == "sdk")))


def run_pool(n: int, pool: int, latency: float, repeats: int, profile: bool) -> dict[str, object]:
    """REPEATS runs of N tasks on a pool of POOL, each against a fresh fake model of LATENCY, each
    after each bare client's run of N requests against a fresh fake; every run in its own process."""
    body = run_once(pool, pool, latency)["request"]  # unmeasured: the request a task sends
    bare: list[tuple[float, float, float]] = []
    bare_sdk: list[tuple[float, float, float]] = []
    runs = []
    for _ in range(repeats):
        bare.append(tuple(in_own_process("bare", n, pool, latency, body)))  # type: ignore[arg-type]
        bare_sdk.append(tuple(in_own_process("sdk", n, pool, latency, body)))  # type: ignore[arg-type]
        runs.append(in_own_process("runtime", n, pool, latency))
    profiled = None
    if profile:
        profiled = cProfile.Profile()
        run_once(n, pool, latency, profiled)
    ideal = math.ceil(n / pool) * latency
    seconds = summary([r["seconds"] * 1000 for r in runs])
    bare_ms = summary([b[0] * 1000 for b in bare])
    sdk_ms = summary([b[0] * 1000 for b in bare_sdk])
    most = [int(r["max_in_flight"]) for r in runs]
    out: dict[str, object] = {
        "n": n, "pool": pool, "latency_s": latency, "request_bytes": len(json.dumps(body)),
        "bare_client_ms": bare_ms,
        "ratio_to_bare_median": round(seconds["median_ms"] / bare_ms["median_ms"], 3),
        "within_ratio_median": seconds["median_ms"] <= RATIO * bare_ms["median_ms"],
        "runs_within_ratio_of_their_bare_run": sum(r["seconds"] <= RATIO * b[0] for r, b in zip(runs, bare, strict=True)),
        "bare_sdk_client_ms": sdk_ms,
        "ratio_to_bare_sdk_median": round(seconds["median_ms"] / sdk_ms["median_ms"], 3),
        "bare_sdk_ratio_to_bare_median": round(sdk_ms["median_ms"] / bare_ms["median_ms"], 3),
        "bare_client_cpu_ms_per_request": summary([b[1] for b in bare]),
        "bare_sdk_client_cpu_ms_per_request": summary([b[1] for b in bare_sdk]),
        "bare_client_latency_ms": summary([b[2] for b in bare]),
        "bare_sdk_client_latency_ms": summary([b[2] for b in bare_sdk]),
        "ideal_ms": round(ideal * 1000, 1),
        "bound_ms": round(1.2 * ideal * 1000, 1), "wall_ms": seconds,
        "median_ratio_to_ideal": round(seconds["median_ms"] / (ideal * 1000), 3),
        "within_bound_median": seconds["median_ms"] <= 1.2 * ideal * 1000,
        "within_bound_p90": seconds["p90_ms"] <= 1.2 * ideal * 1000,
        "runs_within_bound": sum(r["seconds"] <= 1.2 * ideal for r in runs),
        "finished_all": all(r["finished"] == n and r["model_calls"] == n for r in runs),
        "max_in_flight_per_run": most,
        "never_more_than_pool": max(most) <= pool, "reached_pool_every_run": min(most) == pool,
        "loop_cpu_ms_per_call": summary([r["loop_cpu_ms_per_call"] for r in runs]),
        "process_cpu_ms_per_call": summary([r["process_cpu_ms_per_call"] for r in runs]),
        "fake_model_cpu_ms_per_call": summary([r["fake_cpu_ms_per_call"] for r in runs]),
        "gc_ms_per_run": summary([r["gc_ms"] for r in runs]),
        # L as the runtime sees it (its own measure, in the transcript): the fake's sleep plus
        # the HTTP stack and the wait for the loop at both ends.  Median of each run's median.
        "model_latency_ms": summary([r["model_latency_ms"] for r in runs]),
    }
    if profiled is not None:
        out["profiled_loop_ms_per_call_by_component"] = by_component(profiled, n)
    return out


def transcript_write_ms(count: int = 2000) -> dict[str, dict[str, float]]:
    """One transcript write (the loop pays five per task), by size: a task's model request, a small event."""
    from amacs_server.inference.anthropic_backend import build_request
    from amacs_server.persistence.transcript import AgentIdentity, Transcript
    from amacs_server.skills import SkillLibrary
    from amacs_server.state.consciousness import ApiSettings

    home = Path(tempfile.mkdtemp())
    skills = SkillLibrary(load_config({"AMACS_HOME": str(home)}).skills_dir, home / "skills")
    system = "\n\n".join([skills.get("subagent-core").body, "You are task-1, a task (template researcher).",
                           skills.get("researcher").body])
    request = build_request("claude-sonnet-4-5", system, [{"role": "user", "content": "question 1"}], ApiSettings())
    transcript = Transcript(home / "transcripts", "bench", secrets=("sk-ant-bench",))
    task = AgentIdentity("task-1", "viewpoint-bench", "task", "researcher")
    out: dict[str, dict[str, float]] = {}
    for name, event, data in (("model_request", "model_request", {"request": request}),
                              ("agent_end", "agent_end", {"state": "done", "id": "task-1", "steps": 1})):
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            transcript.write(event, data, agent=task)
            samples.append((time.perf_counter() - started) * 1000)
        out[name] = {"bytes": len(json.dumps(data)), **summary(samples)}
    transcript.close()
    return out


COMPONENTS = (  # where a function's file is, first match wins
    ("transcript", "amacs_server/persistence/transcript.py"), ("skills", "amacs_server/skills.py"),
    ("agent world", "amacs_server/agents/"), ("our inference", "amacs_server/inference/"),
    ("amacs other", "amacs_server/"), ("anthropic SDK", "/anthropic/"), ("pydantic", "pydantic"),
    ("opentelemetry (SDK tracing)", "opentelemetry"), ("httpx", "/httpx"), ("httpcore", "/httpcore"),
    ("aiohttp (the SDK's transport)", "/aiohttp/"), ("yarl, multidict", "/yarl/"), ("yarl, multidict", "/multidict/"),
    ("anyio", "/anyio/"), ("sniffio", "/sniffio/"), ("h11", "/h11/"), ("asyncio", "/asyncio/"),
    ("json", "/json/"), ("pathlib", "pathlib.py"), ("typing", "typing.py"), ("bench", "/bench/"),
)


def by_component(prof: cProfile.Profile, n: int) -> dict[str, float]:
    """The loop's profiled time per model call by library (its own time; cProfile inflates it ~2x).

    Also prints the usual tables: the functions with the most time of their own and under them."""
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)
    print(text.getvalue())
    table = stats.stats  # type: ignore[attr-defined]
    totals: dict[str, float] = {}
    for (path, _line, name), (_cc, _nc, own, _cum, callers) in table.items():
        if path == "~" and callers:  # a builtin (a socket's send, isinstance): its main caller's
            path = max(callers.items(), key=lambda kv: kv[1][3])[0][0]
        where = next((label for label, part in COMPONENTS if part in path), None)
        if where is None:
            where = "waiting in epoll (idle)" if "poll' of 'select.epoll" in name else "other (stdlib)"
        totals[where] = totals.get(where, 0.0) + own
    ordered = sorted(totals.items(), key=lambda kv: -kv[1])
    return {label: round(seconds * 1000 / n, 4) for label, seconds in ordered}


def main() -> None:
    if sys.argv[1:2] == ["--fake"]:
        serve_fake(float(sys.argv[2]))
        return
    if sys.argv[1:2] == ["--one"]:
        kind, n, pool, latency, body_file = sys.argv[2:7]
        one(kind, int(n), int(pool), float(latency), body_file)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--pools", type=int, nargs="+", default=list(POOLS))
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--profile", type=int, nargs="*", default=[], metavar="P",
                        help="cProfile the event loop during one more run with these pool sizes")
    args = parser.parse_args()
    start_load = load()
    cases = [run_pool(args.tasks, pool, LATENCY, args.repeats, pool in args.profile) for pool in args.pools]
    save("agents", {"machine_load_at_start": start_load, "machine_load_at_end": load(),
                    "transcript_write_ms": transcript_write_ms(), "cases": cases,
                    "all_within_ratio_median": all(c["within_ratio_median"] for c in cases),
                    "all_within_bound_median": all(c["within_bound_median"] for c in cases),
                    "never_more_than_pool": all(c["never_more_than_pool"] for c in cases),
                    "reached_pool_every_run": all(c["reached_pool_every_run"] for c in cases)})


if __name__ == "__main__":
    main()
