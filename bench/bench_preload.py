"""The org preload's pieces (``amacs-render-preload``): how long each holds Emacs.

The preload loads org a file at each idle moment, so a key typed meanwhile waits at
most for one piece.  Each sample is a fresh ``emacs -Q --batch`` running every piece in
order (the compiled client from ``.elc``); reported: the longest piece of each sample
(what a key can wait), the whole preload's work, and, for comparison, the same work
as the old preload did it: ``(require 'org)`` then the first ``org-mode`` in one go.

    .venv/bin/python bench/bench_preload.py [N]
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import save, summary  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

PIECES = """(progn
  (require 'amacs-render)
  (setq amacs--render-preload-queue (amacs--render-preload-steps))
  (let ((longest 0) (n 0) (start (float-time)))
    (while amacs--render-preload-queue
      (let ((piece (pop amacs--render-preload-queue)) (t0 (float-time)))
        (funcall piece)
        (setq longest (max longest (- (float-time) t0)) n (1+ n))))
    (princ (format "%d %f %f\\n" n longest (- (float-time) start)))))"""

ONE_STEP = """(let ((start (float-time)))
  (require 'org)
  (with-temp-buffer (let ((org-mode-hook nil)) (org-mode)))
  (princ (format "%f\\n" (- (float-time) start))))"""


def emacs(form: str) -> str:
    """FORM's printed output from a fresh batch Emacs with the compiled client on its load path."""
    done = subprocess.run(["emacs", "-Q", "--batch", "-L", str(ROOT / ".elc"), "--eval", form],
                          capture_output=True, text=True, check=True, timeout=120)
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    samples = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    subprocess.run([str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, check=True, capture_output=True)
    longest, total, one_step, pieces = [], [], [], 0
    for _ in range(samples):
        n, piece, whole = emacs(PIECES).split()
        pieces = int(n)
        longest.append(float(piece) * 1000)
        total.append(float(whole) * 1000)
        one_step.append(float(emacs(ONE_STEP)) * 1000)
    save("preload", {"load_average": os.getloadavg()[0], "pieces": pieces,
                     "longest_piece": summary(longest), "all_pieces": summary(total),
                     "one_step_org_and_org_mode": summary(one_step)})


if __name__ == "__main__":
    main()
