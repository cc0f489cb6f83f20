"""CPU of the walk's pack-objects alone (as history._history_up_to runs it, kept packs marked .keep), per fork
to last-5..195 every 10th, 1k and 20k interleaved; and of rev-list --objects of the same walk."""
import os
import resource
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, "/work/bench-src-pk7")
from amacs_server.persistence import history  # noqa: E402
from amacs_server.persistence.git_repo import DELTA_WINDOW, packed_records  # noqa: E402
from bench.bench_flat import as_served, copy_home  # noqa: E402


def child_cpu():
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (c.ru_utime + c.ru_stime) * 1000


base = Path("/work/bench-homes/pt-tmp")
shutil.rmtree(base, ignore_errors=True)
setups = {}
for size in (1000, 20000):
    home = base / f"h{size}"
    copy_home(Path(f"/work/bench-homes/flat/home-{size}"), home)
    as_served(home)
    last = history.last_tick(home)
    walks = []
    for back in range(5, 201, 10):
        commit = history.tick_commit(home, last - back)
        kept = set(history._packs_before(home, commit))
        whole = [sha for sha, names in packed_records(home) if names and names <= kept][-1]
        walks.append((commit, whole, kept))
    setups[size] = (home, walks)
VARIANTS = [("-c", "pack.threads=1", DELTA_WINDOW), ("-c", "pack.threads=1", "--window=0"),
            ("-c", "pack.compression=1", DELTA_WINDOW), ("-c", "pack.threads=1", DELTA_WINDOW, "--depth=50")]
res = {size: [[] for _ in VARIANTS] for size in setups}
sizes = {size: [[] for _ in VARIANTS] for size in setups}
print("load", os.getloadavg())
for i in range(20):
    for size, (home, walks) in setups.items():
        commit, whole, kept = walks[i]
        pack = home / ".git" / "objects" / "pack"
        for name in kept:
            (pack / name).with_suffix(".keep").touch()
        out = base / "out"
        out.mkdir(exist_ok=True)
        for v, extra in enumerate(VARIANTS):
            c = child_cpu()
            subprocess.run(["git", "-C", str(home), *extra[:2], "pack-objects", "--revs", "--honor-pack-keep", *extra[2:], "-q",
                            str(out / "pack")], input=f"{commit}\n^{whole}\n", text=True, capture_output=True, check=True)
            res[size][v].append(child_cpu() - c)
            sizes[size][v].append(sum(f.stat().st_size for f in out.glob("*.pack")))
            for f in out.iterdir():
                f.unlink()
        for name in kept:
            (pack / name).with_suffix(".keep").unlink()
        shutil.rmtree(out)
print("load", os.getloadavg())
for size in res:
    for v, extra in enumerate(VARIANTS):
        p = res[size][v]
        print(size, extra, "cpu median %.0f p90 %.0f" % (statistics.median(p), sorted(p)[17]),
              "pack KB median %.0f" % (statistics.median(sizes[size][v]) / 1000))
shutil.rmtree(base)
