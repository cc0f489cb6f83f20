"""The transcripts' lines written after a moment, read from the files' ends: what a start reads
back to number subagents (agents/saved.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amacs_server.persistence import transcript
from amacs_server.persistence.transcript import written_since

_TS = re.compile(rb'"ts": ([0-9.eE+-]+)')


def read_whole(folder: Path, since: float, slack: float = 5.0) -> list[dict[str, Any]]:
    """What written_since gives, the plain way: every line of every file touched since, newest
    first, back to the first one stamped SLACK before SINCE (its whole text searched for the stamp)."""
    found: list[dict[str, Any]] = []
    for path in folder.glob("*.jsonl"):
        if path.stat().st_mtime < since - slack:
            continue
        for line in reversed(path.read_bytes().split(b"\n")):
            ts = _TS.search(line)
            if ts is None:
                continue
            if float(ts[1]) < since - slack:
                break
            if float(ts[1]) <= since:
                continue
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found


LINE = st.tuples(st.floats(0, 40, allow_nan=False).map(lambda t: round(t, 3)),
                 st.sampled_from(["first", "deep", "none", "cut", "blank"]), st.integers(0, 70_000))


def line_bytes(ts: float, where: str, size: int) -> bytes:
    pad = "x" * size
    if where == "first":
        return json.dumps({"ts": ts, "event": "e", "pad": pad}).encode()
    if where == "deep":  # its stamp after a long field
        return json.dumps({"pad": pad, "ts": ts, "event": "e"}).encode()
    if where == "none":
        return json.dumps({"event": "e", "pad": pad}).encode()
    if where == "cut":  # a line a kill cut short
        return json.dumps({"ts": ts, "pad": pad}).encode()[: 20 + size // 2]
    return b""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.lists(LINE, max_size=12), min_size=1, max_size=3), since=st.floats(0, 40),
       newline_at_end=st.booleans())
def test_lines_read_from_the_end_are_those_a_whole_read_finds(tmp_path, files, since, newline_at_end):
    folder = tmp_path / "transcripts"
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for i, lines in enumerate(files):
        data = b"\n".join(line_bytes(*line) for line in lines) + (b"\n" if newline_at_end else b"")
        (folder / f"{i}.jsonl").write_bytes(data)
    assert written_since(folder, since) == read_whole(folder, since)


def test_a_long_lines_stamp_is_read_from_its_first_bytes(tmp_path, monkeypatch):
    """Was: every line back to 5 s before the tick state's end was read whole and searched (with
    the bench's fast ticks ~50 model_request lines of ~300 KB at 20,000 ticks: a third of a start);
    now a line's first bytes give its stamp, and only the lines after it are read whole."""
    folder = tmp_path / "transcripts"
    folder.mkdir()
    lines = [json.dumps({"ts": float(t), "event": "model_request", "request": "r" * 300_000}) for t in range(100, 110)]
    lines.append(json.dumps({"ts": 110.0, "event": "agent_start", "agent_id": "task-3"}))
    (folder / "a.jsonl").write_text("\n".join(lines) + "\n")
    searched: list[int] = []

    class Counting:
        def search(self, data: bytes) -> re.Match[bytes] | None:
            searched.append(len(data))
            return _TS.search(data)

    monkeypatch.setattr(transcript, "_TS", Counting())
    assert written_since(folder, 109.5) == [json.loads(lines[-1])]
    assert searched and max(searched) <= 4096, searched
    assert os.path.getsize(folder / "a.jsonl") > 3_000_000
