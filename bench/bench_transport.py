"""Transport rows of issue 10, in interactive Emacs, side by side with a direct client (the peer).

One run, one fake model (tests/fake_anthropic.py: 400 words in 100 SSE
chunks, no delay), n = N each, median / p90 in ms:

1. turn overhead with a zero-latency model: RET -> prompt back (``turn-done``
   handled), minus the fake's time on the request(s) of the turn;
2. the fake's last byte -> the reply complete in the buffer;
3. the fake sends its first text -> that text in the buffer;
4. server -> Emacs eval -> result back, ``(* 6 7)``: the real transport and
   ``EmacsFace.evaluate`` in this process, an interactive Emacs connected
   to it with ``amacs-connect``.

Rows 1-3 end to end include the whole server (the SDK's stream parsing, the
harness's tick, the git commit).  The section ``transport`` isolates what the
transport adds: the same shell, connected to the real transport and
``EmacsFace`` in this process, whose ``submit`` plays a turn at once (turn
start, the 100 deltas of the reply back to back, the reply, turn done), so
row 1 is RET -> prompt back minus the scripted turn's time in the server,
row 2 the server's last byte (the ``reply`` event written) -> reply complete
in the buffer, row 3 the server sending the first delta -> visible; and the
transport's own share of rows 2 and 3: until the shell's handler starts
(``*_handler``), the rest being the shell's rendering.

AMACS is ``./amacs`` in tmux (:mod:`bench.interactive`).  The peer, in the same
Emacs, is what gptel does without gptel (not installable here): ``curl -N`` as
an Emacs subprocess whose filter parses the SSE and inserts each text delta
into a buffer; its turn ends when the process sentinel runs.  Its buffer is shown
as gptel shows a reply, in a window of its own below the shell's (word-wrapped, the
window following the end); a second peer writes into a buffer in no window, which
is never redisplayed: the difference between the two is the display's share.  Times
are taken inside Emacs with ``float-time``; the fake's with ``time.time()``.

    .venv/bin/python bench/bench_transport.py        # N=30; BENCH_N=10 for a quick look
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.fake_anthropic as fa  # noqa: E402
from bench.common import save, summary  # noqa: E402
from bench.interactive import BareEmacs, Recorder, amacs_terminal, load  # noqa: E402

N = int(os.environ.get("BENCH_N", "30"))
WARMUP = 3
MODEL_PAUSE = 0.03
WORDS = 400
REPLY_TEXT = json.dumps({"reply": " ".join(f"word{i:03d}" for i in range(WORDS)), "mood": "calm",
                         "confidence": 0.9, "monologue": "answered", "eval": None})
LAST_WORD = f"word{WORDS - 1:03d}"


class TimedFake(fa.FakeAnthropic):
    """The fake, noting per streamed request: when it began, its first text, its last byte."""

    def __init__(self) -> None:
        super().__init__(default=lambda _body: fa.Reply(REPLY_TEXT, chunks=100))
        self.timings: list[dict[str, float]] = []


_original_send_stream = fa._Handler._send_stream


def _timed_send_stream(self: Any, body: dict[str, Any], reply: fa.Reply) -> None:
    fake = self.server.fake
    start, before = time.time(), len(fake.chunk_log)
    _original_send_stream(self, body, reply)
    end = time.time()
    if isinstance(fake, TimedFake):
        # "last": the last text delta's write began; the stream's closing events follow it, and a
        # quick reader may show the last word before the writer's "end" stamp.  "chunks": each
        # text delta's (write began, characters sent so far), for a reference chosen by what a
        # reader shows (:func:`written_at`).
        chunks = [list(c) for c in fake.chunk_log[before:]]
        fake.timings.append({"start": start, "first": fake.chunk_log[before][0],
                             "last": chunks[-1][0] if chunks else end, "end": end, "chunks": chunks})


def written_at(timing: dict[str, Any], chars: int) -> float:
    """When the fake began to write the text delta that brought the reply's first CHARS characters."""
    for at, sent in timing.get("chunks") or ():
        if sent >= chars:
            return float(at)
    return timing.get("last", timing["end"])


fa._Handler._send_stream = _timed_send_stream  # type: ignore[method-assign]

