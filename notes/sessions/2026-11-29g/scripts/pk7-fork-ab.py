"""1k and 20k forks interleaved (the lead's lead-fork-ab.py, 2026-11-29f), with the CPU of each fork's
history part (_history_up_to: links, the walk's pack-objects) apart.  Usage: fork-ab.py ROUNDS"""
import os
import random
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, "/work/bench-src-pk7")
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
for size in (1000, 20000):
    tmp = Path("/work/bench-homes/ab-tmp/h%d" % size)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    copy_home(Path(f"/work/bench-homes/flat/home-{size}"), tmp / "served")
    as_served(tmp / "served")
    homes[size] = tmp
    last = history.last_tick(tmp / "served")
    history.fork(tmp / "served", last - 1, tmp / "f")
    shutil.rmtree(tmp / "f")
rng = random.Random(3)
res = {1000: ([], [], []), 20000: ([], [], [])}
stage = {1000: {n: [] for n in STAGES}, 20000: {n: [] for n in STAGES}}
print("load", os.getloadavg(), time.strftime("%H:%M:%S"))
for r in range(int(sys.argv[1])):
    for size, tmp in homes.items():
        last = history.last_tick(tmp / "served")
        for name in STAGES:
            parts[name].clear()
        c = cpu()
        t = time.perf_counter()
        history.fork(tmp / "served", last - rng.randint(1, 200), tmp / "f")
        res[size][0].append((time.perf_counter() - t) * 1000)
        res[size][1].append((cpu() - c) * 1000)
        for name in STAGES:
            stage[size][name].append(sum(parts[name]))
            parts[name].clear()
        res[size][2].append(stage[size]["_history_up_to"][-1])
        shutil.rmtree(tmp / "f")
print("load", os.getloadavg(), time.strftime("%H:%M:%S"))


def q(v):
    v = sorted(v)
    return "%.0f / %.0f" % (statistics.median(v), v[int(0.9 * (len(v) - 1))])


for size, (w, c, h) in res.items():
    print(size, "n", len(w), "wall", q(w), "cpu", q(c), "history part cpu", q(h))
for size in stage:
    print(size, "stages cpu medians:", ", ".join(f"{n} {statistics.median(v):.0f}" for n, v in stage[size].items()))
print("ratio wall %.2f cpu %.2f history %.2f" % tuple(statistics.median(res[20000][i]) / statistics.median(res[1000][i])
                                                    for i in range(3)))
shutil.rmtree("/work/bench-homes/ab-tmp")
