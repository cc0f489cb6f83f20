"""amacs_server.faults (issue 12): a named point kills the process with SIGKILL, only when armed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from amacs_server import faults

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ("from amacs_server import faults\n"
          "for name in ('a', 'b', 'a', 'b'):\n"
          "    faults.point(name)\n"
          "    print('passed', name, flush=True)\n")


def run(spec: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AMACS_FAULT_POINT"}
    if spec is not None:
        env["AMACS_FAULT_POINT"] = spec
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=30)


def test_unarmed_points_do_nothing_and_cost_next_to_nothing():
    assert faults.ARMED is None  # the suite never runs with a fault armed
    done = run(None)
    assert done.returncode == 0 and done.stdout.split("\n")[:4] == ["passed a", "passed b", "passed a", "passed b"]
    t0 = time.perf_counter()
    for _ in range(100_000):
        faults.point("commit.done")
    assert time.perf_counter() - t0 < 0.5  # ~0.1 us each


def test_the_armed_point_kills_with_sigkill_and_says_where():
    done = run("b")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split() == ["passed", "a"]
    assert "AMACS_FAULT_POINT b: SIGKILL" in done.stderr


def test_the_nth_time():
    done = run("a@2")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.splitlines() == ["passed a", "passed b"]


def test_every_point_is_in_the_code():
    """POINTS (the suite's list), HISTORY_POINTS, RESEARCH_POINTS, TURN_POINTS and the points placed in the server are the same names."""
    source = "\n".join(p.read_text() for p in (ROOT / "amacs_server").rglob("*.py") if p.name != "faults.py")
    placed = set(re.findall(r"faults\.(?:point|point_later|point_soon|armed)\(\s*\"([^\"]+)\"", source))
    assert placed == set(faults.POINTS) | set(faults.HISTORY_POINTS) | set(faults.RESEARCH_POINTS) | set(faults.TURN_POINTS)
    assert len(faults.POINTS) >= 20
