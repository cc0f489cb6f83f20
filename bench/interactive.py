"""Benchmarks in interactive Emacs: ``emacs -nw`` in tmux, waiting in its command loop.

Batch Emacs misstates every event-driven path (DESIGN.md, Measuring), so the
benchmarks that time what a person feels run a real terminal Emacs:

- :func:`amacs_terminal` is ``./amacs`` (the shell and its server) in tmux,
  from ``tests/tmux/terminal.py``;
- :class:`BareEmacs` is ``emacs -nw -Q`` with AMACS's elisp on the load path
  (compiled, from ``.elc/``, as ``./amacs`` loads it) and nothing started, for benchmarks that bring their own server;
- :class:`Launch` is a command typed in ``sh`` in a fresh terminal, the screen read as it
  changes: what a person sees from RET on (``bench_amacs_start``, ``bench_first_answer``).

Both take elisp through an Emacs server inside them (``.elisp(form)``).  Times
are taken inside Emacs (``float-time`` in advice and hooks) and written to a
file the benchmark reads (:meth:`Recorder.read`): polling through emacsclient
would wake Emacs and disturb what is measured.  Wall-clock times are comparable
with Python's ``time.time()`` on the same machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.tmux.terminal import ROOT, Terminal

ELPA = "/usr/share/emacs/site-lisp/elpa"


class BareEmacs(Terminal):
    """``emacs -nw -Q -L elisp`` in tmux with package.el set up and an Emacs server; no AMACS started."""

    def __init__(self, tmp: Path, base_url: str = "http://127.0.0.1:9", init: str = "nil",
                 width: int = 120, height: int = 40, env: dict[str, str] | None = None) -> None:
        super().__init__(tmp, base_url, width, height, env)
        self._init = init

    def start(self, timeout: float = 30) -> BareEmacs:
        """Start Emacs and wait until its Emacs server answers."""
        self.home.mkdir(parents=True, exist_ok=True)
        conf = self._sockets / "tmux.conf"
        conf.write_text("set -g status off\nset -g remain-on-exit on\nset -g history-limit 0\n")
        form = (f'(progn (setq server-socket-dir "{self._emacs_socket.parent}") '
                f'(add-to-list (quote package-directory-list) "{ELPA}") (package-initialize) '
                f"{self._init} (server-start))")
        elc = ["-L", str(ROOT / ".elc")] if (ROOT / ".elc" / ".stamp").exists() else []  # as ./amacs
        self._tmux("-f", str(conf), "new-session", "-d", "-s", "amacs", "-x", str(self.width),
                   "-y", str(self.height), "--", "emacs", "-nw", "-Q", *elc, "-L", str(ROOT / "elisp"),
                   "--eval", form, cwd=ROOT)
        self._pane_pid = int(self._tmux("display", "-p", "-t", "amacs", "#{pane_pid}").strip())
        self.wait_for_elisp("t", timeout=timeout, what="the Emacs server")
        return self


def amacs_terminal(tmp: Path, base_url: str, width: int = 120, height: int = 40, **env: str) -> Terminal:
    """``./amacs`` in tmux against BASE_URL, started and connected."""
    return Terminal(tmp, base_url, width, height, env).start(timeout=60)


class Recorder:
    """A file Emacs appends JSON lines to: ``(bench-record KIND PLIST...)`` after :meth:`install`."""

    def __init__(self, directory: Path | None = None) -> None:
        directory = directory or Path(tempfile.mkdtemp(prefix="amacs-bench-"))
        self.path = directory / "times.jsonl"
        self.path.touch()

    def install(self, emacs: Terminal) -> None:
        """Define ``bench-record`` in EMACS: one JSON object per call, appended to the file."""
        emacs.elisp(f"""(progn
          (require 'json)
          (defun bench-record (kind &rest plist)
            (let ((coding-system-for-write 'utf-8-unix))
              (write-region (concat (json-encode (append (list :kind kind) plist)) "\\n")
                            nil "{self.path}" t 'silent)))
          t)""")

    def read(self, kind: str | None = None) -> list[dict]:
        """Every record so far (of KIND)."""
        rows = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
        return [r for r in rows if kind is None or r.get("kind") == kind]

    def wait(self, kind: str, count: int, timeout: float = 30) -> list[dict]:
        """Wait until COUNT records of KIND exist; return them."""
        deadline = time.monotonic() + timeout
        while True:
            rows = self.read(kind)
            if len(rows) >= count:
                return rows
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(rows)} of {count} {kind!r} records after {timeout} s")
            time.sleep(0.02)


TMUX_CONF = "set -g status off\nset -g remain-on-exit on\nset -g history-limit 0\n"
# What a launch's environment never inherits from the bench's: its own settings and terminal.
NOT_INHERITED = ("AMACS_", "ANTHROPIC_", "OPENAI_", "TMUX", "EMACS", "INSIDE_EMACS", "LC_")


def launch_env(**settings: str) -> dict[str, str]:
    """This process's environment without NOT_INHERITED, as a fresh terminal has it, plus SETTINGS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(NOT_INHERITED)}
    env.update(TERM="xterm-256color", LANG="C.UTF-8", EMACS_INHIBIT_AUTOMATIC_NATIVE_COMPILATION="1", PS1="$ ")
    return {**env, **settings}


class Launch:
    """COMMAND typed in ``sh`` in a fresh tmux session (WIDTHxHEIGHT) and RET pressed, as a
    person does; :meth:`screens` reads the screen as it changes, with the time since RET.

    OBSERVER "output" (the default): tmux copies what the terminal gets into a file
    (``pipe-pane``); the screen is read when that file has grown, so the moment is when
    the text reached the terminal, and reading costs nothing while nothing is drawn.
    "poll": the screen is read every 3 ms whatever happens; each read is a tmux client
    (~3.5 ms of CPU), so the observer took about half a core from Emacs and the server on
    a 2-core machine (earlier numbers of ``bench_amacs_start`` were taken so).
    ``BENCH_SCREENS=FILE`` appends each screen read, with its time, to FILE."""

    def __init__(self, command: str, env: dict[str, str], cwd: Path = ROOT, width: int = 120, height: int = 40,
                 observer: str = "output") -> None:
        self.command, self.env, self.cwd, self.observer = command, env, cwd, observer
        self.size = (width, height)
        self._sockets = Path(tempfile.mkdtemp(prefix="amacs-launch-", dir="/tmp"))
        (self._sockets / "tmux.conf").write_text(TMUX_CONF)
        self._tmux = ["tmux", "-S", str(self._sockets / "tmux"), "-f", str(self._sockets / "tmux.conf")]
        self._output = self._sockets / "output"
        self.t0 = 0.0
        self.screen = ""

    def __enter__(self) -> Launch:
        width, height = self.size
        subprocess.run([*self._tmux, "new-session", "-d", "-s", "b", "-x", str(width), "-y", str(height), "--", "sh"],
                       check=True, env=self.env, cwd=self.cwd)
        self._output.touch()
        if self.observer == "output":
            subprocess.run([*self._tmux, "pipe-pane", "-t", "b", "-o", f"cat >> {self._output}"], check=True)
        self.keys(self.command, literal=True)
        time.sleep(0.3)  # the shell has echoed it; RET is the person's "now"
        self.keys("Enter")
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *_exc: object) -> None:
        subprocess.run([*self._tmux, "kill-server"], capture_output=True)
        if os.environ.get("BENCH_KEEP_OUTPUT"):
            shutil.copy(self._output, os.environ["BENCH_KEEP_OUTPUT"])
        shutil.rmtree(self._sockets, ignore_errors=True)

    def keys(self, *keys: str, literal: bool = False) -> None:
        """Type KEYS (tmux key names; LITERAL: text)."""
        subprocess.run([*self._tmux, "send-keys", "-t", "b", *(["-l"] if literal else []), *keys], check=True)

    def screens(self, timeout: float, what: str = "the end") -> Iterator[tuple[float, str]]:
        """Each screen as the terminal changes, with its time in ms after RET, until the caller
        stops; TimeoutError (naming WHAT was awaited) after TIMEOUT seconds."""
        deadline = self.t0 + timeout
        size = self._output.stat().st_size
        while True:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{what} not on screen after {timeout} s:\n{self.screen}")
            if self.observer == "output":
                grown = self._output.stat().st_size
                if grown == size:
                    time.sleep(0.001)
                    continue
                size = grown
            now = (time.perf_counter() - self.t0) * 1000
            self.screen = subprocess.run([*self._tmux, "capture-pane", "-p", "-t", "b"], capture_output=True,
                                         text=True).stdout
            if os.environ.get("BENCH_SCREENS"):
                with open(os.environ["BENCH_SCREENS"], "a", encoding="utf-8") as log:
                    log.write(f"=== {now:.0f} ms\n{self.screen}\n")
            yield now, self.screen
            if self.observer == "poll":
                time.sleep(0.003)


def load() -> str:
    """The machine's load averages, as ``uptime`` shows them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"
