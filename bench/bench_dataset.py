"""The dataset and the report of many runs (issue 15): 1,000 runs load in <= 10 s.

Generated runs of realistic size (tests/research_fakes.py: a debate-shaped session of
~70 events and ~180 KB, the model requests dominating, as real transcripts) are written
once per size; then, REPEATS times each, on the same files (the page cache warm, as a
researcher's second load is):
- the ``dataset`` command's work: every run into RUNS_DIR/dataset.duckdb and Parquet
  (:func:`amacs_server.research.dataset.load` with parquet);
- the ``report`` command: the dataset loaded again, the charts drawn, report.html written.
Reported per size: median / p90 / n, the files' size, rows per table, and the machine's
load at the start and the end (a shared machine's other work shows in every number).

    .venv/bin/python bench/bench_dataset.py                 # 100 and 1,000 runs, 3 repeats
    .venv/bin/python bench/bench_dataset.py --sizes 100 --repeats 5
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amacs_server.research import dataset, report  # noqa: E402
from bench.common import save, summary  # noqa: E402
from tests.research_fakes import write_runs  # noqa: E402

SIZES = (100, 1000)
REPEATS = 3
LIMIT_1000_S = 10.0


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def folder_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.glob("*/home/transcripts/*.jsonl"))


def bench_size(n: int, repeats: int, scratch: Path) -> dict[str, object]:
    runs_dir = scratch / f"runs-{n}"
    start = time.perf_counter()
    write_runs(runs_dir, n)
    generate_s = time.perf_counter() - start
    loads: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        dataset.load(runs_dir, parquet=True).close()
        loads.append((time.perf_counter() - start) * 1000)
    con = dataset.load(runs_dir)
    rows = dataset.counts(con)
    con.close()
    reports: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            report.main([str(runs_dir)])
        reports.append((time.perf_counter() - start) * 1000)
    case = {"runs": n, "transcripts_mb": round(folder_bytes(runs_dir) / 1e6, 1),
            "generate_s": round(generate_s, 2), "rows": rows,
            "dataset_load_with_parquet": summary(loads), "report": summary(reports),
            "dataset_mb": round((runs_dir / dataset.DB_NAME).stat().st_size / 1e6, 1),
            "parquet_mb": round(sum(p.stat().st_size for p in (runs_dir / "parquet").glob("*.parquet")) / 1e6, 1),
            "report_mb": round((runs_dir / "report.html").stat().st_size / 1e6, 1)}
    shutil.rmtree(runs_dir)
    return case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args()
    start_load = load()
    with tempfile.TemporaryDirectory(prefix="bench-dataset-") as tmp:
        cases = [bench_size(n, args.repeats, Path(tmp)) for n in args.sizes]
    print(f"{'runs':>6} {'MB':>7} {'load median':>12} {'max':>8} {'report median':>14} {'max':>8}  (ms, n={args.repeats})")
    for c in cases:
        ld, rp = c["dataset_load_with_parquet"], c["report"]
        assert isinstance(ld, dict) and isinstance(rp, dict)
        print(f"{c['runs']:>6} {c['transcripts_mb']:>7} {ld['median_ms']:>12.0f} {ld['max_ms']:>8.0f} "
              f"{rp['median_ms']:>14.0f} {rp['max_ms']:>8.0f}")
    thousand = [c for c in cases if c["runs"] == 1000]
    within = (None if not thousand else
              thousand[0]["dataset_load_with_parquet"]["max_ms"] <= LIMIT_1000_S * 1000)  # type: ignore[index]
    save("dataset", {"machine_load_at_start": start_load, "machine_load_at_end": load(), "cpus": os.cpu_count(),
                     "cases": cases, "load_1000_within_10s_every_repeat": within})


if __name__ == "__main__":
    main()
