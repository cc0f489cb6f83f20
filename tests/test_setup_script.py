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

import pytest

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


def test_amacs_on_a_set_up_checkout_runs_no_program_before_emacs(tmp_path):
    """./amacs and setup.sh see that nothing needs building with bash's own tests: no ``find``,
    ``dirname`` or second bash before Emacs starts (./amacs took 60 ms of wall time to start Emacs
    with them, 19 without: median, load 9.3 on 2 cores).  Here the only programs on PATH are bash, git
    (looked for, not run) and a stand-in Emacs that notes its arguments."""
    subprocess.run([str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, check=True, capture_output=True,
                   timeout=600)  # as the first ./amacs would: whatever is missing is installed
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("bash", "git"):
        found = subprocess.run(["bash", "-c", f"command -v {program}"], capture_output=True, text=True, check=True)
        (bin_dir / program).symlink_to(found.stdout.strip())
    ran = tmp_path / "emacs-ran"
    (bin_dir / "emacs").write_text(f'#!/bin/sh\necho "$@" > {ran}\n', encoding="utf-8")
    (bin_dir / "emacs").chmod(0o755)
    env = {**os.environ, "PATH": str(bin_dir), "AMACS_WARM": "0"}
    setup = subprocess.run([str(ROOT / "scripts" / "setup.sh")], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60, env=env)
    assert setup.returncode == 0 and setup.stderr == "", setup.stderr
    launch = subprocess.run([str(ROOT / "amacs")], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert launch.returncode == 0 and launch.stderr == "", launch.stderr
    assert "(require 'amacs-shell-start)" in ran.read_text(encoding="utf-8")


def test_a_killed_emacs_is_said_in_one_line_not_with_its_command(tmp_path):
    """A newcomer killed Emacs (kill -9) and bash printed ``./amacs: line 106: … Killed emacs -nw -Q …
    --eval "(let …"``: the whole command, a page of elisp.  The launcher says it in one line, with
    the status Emacs ended with, and what Emacs itself writes to stderr still reaches the terminal."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("bash", "git"):
        found = subprocess.run(["bash", "-c", f"command -v {program}"], capture_output=True, text=True, check=True)
        (bin_dir / program).symlink_to(found.stdout.strip())
    (bin_dir / "emacs").write_text('#!/bin/bash\necho "emacs: its own warning" >&2\nkill -9 $$\n', encoding="utf-8")
    (bin_dir / "emacs").chmod(0o755)
    env = {**os.environ, "PATH": str(bin_dir), "AMACS_WARM": "0"}
    if subprocess.run([str(ROOT / "scripts" / "setup.sh")], cwd=tmp_path, capture_output=True, env=env,
                      timeout=60).returncode != 0:
        pytest.skip("the checkout is not set up (scripts/setup.sh)")
    launch = subprocess.run([str(ROOT / "amacs"), "--demo"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert launch.returncode == 137
    assert launch.stderr == "emacs: its own warning\n\namacs: Emacs was stopped by signal 9 (KILL)\n", launch.stderr


def test_the_install_prints_no_deprecation_of_a_package_without_pyproject_and_shows_errors(tmp_path):
    """The first ``./amacs`` printed pip's three lines ``DEPRECATION: epc is being installed using the
    legacy 'setup.py install' method …`` (Debian 12's python3, pip 23.0.1) and they stayed on the
    terminal after Emacs quit.  scripts/pip-install.sh, setup.sh's pip, builds epc as a wheel; an
    install that fails still says why."""
    python = Path("/usr/bin/python3")
    if not python.exists():
        pytest.skip("no /usr/bin/python3: the pip that says it is Debian 12's")
    venv = tmp_path / "venv"
    subprocess.run([str(python), "-m", "venv", str(venv)], check=True, timeout=300)
    pip = subprocess.run([str(venv / "bin" / "pip"), "--version"], capture_output=True, text=True, check=True)
    if tuple(int(n) for n in pip.stdout.split()[1].split(".")[:2]) >= (23, 1):
        pytest.skip(f"{pip.stdout.strip()}: a pip from 23.1 on never installs by setup.py install")
    env = {**os.environ, "PIP_NO_CACHE_DIR": "1"}  # a wheel built before would hide it
    done = subprocess.run([str(ROOT / "scripts" / "pip-install.sh"), str(venv), "epc"], capture_output=True,
                          text=True, timeout=600, env=env)
    said = [line for line in (done.stdout + done.stderr).splitlines() if "is ignored: it is neither" not in line]
    assert done.returncode == 0 and not [line for line in said if "DEPRECATION" in line], said
    subprocess.run([str(venv / "bin" / "python"), "-c", "import epc, sexpdata"], check=True, timeout=60)
    failed = subprocess.run([str(ROOT / "scripts" / "pip-install.sh"), str(venv), str(tmp_path / "no-such-project")],
                            capture_output=True, text=True, timeout=600, env=env)
    assert failed.returncode != 0 and "ERROR" in failed.stderr, failed.stderr
