"""The warm server: this user's process that imported the server and the SDK, and forks servers.

It forks a server for each launch (:mod:`.warm_launch`), so a person who starts Emacs and asks at
once does not wait for ``anthropic``'s import (1.3-2 s of CPU) before the first request can go.

    python -c "...; from amacs_server.warm import main; main()" DIRECTORY KEY

:func:`.warm_launch.start_warm` starts it, in a session of its own, when a launch found none.  It
holds ``KEY.lock`` in DIRECTORY for its life (a second one started meanwhile exits at once), waits
``AMACS_WARM_DELAY`` seconds (default 3: the session that started it imports the SDK first, as
before), imports what :mod:`.research.forkserver` preloads (the server's modules, the SDK, the
pydantic models built, all frozen out of the collector's sight), and only then listens on
``KEY.sock``: a launch that comes sooner starts a server of its own, as without it.

Each fork becomes the server its launcher asked for, as the experiments' forks do: the launcher's
standard files, environment, folder and arguments, a process group of its own, stopped when the
launcher's end of the socket closes.  The warm server tells the launcher the fork's pid, then its
wait status once it has ended.  It never builds a runtime, opens a home or starts a thread: each
fork starts from a process that has only imported modules.

It exits, once no fork of it runs, after ``AMACS_WARM_IDLE`` seconds without a launch (default 8
hours), or when the server's sources or the venv changed since it started (its KEY is stale).
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from typing import Any

from .research.forkserver import become_server, preload
from .warm_launch import stamp, start_note

IDLE = 8 * 3600.0
DELAY = 3.0
CHECK = 60.0  # seconds between looks whether the sources changed, when nothing else happens
BACKENDS = ["anthropic"]  # the default backend's SDK; another is imported by the fork that uses it


def _seconds(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def _child(conn: socket.socket, listener: socket.socket, closing: list[int],
           others: list[socket.socket], directory: str) -> None:
    """In the fork: become the server the launcher on CONN asked for; never returns.

    CLOSING and OTHERS (the other launchers' connections) are the warm server's, closed here.
    The server says :func:`.warm_launch.start_note` at hello, when it is due (DIRECTORY's)."""
    status = 1
    try:
        listener.close()
        signal.set_wakeup_fd(-1)
        for fd in closing:
            os.close(fd)
        for other in others:
            os.close(other.detach())
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server sets its own
        asker = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
        note = start_note(directory, os.getppid(), asker)
        status = become_server(conn, {"AMACS_WARM_NOTE": note} if note else None)
    except BaseException:  # noqa: BLE001 - said on the launcher's stderr, then the status
        import traceback

        traceback.print_exc()
    finally:
        os._exit(status)


# The stand-in's answers: the Models API's 404 for an unknown model (a fresh home asks it before
# its first call), and a streamed answer of one word.
_NOT_FOUND = json.dumps({"type": "error", "error": {"type": "not_found_error", "message": "no such model"}})
_EVENTS: list[dict[str, Any]] = [
    {"type": "message_start", "message": {"id": "msg_warm", "type": "message", "role": "assistant",
                                          "model": "claude-warm", "content": [], "stop_reason": None,
                                          "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "{}"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
     "usage": {"output_tokens": 1}},
    {"type": "message_stop"},
]


def _answer(conn: socket.socket) -> None:
    """Read one HTTP request from CONN and answer it as the Messages and Models APIs would."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        rest += chunk
    if head.startswith(b"POST"):
        payload = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in _EVENTS).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + payload)
    else:
        payload = _NOT_FOUND.encode()
        conn.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n"
                     + f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n".encode() + payload)


def rehearse() -> None:
    """Run a model call's path once against a stand-in on 127.0.0.1: what the SDK and its transport
    import or build on first use (aiohttp's client, its connector, the SDK's error types' pydantic
    validators: 0.3-0.7 s of a fork's first call on a loaded machine) is then done for every fork."""
    from .inference.anthropic_backend import AnthropicBackend
    from .inference.retry import RetryPolicy

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    _answer(conn)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, name="amacs-warm-stand-in")
    thread.start()

    async def call(url: str) -> None:
        backend = AnthropicBackend("sk-warm", url, timeout=10.0, retry=RetryPolicy(attempts=1))
        try:
            await backend.capabilities("claude-warm")
            await backend.complete({"model": "claude-warm", "max_tokens": 8,
                                    "messages": [{"role": "user", "content": "hi"}]}, on_text=lambda _t: None)
        finally:
            await backend.aclose()

    try:
        asyncio.run(call(f"http://127.0.0.1:{listener.getsockname()[1]}"))
    except Exception as err:  # noqa: BLE001 - a rehearsal: the forks still work without it
        print(f"warm server {os.getpid()}: the rehearsed model call failed: {err!r}", flush=True)
    finally:
        done.set()
        thread.join()
        listener.close()


def _same_user(conn: socket.socket) -> bool:
    """The process at CONN's other end runs as this user (the folder is private; this makes sure)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


def serve(directory: str, key: str) -> int:
    """Preload, then fork a server for each launch on DIRECTORY/KEY.sock until idle or stale."""
    lock = os.open(os.path.join(directory, f"{key}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another is starting or serving
    os.ftruncate(lock, 0)
    os.write(lock, f"{os.getpid()}\n".encode())
    idle, delay = _seconds("AMACS_WARM_IDLE", IDLE), _seconds("AMACS_WARM_DELAY", DELAY)
    time.sleep(delay)
    started = time.perf_counter()
    preload(BACKENDS)
    rehearse()
    gc.collect()
    gc.freeze()
    if threading.active_count() != 1:  # an import started one: forks would lack it
        raise RuntimeError(f"threads running after the imports: {threading.enumerate()}")
    path = os.path.join(directory, f"{key}.sock")
    try:
        os.unlink(path)  # the lock is ours: a socket there is a dead warm server's
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    bound = os.stat(path).st_ino  # at exit, the socket file is removed if it is still this one
    os.chmod(path, 0o600)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select below through the pipe
    signal.signal(signal.SIGTERM, _stop)  # the socket file is removed on the way out
    print(f"warm server {os.getpid()} ready on {path} after {(time.perf_counter() - started) * 1000:.0f} ms "
          "of imports", flush=True)
    children: dict[int, socket.socket] = {}
    used = time.monotonic()
    try:
        while True:
            ready = select.select([listener.fileno(), wake_r], [], [], min(CHECK, idle + 0.1))[0]
            if wake_r in ready:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
            _reap(children)
            if listener.fileno() in ready:
                conn, _ = listener.accept()
                if not _same_user(conn):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    _child(conn, listener, [wake_r, wake_w, lock], list(children.values()), directory)
                print(f"warm server {os.getpid()}: forked server {pid}", flush=True)
                try:
                    conn.sendall(struct.pack("!i", pid))
                except OSError:
                    pass  # the launcher is gone: the fork sees its end closed and stops
                children[pid] = conn
                used = time.monotonic()
                continue
            if not children and (time.monotonic() - used > idle or stamp() != key):
                print(f"warm server {os.getpid()}: " + ("idle" if time.monotonic() - used > idle else
                                                        "the sources changed") + ", exiting", flush=True)
                return 0
    finally:
        try:
            if os.stat(path).st_ino == bound:
                os.unlink(path)
        except OSError:
            pass
        listener.close()
        os.ftruncate(lock, 0)  # names no process once this one is gone


def _stop(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _reap(children: dict[int, socket.socket]) -> None:
    """Tell the launcher of each fork that has ended its wait status."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        print(f"warm server {os.getpid()}: server {pid} ended ({os.waitstatus_to_exitcode(status)})", flush=True)
        if conn is not None:
            try:
                conn.sendall(struct.pack("!i", status))
            except OSError:
                pass
            conn.close()


def main(argv: list[str] | None = None) -> int:
    """``main DIRECTORY KEY`` (as :func:`.warm_launch.start_warm` runs it)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: amacs_server.warm DIRECTORY KEY", file=sys.stderr)
        return 2
    try:
        return serve(argv[0], argv[1])
    except KeyboardInterrupt:
        return 0
