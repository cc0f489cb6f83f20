"""Run a real batch Emacs against the real server and the fake Anthropic API."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("driver.el")
TEST_KEY = "sk-ant-test-SECRET-e2e-0123456789"


@dataclass
class EmacsRun:
    """What a batch Emacs run left behind."""

    returncode: int
    stdout: str
    stderr: str
    shell: str

    def check(self) -> EmacsRun:
        """Fail with Emacs's output when it did not exit 0."""
        assert self.returncode == 0, f"emacs exited {self.returncode}\n{self.stdout}\n{self.stderr}\n{self.shell}"
        return self


def emacs_env(home: Path, base_url: str, **extra: str) -> dict[str, str]:
    """The environment of a test Emacs: temp HOME and AMACS home, the fake as endpoint."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AMACS_"))}
    env.update(
        HOME=str(home.parent / "user-home"),
        AMACS_HOME=str(home),
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY=TEST_KEY,
        AMACS_E2E_PYTHON=sys.executable,
        AMACS_E2E_OUT=str(home.parent / "shell.txt"),
    )
    env.update(extra)
    Path(env["HOME"]).mkdir(exist_ok=True)
    return env


def run_emacs(home: Path, base_url: str, program: str, timeout: float = 120, **extra: str) -> EmacsRun:
    """Run PROGRAM (elisp forms) in batch Emacs with the driver loaded."""
    env = emacs_env(home, base_url, **extra)
    out = Path(env["AMACS_E2E_OUT"])
    out.unlink(missing_ok=True)
    proc = subprocess.run(
        ["emacs", "-Q", "--batch", "-l", str(DRIVER), "--eval", f"(progn {program})"],
        env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
        stdin=subprocess.DEVNULL,  # an eval that reads input (read-string in batch) gets end of file
    )
    shell = out.read_text(encoding="utf-8", errors="replace") if out.exists() else ""
    return EmacsRun(proc.returncode, proc.stdout, proc.stderr, shell)


def start_emacs(home: Path, base_url: str, program: str, **extra: str) -> subprocess.Popen[str]:
    """Start PROGRAM in batch Emacs without waiting; finish with :func:`finish_emacs`."""
    env = emacs_env(home, base_url, **extra)
    Path(env["AMACS_E2E_OUT"]).unlink(missing_ok=True)
    return subprocess.Popen(
        ["emacs", "-Q", "--batch", "-l", str(DRIVER), "--eval", f"(progn {program})"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, stdin=subprocess.DEVNULL,
    )


def finish_emacs(proc: subprocess.Popen[str], home: Path, timeout: float = 120) -> EmacsRun:
    """Wait for an Emacs from :func:`start_emacs` and collect what it left."""
    stdout, stderr = proc.communicate(timeout=timeout)
    out = home.parent / "shell.txt"
    shell = out.read_text(encoding="utf-8", errors="replace") if out.exists() else ""
    return EmacsRun(proc.returncode, stdout, stderr, shell)


def elisp_string(text: str) -> str:
    """TEXT as an elisp string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
