"""Emacs -> server -> Emacs round trip of a synchronous call (issue 2: median <= 1 ms).

A real batch Emacs starts the real server, then times `amacs--call-sync' of
`ping' N times, and the stock `epc:call-sync' a few times for comparison.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import save, summary  # noqa: E402
from tests.e2e.harness import run_emacs  # noqa: E402

N = 2000
N_STOCK = 30


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    out = tmp / "times.txt"
    program = f"""
      (amacs-e2e-open)
      (dotimes (_ 50) (amacs--call-sync 'ping (list "warm")))
      (let (ours stock)
        (dotimes (_ {N})
          (let ((t0 (float-time)))
            (amacs--call-sync 'ping (list "x"))
            (push (* 1000 (- (float-time) t0)) ours)))
        (dotimes (_ {N_STOCK})
          (let ((t0 (float-time)))
            (epc:call-sync amacs--manager 'ping (list "x"))
            (push (* 1000 (- (float-time) t0)) stock)))
        (with-temp-file "{out}"
          (insert (mapconcat #'number-to-string ours " ") "\\n"
                  (mapconcat #'number-to-string stock " ") "\\n")))
      (amacs-e2e-finish)"""
    run_emacs(tmp / "agent", "http://127.0.0.1:9", program, timeout=600).check()
    ours, stock = (list(map(float, line.split())) for line in out.read_text().splitlines())
    save("roundtrip", {"amacs--call-sync": summary(ours), "stock epc:call-sync": summary(stock)})


if __name__ == "__main__":
    main()
