"""bench/bench_gptel.py runs: one counted turn of AMACS and of real gptel in each phase.

gptel's sources are not part of the project: the test runs when ``AMACS_GPTEL``
or ``../shared/peers`` holds them and is skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bench.bench_gptel import default_gptel, run

pytestmark = pytest.mark.tmux


def test_bench_gptel_measures_both_kinds_in_every_row(amacs_installed: None, tmp_path: Path) -> None:
    peers = Path(os.environ["AMACS_GPTEL"]) if os.environ.get("AMACS_GPTEL") else default_gptel()
    if peers is None or not (peers / "gptel" / "gptel.el").exists():
        pytest.skip("gptel's sources are not here (AMACS_GPTEL=PATH, or ../shared/peers)")
    if not shutil.which("curl"):
        pytest.skip("gptel streams through curl, which is not installed")
    result = run(peers, 1, 1, tmp_path, warmup=0)
    rows = result["rows"]
    assert set(rows) == {"turn overhead, zero-latency model", "turn overhead, 100 chunks at 20 ms",
                         "first text -> visible, streaming", "RET -> request at the model",
                         "whole reply at once -> last word visible",
                         "whole reply at once in 100 chunks -> last word visible"}, set(rows)
    for row, by_kind in rows.items():
        for kind in ("amacs", "gptel"):
            assert by_kind[kind]["n"] == 1, (row, kind)
            assert 0 <= by_kind[kind]["median_ms"] < 10_000, (row, kind, by_kind[kind])
    # gptel's org buffer holds its three replies: the history grew.
    assert result["gptel_buffer_chars"] > 3 * 3000
