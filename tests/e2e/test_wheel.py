"""The server as a user installs it: the built wheel in a fresh venv, run outside the checkout.

Issue 14 (Python package): the wheel carries the core skill (the system prompt)
and the agent templates as package data, declares what it imports, and its
``amacs-server`` console script serves a full tick that batch Emacs drives
against the fake model.

The wheel is built offline (``--no-build-isolation``: the test extras put
setuptools in .venv).  The fresh venv installs it with its dependencies
through pip as the machine has it configured (its local mirror); only when
that fails (no index reachable) does it fall back to a venv without them that
sees .venv's site-packages through a .pth file, saying so in the test's output.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from amacs_server.skills import parse_frontmatter
from tests.e2e.harness import DRIVER, ROOT, elisp_string, emacs_env
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e

# What the wheel is built from: the package (with its builtin_skills link) and its metadata.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "amacs_server", "skills", "elisp")


def build_wheel(tmp: Path) -> Path:
    """The wheel of a copy of the checkout (setuptools writes build/ and egg-info beside its sources)."""
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    dist = tmp / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", str(dist), str(src)],
        capture_output=True, text=True, timeout=300, cwd=tmp, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = dist.glob("amacs_server-*.whl")
    return wheel


def install(wheel: Path, venv: Path) -> str:
    """Install WHEEL into a fresh VENV; say how (with its dependencies, or over .venv's)."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if proc.returncode == 0:
        return "with its dependencies from the configured index"
    print(f"pip could not install the wheel's dependencies; using .venv's:\n{proc.stderr[-2000:]}")
    shutil.rmtree(venv)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "amacs-dev-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")  # after its own
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=300, stdin=subprocess.DEVNULL)
    return "without dependencies, over .venv's site-packages (.pth)"


def test_installed_wheel_serves_a_tick(fake, tmp_path):
    """The wheel ships the skills, license and console script; installed, it serves a tick from elsewhere."""
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "amacs_server/builtin_skills/core/SKILL.md" in names
    assert "amacs_server/builtin_skills/subagent-core/SKILL.md" in names
    for template in ("researcher", "debater", "spawn-limiter"):  # task, viewpoint, compulsion
        assert f"amacs_server/builtin_skills/{template}/SKILL.md" in names
    # the elisp, for an experiment's headless Emacs on a machine with only the wheel (issue 15)
    assert {"amacs_server/elisp/amacs-batch.el", "amacs_server/elisp/amacs.el"} <= set(names)
    assert not any(n.startswith("amacs_server/elisp/test/") for n in names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: GPL-3.0-or-later" in metadata
    for dep in ("jiter", "httpx2", "anthropic", "openai", "epc", "sexpdata", "GitPython", "orgparse"):
        assert f"Requires-Dist: {dep}" in metadata

    venv = tmp_path / "venv"
    how = install(wheel, venv)
    print(f"installed {wheel.name} {how}")
    server = venv / "bin" / "amacs-server"
    assert server.is_file()

    elsewhere = tmp_path / "elsewhere"  # not the checkout: nothing of it on sys.path
    elsewhere.mkdir()
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import amacs_server, amacs_server.config as c; print(amacs_server.__file__); print(c.builtin_skills_dir())"],
        capture_output=True, text=True, check=True, cwd=elsewhere,
        env={**emacs_env(tmp_path / "probe", fake.url), "PYTHONPATH": ""}).stdout.splitlines()
    assert all(Path(p).resolve().is_relative_to(venv.resolve()) for p in where), where

    home = tmp_path / "agent"
    fake.script(Reply(agent_json("Hello from the installed server.", mood="calm", monologue="Greeted")))
    env = {**emacs_env(home, fake.url), "PYTHONPATH": ""}
    program = (f"(setq amacs-server-command (list {elisp_string(str(server))})) "
               f"(amacs-e2e-open) (amacs-e2e-send \"hello\") (amacs-e2e-finish)")
    proc = subprocess.run(["emacs", "-Q", "--batch", "-l", str(DRIVER), "--eval", f"(progn {program})"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=elsewhere,
                          stdin=subprocess.DEVNULL)
    out = Path(env["AMACS_E2E_OUT"])
    shell = out.read_text(encoding="utf-8", errors="replace") if out.exists() else ""
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n{shell}"

    assert "Hello from the installed server." in shell
    assert len(fake.requests) == 1
    core = (ROOT / "skills" / "core" / "SKILL.md").read_text(encoding="utf-8")
    assert fake.requests[0]["body"]["system"][0]["text"] == parse_frontmatter(core)[1].strip()
    assert "Hello from the installed server." in (home / "agent-chat.org").read_text(encoding="utf-8")
