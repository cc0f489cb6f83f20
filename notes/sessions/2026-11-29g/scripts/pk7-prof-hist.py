import cProfile
import pstats
import resource
import shutil
import sys
from pathlib import Path

sys.path.insert(0, "/work/bench-src-pk7")
from amacs_server.persistence import history  # noqa: E402
from bench.bench_flat import as_served, copy_home  # noqa: E402

size = int(sys.argv[1])
tmp = Path("/work/bench-homes/prof-tmp")
shutil.rmtree(tmp, ignore_errors=True)
tmp.mkdir()
copy_home(Path(f"/work/bench-homes/flat/home-{size}"), tmp / "served")
as_served(tmp / "served")
home = tmp / "served"
last = history.last_tick(home)
commit = history.tick_commit(home, last - 100)
prof = cProfile.Profile()
for i in range(5):
    made = tmp / f"m{i}"
    (made / ".git" / "objects" / "pack").mkdir(parents=True)
    import subprocess
    subprocess.run(["git", "init", "-q", str(made)], check=True)
    c = resource.getrusage(resource.RUSAGE_SELF)
    prof.enable()
    history._history_up_to(home, commit, made)
    prof.disable()
pstats.Stats(prof).sort_stats("cumulative").print_stats(18)
shutil.rmtree(tmp)
