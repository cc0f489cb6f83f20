"""Benchmarks in interactive Emacs: ``emacs -nw`` in tmux, waiting in its command loop.

Batch Emacs misstates every event-driven path (DESIGN.md, Measuring), so the
benchmarks that time what a person feels run a real terminal Emacs:

- :func:`amacs_terminal` is ``./amacs`` (the shell and its server) in tmux,
  from ``tests/tmux/terminal.py``;
- :class:`BareEmacs` is ``emacs -nw -Q`` with AMACS's elisp on the load path
  (compiled, from ``.elc/``, as ``./amacs`` loads it) and nothing started, for benchmarks that bring their own server.

Both take elisp through an Emacs server inside them (``.elisp(form)``).  Times
are taken inside Emacs (``float-time`` in advice and hooks) and written to a
file the benchmark reads (:meth:`Recorder.read`): polling through emacsclient
would wake Emacs and disturb what is measured.  Wall-clock times are comparable
with Python's ``time.time()`` on the same machine.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
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


def load() -> str:
    """The machine's load averages, as ``uptime`` shows them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"
