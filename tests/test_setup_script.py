"""What ./amacs does before Emacs starts, on a checkout already set up (issue 10, start-up).

A newcomer in tmux saw 4-6 s of blank terminal at every ``./amacs``: ``scripts/setup.sh``
checked the venv by importing the model SDKs.  It now only looks for the packages.  Every
Python that setup.sh runs here imports a ``sitecustomize`` of the test's (on PYTHONPATH),
which writes down each module that gets imported; none of the SDKs may be among them.
"""

from __future__ import annotations

import os
import subprocess
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


def test_setup_on_a_set_up_checkout_imports_no_sdk(tmp_path):
    subprocess.run([str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, check=True, capture_output=True,
                   timeout=600)  # as the first ./amacs would: whatever is missing is installed
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    record = tmp_path / "imports.txt"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "AMACS_TEST_IMPORTS": str(record)}
    subprocess.run([str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, check=True, capture_output=True,
                   timeout=120, env=env)
    imported = set(record.read_text(encoding="utf-8").split())
    assert "importlib.util" in imported, "the venv's Python did not run: the check is not seen"
    assert not imported & set(HEAVY), f"setup.sh imported {sorted(imported & set(HEAVY))}"
