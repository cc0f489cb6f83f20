"""Launch -> the whole first reply on screen: AMACS beside gptel, each launch a fresh terminal.

Each sample is a fresh tmux session (120x40) running ``sh``, in which a command is
typed and RET pressed, as a person does; time 0 is when tmux has taken that RET.  As
soon as the screen shows a prompt, the question ("go") is typed and sent; the sample
ends when the reply's last word is on the screen.  The screen is read each time the
terminal has got output (:class:`bench.interactive.Launch`, as :mod:`bench.bench_amacs_start`).

Kinds, rounds alternating (each round one sample of each, in turn):

- ``amacs-returning``: ``./amacs`` on a home with history (``--ticks``, built once in
  the RFC format and started once before the rounds), the prompt ``amacs>``, RET sends;
- ``amacs-new``: ``./amacs`` on a new home (a fresh folder each sample): a new user's
  first start;
- ``gptel``: ``emacs -nw -Q`` with gptel 0.9.9.5 (``--gptel PATH``, byte-compiled once
  into a temporary folder, as package.el installs it) loaded and its chat buffer made
  (``M-x gptel``) in its default mode (text-mode: markdown-mode is not installed), the
  prompt ``###``, ``C-c RET`` sends.

Each launch has a fresh ``$HOME``.  The same fake model (tests/fake_anthropic.py,
zero latency, the 400-word reply of :mod:`bench.bench_transport` in 100 chunks) answers
both, without checking the requests against the SDK's types (a check as slow as the request is
long, timed in this process).  Each sample's question is its own (``ask7q``) and so is the reply's last word
(``word399x7``): a returning user's shell shows the last exchange again once the server
has said hello, and the reply of the sample before, seen there, is not this one's.  ``--no-warm``: AMACS's servers are started as before the warm server
(``AMACS_WARM=0``), every sample importing the model SDK.

Marks, ms after RET: ``prompt`` (the prompt is on screen), ``answer`` (the reply's last
word is).  ``BENCH_SCREENS=FILE`` appends each screen read, with its time, to FILE.

    .venv/bin/python bench/bench_first_answer.py [N] [--ticks 1000] [--gptel PATH] [--no-warm]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_gptel import default_gptel  # noqa: E402
from bench.bench_startup import build_home, loadavg  # noqa: E402
from bench.bench_transport import REPLY_TEXT, TimedFake  # noqa: E402
from bench.common import save, server_pid, summary, wait_gone  # noqa: E402
from bench.interactive import Launch, launch_env  # noqa: E402
from tests import fake_anthropic as fa  # noqa: E402

LAST_WORD = "word399"
QUESTIONS = itertools.count()  # each sample's question names its number: ask0q, ask1q, ...
KINDS = ("amacs-returning", "amacs-new", "gptel")
PROMPTS = {"amacs": "\namacs>", "gptel": "\n###"}


def compile_gptel(peers: Path, into: Path) -> Path:
    """PEERS's gptel, compat and transient copied into INTO and byte-compiled (as package.el does)."""
    for sub in ("gptel", "compat", "transient/lisp"):
        shutil.copytree(peers / sub, into / sub, dirs_exist_ok=True)
    dirs = [str(into / d) for d in ("compat", "transient/lisp", "gptel")]
    load_path = " ".join(f'"{d}"' for d in dirs)
    form = (f"(progn (setq load-path (append (list {load_path}) load-path)) "
            f"(dolist (d (list {load_path})) (byte-recompile-directory d 0 t)))")
    subprocess.run(["emacs", "-Q", "--batch", "--eval", form], check=True, capture_output=True)
    return into


def gptel_command(peers: Path, url: str) -> str:
    """The shell command that starts Emacs with gptel loaded and its chat buffer shown."""
    host = url.removeprefix("http://")
    form = f"""(progn
  (dolist (d '("gptel" "compat" "transient/lisp")) (add-to-list 'load-path (expand-file-name d "{peers}")))
  (require 'gptel) (require 'gptel-anthropic)
  (setq gptel-backend (gptel-make-anthropic "Fake" :host "{host}" :protocol "http"
                        :key "sk-peer" :stream t :models '(claude-fake))
        gptel-model 'claude-fake)
  (switch-to-buffer (gptel "*gptel*"))
  (delete-other-windows))"""
    return "emacs -nw -Q --eval " + sh_quote(form)


def tagged_reply(body: dict[str, object]) -> fa.Reply:
    """The 400-word reply, its last word naming the newest question in BODY (ask7q -> word399x7)."""
    tags = re.findall(r"ask(\d+)q", json.dumps(body.get("messages", [])))
    last = f"{LAST_WORD}x{tags[-1]}" if tags else LAST_WORD
    return fa.Reply(REPLY_TEXT.replace(LAST_WORD, last), chunks=100)


def sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def one_sample(kind: str, command: str, env: dict[str, str], tmp: Path, home: Path | None,
               timeout: float = 60.0) -> dict[str, float]:
    """Type COMMAND in a fresh terminal, the question once the prompt shows; the marks in ms."""
    user_home = tmp / "user-home"
    shutil.rmtree(user_home, ignore_errors=True)
    user_home.mkdir(parents=True)
    env = {**env, "HOME": str(user_home), **({"AMACS_HOME": str(home)} if home else {})}
    prompt = PROMPTS["gptel" if kind == "gptel" else "amacs"]
    number = next(QUESTIONS)
    question, last_word = f"ask{number}q", f"{LAST_WORD}x{number}"
    seen: dict[str, float] = {}
    try:
        with Launch(command, env) as launch:
            for now, screen in launch.screens(timeout, what=f"{kind}'s answer"):
                if "prompt" not in seen and prompt in screen:
                    seen["prompt"] = now
                    launch.keys(question, literal=True)
                    launch.keys(*(["Enter"] if kind != "gptel" else ["C-c", "Enter"]))
                if "prompt" in seen and last_word in screen:
                    seen["answer"] = now
                    break
    finally:
        wait_gone(server_pid(home) if home else None)  # the server exits when its Emacs goes
    return seen


def wait_warm(tmp: Path, env: dict[str, str], timeout: float = 120.0) -> None:
    """Start the warm server (a launch that finds none starts one) and wait until it listens."""
    from amacs_server.warm_launch import stamp, warm_dir

    subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-S", str(ROOT / "amacs_server" / "warm_launch.py"),
                    "--help"], env={**env, "HOME": str(tmp)}, cwd=ROOT, check=True, capture_output=True)
    sock = Path(warm_dir()) / f"{stamp()}.sock"
    deadline = time.monotonic() + timeout
    while not sock.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no warm server at {sock} after {timeout} s")
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=5)
    parser.add_argument("--ticks", type=int, default=1000, help="ticks of history in the returning user's home")
    parser.add_argument("--gptel", type=Path, default=default_gptel())
    parser.add_argument("--no-warm", action="store_true", help="AMACS_WARM=0: no warm server")
    parser.add_argument("--only", choices=KINDS, action="append")
    args = parser.parse_args()
    kinds = args.only or list(KINDS)
    tmp = Path(tempfile.mkdtemp(prefix="bench-first-answer-"))
    subprocess.run([str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, check=True, capture_output=True)
    fake = TimedFake()
    # Requests are not checked against the SDK's request type here (tests do that): the check is
    # pydantic in this process, on the path of every answer and as slow as the request is long
    # (profiled: the request's arrival to the stream's start 2-146 ms for a returning home's
    # ~30-100 KB, 1-11 ms for a new home's, ~1 ms for gptel's, load 4-6).  It timed the fake.
    fake.strict = False
    fake.respond_with(tagged_reply)
    fake.start()
    peers = compile_gptel(args.gptel, tmp / "peers") if "gptel" in kinds else None
    env = launch_env(ANTHROPIC_API_KEY="sk-ant-bench", ANTHROPIC_BASE_URL=fake.url)
    if args.no_warm:
        env["AMACS_WARM"] = "0"
    history = tmp / "history-home"
    try:
        if "amacs-returning" in kinds:
            build_home(history, args.ticks)
            one_sample("amacs-returning", "./amacs", env, tmp, history)  # makes its git repo, memory.db
        if not args.no_warm and any(k.startswith("amacs") for k in kinds):
            wait_warm(tmp, env)
        samples: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        load_before = loadavg()
        for i in range(args.n):  # interleaved, so load drifts hit every kind alike
            for kind in kinds:
                if kind == "gptel":
                    assert peers is not None
                    samples[kind].append(one_sample(kind, gptel_command(peers, fake.url), env, tmp, None))
                else:
                    home = history if kind == "amacs-returning" else tmp / f"new-{i}"
                    samples[kind].append(one_sample(kind, "./amacs", env, tmp, home))
        result: dict[str, object] = {"load_before": load_before, "load_after": loadavg(), "cpus": os.cpu_count(),
                                     "ticks": args.ticks, "warm": not args.no_warm,
                                     "reply_chars": len(REPLY_TEXT)}
        for kind, rows in samples.items():
            result[kind] = {mark: summary([r[mark] for r in rows]) for mark in ("prompt", "answer")}
        save("first_answer" + ("_cold" if args.no_warm else ""), result)
        print("| from RET | " + " | ".join(kinds) + " |")
        print("|---" * (len(kinds) + 1) + "|")
        for mark in ("prompt", "answer"):
            cells = [f"{result[k][mark]['median_ms']:.0f} / {result[k][mark]['p90_ms']:.0f}"  # type: ignore[index]
                     for k in kinds]
            print(f"| {mark} (median / p90 ms, n={args.n}) | " + " | ".join(cells) + " |")
        print(f"load before {load_before}, after {result['load_after']}")
    finally:
        fake.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
