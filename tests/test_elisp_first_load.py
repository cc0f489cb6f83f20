"""What the shell's Emacs loads before its first answer: none of the libraries it does not use then.

The client is byte-compiled as ``./amacs`` finds it (``.elc``), then loaded in the order ``./amacs``
loads it, epc as the connection loads it.  ``seq`` (its generic functions compile their
dispatchers at load, which loads the byte compiler) and edmacro with kmacro (loaded by
``read-kbd-macro``, which epc's and ctable's keymaps call) took 30-40 ms of a launch on two
loaded cores before the first answer could be drawn.  The same holds for what the shell runs on
the way to its first answer: a library a function autoloads then (``cl-some`` is cl-extra's, which
requires seq and help-mode) is loaded while the person waits.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ELPA = "(dolist (dir (file-expand-wildcards \"/usr/share/emacs/site-lisp/elpa/*-[0-9]*\")) " \
       "(when (file-directory-p dir) (push dir load-path)))"
KEYMAPS = "(prin1 (list ctbl:table-mode-map ctbl:column-header-keymap epc:controller-keymap " \
          "epc:controller-methods-keymap))"


def emacs(program: str, *load_path: Path, env: dict[str, str] | None = None) -> str:
    args = ["emacs", "-Q", "--batch"]
    for folder in load_path:
        args += ["-L", str(folder)]
    out = subprocess.run([*args, "--eval", f"(progn {ELPA} {program})"], capture_output=True, text=True,
                         timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT, env=env)
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
    """Loading the client and epc as ./amacs does leaves seq, bytecomp, cconv, edmacro, kmacro, diff-mode and
    easy-mmode unloaded (diff-mode is loaded when a turn's changes are first shown);
    epc's keymaps are what a plain ``(require 'epc)`` makes; ``read-kbd-macro`` is edmacro's again after."""
    loaded = emacs("(require 'amacs-shell-start) (require 'amacs) (amacs--require-epc) (require 'amacs-shell) "
                   "(prin1 (mapcar #'featurep '(seq bytecomp cconv edmacro kmacro diff-mode easy-mmode epc))) (terpri) "
                   "(prin1 (autoloadp (symbol-function 'read-kbd-macro))) (terpri) "
                   f"{KEYMAPS}", compiled)
    features, autoload, keymaps = loaded.split("\n", 2)
    assert features == "(nil nil nil nil nil nil nil t)"
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


# The shell's way to its first answer, each step as the connection runs it, with no server: the
# shell opened, a question sent before the server said hello, the hello of a returning home (its
# last exchange replayed, one that evaluated), then the events of the answer, every handler of each.
FIRST_ANSWER = """
(advice-add 'amacs-start-server :override #'ignore)
(advice-add 'amacs-call :override #'ignore)
(let ((connection (amacs-current-connection)) (seen nil))
  (amacs-shell)
  (with-current-buffer (amacs-shell--buffer)
    (goto-char (point-max)) (insert "a question") (amacs-shell-return))
  (push (cons 'sent (cl-remove-if-not #'featurep watched)) seen)
  (amacs--hello-accepted connection '(:tick 3 :recent [(:tick 2 :human "earlier" :agent "an answer"
                                                         :eval (:form "(+ 1 2)" :ok t :value "3"))]))
  (push (cons 'hello (cl-remove-if-not #'featurep watched)) seen)
  (amacs--queue-events connection '((:type "input-taken" :saved t) (:type "turn-start") (:type "step" :step 1 :limit 8)
                                    (:type "reply-delta" :text "the answer")
                                    (:type "reply" :text "the answer" :streamed t)
                                    (:type "tick" :tick 4) (:type "turn-done" :tick 4)))
  (amacs--drain-events connection)
  (push (cons 'answered (cl-remove-if-not #'featurep watched)) seen)
  (prin1 (reverse seen)) (terpri)
  (prin1 (with-current-buffer (amacs-shell--buffer) (buffer-substring-no-properties (point-min) (point-max)))))
"""


def test_the_shell_loads_no_library_on_its_way_to_the_first_answer(compiled: Path, tmp_path: Path) -> None:
    """From the shell's opening to its first answer drawn (a question sent at once, a returning home's
    hello and replay, the answer's events), nothing loads seq, cl-extra or help-mode."""
    program = (f"(defvar watched '(seq cl-extra help-mode bytecomp)) (setq amacs-home {json.dumps(str(tmp_path / 'home'))}) "
               "(require 'amacs-shell-start) (require 'amacs) (amacs--require-epc) (require 'amacs-shell) "
               f"{FIRST_ANSWER}")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AMACS_", "ANTHROPIC_", "OPENAI_"))},
           "HOME": str(tmp_path), "ANTHROPIC_API_KEY": "sk-ant-first-load"}
    loaded, shown = emacs(program, compiled, env=env).split("\n", 1)
    assert "an answer" in shown and "were in an earlier Emacs" in shown and "the answer" in shown, shown
    assert loaded == "((sent) (hello) (answered))", loaded


def test_amacs_asks_the_warm_server_before_the_client_loads(tmp_path: Path) -> None:
    """./amacs asks the warm server for the home's server first thing (elisp/amacs-warm.el): when the
    request goes out, neither cl-lib nor any other file of the client is loaded (their ~15-26 ms of
    Lisp delayed the server's hello behind the prompt under load)."""
    script = (ROOT / "amacs").read_text()
    assert script.index("(amacs-ask-warm-first)") < script.index("(require 'amacs-shell-start)")
    warm = tmp_path / "warm"
    warm.mkdir(mode=0o700)
    program = ("(require 'amacs-warm) "  # what it sends with is replaced (an advice would load cl-lib)
               "(fset 'amacs--open-warm (lambda (&rest _) "
               "(prin1 (mapcar #'featurep '(cl-lib amacs-settings amacs-transport amacs-server epc))) nil)) "
               "(write-region \"\" nil (amacs--warm-socket (expand-file-name \".venv/bin/python\" amacs--root))) "
               "(let ((noninteractive nil)) (amacs-ask-warm-first))")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AMACS_", "ANTHROPIC_", "OPENAI_"))},
           "HOME": str(tmp_path), "ANTHROPIC_API_KEY": "sk-ant-first-load", "AMACS_WARM_DIR": str(warm),
           "AMACS_HOME": str(tmp_path / "home")}
    args = ["emacs", "-Q", "--batch", "-L", str(ROOT / "elisp"), "--eval", f"(progn {program})"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "(nil nil nil nil nil)", out.stdout
