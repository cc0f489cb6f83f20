"""Shared helpers for benchmarks: statistics and result files."""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).with_name("results")


def summary(samples_ms: list[float]) -> dict[str, float]:
    """Count, median, p90, p99, min and max of SAMPLES_MS (percentiles by nearest rank: the
    smallest sample with at least that share of the samples at or below it)."""
    ordered = sorted(samples_ms)
    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered), 4),
        "p90_ms": round(ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)], 4),
        "p99_ms": round(ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)], 4),
        "min_ms": round(ordered[0], 4),
        "max_ms": round(ordered[-1], 4),
    }


def save(name: str, data: dict) -> None:
    """Print DATA and write it to bench/results/NAME.json."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2))
    print(f"{name}: {json.dumps(data, indent=2)}")


def server_pid(home: Path) -> int | None:
    """The pid HOME's server.json names, or None."""
    try:
        pid = json.loads((home / "server.json").read_text(encoding="utf-8")).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None


def wait_gone(pid: int | None, timeout: float = 15.0) -> None:
    """Wait until process PID has exited: a sample's server still stopping (it imports the model
    SDK after hello, ~1 s of a core) must not share the CPU with the next sample."""
    deadline = time.monotonic() + timeout
    while pid is not None and time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
