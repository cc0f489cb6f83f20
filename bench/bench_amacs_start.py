"""``./amacs`` in a terminal -> the header says "waiting for you" (issue 28: <= 500 ms).

Each sample is a fresh tmux session (120x40) running ``sh``, in which ``./amacs`` is
typed and RET pressed, as a person does; time 0 is when tmux has taken that RET.  The
screen is read (``tmux capture-pane``) each time the terminal has got output (``--observer
poll``: every 3 ms, at a cost to what it measures) and these moments noted:

- ``emacs``: Emacs's first screen (its mode line is on it);
- ``prompt``: the shell's prompt ``amacs>`` is on the screen (typing goes to it);
- ``waiting``: the header says "waiting for you": the server has accepted Emacs, its
  runtime is built and its status shown (a turn typed now is taken at once).

Homes: a fresh one per sample, and (``--ticks N``) one with N ticks of history, built
once.  The fake model is not reached (the API key is set, the URL is a closed port).
Also timed: ``scripts/setup.sh`` alone on a checkout already set up (what ``./amacs``
does before Emacs starts).

    .venv/bin/python bench/bench_amacs_start.py [N] [--ticks 5000] [--only fresh|history] [--observer output|poll]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_startup import build_home, loadavg  # noqa: E402
from bench.bench_startup import setup_times as startup_setup_times  # noqa: E402
from bench.common import save, server_pid, summary, wait_gone  # noqa: E402

MARKS = {"emacs": "*amacs-shell*", "prompt": "\namacs>", "waiting": "waiting for you"}
TMUX_CONF = "set -g status off\nset -g remain-on-exit on\nset -g history-limit 0\n"


def one_sample(home: Path, tmp: Path, timeout: float = 30.0, observer: str = "output") -> dict[str, float]:
    """Type ./amacs in a fresh terminal; the moments each mark was first on screen, in ms.

    OBSERVER "output" (the default): tmux copies what the terminal gets into a file
    (``pipe-pane``); the screen is read when that file has grown, so the moment is when
    the text reached the terminal, and reading costs nothing while nothing is drawn.
    "poll": the screen is read every 3 ms whatever happens; each read is a tmux client
    (~3.5 ms of CPU), so the observer took about half a core from Emacs and the server on
    a 2-core machine (earlier numbers of this bench were taken so)."""
    sockets = Path(tempfile.mkdtemp(prefix="amacs-bstart-", dir="/tmp"))
    conf = sockets / "tmux.conf"
    conf.write_text(TMUX_CONF)
    user_home = tmp / "user-home"
    shutil.rmtree(user_home, ignore_errors=True)
    user_home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AMACS_", "ANTHROPIC_", "OPENAI_", "TMUX", "EMACS", "INSIDE_EMACS", "LC_"))}
    env.update(HOME=str(user_home), AMACS_HOME=str(home), ANTHROPIC_API_KEY="sk-ant-bench",
               ANTHROPIC_BASE_URL="http://127.0.0.1:9", TERM="xterm-256color", LANG="C.UTF-8",
               EMACS_INHIBIT_AUTOMATIC_NATIVE_COMPILATION="1", PS1="$ ")
    tmux = ["tmux", "-S", str(sockets / "tmux"), "-f", str(conf)]
    seen: dict[str, float] = {}
    try:
        subprocess.run([*tmux, "new-session", "-d", "-s", "b", "-x", "120", "-y", "40", "--", "sh"],
                       check=True, env=env, cwd=ROOT)
        output = sockets / "output"
        output.touch()
        if observer == "output":
            subprocess.run([*tmux, "pipe-pane", "-t", "b", "-o", f"cat >> {output}"], check=True)
        subprocess.run([*tmux, "send-keys", "-t", "b", "-l", "./amacs"], check=True)
        time.sleep(0.3)  # the shell has echoed it; RET is the person's "now"
        subprocess.run([*tmux, "send-keys", "-t", "b", "Enter"], check=True)
        t0 = time.perf_counter()
        deadline = t0 + timeout
        screen = ""
        size = output.stat().st_size
        while len(seen) < len(MARKS):
            if observer == "output":
                grown = output.stat().st_size
                if grown == size:
                    if time.perf_counter() > deadline:
                        raise TimeoutError(f"not all of {list(MARKS)} on screen after {timeout} s:\n{screen}")
                    time.sleep(0.001)
                    continue
                size = grown
            now = (time.perf_counter() - t0) * 1000
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "b"], capture_output=True,
                                    text=True).stdout
            for mark, text in MARKS.items():
                if mark not in seen and text in screen:
                    seen[mark] = now
            if time.perf_counter() > deadline:
                raise TimeoutError(f"not all of {list(MARKS)} on screen after {timeout} s:\n{screen}")
            if observer == "poll":
                time.sleep(0.003)
    finally:
        pid = server_pid(home)
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        if os.environ.get("BENCH_KEEP_OUTPUT"):
            shutil.copy(sockets / "output", os.environ["BENCH_KEEP_OUTPUT"])
        shutil.rmtree(sockets, ignore_errors=True)
        wait_gone(pid)  # the server exits when its Emacs goes: not during the next sample
    return seen


def setup_times(n: int) -> dict[str, float]:
    """scripts/setup.sh on a checkout already set up: what ./amacs does before Emacs starts."""
    subprocess.run([str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, check=True, capture_output=True)
    return startup_setup_times(n)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("n", type=int, nargs="?", default=5)
    parser.add_argument("--ticks", type=int, default=5000)
    parser.add_argument("--only", choices=["fresh", "history"], action="append")
    parser.add_argument("--observer", choices=["output", "poll"], default="output",
                        help="read the screen when the terminal got output (default), or every 3 ms")
    args = parser.parse_args()
    kinds = args.only or ["fresh", "history"]
    tmp = Path(tempfile.mkdtemp(prefix="bench-amacs-start-"))
    setup = setup_times(args.n)  # and brings .elc and the bytecode up to date first
    history = tmp / "history-home"
    if "history" in kinds:
        build_home(history, args.ticks)
        one_sample(history, tmp, observer=args.observer)  # the first start makes the git repo and memory.db
    samples: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    load_before = loadavg()
    for i in range(args.n):  # interleaved, so load drifts hit every kind alike
        for kind in kinds:
            samples[kind].append(one_sample(tmp / f"fresh-{i}" if kind == "fresh" else history, tmp,
                                            observer=args.observer))
    result: dict[str, object] = {"load_before": load_before, "load_after": loadavg(), "cpus": os.cpu_count(),
                                 "ticks": args.ticks, "target_ms": 500, "observer": args.observer,
                                 "scripts/setup.sh, all set up": setup}
    for kind, rows in samples.items():
        result[kind] = {mark: summary([r[mark] for r in rows]) for mark in MARKS}
    save("amacs_start", result)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
