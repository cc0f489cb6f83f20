"""Cost against history (issue 12, item 8): start-up time and ``.git`` growth per tick
for a chat log of 1 MB, 10 MB and 50 MB.  Both must be flat.

Each home is built in the RFC format as one ``agent-chat.org`` (and a
``monologue.org`` of one line a tick), with ticks spread over the 24 months up
to now, as a home made before the log was split by month, with a
``memory.db`` that holds every tick (``--no-memory``: none) and no ``.git``.  Ticks are ~600 bytes (a 20-word input, a 60-word reply) of words
drawn from a made-up vocabulary (text that compresses as prose does); the case
``50MB-1MB-ticks`` has 50 ticks of ~1 MB (a person who pastes whole files),
where the 64 ticks start-up keeps are the whole file.

Per home:

- first start: ``Runtime(...)`` and the status Emacs gets at hello, then one
  turn (a home made before the split is split at its first tick) and its
  commit (the home's first: everything), then a repack;
- start-up: N fresh ``Runtime`` objects on the home (the server's start-up
  path: consciousness, the chat and monologue tails, memory.db, the status at
  hello), median/p90; with ``--emacs N``, also ``M-x amacs-shell`` -> ready in
  an interactive ``emacs -nw`` under tmux, as bench_startup measures it;
- growth: T turns with a 400-word reply (same vocabulary) from a zero-latency
  fake model, each followed by its commit; what each commit added to ``.git``
  (the on-disk size of its new objects: blobs, trees, the commit), median/p90,
  and the growth of the whole ``.git`` over the T ticks after a repack
  (amortized, with deltas);
- the per-tick cost of the commit over those T ticks: on the loop thread (the
  tick's end: the tick state written, the commit queued with what it needs)
  and on the commit worker (the commit, fsyncs included), median/p90.

The case ``5000-ticks`` is a home of 5,000 ticks of ~600 bytes.

    .venv/bin/python bench/bench_history.py [--n 20] [--ticks 60] [--emacs 10] [--only 1MB ...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from amacs_server import views  # noqa: E402
from amacs_server.config import load_config  # noqa: E402
from amacs_server.loop import primary  # noqa: E402
from amacs_server.loop.primary import run_turn  # noqa: E402
from amacs_server.memory.active import ActiveMemory  # noqa: E402
from amacs_server.memory.ltm import LongTermMemory  # noqa: E402
from amacs_server.persistence.chat_log import ChatLog  # noqa: E402
from amacs_server.persistence.monologue import MonologueLog  # noqa: E402
from amacs_server.runtime import Runtime  # noqa: E402
from amacs_server.state.consciousness import Consciousness  # noqa: E402
from bench.bench_tick import NullFace  # noqa: E402
from bench.common import save, summary  # noqa: E402
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json  # noqa: E402

# Words drawn at random from a vocabulary of 5,000 made-up ones: text that compresses about as
# prose does (zlib ~2.5x), so that a blob's size in .git is realistic.
_RNG = random.Random(12)
VOCABULARY = ["".join(_RNG.choice("etaoinshrdlcumwfgypbvkjxqz") for _ in range(_RNG.randint(2, 9)))
              for _ in range(5000)]
CASES = {"5000-ticks": (3, 600), "1MB": (1, 600), "10MB": (10, 600), "50MB": (50, 600), "50MB-1MB-ticks": (50, 1_000_000)}


def _text(rng: random.Random, size: int) -> str:
    words, n = [], 0
    while n < size:
        word = rng.choice(VOCABULARY)
        words.append(word)
        n += len(word) + 1
    return "\n".join(" ".join(words[j:j + 12]) for j in range(0, len(words), 12))


def build_home(home: Path, megabytes: int, tick_bytes: int, *, memory: bool = True) -> int:
    """An old-layout home: one agent-chat.org of MEGABYTES, ticks of ~TICK_BYTES spread over
    the 24 months up to now, and monologue.org; with MEMORY, a memory.db holding them all.
    Returns the number of ticks."""
    home.mkdir(parents=True, exist_ok=True)
    rng = random.Random(megabytes * 7 + tick_bytes)
    ticks = max(1, megabytes * 1_000_000 // tick_bytes)
    now = datetime.now(UTC).replace(microsecond=0)
    first = now - timedelta(days=730)
    chat, mono = [], ["#+TITLE: Monologue\n\n"]
    for tick in range(1, ticks + 1):
        stamp = (first + (now - first) * (tick / ticks) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        human = _text(rng, 120)
        reply = _text(rng, tick_bytes - 250)
        chat.append(f"* Tick {tick}\n:PROPERTIES:\n:TIMESTAMP: {stamp}\n:END:\n\n** Human\n{human}\n\n"
                    f"** Agent\n{reply}\n\n")
        mono.append(f"- [TICK {tick}][{stamp}] noted {' '.join(human[:60].split())}\n")
    (home / "agent-chat.org").write_text("".join(chat), encoding="utf-8")
    (home / "monologue.org").write_text("".join(mono), encoding="utf-8")
    if memory:  # as a long-lived home's: every exchange and monologue line in memory.db
        ltm = LongTermMemory(home / "memory.db")
        ActiveMemory(ltm, agent=load_config({"AMACS_HOME": str(home)}).identity).restore(
            Consciousness(), chat=[(e.tick, e.human, e.agent) for e in ChatLog(home / "agent-chat.org").read()],
            monologue=MonologueLog(home / "monologue.org").read())
        ltm.close()
    return ticks


def reply(_body: dict) -> Reply:
    """A 400-word reply in the made-up vocabulary."""
    rng = random.Random()
    return Reply(agent_json(" ".join(rng.choice(VOCABULARY) for _ in range(400)), monologue="Answered at length."),
                 chunks=20)


def commit_added(home: Path) -> int:
    """Bytes on disk of the objects HEAD's commit added: the commit, its new trees and blobs
    (the whole .git for a home's first commit)."""
    if subprocess.run(["git", "-C", str(home), "rev-parse", "-q", "--verify", "HEAD~1"],
                      capture_output=True).returncode != 0:
        return git_bytes(home)
    new = subprocess.run(["git", "-C", str(home), "diff-tree", "-r", "-t", "--no-commit-id", "HEAD~1", "HEAD"],
                         capture_output=True, text=True, check=True).stdout
    shas = [line.split()[3] for line in new.splitlines() if not line.split()[3].startswith("0000000")]
    head = subprocess.run(["git", "-C", str(home), "rev-parse", "HEAD", "HEAD^{tree}"], capture_output=True,
                          text=True, check=True).stdout.split()
    sizes = subprocess.run(["git", "-C", str(home), "cat-file", "--batch-check=%(objectsize:disk)"],
                           input="\n".join([*head, *shas]) + "\n", capture_output=True, text=True, check=True)
    return sum(int(n) for n in sizes.stdout.split())


def kb(samples: list[float]) -> dict[str, float]:
    """summary() of byte counts, in KB."""
    return {k.replace("_ms", "_KB"): (v if k == "n" else round(v / 1e3, 1))
            for k, v in summary(samples).items()}


def git_bytes(home: Path) -> int:
    return sum(f.stat().st_size for f in (home / ".git").rglob("*") if f.is_file())


def loose_objects(home: Path) -> int:
    out = subprocess.run(["git", "-C", str(home), "count-objects", "-v"], capture_output=True, text=True).stdout
    return int(dict(line.split(": ", 1) for line in out.splitlines())["count"])


def runtime(home: Path, url: str) -> Runtime:
    return Runtime(load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "sk-ant-bench",
                                "ANTHROPIC_BASE_URL": url}), NullFace())


