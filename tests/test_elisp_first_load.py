"""What the shell's Emacs loads before its first answer: none of the libraries it does not use then.

The client is byte-compiled as ``./amacs`` finds it (``.elc``), then loaded in the order ``./amacs``
loads it, epc as the connection loads it.  ``seq`` (its generic functions compile their
dispatchers at load, which loads the byte compiler) and edmacro with kmacro (loaded by
``read-kbd-macro``, which epc's and ctable's keymaps call) took 30-40 ms of a launch on two
loaded cores before the first answer could be drawn.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ELPA = "(dolist (dir (file-expand-wildcards \"/usr/share/emacs/site-lisp/elpa/*-[0-9]*\")) " \
       "(when (file-directory-p dir) (push dir load-path)))"
KEYMAPS = "(prin1 (list ctbl:table-mode-map ctbl:column-header-keymap epc:controller-keymap " \
          "epc:controller-methods-keymap))"


def emacs(program: str, *load_path: Path) -> str:
    args = ["emacs", "-Q", "--batch"]
    for folder in load_path:
        args += ["-L", str(folder)]
    out = subprocess.run([*args, "--eval", f"(progn {ELPA} {program})"], capture_output=True, text=True,
                         timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """elisp/ byte-compiled into a folder of its own, as ./amacs's setup compiles it into .elc."""
    folder = tmp_path_factory.mktemp("elc")
    for source in (ROOT / "elisp").glob("*.el"):
        (folder / source.name).write_bytes(source.read_bytes())
    emacs(f"(dolist (f (directory-files {json.dumps(str(folder))} t \"\\\\.el\\\\'\")) "
          "(unless (byte-compile-file f) (kill-emacs 1)))", folder)
    return folder


def test_the_client_loads_neither_seq_nor_the_byte_compiler_nor_edmacro_before_its_first_answer(compiled: Path) -> None:
    """Loading the client and epc as ./amacs does leaves seq, bytecomp, cconv, edmacro and kmacro unloaded;
    epc's keymaps are what a plain ``(require 'epc)`` makes; ``read-kbd-macro`` is edmacro's again after."""
    loaded = emacs("(require 'amacs-shell-start) (require 'amacs) (amacs--require-epc) (require 'amacs-shell) "
                   "(prin1 (mapcar #'featurep '(seq bytecomp cconv edmacro kmacro epc))) (terpri) "
                   "(prin1 (autoloadp (symbol-function 'read-kbd-macro))) (terpri) "
                   f"{KEYMAPS}", compiled)
    features, autoload, keymaps = loaded.split("\n", 2)
    assert features == "(nil nil nil nil nil t)"
    assert autoload == "t"
    assert keymaps == emacs(f"(require 'epc) {KEYMAPS}")


def test_a_key_not_plain_is_read_by_edmacro_which_then_stays(compiled: Path) -> None:
    """A key ``amacs--plain-key`` does not read itself is read by edmacro, loaded then, whose
    ``read-kbd-macro`` is kept when epc has loaded."""
    out = emacs("(require 'amacs-transport) (setq print-escape-control-characters t) "
                "(prin1 (list (amacs--plain-key \"q\") (amacs--plain-key \"RET\") (amacs--plain-key \"C-m\") "
                "(featurep 'edmacro) (amacs--plain-key \"C-x a\") (amacs--plain-key \"<f5>\" t) "
                "(featurep 'edmacro)))", compiled)
    assert out == r'("q" "\15" "\15" nil "\30a" [f5] t)'
