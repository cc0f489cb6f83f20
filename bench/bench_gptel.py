"""AMACS beside real gptel: the five transport rows, in one interactive Emacs, turns alternating.

One ``./amacs`` in tmux (``emacs -nw`` under a pty, 120x40) also loads gptel
0.9.9.5 (``--gptel PATH``: the directory holding ``gptel``, ``compat`` and
``transient/lisp``), pointed at the same fake model (tests/fake_anthropic.py,
Anthropic protocol over http, streaming on).  AMACS's shell and gptel's org chat
buffer are shown in turn full-frame in the one window, both wrapped at words (org
would truncate gptel's long lines), their histories growing, turns alternating
AMACS / gptel, the three phases below taking turns round by round.  Both send
the same text ("go"); the fake answers both with the same ~3,300 characters
(AMACS's JSON reply of 400 words).

Rows, median / p90 in ms, each for both:

1. turn overhead with a zero-latency model (100 chunks, no delay): RET -> turn
   done handled (AMACS: ``turn-done``; gptel: ``gptel-post-response-functions``),
   minus the fake's time on the request;
2. the same with 100 chunks 20 ms apart;
3. first text -> visible, streaming (the run of row 2): the fake sends the first
   delta -> that text is in the displayed buffer;
4. RET -> the request at the model (the run of row 1);
5. the whole reply in one chunk -> its last word in the displayed buffer;
6. the same for the whole reply in 100 chunks back to back (the run of row 1).

"Visible" is as in :mod:`bench.bench_transport`: the text inserted into the
buffer shown in the selected window (AMACS: after its delta / reply handler, the
reply's last word after the delta that brought it, or the reply if none did;
gptel: the ``after-change-functions`` call of the insertion holding it), timed
inside Emacs with ``float-time``.  RET is ``RET`` in the shell and gptel's
``C-c RET`` (``gptel-send``) in its buffer, both typed through tmux.

    .venv/bin/python bench/bench_gptel.py [--gptel PATH] [--n N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.fake_anthropic as fa  # noqa: E402
from bench.bench_transport import AMACS_PROBES, LAST_WORD, REPLY_TEXT, TimedFake, written_at  # noqa: E402
from bench.common import save, summary  # noqa: E402
from bench.interactive import Recorder, amacs_terminal, load  # noqa: E402
from tests.tmux.terminal import ROOT, Terminal  # noqa: E402

WARMUP = 2
GPTEL_BUFFER = "*gptel-bench*"


def default_gptel() -> Path | None:
    """The peers directory beside the checkout (../shared/peers), if there is one."""
    for candidate in (ROOT.parent / "shared" / "peers", ROOT.parents[1] / "shared" / "peers"):
        if (candidate / "gptel" / "gptel.el").exists():
            return candidate
    return None


def gptel_setup(peers: Path, port: int) -> str:
    """Elisp: load gptel from PEERS, point it at the fake on PORT, open its org chat buffer, probe it."""
    return f"""(progn
  (dolist (d '("gptel" "compat" "transient/lisp"))
    (add-to-list 'load-path (expand-file-name d "{peers}")))
  (require 'gptel) (require 'gptel-anthropic)
  (setq gptel-backend (gptel-make-anthropic "Fake" :host "127.0.0.1:{port}" :protocol "http"
                        :key "sk-peer" :stream t :models '(claude-fake))
        gptel-model 'claude-fake gptel-default-mode 'org-mode gptel-use-curl t)
  (defvar bench-g-t0 nil) (defvar bench-g-first nil) (defvar bench-g-reply nil)
  (advice-add 'gptel-send :before
    (lambda (&rest _) (setq bench-g-t0 (float-time) bench-g-first nil bench-g-reply nil)))
  (with-current-buffer (gptel "{GPTEL_BUFFER}")
    ;; Wrapped at words like the shell's (org would truncate lines: less to lay out).
    (setq-local word-wrap t truncate-lines nil)
    (add-hook 'after-change-functions
      (lambda (beg end _len)
        (when (and bench-g-t0 (> end beg))
          (let ((s (buffer-substring-no-properties beg end)))
            (when (and (not bench-g-first) (string-search "word" s)) (setq bench-g-first (float-time)))
            (when (string-search "null}}" s) (setq bench-g-reply (float-time))))))
      nil t))
  (add-hook 'gptel-post-response-functions
    (lambda (&rest _)
      (bench-record "gptel" :t0 bench-g-t0 :first bench-g-first :reply (or bench-g-reply (float-time))
                    :done (float-time))))
  t)"""


def show(term: Terminal, buffer_form: str) -> None:
    """Show BUFFER_FORM's buffer full-frame in the one window, point at its end."""
    term.elisp(f"(progn (delete-other-windows) (switch-to-buffer {buffer_form}) (goto-char (point-max)) t)")
    time.sleep(0.2)  # the switch redisplayed, Emacs idle again


# Where the last text each kind shows ends in the fake's reply: AMACS shows the reply's string (its
# last word, then the JSON's close, which it never shows); gptel the whole text (its probe: "null}").
SHOWN_END = {"amacs": REPLY_TEXT.index(LAST_WORD) + len(LAST_WORD), "gptel": len(REPLY_TEXT)}


def phase_rows(records: list[dict[str, Any]], timings: list[dict[str, Any]],
               shown_end: int = len(REPLY_TEXT)) -> dict[str, list[float]]:
    """Per-turn ms from Emacs's RECORDS and the fake's TIMINGS (one request per turn).
    SHOWN_END: where the last text the kind shows ends in the reply (the last word's reference)."""
    out: dict[str, list[float]] = {"turn_overhead": [], "ret_to_request": [], "first_text_visible": [],
                                   "last_byte_to_last_word_visible": []}
    for record, timing in zip(records, timings, strict=True):
        out["turn_overhead"].append(1000 * ((record["done"] - record["t0"]) - (timing["end"] - timing["start"])))
        out["ret_to_request"].append(1000 * (timing["start"] - record["t0"]))
        out["first_text_visible"].append(1000 * ((record["first"] or record["reply"]) - timing["first"]))
        # AMACS: the delta that showed the last word (the reply event renders it again, with org).
        # From the write of the text delta that holds the last word each kind shows, for both alike:
        # in 100 chunks AMACS's last word comes two deltas before gptel's ("null}"), and the fake
        # may be descheduled between them.
        out["last_byte_to_last_word_visible"].append(
            1000 * ((record.get("last") or record["reply"]) - written_at(timing, shown_end)))
    return out


def history_sizes(term: Terminal) -> dict[str, int]:
    """The characters in AMACS's shell and in gptel's chat buffer."""
    return {"amacs": int(term.elisp("(with-current-buffer amacs-shell-buffer-name (buffer-size))")),
            "gptel": int(term.elisp(f'(with-current-buffer "{GPTEL_BUFFER}" (buffer-size))'))}


def run(peers: Path, n_fast: int, n_slow: int, tmp: Path, warmup: int = WARMUP, fill_to: int = 0) -> dict[str, Any]:
    """The three phases, turns alternating AMACS / gptel; the six rows for each.

    FILL_TO: before the counted turns, turns of both (the whole reply at once, not counted)
    until the shell and gptel's buffer each hold at least that many characters."""
    fake = TimedFake().start()
    term = amacs_terminal(tmp / "term", fake.url)
    kinds = ("amacs", "gptel")
    try:
        recorder = Recorder(tmp)
        recorder.install(term)
        term.elisp(AMACS_PROBES)
        term.elisp(gptel_setup(peers, int(fake.url.rsplit(":", 1)[1])), timeout=60)
        buffers = {"amacs": "amacs-shell-buffer-name", "gptel": f'"{GPTEL_BUFFER}"'}
        done = dict.fromkeys(kinds, 0)

        def turn(kind: str) -> tuple[dict[str, Any], dict[str, float]]:
            show(term, buffers[kind])
            before = len(fake.timings)
            term.type("go")
            term.press("Enter" if kind == "amacs" else "C-c Enter")
            done[kind] += 1
            record = recorder.wait(kind, done[kind], timeout=60)[-1]
            new = fake.timings[before:]
            assert len(new) == 1, f"{kind}: one model call per turn, got {len(new)}"
            time.sleep(0.2)
            return record, new[0]

        sizes = history_sizes(term)
        fake.respond_with(lambda _body: fa.Reply(REPLY_TEXT, chunks=1))
        while min(sizes.values()) < fill_to:
            for kind in kinds:
                if sizes[kind] < fill_to:
                    turn(kind)
            sizes = history_sizes(term)
        sizes_before = sizes
        phases = {"zero-latency, 100 chunks": (fa.Reply(REPLY_TEXT, chunks=100), n_fast),
                  "100 chunks at 20 ms": (fa.Reply(REPLY_TEXT, chunks=100, chunk_delay=0.02), n_slow),
                  "whole reply in one chunk": (fa.Reply(REPLY_TEXT, chunks=1), n_fast)}
        # The phases take turns, round by round, so each meets the same histories: gptel
        # reads its whole buffer at every send, so a phase run last would meet the longest.
        got: dict[str, dict[str, tuple[list[dict[str, Any]], list[dict[str, float]]]]] = {
            name: {k: ([], []) for k in kinds} for name in phases}
        for i in range(warmup + max(n for _, n in phases.values())):
            for name, (reply, n) in phases.items():
                if i >= warmup + n:
                    continue
                fake.respond_with(lambda _body, reply=reply: reply)
                for kind in kinds:
                    record, timing = turn(kind)
                    if i >= warmup:
                        got[name][kind][0].append(record)
                        got[name][kind][1].append(timing)
        samples = {name: {kind: phase_rows(*got[name][kind], SHOWN_END[kind]) for kind in kinds} for name in phases}
        pick = {"turn overhead, zero-latency model": ("zero-latency, 100 chunks", "turn_overhead"),
                "turn overhead, 100 chunks at 20 ms": ("100 chunks at 20 ms", "turn_overhead"),
                "first text -> visible, streaming": ("100 chunks at 20 ms", "first_text_visible"),
                "RET -> request at the model": ("zero-latency, 100 chunks", "ret_to_request"),
                "whole reply at once -> last word visible": ("whole reply in one chunk",
                                                             "last_byte_to_last_word_visible"),
                "whole reply at once in 100 chunks -> last word visible": ("zero-latency, 100 chunks",
                                                                           "last_byte_to_last_word_visible")}
        result: dict[str, Any] = {"rows": {row: {kind: summary(samples[phase][kind][key]) for kind in kinds}
                                           for row, (phase, key) in pick.items()},
                                  "all": {phase: {kind: {k: summary(v) for k, v in per.items()}
                                                  for kind, per in by_kind.items()}
                                          for phase, by_kind in samples.items()}}
        result["gptel_buffer_chars"] = int(term.elisp(f'(with-current-buffer "{GPTEL_BUFFER}" (buffer-size))'))
        result["history_chars"] = {"before": sizes_before, "after": history_sizes(term)}
        return result
    finally:
        term.close()
        fake.stop()


def table(rows: dict[str, dict[str, dict[str, float]]]) -> str:
    """The rows as a markdown table: AMACS and gptel median / p90 (n)."""
    lines = ["| path | AMACS | gptel | |", "|---|---|---|---|"]
    for row, by in rows.items():
        a, g = by["amacs"], by["gptel"]
        ratio = a["median_ms"] / g["median_ms"] if g["median_ms"] > 0 else float("inf")
        verdict = "at or ahead" if a["median_ms"] <= g["median_ms"] else f"**{ratio:.1f}x behind**"
        lines.append(f"| {row} (n={a['n']}) | {a['median_ms']:.1f} / {a['p90_ms']:.1f} "
                     f"| {g['median_ms']:.1f} / {g['p90_ms']:.1f} | {verdict} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gptel", type=Path, default=default_gptel(),
                        help="directory holding gptel/, compat/ and transient/lisp/ (default ../shared/peers)")
    parser.add_argument("--n", type=int, default=int(os.environ.get("BENCH_N", "30")),
                        help="turns per kind in the fast phases (the 20 ms phase takes 2/3 of it)")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="turns per kind and phase not counted")
    parser.add_argument("--sizes", default="",
                        help="comma-separated history sizes in characters (e.g. 0,50000,280000): a fresh run "
                             "for each, both histories filled to it by turns not counted")
    args = parser.parse_args(argv)
    if args.gptel is None or not (args.gptel / "gptel" / "gptel.el").exists():
        raise SystemExit("bench_gptel needs gptel's sources: --gptel PATH (holding gptel/, compat/, transient/lisp/)")
    if not shutil.which("tmux") or not shutil.which("curl"):
        raise SystemExit("bench_gptel needs tmux and curl (scripts/setup.sh --test installs them)")
    if args.sizes:
        return by_size(args.gptel.resolve(), [int(x) for x in args.sizes.split(",")], args.n, args.warmup)
    tmp = Path(tempfile.mkdtemp(prefix="amacs-bench-gptel-"))
    result: dict[str, Any] = {"load_before": load()}
    result.update(run(args.gptel.resolve(), args.n, max(1, round(args.n * 2 / 3)), tmp, args.warmup))
    result["load_after"] = load()
    save("gptel", result)
    print(table(result["rows"]))
    print(f"load before {result['load_before']}, after {result['load_after']}")
    print(f"records: {tmp / 'times.jsonl'}")
    return result


def by_size(peers: Path, sizes: list[int], n: int, warmup: int) -> dict[str, Any]:
    """The six rows at each history size: a fresh Emacs for each, both histories filled to it first."""
    results: dict[str, Any] = {}
    for size in sizes:
        tmp = Path(tempfile.mkdtemp(prefix=f"amacs-bench-gptel-{size}-"))
        result: dict[str, Any] = {"load_before": load()}
        result.update(run(peers, n, max(1, round(n * 2 / 3)), tmp, warmup, fill_to=size))
        result["load_after"] = load()
        results[str(size)] = result
        print(f"history filled to {size} chars: {result['history_chars']}")
        print(table(result["rows"]))
        print(f"load before {result['load_before']}, after {result['load_after']}")
    save("gptel_sizes", results)
    return results


if __name__ == "__main__":
    main()
