"""Streaming in the shell (issue 6).

- Latency from a reply delta leaving the fake model to its text in the buffer
  (an upper bound on "arriving at the server -> in the buffer"): target median <= 15 ms.
- While a long reply streams, a 10 ms timer in Emacs never sees a gap over 50 ms.

Real batch Emacs, the real server, the real SDK; the fake model streams one
small delta every 30 ms.  `process-adaptive-read-buffering' is off in Emacs
(DESIGN.md, Measuring).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import save, summary  # noqa: E402
from tests.e2e.harness import run_emacs  # noqa: E402
from tests.fake_anthropic import FakeAnthropic, Reply  # noqa: E402

WORDS = 400
REPLY = " ".join(f"word{i:03d}" for i in range(WORDS))
HEAD = '{"reply": "'

PROGRAM = r"""
(setq process-adaptive-read-buffering nil)
(defvar bench-deltas nil)
(defvar bench-ticks nil)
(advice-add 'amacs-shell--on-reply-delta :after
            (lambda (_event)
              (push (list (float-time)
                          (with-current-buffer amacs-shell-buffer-name
                            (- (marker-position amacs-shell--stream-end) (marker-position amacs-shell--stream-start))))
                    bench-deltas)))
(amacs-e2e-open)
(defvar bench-gc nil)
(let ((timer (run-at-time 0 0.01 (lambda () (push (float-time) bench-ticks))))
      (gcs gcs-done) (elapsed gc-elapsed))
  (amacs-e2e-send "stream a long reply")
  (cancel-timer timer)
  (setq bench-gc (list (- gcs-done gcs) (* 1000 (- gc-elapsed elapsed)) (length (buffer-list))
                       (featurep 'org) (featurep 'magit-section))))
(with-temp-file (getenv "BENCH_OUT")
  (insert (json-encode (list :gc (format "%S" bench-gc)
                             :deltas (vconcat (mapcar #'vconcat (nreverse bench-deltas)))
                             :ticks (vconcat (nreverse bench-ticks))))))
(amacs-e2e-finish)
"""


def main() -> None:
    text = json.dumps({"reply": REPLY, "mood": "ok", "confidence": 1, "monologue": "long"})
    assert text.startswith(HEAD)
    fake = FakeAnthropic().start()
    fake.script(Reply(text, chunks=len(REPLY) // 8, chunk_delay=0.03))
    tmp = Path(tempfile.mkdtemp())
    out = tmp / "bench.json"
    run_emacs(tmp / "agent", fake.url, PROGRAM, timeout=300, BENCH_OUT=str(out)).check()
    fake.stop()
    data = json.loads(out.read_text())
    chunks = fake.chunk_log
    latencies = []
    for when, shown in data["deltas"]:
        raw_needed = len(HEAD) + shown  # the reply's characters are plain ASCII: no escapes
        sent_at = next(t for t, sent in chunks if sent >= raw_needed)
        latencies.append((when - sent_at) * 1000)
    ticks = data["ticks"]
    gaps = [(b - a) * 1000 for a, b in zip(ticks, ticks[1:], strict=False)]
    save("stream", {
        "deltas_shown": len(latencies),
        "emacs_gc (count, ms, buffers, org loaded, magit-section loaded)": data["gc"],
        "delta_to_buffer_ms": summary(latencies),
        "timer_10ms_gaps_ms": summary(gaps),
        "max_gap_ms": round(max(gaps), 2),
        "stream_seconds": round(ticks[-1] - ticks[0], 2),
        "worst_gaps_at_s_after_first_delta": sorted(
            ((round(g, 1), round(ticks[i] - data["deltas"][0][0], 2)) for i, g in enumerate(gaps)), reverse=True)[:5],
        "last_delta_at_s": round(data["deltas"][-1][0] - data["deltas"][0][0], 2),
    })


if __name__ == "__main__":
    main()
