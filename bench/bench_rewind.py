"""Rewind and fork on a long home (issue 26): their time, and what a tick costs on disk.

The home is made by T real turns (the server's Runtime and turn loop, each tick
committed by the commit worker) against a zero-latency fake model: a 60-word
reply, a scratchpad note every 10th tick, a memory note made every 25th and
changed every 50th.  Then:

- disk per tick: ``.git`` after a repack, over T, split by path (what the tick
  state and skills/ add is the "after" minus "before": the other paths are what
  every tick committed before ticks were restorable), and memory.db over T;
- fork: N forks at random ticks into new folders, each timed;
- rewind: N rewinds of a copy of the home (the copy not timed) to random ticks.

    .venv/bin/python bench/bench_rewind.py [--ticks 5000] [--n 10] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from amacs_server.config import load_config  # noqa: E402
from amacs_server.loop.primary import run_turn  # noqa: E402
from amacs_server.memory.items import Kind  # noqa: E402
from amacs_server.persistence import history  # noqa: E402
from amacs_server.runtime import Runtime  # noqa: E402
from bench.bench_history import VOCABULARY  # noqa: E402
from bench.common import save, summary  # noqa: E402
from tests.fake_anthropic import FakeAnthropic, Reply  # noqa: E402
from tests.test_memory import SilentFace  # noqa: E402


def answer(body: dict) -> Reply:
    rng = random.Random(len(body["messages"]))
    data = {"eval": None, "reply": " ".join(rng.choice(VOCABULARY) for _ in range(60)), "mood": "calm",
            "confidence": 0.7, "monologue": " ".join(rng.choice(VOCABULARY) for _ in range(12))}
    if rng.random() < 0.1:
        data["scratchpad"] = {"heading": rng.choice(VOCABULARY), "thread": None,
                              "content": " ".join(rng.choice(VOCABULARY) for _ in range(30))}
    return Reply(json.dumps(data))


# A home grown by thousands of turns spends more than the default budget ($5, ~8,000 of these turns):
# its person raised the limit, or every later tick would be a "budget limit reached" with no reply.
GROWN_BUDGET = "1000000"


def grown_config(home: Path, url: str) -> dict[str, str]:
    """The environment a home is grown (or a turn timed) in: the fake model at URL, the limit raised."""
    return {"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": url,
            "AMACS_BUDGET_LIMIT": GROWN_BUDGET}


def answered_turn(rt: Runtime, fake: FakeAnthropic, text: str) -> None:
    """A turn for TEXT that asked the model: one that did not (the budget reached, an error) is no
    tick of the workload, and the home grown of it would be lighter than the one it stands for."""
    asked = len(fake.requests)
    asyncio.run_coroutine_threadsafe(run_turn(rt, text), rt.loop).result(60)
    if len(fake.requests) == asked:
        tick = rt.mind.consciousness.current_tick
        raise RuntimeError(f"tick {tick} of the workload made no model call: see {rt.config.home}/agent-chat.org")


def build(home: Path, ticks: int) -> float:
    """T turns on HOME; returns the seconds they took."""
    fake = FakeAnthropic(default=answer).start()
    rt = Runtime(load_config(grown_config(home, fake.url)), SilentFace(), turn=run_turn)
    rt.start()
    rng = random.Random(5)
    t0 = time.perf_counter()
    try:
        for tick in range(1, ticks + 1):
            answered_turn(rt, fake, " ".join(rng.choice(VOCABULARY) for _ in range(20)))
            if tick % 25 == 0:
                name = f"note-{tick}"
                done = asyncio.run_coroutine_threadsafe(_memory(rt, name, tick), rt.loop)
                done.result(30)
            if tick % 500 == 0:
                print(f"  {tick} ticks, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        rt.mind.commits.flush(600)
    finally:
        rt.stop(grace=30)
        fake.stop()
    return time.perf_counter() - t0


async def _memory(rt: Runtime, name: str, tick: int) -> None:
    rt.mind.memory.create_note(name, {"text": f"made at {tick}"}, Kind.NOTE, ())
    if tick % 50 == 0:
        rt.mind.memory.mutate(rt.mind.memory.mem_id(f"note-{tick - 25}"), {"text": f"changed at {tick}"})


def git(home: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(home), *args], capture_output=True, text=True, check=True).stdout


def disk_by_path(home: Path) -> dict[str, int]:
    """Bytes on disk (packed, after a full repack) of every object, by the path it was committed at."""
    git(home, "repack", "-a", "-d", "-q", "--window=10", "--depth=50")
    objects = git(home, "rev-list", "--objects", "--all")
    lines = [line.split(" ", 1) for line in objects.splitlines()]
    check = subprocess.run(["git", "-C", str(home), "cat-file", "--batch-check=%(objectname) %(objecttype) "
                            "%(objectsize:disk)"], input="\n".join(sha for sha, *_ in lines) + "\n",
                           capture_output=True, text=True, check=True).stdout
    sizes = {sha: (kind, int(n)) for sha, kind, n in (line.split() for line in check.splitlines())}
    out: dict[str, int] = {}
    for sha, *rest in lines:
        kind, n = sizes[sha]
        path = rest[0] if rest and kind == "blob" else f"({kind}s)"
        key = "chat/ and agent-chat.org" if path.startswith("chat/") or path == "agent-chat.org" else (
            "monologue" if path.startswith("monologue") else "skills/" if path.startswith("skills/") else path)
        out[key] = out.get(key, 0) + n
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ticks", type=int, default=5000)
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--keep", help="make (or reuse) the home in this folder")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="amacs-bench-rewind-"))
    home = Path(args.keep) if args.keep else tmp / "home"
    result: dict[str, object] = {"ticks": args.ticks, "load": os.getloadavg()}
    if not (home / "tick-state.json").exists():
        result["build_s"] = round(build(home, args.ticks), 1)
    last = history.read_state(home)
    assert last is not None
    ticks = int(last["tick"])
    by_path = disk_by_path(home)
    total = sum(by_path.values())
    added = by_path.get(history.STATE_FILE, 0) + by_path.get("skills/", 0)
    result["disk"] = {
        "git_bytes_per_tick_after": round(total / ticks),
        "git_bytes_per_tick_before": round((total - added) / ticks),
        "tick_state_bytes_per_tick": round(by_path.get(history.STATE_FILE, 0) / ticks),
        "by_path_bytes": by_path,
        "memory_db_bytes_per_tick": round((home / "memory.db").stat().st_size / ticks),
        "tick_state_file_bytes": (home / history.STATE_FILE).stat().st_size,
    }
    rng = random.Random(3)
    forks, rewinds = [], []
    for i in range(args.n):
        tick = rng.randint(1, ticks - 1)
        t0 = time.perf_counter()
        history.fork(home, tick, tmp / f"fork-{i}")
        forks.append((time.perf_counter() - t0) * 1000)
        shutil.rmtree(tmp / f"fork-{i}")
    for i in range(args.n):
        copy = tmp / f"copy-{i}"
        shutil.copytree(home, copy, symlinks=True)
        tick = rng.randint(1, ticks - 1)
        t0 = time.perf_counter()
        history.rewind(copy, tick)
        rewinds.append((time.perf_counter() - t0) * 1000)
        shutil.rmtree(copy)
    result["fork"] = summary(forks)
    result["rewind"] = summary(rewinds)
    result["load_after"] = os.getloadavg()
    save("bench_rewind", result)
    if not args.keep:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
