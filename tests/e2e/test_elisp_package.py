"""elisp/ installs as an Emacs package (issue 14): package.el, a clean Emacs, autoloads, the shell opens.

The package tar is built as an archive would build it: a folder ``amacs-VERSION/``
holding the .el files and ``amacs-pkg.el``, which package.el itself writes from
amacs.el's headers (the main file's are the only ones that count).  It is installed
with ``package-install-file`` into an empty ``package-user-dir`` of a fresh
``emacs -Q --batch``; the dependencies (epc, magit-section) come from Debian's
packages, as in the e2e driver.  A second fresh Emacs then finds the commands
through the package's autoloads alone, before anything of AMACS is loaded, and
``M-x amacs-shell`` opens ``*amacs-shell*`` against the real server.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.e2e.harness import ROOT, elisp_string, emacs_env

pytestmark = pytest.mark.e2e

ELISP = ROOT / "elisp"
DEBIAN_ELPA = "/usr/share/emacs/site-lisp/elpa"
# Every command README.md and docs/ name as M-x amacs-..., and the hub and the chat log.
COMMANDS = ["amacs-shell", "amacs-connect", "amacs-restart", "amacs-set-model", "amacs-set-budget",
            "amacs-add-buffer", "amacs-send-region", "amacs-hub", "amacs-open-chat-log", "amacs-install-server",
            "amacs-demo", "amacs-memory-search", "amacs-memory-show"]


def package_setup(user_dir: Path) -> str:
    """Elisp that initialises package.el with USER_DIR and Debian's packages, no archives."""
    return (f"(require 'package) (setq package-user-dir {elisp_string(str(user_dir))}) "
            f"(setq package-archives nil) (add-to-list 'package-directory-list {elisp_string(DEBIAN_ELPA)}) "
            "(package-initialize)")


def batch(program: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run PROGRAM in a clean batch Emacs (no driver, no load-path of ours) outside the checkout."""
    return subprocess.run(["emacs", "-Q", "--batch", "--eval", f"(progn {program})"],
                          env=env, capture_output=True, text=True, timeout=timeout,
                          cwd="/", stdin=subprocess.DEVNULL)


def build_package(out: Path) -> Path:
    """The tar of elisp/ as package.el installs it: amacs-VERSION/ with amacs-pkg.el."""
    version = re.search(r"^;; Version: (\S+)$", (ELISP / "amacs.el").read_text(), re.M)
    assert version, "amacs.el has no Version header"
    folder = out / f"amacs-{version[1]}"
    folder.mkdir(parents=True)
    for source in sorted(ELISP.glob("*.el")):
        (folder / source.name).write_bytes(source.read_bytes())
    write = batch(f"(require 'package) (with-temp-buffer "
                  f"(insert-file-contents {elisp_string(str(folder / 'amacs.el'))}) "
                  f"(package-generate-description-file (package-buffer-info) "
                  f"{elisp_string(str(folder / 'amacs-pkg.el'))}))")
    assert write.returncode == 0, write.stderr
    tar = out / f"{folder.name}.tar"
    with tarfile.open(tar, "w", format=tarfile.USTAR_FORMAT) as archive:
        archive.add(folder, arcname=folder.name)
    return tar


def test_package_installs_and_amacs_shell_opens_through_its_autoloads(fake, home, tmp_path):
    """package-install-file installs the tar; a fresh Emacs has the commands by autoload; M-x amacs-shell opens."""
    tar = build_package(tmp_path / "build")
    pkg_text = (tmp_path / "build" / tar.stem / "amacs-pkg.el").read_text()
    assert '(epc "0.1.1")' in pkg_text and "magit-section" in pkg_text, pkg_text
    user_dir = tmp_path / "elpa"
    env = emacs_env(home, fake.url)

    install = batch(f"{package_setup(user_dir)} (package-install-file {elisp_string(str(tar))}) "
                    "(princ (format \"INSTALLED<<%S>>\\n\" (package-installed-p 'amacs)))", env=env)
    assert install.returncode == 0 and "INSTALLED<<t>>" in install.stdout, install.stdout + install.stderr
    assert not re.search(r"\b(Warning|Error):", install.stderr), install.stderr  # it compiles clean
    installed = user_dir / tar.stem
    assert (installed / "amacs-autoloads.el").exists()
    assert (installed / "amacs-shell.elc").exists()  # package.el byte-compiled it, with the deps found

    program = f"""
{package_setup(user_dir)}
(princ (format "BEFORE<<%S %S>>\\n" (featurep 'amacs) (featurep 'amacs-shell)))
(dolist (command '({" ".join(COMMANDS)}))
  (princ (format "COMMAND<<%s %S %S %S>>\\n" command (fboundp command)
                 (autoloadp (symbol-function command)) (commandp command))))
(setq amacs-server-command (list (getenv "AMACS_E2E_PYTHON") "-m" "amacs_server"))
(command-execute 'amacs-shell)
(let ((deadline (+ (float-time) 60)))
  (while (and (not (amacs-live-p)) (< (float-time) deadline))
    (accept-process-output nil 0.05)))
(princ (format "SHELL<<%S %S %S>>\\n" (buffer-name) major-mode (and (amacs-live-p) t)))
(princ (format "FROM<<%s>>\\n" (locate-library "amacs")))
(amacs-stop-server)
(kill-emacs 0)
"""
    run = batch(program, env=env)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "BEFORE<<nil nil>>" in run.stdout, out  # nothing of AMACS loaded before the command
    for command in COMMANDS:
        assert f"COMMAND<<{command} t t t>>" in run.stdout, out  # an interactive autoload
    assert "SHELL<<\"*amacs-shell*\" amacs-shell-mode t>>" in run.stdout, out
    loaded_from = re.search(r"FROM<<(.*)>>", run.stdout)
    assert loaded_from and loaded_from[1].startswith(str(installed)), out  # the package, not the checkout


def autoloaded_commands() -> set[str]:
    """The interactive functions elisp/ marks ;;;###autoload, but the batch entry point."""
    names = set()
    for path in ELISP.glob("*.el"):
        for match in re.finditer(r";;;###autoload(?: \(autoload '([a-z-]+))?\n\(defun ([a-z-]+)", path.read_text()):
            names.add(match.group(1) or match.group(2))
    return names - {"amacs-batch-run"}


def test_every_autoloaded_command_is_there_in_the_emacs_amacs_opens():
    """./amacs loads elisp/ by load-path, not the package's autoloads: what the shell loads must define them all.

    README and the keyless note told a newcomer to type M-x amacs-demo, which that
    Emacs did not know (only package.el's generated autoloads had it).
    """
    names = autoloaded_commands()
    assert {"amacs-demo", "amacs-use-local-model", "amacs-rewind", "amacs-events"} <= names
    listed = " ".join(names)
    program = (f"(dolist (root (list {elisp_string(DEBIAN_ELPA)})) (dolist (dir (directory-files root t \"^[^.]\")) "
               f"(when (file-directory-p dir) (push dir load-path)))) (push {elisp_string(str(ELISP))} load-path) "
               f"(require 'amacs-shell-start) (require 'amacs) "
               f"(dolist (name '({listed})) (unless (commandp name) (princ (format \"missing %s\\n\" name))))")
    proc = batch(program)
    assert proc.returncode == 0, proc.stderr
    assert "missing" not in proc.stdout, proc.stdout
