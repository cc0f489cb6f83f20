"""What ./amacs does before Emacs starts, on a checkout already set up (issue 10, start-up).

A newcomer in tmux saw 4-6 s of blank terminal at every ``./amacs``: ``scripts/setup.sh``
checked the venv by importing the model SDKs; then it looked for the packages with Python
(~220 ms).  Now, when nothing it builds from changed since its last full run (a stamp), it
starts no Python at all; when something did, it looks for the packages without importing
them.  Every Python that setup.sh runs here imports a ``sitecustomize`` of the test's (on
PYTHONPATH), which writes down each module that gets imported.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("anthropic", "openai", "aiohttp", "git", "orgparse")

SITECUSTOMIZE = """\
import atexit, os, sys

def _write_down():
    with open(os.environ["AMACS_TEST_IMPORTS"], "a", encoding="utf-8") as out:
        out.write("\\n".join(sorted(sys.modules)) + "\\n")

atexit.register(_write_down)
"""


def test_setup_on_a_set_up_checkout_starts_no_python_and_a_change_is_seen(tmp_path):
    subprocess.run([str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, check=True, capture_output=True,
                   timeout=600)  # as the first ./amacs would: whatever is missing is installed
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    record = tmp_path / "imports.txt"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "AMACS_TEST_IMPORTS": str(record)}
    subprocess.run([str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, check=True, capture_output=True,
                   timeout=120, env=env)
    assert not record.exists(), "setup.sh started Python on a checkout already set up"
    # The stamp older than an input (as after an edit or a pip install): the full check runs,
    # and still imports no SDK.
    stamp = ROOT / ".venv" / ".amacs-ready"
    an_hour_ago = time.time() - 3600
    os.utime(stamp, (an_hour_ago, an_hour_ago))
    subprocess.run([str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, check=True, capture_output=True,
                   timeout=600, env=env)
    imported = set(record.read_text(encoding="utf-8").split())
    assert "importlib.util" in imported, "the venv's Python did not run: the check is not seen"
    assert not imported & set(HEAVY), f"setup.sh imported {sorted(imported & set(HEAVY))}"
    assert stamp.stat().st_mtime > an_hour_ago + 3000  # written again after the full run
