"""A fork server for an experiment's runs: each run's server forks from one that imported it all.

So a run does not pay the imports again (the model SDK alone is ~1.3 s of CPU).

    python -m amacs_server.research.forkserver SOCKET [BACKEND...]

It imports the server's modules and the SDKs of BACKENDs (``anthropic``,
``openai``), moves what it imported out of the garbage collector's sight
(``gc.freeze``: a fork's pages stay shared), prints ``ready`` and then
listens on the Unix socket SOCKET.  It never builds a runtime, opens a home or
starts a thread: every fork starts from the state of a process that has only
imported modules, as a fresh ``python -m amacs_server`` has once its imports
are done.  No run's server is ever reused.

A run's Emacs starts :mod:`.launch` as its server command; the launcher sends
its standard files, environment, folder and arguments.  The fork takes them,
makes its own process group (the experiment kills a run's groups), and runs
``amacs_server.serve.main``; its exit status goes back to the launcher, which
exits with it.  The fork stops, as a server whose Emacs died does, when the
launcher's end of the socket closes (Emacs killed it), or when the fork
server itself is gone.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
from pathlib import Path
from typing import Any

MAX_REQUEST = 1 << 20
PARENT_CHECK = 0.5  # seconds between looks whether the experiment that started it is still there
# What a run's server imports before its port line and for its first turn (the rest is imported as used).
# The reply's org converter (org_markup: ~20 regexes) is imported by a server's first reply, between
# the model's last byte and the reply shown (3-15 ms, load 0-7); a fork finds it imported.  hello (its
# dataclasses made: ~12 ms at load 4) is imported by the runtime's build, which hello's answer waits for.
SERVER_MODULES = ("amacs_server.serve", "amacs_server.hello", "amacs_server.methods", "amacs_server.runtime",
                  "amacs_server.loop.primary", "amacs_server.transport.server",
                  "amacs_server.transport.emacs_face", "amacs_server.persistence.git_repo",
                  "amacs_server.text.org_markup")


def launcher() -> Path:
    """The launcher a run's Emacs starts (``python -S`` it: standard library only)."""
    return Path(__file__).with_name("launch.py")


def preload(backends: list[str]) -> None:
    """Import the server's modules and BACKENDS' SDKs, then freeze them out of the collector's sight."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")  # as serve does, before any model is built
    for name in SERVER_MODULES:
        importlib.import_module(name)
    from ..methods import prepare_models
    from ..serve import parser

    # Made here, not in each fork: the server's command line, and the validators of the methods'
    # arguments (a person's first input is validated with one: 3-9 ms of a fork's CPU after RET).
    parser()
    prepare_models()
    from ..transport.server import unpack

    # A message from Emacs read once: sexpdata compiles its reader's regexes for each message and
    # a fork finds them in re's cache (its first message, hello, took 1.7 ms of CPU more than the
    # second, measured in forks of a preloaded process).
    unpack(b'(call 1 hello ((:steps . 1) "text"))')
    from ..inference import sdk

    for backend in backends:
        sdk.SDKS[backend].load()
    build_models()
    from ..inference.parse import response_schema

    # The reply's model (imported by the first request) built and its JSON schema made: 30-70 ms
    # of a fork's first turn between the person's RET and the request (profiled at load 4-11).
    response_schema()
    gc.collect()
    gc.freeze()


def build_models() -> None:
    """Build the validators of the server's pydantic models now (``defer_build``: each is built at its
    first use, in every fork again).  A fork then builds hello's and submit's argument models in
    4-14 ms instead of 31-64 (n=5 forks each): they reuse these schemas and pydantic's warmed caches."""
    from pydantic import BaseModel

    found: list[type[BaseModel]] = []
    todo = list(BaseModel.__subclasses__())
    while todo:
        model = todo.pop()
        todo.extend(model.__subclasses__())
        if model.__module__.startswith("amacs_server."):
            found.append(model)
    for model in found:
        model.model_rebuild()


def _read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """The launcher's request (length-prefixed JSON) and the files it sent with it."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
    if len(data) < 4:
        raise OSError("short request")
    (length,) = struct.unpack("!I", data[:4])
    if length > MAX_REQUEST:
        raise OSError("request too long")
    body = data[4:]
    while len(body) < length:
        chunk = conn.recv(length - len(body))
        if not chunk:
            raise OSError("request cut off")
        body += chunk
    return json.loads(body), fds


def _watch_launcher(conn: socket.socket) -> None:
    """Stop this server (as SIGTERM does) once the launcher's end closes: Emacs killed it."""

    def watch() -> None:
        try:
            while conn.recv(1):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="amacs-launcher-watch", daemon=True).start()


def become_server(conn: socket.socket, extra_env: dict[str, str] | None = None,
                  stdio: tuple[int, int, int] | None = None) -> int:
    """In a fork: become the server the launcher on CONN asked for (its standard streams, its
    environment, with EXTRA_ENV, and folder, its argv) and run it; its exit status.  What went
    wrong is said on the launcher's stderr.

    A launcher that sends no files (Emacs itself) gets STDIO as the server's standard streams."""
    status = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server waits for its own children (git)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setpgid(0, 0)  # a group of its own, as Emacs gives its processes
        request, fds = _read_request(conn)
        if stdio is not None:
            if fds:
                for fd in stdio:
                    os.close(fd)
            else:
                fds = list(stdio)
        for target, fd in zip((0, 1, 2), fds, strict=False):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.update(extra_env or {})
        os.chdir(request["cwd"])
        random.seed()  # a fresh process's random numbers, not the forking server's
        _watch_launcher(conn)
        from ..serve import main

        sys.argv = ["amacs_server", *request["argv"]]
        status = main(list(request["argv"]))
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001 - said on the launcher's stderr, then the status
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - the launcher is gone
            pass
    return status


def _serve_one(conn: socket.socket, listener: socket.socket) -> None:
    """In the fork: become the server the launcher on CONN asked for; never returns."""
    status = 1
    try:
        listener.close()
        status = become_server(conn)
        conn.sendall(struct.pack("!i", status))
    except Exception:  # noqa: BLE001 - the launcher is gone
        pass
    finally:
        os._exit(status)


def serve(path: str, backends: list[str]) -> None:
    """Preload, say ``ready``, then fork a server for each launcher that connects to PATH, until killed."""
    preload(backends)
    if threading.active_count() != 1:  # an import started one: forks would lack it
        raise RuntimeError(f"threads running after the imports: {threading.enumerate()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks are reaped by the kernel
    parent = os.getppid()
    print("ready", flush=True)
    # No thread may run here (a fork copies only the forking one): the experiment's end is
    # noticed between accepts; its servers then stop, as servers whose parent is gone do.
    while os.getppid() == parent:
        if not select.select([listener], [], [], PARENT_CHECK)[0]:
            continue
        conn, _ = listener.accept()
        if os.fork() == 0:
            _serve_one(conn, listener)
        conn.close()


def main(argv: list[str]) -> int:
    """``python -m amacs_server.research.forkserver SOCKET [BACKEND...]``."""
    if not argv:
        print("usage: python -m amacs_server.research.forkserver SOCKET [BACKEND...]", file=sys.stderr)
        return 2
    try:
        serve(argv[0], argv[1:])
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
