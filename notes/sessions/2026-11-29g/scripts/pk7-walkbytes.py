"""Bytes (inflated) a fork's walk packs, by file, for forks to last-1..200 (every 10th): what the walk costs beside its length."""
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, "/work/bench-src-pk7")
from amacs_server.persistence import history  # noqa: E402
from amacs_server.persistence.git_repo import packed_records  # noqa: E402
from bench.bench_flat import as_served, copy_home  # noqa: E402

src = Path(sys.argv[1])
with tempfile.TemporaryDirectory(dir="/work/bench-homes") as tmp:
    home = Path(tmp) / "served"
    copy_home(src, home)
    as_served(home)
    last = history.last_tick(home)
    per = collections.Counter()
    forks = 0
    for back in range(5, 201, 10):
        commit = history.tick_commit(home, last - back)
        kept = set(history._packs_before(home, commit))
        whole = [sha for sha, names in packed_records(home) if names and names <= kept]
        listed = subprocess.run(["git", "-C", str(home), "rev-list", "--objects", commit, f"^{whole[-1]}"],
                                capture_output=True, text=True, check=True).stdout.splitlines()
        names = {line.split()[0]: (line.split(maxsplit=1) + ["(commit)"])[1] for line in listed}
        sized = subprocess.run(["git", "-C", str(home), "cat-file", "--batch-check=%(objectname) %(objectsize)"],
                               input="\n".join(names), capture_output=True, text=True, check=True).stdout
        for line in sized.splitlines():
            sha, size = line.split()
            per[names[sha]] += int(size)
        forks += 1
    total = sum(per.values())
    print(src.name, f"per fork: {total / forks / 1e6:.2f} MB inflated;", ", ".join(
        f"{name} {size / forks / 1e6:.2f}" for name, size in per.most_common(4)))
