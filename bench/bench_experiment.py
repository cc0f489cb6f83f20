"""Experiment throughput (issue 15): runs per minute at parallelism 1, 2 and 4 against the
zero-latency fake model, and the harness's overhead per run.

Each level runs N one-turn runs (default 8) through the experiment's own loop
(:func:`amacs_server.research.experiment.execute` with the local executor), each a
real headless session: a batch Emacs that loads the AMACS elisp, starts the server,
sends the turn and stops it.  The fake is ``python -m tests.fake_anthropic`` in its
own process, answering at once, so a run's time is the harness's: Emacs start-up and
elisp loading, the server's start-up (its imports, the home's git and memory),
the turn, and the stop.  Reported per level: wall time, runs per minute, a run's
seconds (median / p90), the overhead per run (run seconds - the model's seconds from
the transcripts' ``latency_ms``), and the machine's load average before and after
(a shared machine's other work shows in every number).

    .venv/bin/python bench/bench_experiment.py            # parallel 1, 2, 4; 8 runs each
    .venv/bin/python bench/bench_experiment.py --runs 12 --levels 1 4
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402

from amacs_server.research.cluster import LocalExecutor  # noqa: E402
from amacs_server.research.experiment import execute  # noqa: E402
from amacs_server.research.runs import transcript_totals  # noqa: E402
from amacs_server.research.spec import load  # noqa: E402
from bench.common import save  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPEC = """
[experiment]
name = "bench-p{parallel}"
repetitions = {runs}
parallel = {parallel}
timeout = 120
max_steps = 2

[[prompts]]
name = "hello"
turns = ["hello"]

