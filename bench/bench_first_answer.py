"""Launch -> the whole first reply on screen: AMACS beside gptel, each launch a fresh terminal.

Each sample is a fresh tmux session (120x40) running ``sh``, in which a command is
typed and RET pressed, as a person does; time 0 is when tmux has taken that RET.  As
soon as the screen shows a prompt, the question ("go") is typed and sent; the sample
ends when the reply's last word is on the screen.  The screen is read each time the
terminal has got output (:class:`bench.interactive.Launch`, as :mod:`bench.bench_amacs_start`).

Kinds, rounds alternating (each round one sample of each, in turn, each other round in reverse):

- ``amacs-returning``: ``./amacs`` on a home with history (``--ticks``, built once in
  the RFC format and started once before the rounds), the prompt ``amacs>``, RET sends.
  Each sample's exchange stays in the home, and its first request carries the recent ones:
  27.5 KB at the first sample, ~8.4 KB more a sample (~70 KB at the median of 11);
- ``amacs-new``: ``./amacs`` on a new home (a fresh folder each sample): a new user's
  first start;
- ``gptel``: ``emacs -nw -Q`` with gptel 0.9.9.5 (``--gptel PATH``, byte-compiled once
  into a temporary folder, as package.el installs it) loaded and its chat buffer made
  (``M-x gptel``) in its default mode (text-mode: markdown-mode is not installed), the
  prompt ``###``, ``C-c RET`` sends: a new, empty chat;
- ``gptel-returning``: the same Emacs and gptel reopening a saved chat that holds the
  returning home's history (its ``--ticks`` exchanges, the same text), saved once before the
  rounds by gptel itself (:func:`save_gptel_chat`) in org-mode, the one of gptel's chat
  modes that reopens a chat this long with its responses marked (text-mode's file-local
  variables are not read past ~150 exchanges; markdown-mode is not installed): the file
  visited, ``gptel-mode`` on, point at the end of the last, empty ``***`` prompt, shown at the
  window's top (:func:`gptel_command` says why).  gptel sends its whole history (each
  exchange a user and an assistant message; the bench asserts the count, and that the
  first message is the first exchange's input), or with ``--gptel-messages N`` its last N
  exchanges, gptel's own setting saved in the chat (150: a request of the size of the
  returning AMACS home's median one).  ``--gptel-chat txt``: the chat in text-mode instead,
  which reopens with its responses marked only for a short history (``--ticks 150``).

Each launch has a fresh ``$HOME``.  The same fake model (tests/fake_anthropic.py,
zero latency, the 400-word reply of :mod:`bench.bench_transport` in 100 chunks) answers
all, without checking the requests against the SDK's types (a check as slow as the request is
long, timed in this process).  Each sample's question is its own (``ask7q``) and so is the reply's last word
(``word399x7``): a returning user's shell shows the last exchange again once the server
has said hello, and the reply of the sample before, seen there, is not this one's.  ``--no-warm``: AMACS's servers are started as before the warm server
(``AMACS_WARM=0``), every sample importing the model SDK.

Marks, ms after RET: ``prompt`` (the prompt is on screen), ``answer`` (the reply's last
word is), and their difference (what the question costs once the prompt shows, where a
reopened chat's history is sent).  The request that asked the question, as the fake got it: its size in bytes (its
``content-length``) and its message count, per kind (median), so the rows' requests can be
compared.  ``BENCH_SCREENS=FILE`` appends each screen read, with its time, to FILE.

    .venv/bin/python bench/bench_first_answer.py [N] [--ticks 1000] [--gptel PATH] [--no-warm]
        [--gptel-messages N] [--only KIND ...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_gptel import default_gptel  # noqa: E402
from bench.bench_startup import build_home, exchanges, loadavg  # noqa: E402
from bench.bench_transport import REPLY_TEXT, TimedFake  # noqa: E402
from bench.common import save, server_pid, summary, wait_gone  # noqa: E402
from bench.interactive import Launch, launch_env  # noqa: E402
from tests import fake_anthropic as fa  # noqa: E402

LAST_WORD = "word399"
QUESTIONS = itertools.count()  # each sample's question names its number: ask0q, ask1q, ...
KINDS = ("amacs-returning", "amacs-new", "gptel", "gptel-returning")
# What shows that the prompt takes input.  A reopened chat has a prompt prefix ("*** " in org-mode,
# "### " in text-mode) before each input: its prompt is the last one, empty, once gptel-mode's
# header line (the model's name) is drawn.
PROMPTS = {"amacs": re.compile(r"\namacs>"), "gptel": re.compile(r"\n###"),
           "gptel-returning": re.compile(r"claude-fake(?s:.*)\n(\*\*\*|###) *\n")}
GPTEL_SETUP = """(dolist (d '("gptel" "compat" "transient/lisp")) (add-to-list 'load-path (expand-file-name d "{peers}")))
  (require 'gptel) (require 'gptel-anthropic)
  (setq gptel-backend (gptel-make-anthropic "Fake" :host "{host}" :protocol "http"
                        :key "sk-peer" :stream t :models '(claude-fake))
        gptel-model 'claude-fake)"""


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


def gptel_command(peers: Path, url: str, chat: Path | None = None) -> str:
    """The shell command that starts Emacs with gptel loaded and its chat buffer shown: a new
    one, or CHAT (a chat gptel saved) reopened as a person does: visited, `gptel-mode' on,
    point at the end of its last prompt (before the file's local variables), that line at the
    window's top (C-l C-l), where a new chat has it.  gptel inserts the reply below point and
    does not scroll to follow it: with the prompt mid-window, where Emacs puts it, the 400-word
    reply runs past the window's bottom and its last word never shows (`gptel-auto-scroll' on
    `gptel-post-stream-hook', gptel's way to follow, scrolled past the reply's end when the
    100 chunks come at once, as the zero-latency fake sends them).  Org truncates long lines
    by default: the reply (one line) wraps there as in text-mode (`org-startup-truncated' nil)."""
    setup = GPTEL_SETUP.format(peers=peers, host=url.removeprefix("http://"))
    show = ('(switch-to-buffer (gptel "*gptel*"))' if chat is None else
            f'(setq org-startup-truncated nil) (find-file "{chat}") (gptel-mode 1) (goto-char (point-max))'
            ' (re-search-backward (concat "^" (regexp-quote (gptel-prompt-prefix-string)))) (end-of-line)'
            " (recenter 0)")
    return "emacs -nw -Q --eval " + sh_quote(f"(progn {setup}\n  {show}\n  (delete-other-windows))")


def save_gptel_chat(peers: Path, ticks: int, chat: Path, messages: int | None = None) -> None:
    """CHAT holding the TICKS exchanges of :func:`build_home`'s history, laid out as gptel
    inserts them (its prompt prefix before each input, its separator, each reply marked as a
    response) and saved by gptel itself: with `gptel-mode' on, `save-buffer' runs
    `gptel--save-state', which writes the response bounds, model and backend into the file
    (and MESSAGES, when given: gptel's `gptel--num-messages-to-send', by which it sends the
    last MESSAGES exchanges, 2 MESSAGES + 1 messages with the question; all by default).
    Then CHAT is visited afresh and `gptel-mode' turned on: it must mark TICKS responses again.

    CHAT's mode goes by its name.  A chat in text-mode (``.txt``, gptel's default) keeps its
    state as file-local variables, and Emacs reads those only when their block begins within
    the file's last 3,000 characters: the bounds, ~12 characters a response on one line, push
    it out (150 responses reopened marked here, 200 did not), and the chat reopens with none
    marked: its whole history sent as one user message.  gptel's org-mode chat (``.org``) keeps them in the file's property
    drawer at its top, read whatever the size."""
    data = chat.with_suffix(".el")
    data.write_text("(" + "\n".join(f"({json.dumps(h)} . {json.dumps(r)})" for h, r in exchanges(ticks)) + ")\n")
    form = f"""(progn {GPTEL_SETUP.format(peers=peers, host="127.0.0.1:9")}
  (find-file "{chat}")
  (dolist (x (with-temp-buffer (insert-file-contents "{data}") (read (current-buffer))))
    (insert (gptel-prompt-prefix-string) (car x) gptel-response-separator
            (propertize (cdr x) 'gptel 'response 'front-sticky '(gptel))
            gptel-response-separator))
  (insert (gptel-prompt-prefix-string))
  (gptel-mode 1)
  (setq-local gptel--num-messages-to-send {'nil' if messages is None else messages})
  (save-buffer)
  (kill-buffer)
  (find-file "{chat}")
  (gptel-mode 1)
  (princ (length (alist-get 'response (gptel--get-buffer-bounds)))))"""
    marked = subprocess.run(["emacs", "-Q", "--batch", "--eval", form], check=True, capture_output=True, text=True)
    if marked.stdout.strip() != str(ticks):
        raise RuntimeError(f"{chat} reopened with {marked.stdout.strip()} responses marked, not {ticks}")


def tagged_reply(body: dict[str, object]) -> fa.Reply:
    """The 400-word reply, its last word naming the newest question in BODY (ask7q -> word399x7)."""
    tags = re.findall(r"ask(\d+)q", json.dumps(body.get("messages", [])))
    last = f"{LAST_WORD}x{tags[-1]}" if tags else LAST_WORD
    return fa.Reply(REPLY_TEXT.replace(LAST_WORD, last), chunks=100)


def sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def one_sample(kind: str, command: str, env: dict[str, str], tmp: Path, home: Path | None,
               fake: fa.FakeAnthropic | None = None, history: str | None = None,
               timeout: float = 60.0) -> dict[str, float]:
    """Type COMMAND in a fresh terminal, the question once the prompt shows; the marks in ms,
    and (given FAKE) the size in bytes and message count of the request that asked it, whose
    first message must hold HISTORY when given."""
    user_home = tmp / "user-home"
    shutil.rmtree(user_home, ignore_errors=True)
    user_home.mkdir(parents=True)
    env = {**env, "HOME": str(user_home), **({"AMACS_HOME": str(home)} if home else {})}
    prompt = PROMPTS.get(kind, PROMPTS["amacs"])
    number = next(QUESTIONS)
    question, last_word = f"ask{number}q", f"{LAST_WORD}x{number}"
    seen: dict[str, float] = {}
    try:
        with Launch(command, env) as launch:
            for now, screen in launch.screens(timeout, what=f"{kind}'s answer"):
                if "prompt" not in seen and prompt.search(screen):
                    seen["prompt"] = now
                    launch.keys(question, literal=True)
                    launch.keys(*(["C-c", "Enter"] if kind.startswith("gptel") else ["Enter"]))
                if "prompt" in seen and last_word in screen:
                    seen["answer"] = now
                    break
    finally:
        wait_gone(server_pid(home) if home else None)  # the server exits when its Emacs goes
    if fake is not None:
        body, size = asked(fake, question)
        seen.update(request_bytes=size, request_messages=len(body["messages"]))
        if history is not None and history not in json.dumps(body["messages"][0]):
            raise AssertionError(f"{kind}'s request does not begin with its history: {body['messages'][0]}")
    return seen


def asked(fake: fa.FakeAnthropic, question: str) -> tuple[dict[str, Any], int]:
    """The body and size in bytes of the first request whose last message holds QUESTION."""
    for request in list(fake.requests):
        messages = request["body"].get("messages") or [{}]
        if question in json.dumps(messages[-1]):
            return request["body"], int(request["headers"]["content-length"])
    raise LookupError(f"no request asked {question}")


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
    parser.add_argument("--gptel-chat", choices=("org", "txt"), default="org",
                        help="gptel-returning's chat in org-mode or text-mode (text: at most ~150 ticks)")
    parser.add_argument("--gptel-messages", type=int, help="gptel-returning's chat saved with gptel's "
                        "`gptel--num-messages-to-send' N: it sends its last N exchanges (2N+1 messages with the "
                        "question); by default all of them")
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
    peers = compile_gptel(args.gptel, tmp / "peers") if any(k.startswith("gptel") for k in kinds) else None
    chat = tmp / f"chat.{args.gptel_chat}"  # text-mode cannot reopen a long chat (save_gptel_chat)
    if "gptel-returning" in kinds:
        assert peers is not None
        save_gptel_chat(peers, args.ticks, chat, args.gptel_messages)
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
        for i in range(args.n):  # interleaved, so load drifts hit every kind alike; each other round reversed
            for kind in kinds if i % 2 == 0 else kinds[::-1]:
                if kind.startswith("gptel"):
                    assert peers is not None
                    # Each sample's Emacs is killed with the chat modified (the question typed) and
                    # leaves an auto-save file, maybe after the next has started; visiting a file whose
                    # auto-save data is newer waits a second (`after-find-file's sit-for).  An Emacs a
                    # person quit leaves none: each sample visits its own copy of the chat.
                    own = None
                    if kind == "gptel-returning":
                        own = tmp / f"chat-{i}" / chat.name
                        own.parent.mkdir()
                        shutil.copy(chat, own)
                    command = gptel_command(peers, fake.url, own)
                    first = exchanges(args.ticks)[0][0] if kind == "gptel-returning" and not args.gptel_messages else None
                    samples[kind].append(one_sample(kind, command, env, tmp, None, fake, first))
                else:
                    home = history if kind == "amacs-returning" else tmp / f"new-{i}"
                    samples[kind].append(one_sample(kind, "./amacs", env, tmp, home, fake))
                if kind == "gptel-returning":  # the reopened chat sent its history, responses marked as such
                    sent = samples[kind][-1]["request_messages"]
                    assert sent == 2 * (args.gptel_messages or args.ticks) + 1, samples[kind][-1]
                print(kind, {k: round(v) for k, v in samples[kind][-1].items()}, flush=True)
        result: dict[str, object] = {"load_before": load_before, "load_after": loadavg(), "cpus": os.cpu_count(),
                                     "ticks": args.ticks, "warm": not args.no_warm, "gptel_messages": args.gptel_messages,
                                     "gptel_chat": args.gptel_chat,
                                     "reply_chars": len(REPLY_TEXT)}
        for kind, rows in samples.items():
            result[kind] = {mark: summary([r[mark] for r in rows]) for mark in ("prompt", "answer")}
            result[kind]["after_prompt"] = summary([r["answer"] - r["prompt"] for r in rows])  # type: ignore[index]
            result[kind]["request"] = {key: statistics.median(r[key] for r in rows)  # type: ignore[index]
                                       for key in ("request_bytes", "request_messages")}
        save("first_answer" + ("_cold" if args.no_warm else ""), result)
        print("| from RET | " + " | ".join(kinds) + " |")
        print("|---" * (len(kinds) + 1) + "|")
        for mark in ("prompt", "answer", "after_prompt"):
            cells = [f"{result[k][mark]['median_ms']:.0f} / {result[k][mark]['p90_ms']:.0f}"  # type: ignore[index]
                     for k in kinds]
            label = "answer - prompt" if mark == "after_prompt" else mark
            print(f"| {label} (median / p90 ms, n={args.n}) | " + " | ".join(cells) + " |")
        cells = [f"{result[k]['request']['request_bytes'] / 1000:.1f} KB, "  # type: ignore[index]
                 f"{result[k]['request']['request_messages']:.0f}" for k in kinds]  # type: ignore[index]
        print("| the first request (median size, messages) | " + " | ".join(cells) + " |")
        print(f"load before {load_before}, after {result['load_after']}")
    finally:
        fake.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
