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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_startup import build_home, loadavg  # noqa: E402
from bench.bench_startup import setup_times as startup_setup_times  # noqa: E402
from bench.common import save, server_pid, summary, wait_gone  # noqa: E402
from bench.interactive import Launch, launch_env  # noqa: E402

MARKS = {"emacs": "*amacs-shell*", "prompt": "\namacs>", "waiting": "waiting for you"}


def one_sample(home: Path, tmp: Path, timeout: float = 30.0, observer: str = "output") -> dict[str, float]:
    """Type ./amacs in a fresh terminal; the moments each mark was first on screen, in ms
    (OBSERVER: how the screen is read, :class:`bench.interactive.Launch`)."""
    user_home = tmp / "user-home"
    shutil.rmtree(user_home, ignore_errors=True)
    user_home.mkdir(parents=True)
    env = launch_env(HOME=str(user_home), AMACS_HOME=str(home), ANTHROPIC_API_KEY="sk-ant-bench",
                     ANTHROPIC_BASE_URL="http://127.0.0.1:9")
    seen: dict[str, float] = {}
    try:
        with Launch("./amacs", env, observer=observer) as launch:
            for now, screen in launch.screens(timeout, what=f"all of {list(MARKS)}"):
                for mark, text in MARKS.items():
                    if mark not in seen and text in screen:
                        seen[mark] = now
                if len(seen) == len(MARKS):
                    break
    finally:
        wait_gone(server_pid(home))  # the server exits when its Emacs goes: not during the next sample
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
