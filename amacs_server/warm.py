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
wait status once it has ended.  Emacs itself asks on a second socket, :func:`emacs_socket`, with
no launcher process (it cannot send files): the fork's stdout and stderr are pipes whose output
the warm server passes on to Emacs in frames (:func:`_frame`), between the pid and the status.
It never builds a runtime, opens a home or starts a thread: each fork starts from a process that
has only imported modules.

It exits, once no fork of it runs, after ``AMACS_WARM_IDLE`` seconds without a launch (default 8
hours), or when the server's sources or the venv changed since it started (its KEY is stale).
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import hashlib
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
from .warm_launch import PACKAGE, stamp, start_note

IDLE = 8 * 3600.0
DELAY = 3.0
CHECK = 60.0  # seconds between looks whether the sources changed, when nothing else happens
BACKENDS = ["anthropic"]  # the default backend's SDK; another is imported by the fork that uses it


def _seconds(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def _child(conn: socket.socket, listeners: list[socket.socket], closing: list[int],
           others: list[socket.socket], directory: str, stdio: tuple[int, int, int] | None = None) -> None:
    """In the fork: become the server the launcher on CONN asked for; never returns.

    LISTENERS, CLOSING and OTHERS (the other launchers' connections) are the warm server's,
    closed here.  STDIO: the standard streams of a server Emacs asked for itself (it sends
    none).  The server says :func:`.warm_launch.start_note` at hello, when it is due (DIRECTORY's)."""
    status = 1
    try:
        for listener in listeners:
            listener.close()
        signal.set_wakeup_fd(-1)
        for fd in closing:
            os.close(fd)
        for other in others:
            os.close(other.detach())
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server sets its own
        asker = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
        note = start_note(directory, os.getppid(), asker, emacs=stdio is not None)
        status = become_server(conn, {"AMACS_WARM_NOTE": note} if note else None, stdio)
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


def emacs_socket(directory: str) -> str:
    """The socket in DIRECTORY on which Emacs itself asks this checkout's warm server for a server.

    Named by the Python and the package alone (Emacs names it so, `amacs--warm-socket`), not by
    :func:`.warm_launch.stamp` (a walk of the sources Emacs would repeat at each start): the warm
    server checks the stamp as it accepts, and a stale one answers nothing."""
    mark = f"{sys.executable}|{PACKAGE}".encode(errors="surrogateescape")
    return os.path.join(directory, f"emacs-{hashlib.sha1(mark).hexdigest()[:16]}.sock")


def _frame(kind: bytes, data: bytes) -> bytes:
    """One message to an Emacs that asked itself: KIND (``p`` pid, ``o`` stdout, ``e`` stderr,
    ``s`` wait status), DATA's length (4 bytes, big-endian), DATA."""
    return kind + struct.pack("!I", len(data)) + data


def _listen(path: str) -> tuple[socket.socket, int]:
    """A listener on the Unix socket PATH (mode 0600; a file there is a dead warm server's) and its inode."""
    try:
        os.unlink(path)  # the lock is ours: a socket there is a dead warm server's
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    bound = os.stat(path).st_ino  # at exit, the socket file is removed if it is still this one
    os.chmod(path, 0o600)
    listener.listen(64)
    return listener, bound


class _Forks:
    """The servers this warm server forked: each one's launcher connection and, for a server Emacs
    asked for itself, the read ends of its stdout and stderr, passed on to Emacs as they come."""

    def __init__(self) -> None:
        self.conns: dict[int, socket.socket] = {}
        self.relays: dict[int, tuple[int, bytes]] = {}  # read end -> (pid, kind)
        self.framed: set[int] = set()  # the forks Emacs asked for itself: told in frames

    def relay(self, fd: int) -> bool:
        """Pass on what FD has to its Emacs; False once FD is closed (and forgotten)."""
        pid, kind = self.relays[fd]
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            os.close(fd)
            del self.relays[fd]
            return False
        try:
            self.conns[pid].sendall(_frame(kind, data))
        except OSError:
            pass  # Emacs is gone: the fork sees its end closed and stops
        return True

    def ended(self, pid: int, status: int) -> None:
        """Tell fork PID's launcher its wait STATUS, after what it wrote last."""
        conn = self.conns.pop(pid, None)
        for fd in [fd for fd, (owner, _kind) in self.relays.items() if owner == pid]:
            while fd in self.relays and self.relay(fd):
                pass
        framed = pid in self.framed
        self.framed.discard(pid)
        if conn is None:
            return
        try:
            conn.sendall(_frame(b"s", str(status).encode()) if framed else struct.pack("!i", status))
        except OSError:
            pass
        conn.close()


def serve(directory: str, key: str) -> int:
    """Preload, then fork a server for each launch on DIRECTORY/KEY.sock, and for each Emacs that
    asks itself on :func:`emacs_socket`, until idle or stale."""
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
    path, emacs_path = os.path.join(directory, f"{key}.sock"), emacs_socket(directory)
    listener, bound = _listen(path)
    emacs_listener, emacs_bound = _listen(emacs_path)  # a newer warm server of this checkout takes it over
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select below through the pipe
    signal.signal(signal.SIGTERM, _stop)  # the socket file is removed on the way out
    print(f"warm server {os.getpid()} ready on {path} after {(time.perf_counter() - started) * 1000:.0f} ms "
          "of imports", flush=True)
    forks = _Forks()
    used = time.monotonic()
    try:
        while True:
            ready = select.select([listener.fileno(), emacs_listener.fileno(), wake_r, *forks.relays], [], [],
                                  min(CHECK, idle + 0.1))[0]
            if wake_r in ready:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
            _reap(forks)
            for fd in ready:
                if fd in forks.relays:
                    forks.relay(fd)
            for accepting in (listener, emacs_listener):
                if accepting.fileno() not in ready:
                    continue
                conn, _ = accepting.accept()
                # Emacs asks itself without the launcher's walk of the sources: a warm server whose
                # sources changed answers nothing, and Emacs starts its launcher instead.
                if not _same_user(conn) or (accepting is emacs_listener and stamp() != key):
                    conn.close()
                    continue
                _fork(conn, forks, [listener, emacs_listener], [wake_r, wake_w, lock], directory,
                      relayed=accepting is emacs_listener)
                used = time.monotonic()
            if not forks.conns and (time.monotonic() - used > idle or stamp() != key):
                print(f"warm server {os.getpid()}: " + ("idle" if time.monotonic() - used > idle else
                                                        "the sources changed") + ", exiting", flush=True)
                return 0
    finally:
        for where, inode, sock in ((path, bound, listener), (emacs_path, emacs_bound, emacs_listener)):
            try:
                if os.stat(where).st_ino == inode:
                    os.unlink(where)
            except OSError:
                pass
            sock.close()
        os.ftruncate(lock, 0)  # names no process once this one is gone


def _fork(conn: socket.socket, forks: _Forks, listeners: list[socket.socket], closing: list[int],
          directory: str, relayed: bool) -> None:
    """Fork the server the launcher on CONN asks for; tell it the pid.  RELAYED (Emacs asked itself,
    and sends no files): the server's stdout and stderr are pipes whose output goes to Emacs in frames."""
    stdio, ends = None, []
    if relayed:
        null = os.open(os.devnull, os.O_RDONLY)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        stdio, ends = (null, out_w, err_w), [out_r, err_r]
    pid = os.fork()
    if pid == 0:
        _child(conn, listeners, closing + list(forks.relays) + ends, list(forks.conns.values()), directory, stdio)
    print(f"warm server {os.getpid()}: forked server {pid}" + (" for Emacs" if relayed else ""), flush=True)
    if stdio is not None:
        for fd in stdio:
            os.close(fd)
        for fd, kind in zip(ends, (b"o", b"e"), strict=True):
            os.set_blocking(fd, False)
            forks.relays[fd] = (pid, kind)
        forks.framed.add(pid)
    try:
        conn.sendall(_frame(b"p", str(pid).encode()) if relayed else struct.pack("!i", pid))
    except OSError:
        pass  # the launcher is gone: the fork sees its end closed and stops
    forks.conns[pid] = conn


def _stop(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _reap(forks: _Forks) -> None:
    """Tell the launcher of each fork that has ended its wait status."""
    while forks.conns:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        print(f"warm server {os.getpid()}: server {pid} ended ({os.waitstatus_to_exitcode(status)})", flush=True)
        forks.ended(pid, status)


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
