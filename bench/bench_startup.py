"""Start-up (issue 10): ``M-x amacs-shell`` -> server ready (``amacs-ready-hook``).

Each sample is a fresh interactive ``emacs -nw -Q`` in a detached tmux session
(event-driven, with redisplay, as a person has it): once Emacs is up, the keys
``M-x amacs-shell RET`` are typed through tmux; Emacs notes the time when the
minibuffer's RET ends (``minibuffer-exit-hook``), when ``amacs-shell`` runs
(its files autoloaded), when it starts the server process, when the port line
arrives, when the server accepts hello (ready: ``amacs-ready-hook`` runs; the server
answers hello only once its runtime is built and its methods published, so a turn typed
now is taken at once; its first model call still waits for the model SDK's import, which
starts after hello), and when that hook is done (greeted: the shell has rendered the last exchanges), and when the
shell's prompt takes input (prompt: the command that made the shell has ended, the shell in
the selected window; Emacs redisplays next).  Targets (issue 28): prompt <= 150 ms,
ready <= 300 ms, flat in history.  Homes: a fresh one (new directory per sample) and
one with 5,000 ticks of chat and monologue (built once, in the RFC format).

The peer (gptel cannot be installed here) is loading a comparable HTTP client in
the same way: ``M-x bench-peer`` = ``(require 'url)``, ``(require 'url-http)``,
``(require 'json)`` in a fresh Emacs.

    .venv/bin/python bench/bench_startup.py [N] [--ticks 5000] [--only fresh|history|peer]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from amacs_server.persistence.chat_log import ChatLog  # noqa: E402
from amacs_server.persistence.monologue import MonologueLog  # noqa: E402
from bench.common import save, server_pid, summary, wait_gone  # noqa: E402

SETUP = r"""
(progn
  (setq native-comp-async-report-warnings-errors 'silent)
  (add-to-list 'package-directory-list "/usr/share/emacs/site-lisp/elpa")  ; as ./amacs does
  (package-initialize)
  (autoload 'amacs-shell "amacs-shell-start" nil t)  ; as the package's autoloads say
  (defvar bench-times nil)
  (defun bench-mark (what) (push (cons what (float-time)) bench-times))
  (defun bench-write-and-quit ()
    (setq create-lockfiles nil)  ; a sample's Emacs killed mid-write must not lock the next one out
    (with-temp-file (getenv "BENCH_OUT")
      (insert (json-encode (vconcat (mapcar (lambda (m) (vector (car m) (cdr m))) (reverse bench-times))))))
    (kill-emacs 0))
  ;; RET ends M-x's minibuffer: the person's "now"; then amacs-shell.el is autoloaded.
  (add-hook 'minibuffer-exit-hook
            (lambda () (unless (assoc "command" bench-times) (bench-mark "command"))))
  (advice-add 'amacs-shell :before (lambda (&rest _) (bench-mark "loaded")))
  ;; The shell's buffer and prompt are made and shown in the window: keys typed now go to it
  ;; (and are kept until the server is ready).  Marked when the command that made it has ended.
  (add-hook 'post-command-hook
            (lambda () (when (and (not (assoc "prompt" bench-times)) (get-buffer "*amacs-shell*")
                                  (eq (window-buffer) (get-buffer "*amacs-shell*")))
                         (bench-mark "prompt"))))
  (with-eval-after-load 'amacs-transport
    (advice-add 'amacs--start-server-process :before (lambda (&rest _) (bench-mark "process")))
    (advice-add 'amacs--connect-port :before (lambda (&rest _) (bench-mark "port")))
    ;; Ready: hello accepted, as `amacs-ready-hook' starts.  Greeted: after that hook,
    ;; whose `amacs-shell--greet' renders the last exchanges of a home with history.
    (advice-add 'amacs--hello-accepted :before (lambda (&rest _) (bench-mark "ready")))
    (advice-add 'amacs--hello-accepted :after
                (lambda (&rest _) (bench-mark "greeted") (run-at-time 0.3 nil #'bench-write-and-quit))))
  (defun bench-peer ()
    (interactive)
    (require 'url) (require 'url-http) (require 'json)
    (bench-mark "ready")
    (run-at-time 0.3 nil #'bench-write-and-quit))
  (add-hook 'emacs-startup-hook
            (lambda () (run-at-time 0.2 nil (lambda () (write-region "" nil (getenv "BENCH_UP")))))))
"""

WORDS = "the agent reads the file and writes a note about what it found in the buffer".split()


def exchanges(ticks: int) -> list[tuple[str, str]]:
    """TICKS exchanges, each (a 20-word input, a 60-word reply): the chat of :func:`build_home`."""
    return [(" ".join(WORDS[(tick + i) % len(WORDS)] for i in range(20)),
             " ".join(WORDS[(tick * 3 + i) % len(WORDS)] for i in range(60))) for tick in range(1, ticks + 1)]


def build_home(home: Path, ticks: int) -> None:
    """A home with TICKS ticks of chat (a 20-word input, a 60-word reply) and monologue."""
    home.mkdir(parents=True, exist_ok=True)
    chat, mono = ChatLog(home / "agent-chat.org"), MonologueLog(home / "monologue.org")
    chat_parts, mono_parts = [], []
    stamp = datetime(2026, 1, 1, tzinfo=UTC).isoformat(timespec="seconds")
    for tick, (human, reply) in enumerate(exchanges(ticks), start=1):
        chat_parts.append(f"* Tick {tick}\n:PROPERTIES:\n:TIMESTAMP: {stamp}\n:END:\n\n** Human\n{human}\n\n"
                          f"** Agent\n{reply}\n\n")
        mono_parts.append(f"- [TICK {tick}][{stamp}] noted {human[:60]}\n")
    # The same text ChatLog.write_human/write_agent and MonologueLog.append write, in one go.
    chat.path.write_text("".join(chat_parts), encoding="utf-8")
    mono.path.write_text("".join(mono_parts), encoding="utf-8")


def one_sample(home: Path, keys: list[str], tmp: Path) -> dict[str, float]:
    """Open a fresh Emacs in tmux, type KEYS, return the marks in ms after "command"."""
    sock = Path(tempfile.mkdtemp(prefix="amacs-bench-", dir="/tmp")) / "tmux"
    out, up = tmp / "marks.json", tmp / "up"
    for f in (out, up, tmp / ".#marks.json"):
        f.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMACS_", "ANTHROPIC_", "OPENAI_", "TMUX"))}
    env.update(AMACS_HOME=str(home), ANTHROPIC_API_KEY="sk-ant-bench", ANTHROPIC_BASE_URL="http://127.0.0.1:9",
               BENCH_OUT=str(out), BENCH_UP=str(up), HOME=str(tmp / "user-home"), TERM="xterm-256color",
               EMACS_INHIBIT_AUTOMATIC_NATIVE_COMPILATION="1")
    (tmp / "user-home").mkdir(exist_ok=True)
    tmux = ["tmux", "-S", str(sock), "-f", "/dev/null"]
    try:
        # As ./amacs: the byte-compiled elisp of scripts/setup.sh first, when it is there.
        compiled = ["-L", str(ROOT / ".elc")] if (ROOT / ".elc" / ".stamp").exists() else []
        subprocess.run([*tmux, "new-session", "-d", "-s", "b", "-x", "100", "-y", "30", "--", "emacs", "-nw", "-Q",
                        *compiled, "-L", str(ROOT / "elisp"), "--eval", SETUP], check=True, env=env, cwd=ROOT)
        deadline = time.monotonic() + 30
        while not up.exists():
            if time.monotonic() > deadline:
                raise TimeoutError("Emacs did not start")
            time.sleep(0.02)
        time.sleep(0.3)  # let Emacs settle in its command loop
        subprocess.run([*tmux, "send-keys", "-t", "b", "M-x"], check=True)
        time.sleep(0.1)
        subprocess.run([*tmux, "send-keys", "-t", "b", "-l", keys[0]], check=True)
        subprocess.run([*tmux, "send-keys", "-t", "b", "Enter"], check=True)
        deadline = time.monotonic() + 30
        while not out.exists() or out.stat().st_size == 0:
            if time.monotonic() > deadline:
                screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "b"], capture_output=True, text=True)
                raise TimeoutError("no ready mark:\n" + screen.stdout)
            time.sleep(0.02)
        time.sleep(0.05)
        marks = dict(json.loads(out.read_text()))
    finally:
        pid = server_pid(home)
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        shutil.rmtree(sock.parent, ignore_errors=True)
        wait_gone(pid)  # the server exits when its Emacs goes: not during the next sample
    t0 = marks["command"]
    return {k: (v - t0) * 1000 for k, v in marks.items() if k != "command"}


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def setup_times(n: int) -> dict[str, float]:
    """What ./amacs does before it starts Emacs, on a checkout already set up: scripts/setup.sh
    (it checked the venv by importing the SDKs, ~4 s of blank terminal, until a newcomer saw it)."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run([str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, check=True, capture_output=True)
        times.append((time.perf_counter() - started) * 1000)
    return summary(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("n", type=int, nargs="?", default=10)
    parser.add_argument("--ticks", type=int, default=5000)
    parser.add_argument("--only", choices=["fresh", "history", "peer"], action="append")
    args = parser.parse_args()
    kinds = args.only or ["fresh", "history", "peer"]
    # The server's bytecode is brought up to date first, as a person's Python does at its first
    # start: with PYTHONDONTWRITEBYTECODE set (as here), every file edited since its .pyc was
    # written (agents/world.py: ~20 ms) was compiled from source at every sample.
    compileall.compile_dir(ROOT / "amacs_server", quiet=1)
    tmp = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    history = tmp / "history-home"
    if "history" in kinds:
        build_home(history, args.ticks)
        one_sample(history, ["amacs-shell"], tmp)  # the first start makes the git repo, memory.db
    samples: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    load_before = loadavg()
    for i in range(args.n):  # interleaved, so load drifts hit every kind alike
        for kind in kinds:
            if kind == "fresh":
                samples[kind].append(one_sample(tmp / f"fresh-{i}", ["amacs-shell"], tmp))
            elif kind == "history":
                samples[kind].append(one_sample(history, ["amacs-shell"], tmp))
            else:
                samples[kind].append(one_sample(tmp / "unused", ["bench-peer"], tmp))
    result: dict[str, object] = {"load_before": load_before, "load_after": loadavg(), "cpus": os.cpu_count(),
                                 "ticks": args.ticks, "target_ms": 300,
                                 "./amacs before Emacs starts (scripts/setup.sh, all set up)": setup_times(args.n)}
    for kind, rows in samples.items():
        result[kind] = {mark: summary([r[mark] for r in rows if mark in r])
                        for mark in ("loaded", "process", "prompt", "port", "ready", "greeted")
                        if any(mark in r for r in rows)}
    save("startup", result)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
