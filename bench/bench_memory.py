"""Memory benchmarks (issues 3 and 10).

- `agent-memory-search' over 100,000 LTM items (issue 13: FTS5's own bm25()),
  timed server-side (the brain tool, argument checks included).  The items are
  notes of Zipf English (function words in nearly every item, then a long
  tail); queries of common words, rare words, both, mid-frequency words, an
  exact phrase from a stored item, and two words from one: target median
  <= 10 ms, p99 <= 30 ms.  Each set reports n, wall and CPU time, and the
  1-minute load average before and after it.
- `agent-memory-search' on a real ``memory.db`` after 5,000 ticks (issue 10),
  built by the memory code as the runtime drives it each tick: consciousness
  versions, the person's input, a 400-word reply, a monologue line, scratchpad
  entries and notes.  Common words (in most items) and rare words: target
  median <= 10 ms, p90 <= 20 ms.
- Context assembly with 100,000 items in LTM and 200 in active memory:
  target median <= 5 ms.
"""

from __future__ import annotations

import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amacs_server.config import load_config  # noqa: E402
from amacs_server.context.assemble import assemble  # noqa: E402
from amacs_server.memory.items import Kind, MemoryItem, Tier  # noqa: E402
from amacs_server.tools import memory as tools  # noqa: E402
from bench.bench_tick import NullFace  # noqa: E402
from bench.common import save, summary  # noqa: E402

if TYPE_CHECKING:
    from amacs_server.runtime import Runtime

LTM_ITEMS = 100_000
ACTIVE_NOTES = 150
RUNS = 200
TICKS = 5_000
TICK_RUNS = 60

# English as an agent writes it: function words in nearly every reply, then a long tail.
ENGLISH = ("the of and to a in is it that for you this with on be as are was not have or by at "
           "from but can what all an if we your will one would there which so do about more up "
           "out they some has my use when file buffer function list code emacs org then also "
           "just like new first need should here how each make time into other see only way "
           "value line could these two may any after now where most over well because find "
           "change thread note test point key run return call mode").split()


def _cumulative(n: int) -> list[float]:
    """Cumulative Zipf weights (1/rank) of N words."""
    out, total = [], 0.0
    for rank in range(1, n + 1):
        total += 1 / rank
        out.append(total)
    return out


TAIL_WORDS = 20_000
_ENGLISH_CUM = _cumulative(len(ENGLISH))
_TAIL_CUM = _cumulative(TAIL_WORDS)


def prose(rng: random.Random, tail: list[str], n: int) -> str:
    """N words: a little over half common English (Zipf), the rest from a long Zipf tail of rarer words."""
    english = rng.choices(ENGLISH, cum_weights=_ENGLISH_CUM, k=n)
    rarer = rng.choices(tail, cum_weights=_TAIL_CUM, k=n)
    return " ".join(e if rng.random() < 0.55 else r for e, r in zip(english, rarer, strict=True))


def build_ticks(home: Path, ticks: int, seed: int = 11) -> Path:
    """A ``memory.db`` as TICKS ticks of the runtime leave it (loop/primary.py's writes,
    in its transactions: begin, observe, record and persist)."""
    from datetime import UTC, datetime, timedelta

    from amacs_server.memory.active import ActiveMemory
    from amacs_server.memory.ltm import LongTermMemory
    from amacs_server.state.consciousness import Consciousness, EvalResult

    rng = random.Random(seed)
    tail = tail_words(rng)
    home.mkdir(parents=True, exist_ok=True)
    ltm = LongTermMemory(home / "memory.db")
    ltm.db.execute("PRAGMA synchronous=OFF")  # building only: the file's content is the same
    mem = ActiveMemory(ltm, agent="amacs-instance-1")
    c = Consciousness()
    start = datetime(2025, 1, 1, tzinfo=UTC)
    moods = ["curious", "focused", "satisfied", "puzzled", "calm"]
    for tick in range(1, ticks + 1):
        now = start + timedelta(seconds=37 * tick)
        c.begin_tick(tick, now)
        with ltm.transaction():  # begin
            mem.sync_state(c, now)
            mem.begin_chat(tick, prose(rng, tail, rng.randint(8, 40)))
        with ltm.transaction():  # observe
            mem.set_events([], 0)
        c.mood = rng.choice(moods)
        c.confidence = round(rng.uniform(0.4, 0.95), 2)
        c.budget.cost_so_far = round(c.budget.cost_so_far + rng.uniform(0.001, 0.02), 6)
        if rng.random() < 0.6:
            c.last_eval_result = EvalResult(True, result=prose(rng, tail, rng.randint(1, 12)))
        else:
            c.last_eval_result = EvalResult.skipped_result()
        with ltm.transaction():  # record and persist
            mem.add_monologue(tick, prose(rng, tail, rng.randint(10, 25)))
            if tick % 4 == 0:
                mem.add_scratchpad(tick, prose(rng, tail, 4), None, prose(rng, tail, rng.randint(20, 80)))
            mem.finish_chat(tick, prose(rng, tail, 400))
            mem.sync_state(c, now)
        if tick % 50 == 0:
            mem.create_note(f"note-{tick}", prose(rng, tail, rng.randint(30, 120)), Kind.NOTE, ("bench",))
        if tick % 150 == 0:
            mem.mutate(mem.mem_id(f"note-{tick - 100}"), prose(rng, tail, rng.randint(30, 120)))
    ltm.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ltm.close()
    return home / "memory.db"


