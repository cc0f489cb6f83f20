"""A research command in a venv without the research extras says how to add them, in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("missing", ["rich", "duckdb"])
def test_a_research_command_without_its_extras_says_how_to_install_them(tmp_path, missing):
    # sys.modules[name] = None makes `import name' fail as if it were not installed.
    code = (f"import sys; sys.modules[{missing!r}] = None; from amacs_server.__main__ import main; "
            f"sys.exit(main(['report' if {missing!r} == 'duckdb' else 'experiment', {str(tmp_path)!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{missing} is not installed" in lines[0] and "pip install -e '.[research]'" in lines[0]


def test_transcripts_without_duckdb_says_how_to_install_it_in_one_line(tmp_path):
    code = ("import sys; sys.modules['duckdb'] = None; from amacs_server.__main__ import main; "
            f"sys.exit(main(['transcripts', {str(tmp_path)!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "amacs-server transcripts: needs the research extras (duckdb is not installed)" in lines[0]