AMACS_PROBES = """(progn
  (defvar bench-t0 nil) (defvar bench-first nil) (defvar bench-reply nil)
  (defvar bench-first-start nil) (defvar bench-reply-start nil)
  (advice-add 'amacs-shell-return :before
    (lambda (&rest _) (setq bench-t0 (float-time) bench-first nil bench-first-start nil)))
  (advice-add 'amacs-shell--on-reply-delta :before
    (lambda (_e) (unless bench-first-start (setq bench-first-start (float-time)))))
  (advice-add 'amacs-shell--on-reply :before (lambda (_e) (setq bench-reply-start (float-time))))
  (advice-add 'amacs-shell--on-reply-delta :after
    (lambda (_e)
      (unless bench-first
        (with-current-buffer amacs-shell-buffer-name
          (when (> (- (marker-position amacs-shell--stream-end) (marker-position amacs-shell--stream-start)) 0)
            (setq bench-first (float-time)))))))
  (advice-add 'amacs-shell--on-reply :after
    (lambda (_e) (setq bench-reply (float-time)) (unless bench-last (setq bench-last bench-reply))))
  ;; The reply's last word on screen: the delta that brought it, or the reply (none streamed).
  ;; Looked for in this reply's streamed text only: the one before ends with the same word.
  (defvar bench-last nil)
  (advice-add 'amacs-shell-return :before (lambda (&rest _) (setq bench-last nil)))
  (advice-add 'amacs-shell--on-reply-delta :after
    (lambda (_e)
      (unless bench-last
        (with-current-buffer amacs-shell-buffer-name
          (when (save-excursion (goto-char amacs-shell--stream-end)
                                (search-backward "LAST_WORD" (max amacs-shell--stream-start
                                                                  (- (point) 200))
                                                 t))
            (setq bench-last (float-time)))))))
  (advice-add 'amacs-shell--on-turn-done :after
    (lambda (_e) (bench-record "amacs" :t0 bench-t0 :first bench-first :reply bench-reply :done (float-time)
                                     :first_start bench-first-start :reply_start bench-reply-start
                                     :last bench-last)))
  t)""".replace("LAST_WORD", LAST_WORD)

PEER = """(progn
  ;; The peer's text is shown as gptel shows a reply: in a window of its own beside
  ;; the shell (the frame split in two), wrapped at words like the shell's, the window
  ;; following the end (gptel-auto-scroll).  A buffer in no window is never redisplayed:
  ;; its "visible" times would leave out the display work the shell's include.
  (with-current-buffer (get-buffer-create "*peer*")
    (setq-local word-wrap t truncate-lines nil))
  (with-selected-window (get-buffer-window amacs-shell-buffer-name)
    (set-window-buffer (split-window-below) "*peer*"))
  (defun bench-peer-run (url &optional kind)
    "POST to URL's messages API with curl; insert each streamed text delta into *peer*.
With KIND \\"peer-hidden\\", into *peer-hidden*, a buffer in no window (no redisplay)."
    (let* ((t0 (float-time)) (first nil) (pending "") (kind (or kind "peer"))
           (buf (get-buffer-create (format "*%s*" kind)))
           (body (json-encode (list :model "claude-fake" :max_tokens 1024 :stream t
                                    :messages (vector (list :role "user" :content "go")))))
           (process-adaptive-read-buffering nil))
      (with-current-buffer buf (goto-char (point-max)) (insert "\\n\\n"))
      (make-process
       :name "bench-peer" :buffer nil :connection-type 'pipe :noquery t :coding 'utf-8-unix
       :command (list "curl" "-sN" "--no-buffer" "-X" "POST" (concat url "/v1/messages")
                      "-H" "x-api-key: sk-peer" "-H" "anthropic-version: 2023-06-01"
                      "-H" "content-type: application/json" "--data-binary" body)
       :filter (lambda (_p string)
                 (setq pending (concat pending string))
                 (let ((start 0) end text)
                   (while (setq end (string-search "\\n" pending start))
                     (when (and (> end (+ start 6)) (eq (aref pending start) ?d)
                                (string-search "text_delta" pending start)
                                (< (string-search "text_delta" pending start) end))
                       (setq text (gethash "text" (gethash "delta" (json-parse-string
                                                                    (substring pending (+ start 6) end)))))
                       (with-current-buffer buf (goto-char (point-max)) (insert text)
                         (dolist (w (get-buffer-window-list buf nil t)) (set-window-point w (point-max))))
                       (unless first (setq first (float-time))))
                     (setq start (1+ end)))
                   (setq pending (substring pending start))))
       :sentinel (lambda (p _e)
                   (unless (process-live-p p)
                     (let ((now (float-time)))
                       (bench-record kind :t0 t0 :first first :reply now :done now)))))))
  t)"""


