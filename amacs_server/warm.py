"""The warm server: this user's process that has imported the server and the model SDK, and forks a
server for each launch (:mod:`.warm_launch`), so a person who starts Emacs and asks at once does not
wait for ``anthropic``'s import (1.3-2 s of CPU) before the first request can go.

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

import fcntl
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
import time

from .research.forkserver import _read_request, _watch_launcher, preload
from .warm_launch import stamp

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
           others: list[socket.socket]) -> None:
    """In the fork: become the server the launcher on CONN asked for; never returns.

    CLOSING and OTHERS (the other launchers' connections) are the warm server's, closed here."""
    status = 1
    try:
        listener.close()
        signal.set_wakeup_fd(-1)
        for fd in closing:
            os.close(fd)
        for other in others:
            os.close(other.detach())
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server waits for its own children (git)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setpgid(0, 0)  # a group of its own, as Emacs gives its processes
        request, fds = _read_request(conn)
        for target, fd in zip((0, 1, 2), fds, strict=False):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        random.seed()  # a fresh process's random numbers, not the warm server's
        _watch_launcher(conn)
        from .__main__ import main

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
        except Exception:  # noqa: BLE001 - Emacs is gone
            pass
        os._exit(status)


def _same_user(conn: socket.socket) -> bool:
    """The process at CONN's other end runs as this user (the folder is private; this makes sure)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


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
    if threading.active_count() != 1:  # an import started one: forks would lack it
        raise RuntimeError(f"threads running after the imports: {threading.enumerate()}")
    path = os.path.join(directory, f"{key}.sock")
    try:
        os.unlink(path)  # the lock is ours: a socket there is a dead warm server's
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select below through the pipe
    print(f"warm server {os.getpid()} ready on {path} after {(time.perf_counter() - started) * 1000:.0f} ms "
          "of imports", flush=True)
    children: dict[int, socket.socket] = {}
    used = time.monotonic()
    try:
        while True:
            ready = select.select([listener, wake_r], [], [], CHECK)[0]
            if wake_r in ready:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
            _reap(children)
            if listener in ready:
                conn, _ = listener.accept()
                if not _same_user(conn):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    _child(conn, listener, [wake_r, wake_w, lock], list(children.values()))
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
            if os.stat(path).st_ino == os.fstat(listener.fileno()).st_ino:
                os.unlink(path)
        except OSError:
            pass
        listener.close()


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