[[models]]
name = "fake"
model = "claude-sonnet-4-5"
base_url = "{url}"
"""


def start_fake() -> tuple[subprocess.Popen[str], str]:
    """The zero-latency fake in its own process, and its URL."""
    fake = subprocess.Popen([sys.executable, "-m", "tests.fake_anthropic"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert fake.stdout is not None
    return fake, fake.stdout.readline().strip()


# A run's steps in order (runs.read_trace): Emacs's marks and the experiment's.
STEPS = ("spawn", "emacs-init", "loaded", "shell-opened", "hello", "start", "go-sent", "go", "sent",
         "turn-done", "settled", "written", "ended", "server-exited", "emacs-exited", "judged", "recorded")


def steps(folders: list[Path]) -> dict[str, float]:
    """The median milliseconds from each step to the next over the runs in FOLDERS (the runs' traces),
    and from a run's ``recorded`` to the next run's ``start`` (``next-start``)."""
    from amacs_server.research.runs import read_trace  # noqa: PLC0415 - only with --trace (not in older trees)

    traces = [read_trace(f) for f in folders]
    gaps: dict[str, list[float]] = {}
    for marks in traces:
        seen = [s for s in STEPS if s in marks]
        for a, b in zip(seen, seen[1:], strict=False):
            gaps.setdefault(f"{a}->{b}", []).append(1000 * (marks[b] - marks[a]))
    starts = sorted((m["start"], m.get("recorded")) for m in traces if "start" in m)
    for (_, recorded), (start, _) in zip(starts, starts[1:], strict=False):
        if recorded is not None:
            gaps.setdefault("recorded->next-start", []).append(1000 * (start - recorded))
    return {k: round(statistics.median(v), 1) for k, v in gaps.items()}


def level(url: str, parallel: int, runs: int, tmp: Path, fork: bool = True, trace: bool = False,
          ahead: int | None = None) -> dict[str, Any]:
    """Run RUNS one-turn runs at PARALLEL (each server forked from the fork server, or FORK false: started
    from nothing); what it took."""
    folder = tmp / f"p{parallel}{'' if fork else '-nofork'}"
    folder.mkdir()
    spec = folder / "experiment.toml"
    spec.write_text(SPEC.format(parallel=parallel, runs=runs, url=url))
    experiment = load(spec)
    runs_dir = folder / "runs"
    runs_dir.mkdir()
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    # the fork server's start is in the wall time; a tree without trace/ahead (an older main, for a
    # comparison run with PYTHONPATH) is given neither
    known = inspect.signature(LocalExecutor).parameters
    extra = {k: v for k, v in (("trace", trace), ("ahead", ahead)) if k in known}
    executor = LocalExecutor(runs_dir, parallel, fork=fork, **extra)
    outcomes, left, _stopped = execute(experiment.runs, executor, parallel, None, 0.0,
                             len(experiment.runs), experiment.name, Console(stderr=True, quiet=True))
    wall = time.perf_counter() - start
    failed = [o for o in outcomes if o.status != "done"]
    assert not failed and not left, failed
    seconds = [o.seconds for o in outcomes]
    ended = sorted(o.ended_at for o in outcomes)
    # A run's turn in the line at parallel 1: from its start to the next run's start (its harness
    # overhead is that less its model time), the first run (the fork server's start) left out.
    steady = (ended[-1] - ended[0]) / (len(ended) - 1) if len(ended) > 1 else wall  # a run's wall, once going
    overhead = sorted(o.seconds - transcript_totals(runs_dir / o.run_id / "home")[1] for o in outcomes)
    model = [transcript_totals(runs_dir / o.run_id / "home")[1] for o in outcomes]
    starts = sorted(o.started_at for o in outcomes)
    gaps = sorted(b - a - statistics.median(model) for a, b in zip(starts[1:], starts[2:], strict=False))
    return {
        "parallel": parallel, "fork": fork, "ahead": getattr(executor, "ahead", None), "runs": runs, "wall_s": round(wall, 2),
        "runs_per_minute": round(60 * runs / wall, 1),
        "run_s_median": round(statistics.median(seconds), 2),
        "run_s_p90": round(sorted(seconds)[int(0.9 * (len(seconds) - 1))], 2),
        "model_s_median": round(statistics.median(model), 3),
        "overhead_s_median": round(statistics.median(overhead), 3),
        "overhead_s_p90": round(overhead[int(0.9 * (len(overhead) - 1))], 3),
        # wall per run at this parallelism, less a run's model time: what the harness costs a run
        "wall_overhead_s": round(wall * parallel / runs - statistics.median(model), 3),
        # the same from the first run's end to the last's (the fork server's and the first start-up left out)
        "steady_overhead_s": round(steady * parallel - statistics.median(model), 3),
        **({"gap_overhead_s_median": round(statistics.median(gaps), 3),
            "gap_overhead_s_p90": round(gaps[int(0.9 * (len(gaps) - 1))], 3), "gap_n": len(gaps)}
           if parallel == 1 and gaps else {}),
        **({"steps_ms": steps([runs_dir / o.run_id for o in outcomes])} if trace else {}),
        "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="runs per level (default 8)")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4], help="parallelism levels")
    parser.add_argument("--ahead", type=int, help="runs kept prepared (default: parallel, at least 2)")
    parser.add_argument("--trace", action="store_true",
                        help="each run keeps the times of its steps; print the median time between steps")
    parser.add_argument("--compare", action="store_true",
                        help="also run each level with every server started from nothing (no fork server)")
    args = parser.parse_args()
    os.environ.setdefault("ANTHROPIC_API_KEY", "sk-ant-bench-0123456789abcdef")
    fake, url = start_fake()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="amacs-bench-exp-") as tmp:
            for parallel in args.levels:
                for fork in (True, False) if args.compare else (True,):
                    rows.append(level(url, parallel, args.runs, Path(tmp), fork, args.trace, args.ahead))
                    print(f"parallel {parallel}{'' if fork else ' (no fork server)'}: "
                          f"{rows[-1]['runs_per_minute']} runs/min", flush=True)
    finally:
        fake.terminate()
        fake.wait()
    for r in rows:
        if "steps_ms" in r:
            print(f"\nparallel {r['parallel']}: median ms between a run's steps")
            for step, ms in r["steps_ms"].items():
                print(f"  {step:>28} {ms:>8}")
    print(f"\n{'parallel':>8} {'fork':>5} {'runs':>5} {'wall s':>7} {'runs/min':>9} {'run s med':>10} {'p90':>6} "
          f"{'model s':>8} {'overhead s med':>15} {'p90':>6} {'wall/run-model':>15} {'steady':>7} {'load':>11}")
    for r in rows:
        print(f"{r['parallel']:>8} {str(r['fork']):>5} {r['runs']:>5} {r['wall_s']:>7} {r['runs_per_minute']:>9} "
              f"{r['run_s_median']:>10} {r['run_s_p90']:>6} {r['model_s_median']:>8} "
              f"{r['overhead_s_median']:>15} {r['overhead_s_p90']:>6} {r['wall_overhead_s']:>15} "
              f"{r['steady_overhead_s']:>7} "
              f"{r['load_before']:>5}->{r['load_after']:<5}")
    save("experiment", {"cpus": os.cpu_count(), "levels": rows})


if __name__ == "__main__":
    main()
