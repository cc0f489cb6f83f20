"""A run is held still while the experiment looks whether C-c may let it finish (research.runs)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from amacs_server.research import runs

WRITER = """
import sys, time
with open(sys.argv[1], "a") as out:
    while True:
        out.write("x\\n"); out.flush(); time.sleep(0.002)
"""


def _writer(path: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], process_group=0)
    deadline = time.monotonic() + 10
    while (not path.exists() or path.stat().st_size == 0) and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc


def test_a_held_run_writes_nothing_until_let_go_and_a_killed_one_leaves_nothing_stopped(tmp_path):
    """The run's Emacs (its own process group) and its server (named by home/server.json, a group of
    its own) stop writing while held; released, both write again.  The newcomer's case: a C-c looked at
    the transcripts, found the last reply missing, and the reply was written in the milliseconds before
    the kill: a run paid for whole was recorded interrupted and paid again on resume."""
    home = tmp_path / "home"
    home.mkdir()
    emacs, server = _writer(tmp_path / "emacs.out"), _writer(tmp_path / "server.out")
    try:
        (home / "server.json").write_text(json.dumps({"pid": server.pid}))
        groups = runs._hold(emacs, home)  # noqa: SLF001 - the hold itself is what is tested
        assert sorted(groups) == sorted([emacs.pid, server.pid])
        sizes = [(tmp_path / n).stat().st_size for n in ("emacs.out", "server.out")]
        time.sleep(0.3)
        assert [(tmp_path / n).stat().st_size for n in ("emacs.out", "server.out")] == sizes
        runs._release(groups)  # noqa: SLF001
        time.sleep(0.3)
        after = [(tmp_path / n).stat().st_size for n in ("emacs.out", "server.out")]
        assert after[0] > sizes[0] and after[1] > sizes[1], (sizes, after)
        runs._hold(emacs, home)  # noqa: SLF001 - held, then killed as the C-c of a run not answered is
        runs._kill(emacs, home)  # noqa: SLF001
        server.wait(timeout=10)
        assert emacs.poll() is not None and server.poll() is not None
    finally:
        for proc in (emacs, server):
            proc.kill()
            proc.wait()