def start_ms(home: Path, url: str) -> float:
    """One start: the runtime and the status sent at hello (what start-up reads), in ms."""
    t0 = time.perf_counter()
    rt = runtime(home, url)
    views.status(rt)
    ms = (time.perf_counter() - t0) * 1000
    rt.mind.ltm.close()
    rt.transcript.close()
    return ms


LOOP_MS: list[float] = []  # each tick's end on the loop thread: tick state, commit queued


def _timed_commit(real):  # type: ignore[no-untyped-def]
    def timed(rt: Runtime, message: str) -> None:
        t0 = time.perf_counter()
        real(rt, message)
        LOOP_MS.append((time.perf_counter() - t0) * 1000)
    return timed


primary._commit = _timed_commit(primary._commit)  # type: ignore[attr-defined]


def turns(home: Path, url: str, count: int) -> tuple[Runtime, list[float], list[float]]:
    """COUNT turns on a started runtime; per tick: the turn's ms and what its commit added to .git."""
    LOOP_MS.clear()
    rt = runtime(home, url)
    rt.start()
    turn_ms, added = [], []
    for i in range(count):
        t0 = time.perf_counter()
        asyncio.run_coroutine_threadsafe(run_turn(rt, f"question {i}"), rt.loop).result()
        turn_ms.append((time.perf_counter() - t0) * 1000)
        rt.mind.commits.flush()
        added.append(float(commit_added(home)))
    return rt, turn_ms, added