def ticks_search(ticks: int = TICKS) -> dict[str, object]:
    """Search timings on a memory.db after TICKS ticks: common and rare words."""
    from amacs_server.memory.ltm import LongTermMemory

    home = Path(tempfile.mkdtemp()) / "agent"
    t0 = time.perf_counter()
    path = build_ticks(home, ticks)
    build_s = time.perf_counter() - t0
    ltm = LongTermMemory(path)
    rng = random.Random(3)
    total = ltm.count()
    docs = ltm.db.execute("SELECT count(*) FROM items WHERE kind IN ('message', 'monologue', 'note')").fetchone()[0]

    def df(word: str) -> int:
        return int(ltm.db.execute("SELECT count(*) FROM items_fts WHERE items_fts MATCH ?",
                                  (f'"{word}"',)).fetchone()[0])

    # Query words drawn from recent replies, sorted by how many versions hold them.
    seen: dict[str, int] = {}
    for (text,) in ltm.db.execute("SELECT text FROM items WHERE kind='message' ORDER BY id DESC LIMIT 40"):
        for w in set(re.findall(r"[a-z0-9]+", text)) - set(ENGLISH) - seen.keys():
            seen[w] = df(w)
    rare_words = sorted(w for w, n in seen.items() if n <= 30)
    mid_words = sorted(w for w, n in seen.items() if 300 <= n <= 2000)
    common = [" ".join(rng.sample(ENGLISH[:12], rng.randint(1, 3))) for _ in range(TICK_RUNS)]
    rare = [" ".join(rng.sample(rare_words, 2)) for _ in range(TICK_RUNS)]
    mid = [" ".join(rng.sample(mid_words, 2)) for _ in range(TICK_RUNS)]
    mixed = [f"{rng.choice(ENGLISH[:20])} {rng.choice(rare_words)}" for _ in range(TICK_RUNS)]
    out: dict[str, object] = {"ticks": ticks, "versions": total, "build_s": round(build_s, 1),
                              "db_mb": round(path.stat().st_size / 1e6, 1),
                              "versions_with_'the'": df("the"), "versions_with_'emacs'": df("emacs"),
                              "chat_monologue_note_versions": docs, "load_avg_1min_before": os.getloadavg()[0]}
    for label, queries in (("common words, in most items", common), ("rare words, in <= 30 versions", rare),
                           ("words in 300..2000 versions", mid), ("common + rare", mixed)):
        timed(label, queries, lambda q: ltm.search(q, limit=10, agent_brain="amacs-instance-1:primary"), out)
    out["load_avg_1min_after"] = os.getloadavg()[0]
    ltm.close()
    return out


def words(rng: random.Random, vocab: list[str], n: int) -> str:
    # Zipf-like: a few words are common, most are rare, as in real notes.
    return " ".join(vocab[min(int(rng.paretovariate(1.1)) - 1, len(vocab) - 1)] for _ in range(n))


