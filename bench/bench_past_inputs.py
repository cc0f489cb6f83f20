"""What M-x amacs-rewind's picker costs on a long home: the server reads the newest page of
past inputs from the end of agent-chat.org (``past_inputs``) and Emacs makes a label of each.

The home's agent-chat.org holds T ticks written by the server's own ChatLog (a
10-word input, a 60-word reply each); a batch Emacs opens the shell on it and
times ``amacs-history--page`` (the EPC call and the labels) N times, and the
EPC call alone; the server's read of the whole log is timed in Python too (what
the picker read before it was paged).

    .venv/bin/python bench/bench_past_inputs.py [--ticks 5000] [--n 5]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from amacs_server.persistence.chat_log import ChatLog  # noqa: E402
from bench.common import save, summary  # noqa: E402
from tests.e2e.harness import run_emacs  # noqa: E402
from tests.fake_anthropic import FakeAnthropic  # noqa: E402


def make_chat(home: Path, ticks: int) -> int:
    """Write TICKS exchanges to HOME's agent-chat.org; its size in bytes."""
    log = ChatLog(home / "agent-chat.org")
    reply = " ".join(["word"] * 60)
    for tick in range(1, ticks + 1):
        log.write_human(tick, "2026-11-27T01:00:00Z", f"input number {tick} with a few more words in it")
        log.write_agent(tick, "2026-11-27T01:00:00Z", reply, with_heading=False)
    return sum(p.stat().st_size for p in log.files())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ticks", type=int, default=5000)
    parser.add_argument("--n", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        size = make_chat(home, args.ticks)
        read_ms = []
        for _ in range(args.n):
            t0 = time.perf_counter()
            listed = [e for e in ChatLog(home / "agent-chat.org").read() if e.human is not None]
            read_ms.append((time.perf_counter() - t0) * 1000)
        assert len(listed) == args.ticks
        fake = FakeAnthropic().start()
        try:
            program = f"""(require (quote amacs-history)) (amacs-e2e-open)
              (dotimes (_ {args.n})
                (let* ((t0 (float-time)) (inputs (car (amacs-history--page))) (t1 (float-time))
                       (raw (amacs--call-sync 'past_inputs nil)))
                  (princ (format "PICKER %d %.1f %.1f\\n" (length inputs) (* 1000 (- t1 t0))
                                 (* 1000 (- (float-time) t1))))))
              (amacs-e2e-finish)"""
            run = run_emacs(home, fake.url, program, timeout=300).check()
        finally:
            fake.stop()
        picker = [(int(n), float(ms), float(call)) for n, ms, call
                  in re.findall(r"^PICKER (\d+) ([\d.]+) ([\d.]+)$", run.stdout, re.M)]
        assert picker and all(n == min(args.ticks, 200) for n, _, _ in picker), run.stdout
        data = {"ticks": args.ticks, "chat_bytes": size, "server_read_ms": summary(read_ms),
                "emacs_picker_ms": summary([ms for _, ms, _ in picker]),
                "epc_call_alone_ms": summary([call for _, _, call in picker])}
        print(data)
        save("past_inputs", data)


if __name__ == "__main__":
    main()