def rows(records: list[dict[str, Any]], timings: list[dict[str, float]]) -> dict[str, list[float]]:
    """The three streaming rows, in ms, from Emacs's RECORDS and the fake's TIMINGS (one request per turn)."""
    out: dict[str, list[float]] = {"turn_overhead": [], "last_byte_to_complete": [], "first_text_visible": []}
    for record, timing in zip(records, timings, strict=True):
        server = timing["end"] - timing["start"]
        out["turn_overhead"].append(1000 * ((record["done"] - record["t0"]) - server))
        out["last_byte_to_complete"].append(1000 * (record["reply"] - timing["end"]))
        out["first_text_visible"].append(1000 * ((record["first"] or record["reply"]) - timing["first"]))
        if "reply_start" in record:  # AMACS's turn, in parts: where the overhead goes
            for name, ms in (("part: RET -> request at the model", timing["start"] - record["t0"]),
                             ("part: last byte -> reply handler starts", record["reply_start"] - timing["end"]),
                             ("part: reply handler (render, insert)", record["reply"] - record["reply_start"]),
                             ("part: reply shown -> turn done handled", record["done"] - record["reply"])):
                out.setdefault(name, []).append(1000 * ms)
    return out


def bench_stream(tmp: Path) -> dict[str, Any]:
    """Rows 1-3 for AMACS and the peer, alternating turns in one Emacs."""
    fake = TimedFake().start()
    term = amacs_terminal(tmp / "term", fake.url)
    try:
        recorder = Recorder(tmp)
        recorder.install(term)
        term.elisp(AMACS_PROBES)
        term.elisp(PEER)
        kinds = {"amacs": "amacs",
                 "peer": "peer (curl + process filter), its text in a window",
                 "peer-hidden": "peer, its text in no window (never redisplayed)"}
        timings: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}

        def turn(kind: str, i: int) -> None:
            """One turn of KIND (the i-th): started, waited for; the fake's timings of it kept."""
            n_before = len(fake.timings)
            if kind == "amacs":
                term.type("go")
                term.press("Enter")
            else:
                term.elisp(f'(bench-peer-run "{fake.url}" "{kind}")')
            recorder.wait(kind, i + 1)
            new = fake.timings[n_before:]
            assert kind != "amacs" or len(new) == 1, f"one model call per turn, got {len(new)}"
            if i >= WARMUP:
                timings[kind] += new
            time.sleep(0.2)

        for i in range(WARMUP + N):
            for kind in kinds:
                turn(kind, i)
        return {label: {k: summary(v) for k, v in rows(recorder.read(kind)[WARMUP:], timings[kind]).items()}
                for kind, label in kinds.items()}
    finally:
        term.close()
        fake.stop()


