"""For each of the last 200 ticks of a home (a copy made as served), the commits a fork's walk covers:
from the tick's commit down to the newest packer note whose packs the fork keeps (history._history_up_to's
rule), and how many packs the fork keeps / the home has.  Usage: walks.py HOME"""
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, "/work/bench-src-pk7")
sys.path.insert(0, "/work/bench-src-pk7/bench")
from bench_flat import as_served, copy_home  # noqa: E402

from amacs_server.persistence import history  # noqa: E402
from amacs_server.persistence.git_repo import pack_names, packed_records  # noqa: E402

src = Path(sys.argv[1])
with tempfile.TemporaryDirectory(dir="/work/bench-homes") as tmp:
    home = Path(tmp) / "served"
    copy_home(src, home)
    as_served(home)
    last = history.last_tick(home)
    walks, kept_n = [], []
    for back in range(1, 201):
        commit = history.tick_commit(home, last - back)
        kept = set(history._packs_before(home, commit))
        whole = [sha for sha, names in packed_records(home) if names and names <= kept]
        revs = [commit] + ([f"^{whole[-1]}"] if whole else [])
        walks.append(int(subprocess.run(["git", "-C", str(home), "rev-list", "--count", *revs], capture_output=True,
                                        text=True, check=True).stdout))
        kept_n.append(len(kept))
    w = sorted(walks)
    print(f"{src.name}: last tick {last}, packs {len(pack_names(home))}, notes {len(packed_records(home))}; "
          f"walk over last-1..200: median {statistics.median(w)}, p90 {w[179]}, min {w[0]}, max {w[-1]}; "
          f"packs kept median {statistics.median(kept_n)}")