def tail_words(rng: random.Random) -> list[str]:
    """TAIL_WORDS made-up words for the long tail, in a random Zipf order."""
    tail = [f"{a}{b}{c}" for a in ("ka", "lo", "mi", "nu", "pe", "ra", "si", "tu", "vo", "ze")
            for b in ("bar", "cen", "dol", "fim", "gos", "hul", "jin", "kep", "lum", "mor")
            for c in range(TAIL_WORDS // 100)]
    rng.shuffle(tail)
    return tail


def timed(label: str, queries: list[str], run: Callable[[str], object], out: dict[str, object]) -> None:
    """Run each of QUERIES once; put their wall and CPU times and the load into OUT under LABEL."""
    load = os.getloadavg()[0]
    ms, cpu = [], []
    for q in queries:
        t, c = time.perf_counter(), time.thread_time()
        run(q)
        ms.append((time.perf_counter() - t) * 1000)
        cpu.append((time.thread_time() - c) * 1000)
    out[f"search_ms ({label})"] = {**summary(ms), "load_avg_1min": [load, os.getloadavg()[0]]}
    out[f"search_cpu_ms ({label})"] = summary(cpu)


def bulk_search(rt: Runtime, rng: random.Random) -> dict[str, object]:
    """Search timings over LTM_ITEMS notes of Zipf English, through the brain tool."""
    mem, ltm = rt.mind.memory, rt.mind.ltm
    tail = tail_words(rng)
    t0 = time.perf_counter()
    with ltm.transaction():
        for i in range(LTM_ITEMS):
            ltm.put(MemoryItem(mem.mem_id(f"bulk.{i}", 1), Tier.RAM, Kind.NOTE, prose(rng, tail, rng.randint(20, 120))))
    out: dict[str, object] = {"items": ltm.count(), "build_s": round(time.perf_counter() - t0, 1),
                              "cpus": os.cpu_count()}
    # Document frequencies from FTS5's own vocabulary (the bench's query sets only).
    ltm.db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.bench_vocab USING fts5vocab(main, items_fts, row)")
    df = dict(ltm.db.execute("SELECT term, doc FROM temp.bench_vocab"))
    rare_words = sorted(w for w, n in df.items() if 5 <= n <= 30)
    mid_words = sorted(w for w, n in df.items() if 300 <= n <= 2000)
    out["items_with_'the'"], out["items_with_'emacs'"] = df["the"], df["emacs"]
    texts = [str(ltm.get(mem.mem_id(f"bulk.{rng.randrange(LTM_ITEMS)}")).content).split() for _ in range(RUNS)]
    sets = {
        "common words, in most items": [" ".join(rng.sample(ENGLISH[:12], rng.randint(1, 3))) for _ in range(RUNS)],
        "rare words, in 5..30 items": [" ".join(rng.sample(rare_words, 2)) for _ in range(RUNS)],
        "common + rare": [f"{rng.choice(ENGLISH[:20])} {rng.choice(rare_words)}" for _ in range(RUNS)],
        "words in 300..2000 items": [" ".join(rng.sample(mid_words, 2)) for _ in range(RUNS)],
        "three words in a row from a stored item": [" ".join(t[(i := rng.randrange(len(t) - 2)):i + 3])
                                                   for t in texts],
        "two words from a stored item": [" ".join(rng.sample(t, 2)) for t in texts],
    }
    for label, queries in sets.items():
        timed(label, queries, lambda q: tools.memory_search(rt, q, {"limit": 10}), out)
    return out


def main() -> None:
    from amacs_server.runtime import Runtime

    rng = random.Random(7)
    vocab = [f"w{i:05d}" for i in range(20_000)]
    home = Path(tempfile.mkdtemp()) / "agent"
    rt = Runtime(load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k"}), NullFace())
    mem = rt.mind.memory
    results: dict[str, object] = {f"over_{LTM_ITEMS}_items": bulk_search(rt, rng)}
    if "--search-only" in sys.argv:
        save("memory_search", results)
        return

    c = rt.mind.consciousness
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
        **results,
        "after_5000_ticks": ticks_search(),
        "active_items_in_context": active,
        "assemble_ms": summary(assemble_ms),
    })


if __name__ == "__main__":
    main()
