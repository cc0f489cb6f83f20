"""1k and 20k forks interleaved (the lead's lead-fork-ab.py, 2026-11-29f), with the CPU of each fork's
history part (_history_up_to: links, the walk's pack-objects) apart.  sc7's copy: the homes of each DIR
(home-1000, home-20000), all interleaved.  Usage: fork-ab-same.py ROUNDS DIR..."""
import os
import random
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, "/work/bench-src-sc7")
from amacs_server.persistence import history  # noqa: E402
from bench.bench_flat import as_served, copy_home  # noqa: E402


def cpu():
    a = resource.getrusage(resource.RUSAGE_SELF)
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


STAGES = ("_history_up_to", "_check_out", "_memory_from_snapshot", "_memory_up_to")
parts = {name: [] for name in STAGES}


def timing(name):
    real = getattr(history, name)

    def timed(*args, **kw):
        c = cpu()
        try:
            return real(*args, **kw)
        finally:
            parts[name].append((cpu() - c) * 1000)
    setattr(history, name, timed)


for name in STAGES:
    timing(name)
homes = {}
DIRS = [Path(d) for d in sys.argv[2:]]
KEYS = [(d, size) for d in DIRS for size in (1000, 20000)]
AB = Path("/work/bench-homes/flat-same/ab-tmp")
for d, size in KEYS:
    tmp = AB / f"{d.name}-h{size}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    copy_home(d / f"home-{size}", tmp / "served")
    as_served(tmp / "served")
    homes[d, size] = tmp
    last = history.last_tick(tmp / "served")
    history.fork(tmp / "served", last - 1, tmp / "f")
    shutil.rmtree(tmp / "f")
rng = random.Random(3)
res = {k: ([], [], []) for k in KEYS}
stage = {k: {n: [] for n in STAGES} for k in KEYS}
print("load", os.getloadavg(), time.strftime("%H:%M:%S"), flush=True)
for r in range(int(sys.argv[1])):
    back = rng.randint(1, 200)  # each home forked the same ticks back, this round
    for key, tmp in (list(homes.items()) if r % 2 == 0 else list(homes.items())[::-1]):  # order swapped each round
        last = history.last_tick(tmp / "served")
        for name in STAGES:
            parts[name].clear()
        c = cpu()
        t = time.perf_counter()
        history.fork(tmp / "served", last - back, tmp / "f")
        res[key][0].append((time.perf_counter() - t) * 1000)
        res[key][1].append((cpu() - c) * 1000)
        for name in STAGES:
            stage[key][name].append(sum(parts[name]))
            parts[name].clear()
        res[key][2].append(stage[key]["_history_up_to"][-1])
        shutil.rmtree(tmp / "f")
print("load", os.getloadavg(), time.strftime("%H:%M:%S"))


def q(v):
    v = sorted(v)
    return "%.0f / %.0f" % (statistics.median(v), v[int(0.9 * (len(v) - 1))])


for (d, size), (w, c, h) in res.items():
    print(d.name, size, "n", len(w), "wall", q(w), "cpu", q(c), "history part cpu", q(h))
for (d, size) in stage:
    print(d.name, size, "stages cpu medians:", ", ".join(f"{n} {statistics.median(v):.0f}" for n, v in stage[d, size].items()))
for d in DIRS:
    print(d.name, "ratio wall %.2f cpu %.2f history %.2f" % tuple(
        statistics.median(res[d, 20000][i]) / statistics.median(res[d, 1000][i]) for i in range(3)))
shutil.rmtree(AB)
