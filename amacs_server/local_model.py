"""A local model server under the AMACS server's care: llama.cpp's OpenAI-compatible server.

When ``AMACS_LOCAL_MODEL`` names a GGUF file (and ``AMACS_LOCAL_PYTHON`` the
Python of a venv holding ``llama-cpp-python[server]``; ``scripts/local-model.sh``
makes one), the AMACS server starts ``python -m llama_cpp.server`` on a free
port of 127.0.0.1 and talks to it as an OpenAI-compatible endpoint.  The rules
it keeps:

- it listens on 127.0.0.1 only;
- it is started again when it dies (at most :data:`RESTARTS` times in a row
  within :data:`STEADY` seconds of each other), on the same port, so the
  endpoint the backend holds stays right;
- it stops with the AMACS server, and a model server whose AMACS server was
  killed (SIGKILL leaves no time to stop it) stops by itself: it watches its
  parent's pid, as the AMACS server watches its Emacs;
- its output goes to ``logs/local-model.log`` in the home, never to Emacs.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import threading
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from pathlib import Path
from typing import Any, BinaryIO

from .config import LOCAL_ALIAS as ALIAS
from .errors import AmacsError
from .inference.backend import Piece
from .inference.openai_backend import OpenAIBackend
from .inference.retry import InferenceError

log = logging.getLogger("amacs.local")

# SmolLM2's context window (its GGUF says 8192): llama.cpp's default is 2048.
CONTEXT = 8192
# Restarts in a row before giving up; a server that ran this many seconds was steady.
RESTARTS = 5
STEADY = 60.0
# How long a start may take before a model call says the local model did not come up.
READY_TIMEOUT = 120.0
# The note the shell shows: what a 135M model is for.
TRY_ONLY = ("Local model: SmolLM2-135M-Instruct via llama.cpp on this machine. A 135M model is for "
            "trying AMACS, not for real work: it answers simple questions, often wrongly, and rarely "
            "evaluates useful elisp. For real work set an API key (or point AMACS_BACKEND=openai at a "
            "bigger model) and M-x amacs-restart.")

# Run as ``python -c WATCH ARGS...``: serve llama_cpp.server with ARGS, and exit at once
# when the process that started it is gone (its parent pid changes).
WATCH = """\
import os, runpy, sys, threading, time
parent = os.getppid()
def watch():
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
sys.argv[0] = "llama_cpp.server"
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


class LocalModelError(AmacsError, RuntimeError):
    """The local model server could not be started; the message says why and what to do."""


def free_port() -> int:
    """A port of 127.0.0.1 nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LocalModel:
    """One llama.cpp server process, started, watched and restarted by a thread of its own."""

    def __init__(self, python: Path, gguf: Path, log_file: Path, *, port: int | None = None,
                 context: int = CONTEXT, alias: str = ALIAS, backoff: float = 0.5) -> None:
        self.python, self.gguf, self.log_file = python, gguf, log_file
        self.backoff = backoff  # seconds before the first restart in a row; doubled for each next one
        self.port = port or free_port()
        self.context, self.alias = context, alias
        self.starts = 0  # processes started, the first included
        self.failure: str | None = None  # why it was given up, once it was
        self._proc: subprocess.Popen[bytes] | None = None
        # The log as the running process has it, kept open while it runs: a rewind leaves a log
        # file this server holds open (persistence.history), and llama.cpp writes on into it.
        self._log: BinaryIO | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible endpoint."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        """The running process's pid, or None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def command(self) -> list[str]:
        """The command that serves the model."""
        return [str(self.python), "-c", WATCH, "--model", str(self.gguf), "--model_alias", self.alias,
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.context)]

    def start(self) -> None:
        """Start the process and the thread that restarts it; return at once."""
        if not self.gguf.is_file():
            raise LocalModelError(f"the local model file {self.gguf} does not exist: run scripts/local-model.sh "
                                  "(or M-x amacs-use-local-model) to install it")
        if not Path(self.python).is_file():
            raise LocalModelError(f"{self.python} does not exist: run scripts/local-model.sh "
                                  "(or M-x amacs-use-local-model) to install llama.cpp's server")
        self._spawn()
        self._thread = threading.Thread(target=self._supervise, name="amacs-local-model", daemon=True)
        self._thread.start()

    def _spawn(self) -> None:
        with self._lock:
            if self._stopping.is_set():
                return
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            out = open(self.log_file, "ab")  # noqa: SIM115 - closed when the process is replaced or stopped
            try:
                self._proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=out,
                                              stderr=subprocess.STDOUT)
            except BaseException:
                out.close()
                raise
            if self._log is not None:
                self._log.close()
            self._log = out
            self.starts += 1
            log.info("local model server started: pid %s, %s (start %d)", self._proc.pid, self.base_url,
                     self.starts)

    def _supervise(self) -> None:
        """Start the process again each time it dies, until stopped or it dies too often."""
        in_a_row = 0
        while not self._stopping.is_set():
            proc = self._proc
            if proc is None:
                return
            began = time.monotonic()
            code = proc.wait()
            if self._stopping.is_set():
                return
            in_a_row = 1 if time.monotonic() - began > STEADY else in_a_row + 1
            if in_a_row > RESTARTS:
                self.failure = (f"the local model server stopped {in_a_row} times in a row (last exit code "
                                f"{code}); see {self.log_file}")
                log.error("%s: giving up", self.failure)
                return
            log.warning("local model server (pid %s) exited with code %s: starting it again", proc.pid, code)
            self._stopping.wait(min(8.0, self.backoff * 2 ** (in_a_row - 1)))
            self._spawn()

    def ready(self) -> bool:
        """True when the server answers ``/v1/models``."""
        import urllib.error  # here: urllib.request (with http.client, email) is ~15 ms of every start
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Return once the server answers; raise :class:`LocalModelError` when it cannot."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.failure is not None:
                raise LocalModelError(self.failure)
            if self._stopping.is_set():
                raise LocalModelError("the local model server is stopping")
            if time.monotonic() > deadline:
                raise LocalModelError(f"the local model server did not answer on {self.base_url} within "
                                      f"{timeout:.0f} s; see {self.log_file}")
            time.sleep(0.2)

    def stop(self, grace: float = 5.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL after GRACE seconds) and its watcher."""
        self._stopping.set()
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._thread is not None:
            self._thread.join(grace)
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None


class LocalBackend(OpenAIBackend):
    """The OpenAI-compatible backend at a :class:`LocalModel`: each call waits until it answers.

    llama-cpp-python's server takes the reply schema in the ``json_object`` form only, and
    counts tokens only in answers not streamed: its calls are not streamed."""

    schema_form: str | None = "json_object"

    def __init__(self, local: LocalModel, timeout: float) -> None:
        super().__init__(None, local.base_url, timeout)
        self.local = local
        self.streams_usage = False  # llama-cpp-python's server counts tokens only in answers not streamed

    async def answer(self, request: dict[str, Any], *, stream: bool = True) -> AsyncGenerator[Piece, None]:
        """As :meth:`OpenAIBackend.answer`, once the local server answers (at once when it does)."""
        if not self.local.ready():
            try:
                await asyncio.to_thread(self.local.wait_ready)
            except LocalModelError as err:
                raise InferenceError(str(err)) from err
        async with aclosing(super().answer(request, stream=stream)) as pieces:
            async for piece in pieces:
                yield piece