def bench_eval(tmp: Path) -> dict[str, Any]:
    """Row 4, and rows 1-3 of the transport alone: the real transport and EmacsFace in this process."""
    from amacs_server.transport.emacs_face import EmacsFace
    from amacs_server.transport.server import AmacsEPCServer

    token = secrets.token_hex(32)
    server = AmacsEPCServer(token, headless=True)
    face = EmacsFace(server)
    reply = json.loads(REPLY_TEXT)["reply"]
    size = -(-len(reply) // 100)
    deltas = [reply[i:i + size] for i in range(0, len(reply), size)]
    turns: list[dict[str, float]] = []

    def submit(_text: Any) -> bool:
        def play() -> None:
            start = time.time()
            face.input_taken()
            face.turn_started()
            time.sleep(MODEL_PAUSE)  # the model's time to first token: the shell shows "thinking"
            first = time.time()
            for delta in deltas:
                face.reply_delta(delta)
            face.reply(reply, streamed=True)
            last = time.time()
            done_sent = time.time()
            face.turn_done(len(turns) + 1)
            turns.append({"start": start, "first": first, "end": last, "done": time.time(), "done_sent": done_sent})
        threading.Thread(target=play, daemon=True).start()  # as the loop thread would
        return True

    server.register("emacs_reply", lambda rid, result: face.deliver(rid, result) or True)
    server.register("eval_hold", lambda rid, holding: face.hold(rid, bool(holding)) or True)
    server.register("submit", submit)
    server.on_hello = lambda _settings: {"model": "scripted", "backend": "bench"}
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    emacs = BareEmacs(tmp / "eval", init="(require 'amacs)").start()
    try:
        emacs.elisp(f'(amacs-connect {server.server_address[1]} "{token}")')
        emacs.wait_for_elisp("(amacs-live-p)", what="the connection")

        async def evals() -> list[float]:
            samples = []
            for i in range(WARMUP + 3 * N):
                t0 = time.perf_counter()
                result = await face.evaluate("(* 6 7)")
                dt = 1000 * (time.perf_counter() - t0)
                assert result.success and result.result == "42", result
                if i >= WARMUP:
                    samples.append(dt)
                await asyncio.sleep(0.05)
            return samples

        bare_eval = asyncio.run(evals())
        emacs.elisp("(progn (amacs-shell) (delete-other-windows) t)")
        emacs.wait_idle()
        recorder = Recorder(tmp / "eval")
        recorder.install(emacs)
        emacs.elisp(AMACS_PROBES)
        for i in range(WARMUP + N):
            emacs.type("go")
            emacs.press("Enter")
            recorder.wait("amacs", i + 1)
            time.sleep(0.15)
        transport: dict[str, list[float]] = {"turn_overhead": [], "last_byte_to_complete": [],
                                             "first_text_visible": [], "last_byte_to_reply_handler": [],
                                             "first_delta_to_its_handler": [], "ret_to_submit_in_server": [],
                                             "turn_done_sent_to_handled": []}
        for record, turn in list(zip(recorder.read("amacs"), turns, strict=True))[WARMUP:]:
            server_ms = 1000 * (turn["done"] - turn["start"])
            transport["turn_overhead"].append(1000 * (record["done"] - record["t0"]) - server_ms)
            transport["last_byte_to_complete"].append(1000 * (record["reply"] - turn["end"]))
            # The first text shown: a delta, or the reply itself when it came in the same drain.
            transport["first_text_visible"].append(1000 * ((record["first"] or record["reply"]) - turn["first"]))
            transport["ret_to_submit_in_server"].append(1000 * (turn["start"] - record["t0"]))
            transport["turn_done_sent_to_handled"].append(1000 * (record["done"] - turn["done_sent"]))
            transport["last_byte_to_reply_handler"].append(1000 * (record["reply_start"] - turn["end"]))
            transport["first_delta_to_its_handler"].append(
                1000 * ((record["first_start"] or record["reply_start"]) - turn["first"]))

        return {"eval": {"amacs (transport + amacs-eval, no shell buffer)": summary(bare_eval),
                         "amacs with the shell open (its eval lines)": summary(asyncio.run(evals()))},
                "transport": {k: summary(v) for k, v in transport.items()}}
    finally:
        emacs.close()
        server.shutdown()
        server.server_close()


def main() -> None:
    if not shutil.which("tmux"):
        raise SystemExit("bench_transport needs tmux (scripts/setup.sh --test installs it)")
    tmp = Path(tempfile.mkdtemp(prefix="amacs-bench-transport-"))
    load_before = load()
    result: dict[str, Any] = {"n": N, "load_before": load_before}
    inproc = bench_eval(tmp)
    result["eval_roundtrip_6x7"] = inproc["eval"]
    result["amacs transport alone (in-process server, scripted turn)"] = inproc["transport"]
    result.update(bench_stream(tmp))
    result["load_after"] = load()
    result["targets_ms"] = {"turn_overhead": "<= 10 median", "last_byte_to_complete": "<= 3",
                            "first_text_visible": "<= 5 / 10", "eval_roundtrip_6x7": "<= 1"}
    save("transport", result)


if __name__ == "__main__":
    main()
