"""Grow /work/bench-homes/flat-same/home-{1000,20000} with bench_flat.grow(..., "same") (sc7)."""
import sys
import time
sys.path.insert(0, "/work/bench-src-sc7")
from pathlib import Path
from bench.bench_flat import grow
t0 = time.perf_counter()
print(grow(Path("/work/bench-homes/flat-same"), [1000, 20000], "same"), f"{time.perf_counter() - t0:.0f} s", flush=True)
