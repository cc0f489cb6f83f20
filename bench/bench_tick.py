"""Harness overhead per tick, flat in history (issue 10, PER-TICK HARNESS COST and DURABILITY).

One turn is the person's input and one tick with a 400-word reply (100 streamed
deltas) from a zero-latency fake model.  Overhead = turn time (``run_turn``
until the prompt is given back) minus the model call (the real SDK against the
fake, timed around ``backend.complete``).  Everything else is counted: the
write-ahead, context assembly, parsing, org appends, consciousness.el,
memory.db, transcript, queueing the commit.

The history is built by running the turns themselves (no synthetic home), as
fast as they go; around ticks ~10, ~1,000 and ~5,000 a window of turns is
measured, each after the commit worker has caught up (a person reads the reply
before typing; an eval turn's next tick does not wait, see the test).  Also
reported: each measured tick's commit time (off the critical path, on the
worker), the repository's size and object counts at the end, fsyncs per tick
by thread (``--fsyncs``, under strace), and the machine's load.

    .venv/bin/python bench/bench_tick.py            # ticks 10 / 1,000 / 5,000
    .venv/bin/python bench/bench_tick.py --ticks 1000 --fsyncs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amacs_server.agents import loop as agent_loop  # noqa: E402
from amacs_server.config import load_config  # noqa: E402
from amacs_server.loop import primary  # noqa: E402
from amacs_server.loop.primary import run_turn  # noqa: E402
from amacs_server.runtime import Runtime  # noqa: E402
from amacs_server.state.consciousness import EvalResult  # noqa: E402
from bench.common import save, summary  # noqa: E402
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json  # noqa: E402

WINDOW = 30
WORDS = ("the agent reads the buffer then writes a short note about what it found and why it "
         "matters for the next step of the task at hand").split()


class NullFace:
    """A face that shows nothing: the benchmark measures the server alone."""

    def reply(self, text: str, streamed: bool = False) -> None: ...
    def reply_delta(self, text: str, last: bool = False) -> None: ...
    def thinking_delta(self, text: str) -> None: ...
    def reply_abandon(self, reason: str) -> None: ...
    def annotate(self, text: str, kind: str = "info") -> None: ...
    def retrying(self, retry: object) -> None: ...

    def preparing(self, text: str) -> None: ...
    def agent_ended(self, agent_id: str, state: str, ok: bool, text: str) -> None: ...
    def turn_started(self) -> None: ...
    def step_started(self, step: int, limit: int) -> None: ...
    def turn_done(self, tick: int) -> None: ...
    def input_taken(self, saved: bool = True) -> None: ...
    def agents(self, working: list, spending: object = None) -> None: ...
    def ticked(self, tick: int, usage: dict) -> None: ...

    async def evaluate(self, form: str, agent: str = "primary") -> EvalResult:
        return EvalResult(True, result="nil")

    async def hydrate(self, buffers):
        return [{"name": b, "error": "no Emacs here"} for b in buffers]



def time_model_calls(rt: Runtime) -> list[float]:
    """The list each of RT's model calls appends its milliseconds to, from now on."""
    model_ms: list[float] = []
    original = rt.slot.backend.answer

    async def timed_answer(request, **options):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        try:
            async for piece in original(request, **options):
                yield piece
        finally:
            model_ms.append((time.perf_counter() - t0) * 1000)

    rt.slot.backend.answer = timed_answer  # type: ignore[method-assign]
    return model_ms

def reply_400(_body: dict) -> Reply:
    text = " ".join(WORDS[i % len(WORDS)] for i in range(400))
    return Reply(agent_json(text, monologue="Answered with a long reply."), chunks=100)


def load() -> dict[str, object]:
    one, five, fifteen = os.getloadavg()
    return {"loadavg_1_5_15": [round(one, 2), round(five, 2), round(fifteen, 2)], "cpus": os.cpu_count()}


