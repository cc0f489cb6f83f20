"""Grow bench_flat's homes (1,000 and 20,000 ticks) with the code of the tree this runs from."""
import sys
import time
from pathlib import Path

sys.path.insert(0, "/work/bench-src-pk7")
sys.path.insert(0, "/work/bench-src-pk7/bench")
import bench_flat  # noqa: E402

t0 = time.time()
print(bench_flat.grow(Path("/work/bench-homes/flat"), [1000, 20000]), f"{time.time() - t0:.0f} s", flush=True)
