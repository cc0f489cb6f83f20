"""Memory benchmarks (issue 3).

- `agent-memory-search' over 100,000 LTM items, timed server-side (the brain
  tool, argument checks included): target median <= 10 ms.
- Context assembly with 100,000 items in LTM and 200 in active memory:
  target median <= 5 ms.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amacs_server.config import load_config  # noqa: E402
from amacs_server.context.assemble import assemble  # noqa: E402
from amacs_server.memory import tools  # noqa: E402
from amacs_server.memory.items import Kind, MemoryItem, Tier  # noqa: E402
from bench.bench_tick import NullFace  # noqa: E402
from bench.common import save, summary  # noqa: E402

LTM_ITEMS = 100_000
ACTIVE_NOTES = 150
RUNS = 200


def words(rng: random.Random, vocab: list[str], n: int) -> str:
    # Zipf-like: a few words are common, most are rare, as in real notes.
    return " ".join(vocab[min(int(rng.paretovariate(1.1)) - 1, len(vocab) - 1)] for _ in range(n))


def main() -> None:
    from amacs_server.runtime import Runtime

    rng = random.Random(7)
    vocab = [f"w{i:05d}" for i in range(20_000)]
    home = Path(tempfile.mkdtemp()) / "agent"
    rt = Runtime(load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k"}), NullFace())
    mem = rt.memory
    t0 = time.perf_counter()
    with rt.ltm.transaction():
        for i in range(LTM_ITEMS):
            rt.ltm.put(MemoryItem(mem.mem_id(f"bulk.{i}", 1), Tier.RAM, Kind.NOTE, words(rng, vocab, 24)))
    load_s = time.perf_counter() - t0

    # Queries a person or agent would make: two words from something stored.
    queries = []
    for _ in range(RUNS):
        text = rt.ltm.get(mem.mem_id(f"bulk.{rng.randrange(LTM_ITEMS)}")).content.split()
        queries.append(" ".join(rng.sample(text, 2)))
    search_ms = []
    for q in queries:
        t = time.perf_counter()
        tools.memory_search(rt, q, {"limit": 10})
        search_ms.append((time.perf_counter() - t) * 1000)
    common_ms = []
    for _ in range(50):
        t = time.perf_counter()
        tools.memory_search(rt, "w00000 w00001", {"limit": 10})  # the two most common words
        common_ms.append((time.perf_counter() - t) * 1000)

    c = rt.consciousness
    for tick in range(1, 41):
        c.begin_tick(tick)
        mem.sync_state(c)
        mem.begin_chat(tick, words(rng, vocab, 30))
        mem.finish_chat(tick, words(rng, vocab, 60))
        mem.add_monologue(tick, words(rng, vocab, 12))
    for i in range(ACTIVE_NOTES):
        mem.create_note(f"note.{i}", words(rng, vocab, 40), Kind.NOTE, ())
    c.monologue_context_depth = 20
    c.chat_context_depth = 15
    mem.begin_chat(41, "what now?")
    snap = mem.snapshot(c)
    active = len(snap.all_items())
    assemble_ms = []
    for _ in range(RUNS):
        t = time.perf_counter()
        assemble(mem.snapshot(c))
        assemble_ms.append((time.perf_counter() - t) * 1000)
    save("memory", {
        "ltm_versions": rt.ltm.count(),
        "bulk_load_s": round(load_s, 1),
        "search_ms (two words from a stored item)": summary(search_ms),
        "search_ms (two most common words)": summary(common_ms),
        "active_items_in_context": active,
        "assemble_ms": summary(assemble_ms),
    })


if __name__ == "__main__":
    main()
