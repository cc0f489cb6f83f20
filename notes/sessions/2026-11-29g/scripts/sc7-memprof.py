"""Where _memory_from_snapshot's CPU goes, 1k against 20k (flat-same homes), interleaved; n rounds."""
import resource, shutil, statistics, sys, time, sqlite3, random
from pathlib import Path
sys.path.insert(0, "/work/bench-src-sc7")
from amacs_server.persistence import history  # noqa: E402
from amacs_server.persistence.history import memory_snapshots  # noqa: E402
from bench.bench_flat import as_served, copy_home  # noqa: E402

def cpu():
    a = resource.getrusage(resource.RUSAGE_SELF); b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime) * 1000

AB = Path("/work/bench-homes/flat-same/mp-tmp"); shutil.rmtree(AB, ignore_errors=True)
homes = {}
for s in (1000, 20000):
    h = AB / f"h{s}" / "served"; h.parent.mkdir(parents=True); copy_home(Path(f"home-{s}"), h); as_served(h); homes[s] = h
rng = random.Random(3)
out = {s: {"all": [], "copy": [], "rows": []} for s in homes}
for r in range(int(sys.argv[1])):
    back = rng.randint(1, 200)
    for s, h in homes.items():
        last = history.last_tick(h); commit = history.tick_commit(h, last - back); state = history.state_at(h, commit, last - back)
        dest = AB / f"h{s}" / "m.db"
        c = cpu(); ok = history._memory_from_snapshot(h, dest, state); out[s]["all"].append(cpu() - c)
        assert ok
        snaps = [(at, p) for have, at, p in memory_snapshots(h)]
        at = snaps[-1][0]
        out[s]["rows"].append(int(state["ltm_max_id"]) - at)
        for p in AB.glob(f"h{s}/m.db*"): p.unlink()
        c = cpu(); shutil.copyfile(snaps[-1][1], dest); out[s]["copy"].append(cpu() - c); dest.unlink()
for s, d in out.items():
    print(s, {k: round(statistics.median(v), 1) for k, v in d.items()}, "snapshot", snaps and [p.stat().st_size for _a, p in snaps])
shutil.rmtree(AB)
