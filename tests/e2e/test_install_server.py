"""M-x amacs-install-server installs the server into a venv of user-emacs-directory (issue 14).

A fresh checkout without ``.venv`` (a copy of the server's sources and elisp/) is
loaded into a clean batch Emacs whose ``user-emacs-directory`` is a temp folder.
``amacs-install-server`` makes ``amacs/venv`` there with ``python3 -m venv`` and
pip-installs the checkout into it (dependencies through pip as the machine has it
configured), streaming the output into ``*amacs-install*``.  When it is done the
session's ``amacs-server-command`` is the venv's ``amacs-server``, which
``M-x amacs-shell`` starts and connects to (against the fake model); a second
Emacs finds it by default.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.harness import ROOT, elisp_string, emacs_env

pytestmark = pytest.mark.e2e

DEBIAN_ELPA = "/usr/share/emacs/site-lisp/elpa"
# A checkout as git clone gives it: the server's sources and metadata, and elisp/ (no .venv).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "amacs_server", "skills", "elisp")


def fresh_checkout(where: Path) -> Path:
    """A copy of the checkout's sources at WHERE, without .venv, build/ or caches."""
    where.mkdir(parents=True)
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, where / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.elc", "*.egg-info"))
        else:
            shutil.copy2(path, where / name)
    return where


def batch(program: str, env: dict[str, str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run PROGRAM in a clean batch Emacs with Debian's epc and magit-section."""
    setup = (f"(add-to-list 'package-directory-list {elisp_string(DEBIAN_ELPA)}) (package-initialize) ")
    return subprocess.run(["emacs", "-Q", "--batch", "--eval", f"(progn {setup}{program})"],
                          env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def test_amacs_install_server_makes_a_venv_that_emacs_starts(fake, home, tmp_path):
    """The install streams into *amacs-install*, ends with Done, and its server is the one Emacs starts."""
    checkout = fresh_checkout(tmp_path / "amacs")
    emacs_d = tmp_path / "emacs.d"
    venv = emacs_d / "amacs" / "venv"
    server = venv / "bin" / "amacs-server"
    env = emacs_env(home, fake.url)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    program = f"""
(setq user-emacs-directory {elisp_string(str(emacs_d) + "/")})
(add-to-list 'load-path {elisp_string(str(checkout / "elisp"))})
(require 'amacs)
(princ (format "BEFORE<<%S>>\\n" amacs-server-command))
(let ((process (amacs-install-server)))
  (princ (format "RETURNED<<%S %S>>\\n" (processp process) amacs-install-server-status)))
(let ((deadline (+ (float-time) 200)))
  (while (and (eq amacs-install-server-status 'running) (< (float-time) deadline))
    (accept-process-output nil 0.1)))
(princ (format "STATUS<<%S>>\\n" amacs-install-server-status))
(princ (format "AFTER<<%S>>\\n" amacs-server-command))
(princ (format "BUFFER<<%s>>\\n" (with-current-buffer "*amacs-install*" (buffer-string))))
(command-execute 'amacs-shell)
(let ((deadline (+ (float-time) 60)))
  (while (and (not (amacs-live-p)) (< (float-time) deadline))
    (accept-process-output nil 0.05)))
(princ (format "LIVE<<%S %S>>\\n" (and (amacs-live-p) t)
               (and (amacs-server-process) (process-command (amacs-server-process)))))
(amacs-stop-server)
(kill-emacs 0)
"""
    started = time.monotonic()
    run = batch(program, env, elsewhere)
    took = time.monotonic() - started
    print(f"amacs-install-server and a server start took {took:.1f} s")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "RETURNED<<t running>>" in run.stdout, out  # asynchronous: it returns while the venv is made
    assert "STATUS<<done>>" in run.stdout, out

    log = re.search(r"BUFFER<<(.*?)\n>>\n", run.stdout, re.S)
    assert log, out
    text = log[1]
    assert re.search(r"^\$ \S*python3? -m venv " + re.escape(str(venv)) + "$", text, re.M), text
    assert re.search(r"^\$ " + re.escape(str(venv / "bin" / "python")) + r" -m pip install "
                     + re.escape(str(checkout)) + "$", text, re.M), text
    assert "Successfully installed" in text and "amacs-server-0.1.0" in text, text  # pip's output streamed in
    last = text.strip().splitlines()[-1]
    assert last.startswith(f"Done: the AMACS server is installed ({server}).") and "M-x amacs-shell" in last, text

    assert server.is_file()
    assert f'BEFORE<<("{server}")>>' not in run.stdout, out  # not there before
    assert f'AFTER<<("{server}")>>' in run.stdout, out  # the session now starts the installed server
    assert f'LIVE<<t ("{server}")>>' in run.stdout, out  # and it serves this Emacs

    # A later Emacs finds the installed server by default (no .venv in this checkout).
    again = batch(f"(setq user-emacs-directory {elisp_string(str(emacs_d) + '/')}) "
                  f"(add-to-list 'load-path {elisp_string(str(checkout / 'elisp'))}) (require 'amacs) "
                  "(princ (format \"DEFAULT<<%S>>\\n\" amacs-server-command))", env, elsewhere, timeout=60)
    assert f'DEFAULT<<("{server}")>>' in again.stdout, again.stdout + again.stderr


def test_amacs_install_server_says_when_pip_fails(fake, home, tmp_path):
    """A checkout pip cannot install: the last line says it failed and what to do; the command is unchanged."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text("this is not toml [\n")
    emacs_d = tmp_path / "emacs.d"
    env = emacs_env(home, fake.url)
    program = f"""
(setq user-emacs-directory {elisp_string(str(emacs_d) + "/")})
(add-to-list 'load-path {elisp_string(str(ROOT / "elisp"))})
(require 'amacs)
(let ((before amacs-server-command) (ended nil))
  (add-hook 'amacs-install-server-functions (lambda (ok) (setq ended (list ok))))
  (setq amacs-install-server-source {elisp_string(str(broken))})
  (amacs-install-server)
  (let ((deadline (+ (float-time) 120)))
    (while (and (not ended) (< (float-time) deadline))
      (accept-process-output nil 0.1)))
  (princ (format "ENDED<<%S %S %S>>\\n" ended amacs-install-server-status
                 (equal before amacs-server-command))))
(princ (format "BUFFER<<%s>>\\n" (with-current-buffer "*amacs-install*" (buffer-string))))
(kill-emacs 0)
"""
    run = batch(program, env, tmp_path)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "ENDED<<(nil) failed t>>" in run.stdout, out
    last = re.search(r"BUFFER<<(.*?)\n>>\n", run.stdout, re.S)[1].strip().splitlines()[-1]  # type: ignore[index]
    assert last.startswith("Failed: pip install exited with code "), last
    assert "M-x amacs-install-server again" in last, last