def repo_stats(home: Path) -> dict[str, object]:
    git_dir = home / ".git"
    size = sum(f.stat().st_size for f in git_dir.rglob("*") if f.is_file())
    counts = subprocess.run(["git", "-C", str(home), "count-objects", "-v"], capture_output=True, text=True).stdout
    fields = dict(line.split(": ", 1) for line in counts.splitlines())
    commits = subprocess.run(["git", "-C", str(home), "rev-list", "--count", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
    return {"git_dir_MB": round(size / 1e6, 2), "loose_objects": int(fields["count"]),
            "loose_MB": round(int(fields["size"]) / 1e3, 2), "packs": int(fields["packs"]),
            "pack_MB": round(int(fields["size-pack"]) / 1e3, 2), "commits": int(commits),
            "agent-chat.org_MB": round((home / "agent-chat.org").stat().st_size / 1e6, 2)}


STEPS = ("begin", "observe", "infer_and_parse", "act", "record", "persist", "commit")


def instrument(steps_ms: dict[str, float]) -> None:
    """Time each step of a tick (module globals called by name: the primary's steps, and
    the one agent loop's ``act``) into STEPS_MS."""
    for name in STEPS:
        module = agent_loop if name == "act" else primary
        fn = getattr(module, name)

        def make(fn=fn, name=name):
            if asyncio.iscoroutinefunction(fn):
                async def timed_async(*a, **k):
                    t0 = time.perf_counter()
                    try:
                        return await fn(*a, **k)
                    finally:
                        steps_ms[name] = steps_ms.get(name, 0.0) + (time.perf_counter() - t0) * 1000
                return timed_async

            def timed(*a, **k):
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    steps_ms[name] = steps_ms.get(name, 0.0) + (time.perf_counter() - t0) * 1000
            return timed

        setattr(module, name, make())


def run(ticks: int, windows: list[int], ids_file: Path | None = None) -> dict[str, object]:
    fake = FakeAnthropic(default=reply_400).start()
    home = Path(tempfile.mkdtemp()) / "agent"
    rt = Runtime(load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": fake.url}),
                 NullFace())
    rt.start()
    model_ms = time_model_calls(rt)
    commits = getattr(rt, "commits", None)
    steps_ms: dict[str, float] = {}
    instrument(steps_ms)
    steps: dict[int, list[dict[str, float]]] = {w: [] for w in windows}
    if ids_file is not None:
        async def native_id() -> int:
            return threading.get_native_id()

        loop_tid = asyncio.run_coroutine_threadsafe(native_id(), rt.loop).result()
    measured = {w: range(max(1, w - WINDOW // 2), max(1, w - WINDOW // 2) + WINDOW) for w in windows}
    overhead: dict[int, list[float]] = {w: [] for w in windows}
    commit_ms: dict[int, list[float]] = {w: [] for w in windows}
    t_start = time.perf_counter()
    for tick in range(1, ticks + 1):
        window = next((w for w, r in measured.items() if tick in r), None)
        if window is not None and commits is not None:
            commits.flush()
        before = len(model_ms)
        steps_ms.clear()
        t0 = time.perf_counter()
        asyncio.run_coroutine_threadsafe(run_turn(rt, f"question {tick}"), rt.loop).result()
        total = (time.perf_counter() - t0) * 1000
        if window is not None:
            overhead[window].append(total - sum(model_ms[before:]))
            steps[window].append({**steps_ms, "infer_and_parse": steps_ms.get("infer_and_parse", 0.0)
                                  - sum(model_ms[before:])})
            if commits is not None:
                commits.flush()
                commit_ms[window].append(commits.commit_ms[-1])
            else:  # before issue 10: the commit ran inside the tick
                commit_ms[window].append(steps_ms.get("commit", 0.0))
    build_s = time.perf_counter() - t_start
    if ids_file is not None:
        worker = commits._thread if commits is not None else None
        ids_file.write_text(json.dumps({"loop": loop_tid, "worker": worker.native_id if worker else None}))
    t1 = time.perf_counter()
    rt.stop()
    stop_ms = (time.perf_counter() - t1) * 1000
    if commits is not None:
        commits.wait_packed()
    fake.stop()
    out: dict[str, object] = {"ticks": ticks, "reply_words": 400, "machine_load_at_end": load(),
                              "run_seconds": round(build_s, 1)}
    for w in windows:
        out[f"around tick {w}"] = {
            "harness_overhead": summary(overhead[w]),
            "commit_on_worker (off the critical path)": summary(commit_ms[w]),
            "steps_median_ms (infer_and_parse without the model)": {
                name: round(statistics.median(s.get(name, 0.0) for s in steps[w]), 2) for name in STEPS},
        }
    if windows:
        first, last = windows[0], windows[-1]
        out["ratio_overhead_last_over_first"] = round(
            out[f"around tick {last}"]["harness_overhead"]["median_ms"]  # type: ignore[index]
            / out[f"around tick {first}"]["harness_overhead"]["median_ms"], 2)  # type: ignore[index]
    out["model_call_ms (SDK + fake, not counted)"] = summary(model_ms)
    out["packs: repack runs, ms"] = summary(commits.pack_ms) if commits is not None and commits.pack_ms else None
    out["stop: flush of pending commits, ms"] = round(stop_ms, 1)
    out["repository at the end"] = repo_stats(home)
    shutil.rmtree(home.parent, ignore_errors=True)
    return out


def count_fsyncs(ticks: int = 40) -> dict[str, object]:
    """Run TICKS turns under strace and count fsync/fdatasync per tick: loop thread, commit worker,
    git processes, other threads (SQLite runs on the loop thread)."""
    if shutil.which("strace") is None:
        return {"error": "strace not installed"}
    with tempfile.TemporaryDirectory() as tmp:
        trace, ids = Path(tmp) / "trace", Path(tmp) / "ids.json"
        subprocess.run(["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync,sync_file_range,syncfs", "-o",
                        str(trace), sys.executable, __file__, "--ticks", str(ticks), "--windows", "",
                        "--ids-file", str(ids), "--no-save"], check=True, capture_output=True)
        who = json.loads(ids.read_text())
        pids: Counter[str] = Counter()
        git_pids: set[str] = set()
        for line in trace.read_text().splitlines():
            match = re.match(r"(\d+)\s+(\w+)\(", line)
            if match and match.group(2).startswith(("fsync", "fdatasync", "sync")):
                pids[match.group(1)] += 1
        for line in trace.read_text().splitlines():
            if "execve" in line and "git" in line:
                git_pids.add(line.split()[0])
        loop_n = pids.pop(str(who["loop"]), 0)
        worker_n = pids.pop(str(who["worker"]), 0)
        other = sum(pids.values())
    return {"ticks": ticks, "loop_thread_per_tick": round(loop_n / ticks, 2),
            "commit_worker_per_tick": round(worker_n / ticks, 2),
            "other_threads_and_git_per_tick": round(other / ticks, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ticks", type=int, default=5000)
    parser.add_argument("--windows", default=None, help="comma-separated ticks to measure around")
    parser.add_argument("--fsyncs", action="store_true", help="also count fsyncs per tick under strace")
    parser.add_argument("--ids-file", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-save", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.windows is None:
        windows = [w for w in (10, 1000, 5000) if w <= args.ticks] or [args.ticks]
        windows = [min(w, args.ticks - WINDOW // 2) if w > WINDOW else w for w in windows]
    else:
        windows = [int(w) for w in args.windows.split(",") if w]
    out = {"machine_load_at_start": load(), **run(args.ticks, windows, args.ids_file)}
    if args.fsyncs:
        out["fsyncs"] = count_fsyncs()
    if not args.no_save:
        save("tick_overhead", out)


if __name__ == "__main__":
    main()