def emacs_ready(home: Path, n: int) -> dict[str, float] | None:
    if n <= 0 or not (shutil.which("emacs") and shutil.which("tmux")):
        return None
    from bench.bench_startup import one_sample  # noqa: PLC0415

    tmp = Path(tempfile.mkdtemp(prefix="bench-history-emacs-"))
    try:
        return summary([one_sample(home, ["amacs-shell"], tmp)["ready"] for _ in range(n)])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_case(name: str, megabytes: int, tick_bytes: int, args: argparse.Namespace, url: str) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-history-"))
    home = tmp / "agent"
    try:
        t0 = time.perf_counter()
        ticks = build_home(home, megabytes, tick_bytes, memory=not args.no_memory)
        out: dict[str, object] = {"ticks": ticks, "agent-chat.org_MB": round(
            (home / "agent-chat.org").stat().st_size / 1e6, 1), "memory.db_MB": round(
            (home / "memory.db").stat().st_size / 1e6, 1) if (home / "memory.db").exists() else 0,
            "build_s": round(time.perf_counter() - t0, 1)}
        first_ms = start_ms(home, url)
        rt, first_turn, first_growth = turns(home, url, 1)
        rt.stop()
        rt.mind.commits.wait_packed()
        subprocess.run(["git", "-C", str(home), "-c", "pack.threads=1", "repack", "-d", "-q"], check=True)
        out["first start (old layout): start ms, first turn ms (split, SDK import), first commit's .git MB"] = [
            round(first_ms), round(first_turn[0]), round(first_growth[0] / 1e6, 1)]
        out["files after the first turn"] = {
            "agent-chat.org_KB": round((home / "agent-chat.org").stat().st_size / 1e3, 1),
            "monologue.org_KB": round((home / "monologue.org").stat().st_size / 1e3, 1),
            "chat/": len(list((home / "chat").glob("*.org"))), "monologue/": len(list((home / "monologue").glob("*.org")))}
        out["start-up ms (Runtime + status)"] = summary([start_ms(home, url) for _ in range(args.n)])
        ready = emacs_ready(home, args.emacs)
        if ready is not None:
            out["M-x amacs-shell -> ready ms (emacs -nw, tmux)"] = ready
        size0 = git_bytes(home)
        rt, turn_ms, growth = turns(home, url, args.ticks)
        out["per tick on the loop thread: tick state + commit queued, ms"] = summary(LOOP_MS)
        if getattr(rt.mind.commits, "snapshot_ms", None):
            out["of which the snapshot of the tracked files, ms"] = summary(rt.mind.commits.snapshot_ms)
        out["per tick on the commit worker: the commit, ms"] = summary(rt.mind.commits.commit_ms)
        rt.stop()
        rt.mind.commits.wait_packed()
        subprocess.run(["git", "-C", str(home), "-c", "pack.threads=1", "repack", "-d", "-q", "--window=4"],
                       check=True)
        out["turn ms (fake model, 400 words)"] = summary(turn_ms)
        out[".git added by each tick's commit (new objects, on disk)"] = kb(growth)
        out[f".git growth per tick over {args.ticks} ticks after a repack, KB"] = round(
            (git_bytes(home) - size0) / args.ticks / 1e3, 1)
        out["agent-chat.org KB at the end"] = round((home / "agent-chat.org").stat().st_size / 1e3, 1)
        out["loose objects left"] = loose_objects(home)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20, help="starts per home")
    parser.add_argument("--ticks", type=int, default=60, help="ticks whose commits are measured")
    parser.add_argument("--emacs", type=int, default=5, help="M-x amacs-shell samples per home (0: none)")
    parser.add_argument("--only", action="append", choices=list(CASES))
    parser.add_argument("--no-memory", action="store_true", help="homes without memory.db (faster to build)")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    fake = FakeAnthropic(default=reply).start()
    result: dict[str, object] = {"load_before": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
    try:
        for name in args.only or list(CASES):
            result[name] = run_case(name, *CASES[name], args, fake.url)
            print(name, result[name], flush=True)
    finally:
        fake.stop()
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if not args.no_save:
        save("history", result)


if __name__ == "__main__":
    main()
