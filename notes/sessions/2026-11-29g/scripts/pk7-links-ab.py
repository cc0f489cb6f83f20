"""A/B, interleaved: a fork whose history part links every object file of the home (old, as at fcdf97b) vs one
that links only the packs it keeps and reads the rest through git's alternates (new, the worktree).
Both forks of each pair go to the same tick; 1k and 20k homes, as served.  Usage: links-ab.py ROUNDS"""
import ast
import os
import random
import re
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, "/work/wt-pk")
from amacs_server.persistence import history  # noqa: E402
from bench.bench_flat import as_served, copy_home  # noqa: E402

source = Path("/work/bench-homes/old_history.py").read_text()
tree = ast.parse(source)
[fn] = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "_history_up_to"]
namespace = dict(vars(history))
namespace["_LOOSE"] = re.compile(r"[0-9a-f]{38}(?:[0-9a-f]{24})?")
exec(compile(ast.Module(body=[fn], type_ignores=[]), "old_history", "exec"), namespace)
variants = {"old": namespace["_history_up_to"], "new": history._history_up_to}


def cpu():
    a = resource.getrusage(resource.RUSAGE_SELF)
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime) * 1000


base = Path("/work/bench-homes/lab-tmp")
shutil.rmtree(base, ignore_errors=True)
homes = {}
for size in (1000, 20000):
    homes[size] = base / f"h{size}"
    copy_home(Path(f"/work/bench-homes/flat/home-{size}"), homes[size] / "served")
    as_served(homes[size] / "served")
    history.fork(homes[size] / "served", history.last_tick(homes[size] / "served") - 1, homes[size] / "f")
    shutil.rmtree(homes[size] / "f")
rng = random.Random(3)
res = {(size, v): ([], []) for size in homes for v in variants}
print("load", os.getloadavg(), time.strftime("%H:%M:%S"))
for r in range(int(sys.argv[1])):
    for size, tmp in homes.items():
        tick = history.last_tick(tmp / "served") - rng.randint(1, 200)
        for v in (("old", "new") if r % 2 else ("new", "old")):
            history._history_up_to = variants[v]
            c, t = cpu(), time.perf_counter()
            history.fork(tmp / "served", tick, tmp / "f")
            res[size, v][0].append((time.perf_counter() - t) * 1000)
            res[size, v][1].append(cpu() - c)
            shutil.rmtree(tmp / "f")
print("load", os.getloadavg(), time.strftime("%H:%M:%S"))


def q(x):
    x = sorted(x)
    return "%.0f / %.0f" % (statistics.median(x), x[int(0.9 * (len(x) - 1))])


for (size, v), (w, c) in res.items():
    print(size, v, "n", len(w), "wall", q(w), "cpu", q(c))
for v in variants:
    print(v, "20k/1k: wall %.2f cpu %.2f" % (statistics.median(res[20000, v][0]) / statistics.median(res[1000, v][0]),
                                             statistics.median(res[20000, v][1]) / statistics.median(res[1000, v][1])))
shutil.rmtree(base)
