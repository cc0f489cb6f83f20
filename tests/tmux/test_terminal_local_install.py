"""``./amacs --local``'s first install in a real terminal, as a newcomer waits through it.

The install runs in a venv whose pip and python are stand-ins replaying a real build's output
(tests/local_install; tests/test_local_model_install.py tests the script's every path).  The
pipeline is ./amacs's own, so what the terminal shows is what ./amacs shows; Ctrl-C is pressed in
the terminal, which sends it to the whole install as it would to ./amacs.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.tmux.terminal import ROOT

pytestmark = pytest.mark.tmux

DATA = ROOT / "tests" / "local_install"
# How ./amacs runs it: its last line (the model file, for scripts) is left out of the terminal.
PIPELINE = 'scripts/local-model.sh | { grep -v "^model: " || true; }'


def screen(socket: Path) -> str:
    return subprocess.run(["tmux", "-S", str(socket), "capture-pane", "-p", "-J", "-t", "install"],
                          capture_output=True, text=True, check=True).stdout


def wait_for(socket: Path, text: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        shown = screen(socket)
        if text in shown:
            return shown
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {text!r}; the screen:\n{shown}")
        time.sleep(0.1)


def test_the_wait_names_its_phases_and_ctrl_c_says_what_it_left(tmp_path):
    if not shutil.which("tmux"):
        pytest.skip("tmux is not installed")
    assert PIPELINE in (ROOT / "amacs").read_text(), "./amacs runs the install otherwise now: follow it here"
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("pip", "python"):
        (venv / "bin" / name).symlink_to(DATA / name)
    sockets = Path(tempfile.mkdtemp(prefix="amacs-tmux-"))
    socket = sockets / "tmux"
    command = PIPELINE.replace("local-model.sh", f"local-model.sh {venv}")
    try:
        subprocess.run(["tmux", "-S", str(socket), "-f", "/dev/null", "new-session", "-d", "-s", "install",
                        "-x", "120", "-y", "30", "-e", "AMACS_INSTALL_EVERY=1", "-e", "FAKE_PIP_DELAY=0.3",
                        "bash", "--norc", "--noprofile"], cwd=ROOT, check=True)
        subprocess.run(["tmux", "-S", str(socket), "send-keys", "-t", "install", "-l", command], check=True)
        subprocess.run(["tmux", "-S", str(socket), "send-keys", "-t", "install", "Enter"], check=True)
        shown = wait_for(socket, "compiling llama.cpp: step")
        assert "llama.cpp is compiled from source: about" in shown and "min at this load (" in shown, shown
        assert f"pip's whole output: {venv}/install.log" in shown
        assert "Ctrl-C stops it safely: the last line then says what is kept." in shown
        subprocess.run(["tmux", "-S", str(socket), "send-keys", "-t", "install", "C-c"], check=True)
        shown = wait_for(socket, "== stopped after", timeout=15)
        assert "llama.cpp's unfinished build is removed; the next ./amacs --local builds it from the start." \
            in shown, shown
        assert f"   pip's output so far: {venv}/install.log" in shown, shown
        assert not (venv / ".install-tmp").exists()
    finally:
        subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True)
        shutil.rmtree(sockets, ignore_errors=True)
