"""Stamps of a forked server's CPU on its way to the first answer, for :mod:`bench.bench_first_cpu`.

Installed in a warm server before it forks (:func:`install`); every server it forks then appends
one JSON line per point to ``$AMACS_CPU_PROBE``: the point, the fork's CPU since the fork
(``getrusage``: every thread's, those ended too; a fork starts at zero), the calling thread's CPU,
and the wall time.  The points: the fork; each log line (its first words); each call Emacs
makes (its name); the runtime built (hello can be answered); the model request leaving
(aiohttp's ``ClientSession._request``); the reply's events and turn-done sent to Emacs.  Only
standard-library imports and hooks found by name, so one probe serves an older tree too.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import threading
import time
from collections.abc import Callable
from typing import Any

_LOCK = threading.Lock()
_WARM = os.getpid()
_FILE = os.environ.get("AMACS_CPU_PROBE", "/dev/null")  # a fork's environment is its launcher's


def cpu_ms() -> float:
    """This process's CPU (user + system, every thread) in ms."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return (use.ru_utime + use.ru_stime) * 1000


def asker_cpu(conn: Any) -> float | None:
    """The CPU so far (ms, 10 ms ticks) of the process at CONN's other end: the Emacs that asked."""
    import socket
    import struct

    try:
        pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(") ", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def threads_cpu() -> dict[str, float]:
    """Each live thread's CPU so far (ms, from the scheduler's ns count), by its name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as stat:
                found[names.get(int(tid), tid)] = round(int(stat.read().split()[0]) / 1e6, 2)
        except (OSError, ValueError):
            pass
    return found


def stamp(point: str, **more: Any) -> None:
    """Append POINT with the CPU so far to the probe's file (nothing in the warm server itself)."""
    if os.getpid() == _WARM:
        return
    line = json.dumps({**more, "pid": os.getpid(), "point": point, "cpu": round(cpu_ms(), 2),
                       "thread": threading.current_thread().name, "thread_cpu": round(time.thread_time() * 1000, 2), "threads": threads_cpu(),
                       "wall": time.time()})
    with _LOCK, open(_FILE, "a") as out:
        out.write(line + "\n")


def _wrap(owner: Any, name: str, point: Callable[..., str | None]) -> None:
    original = getattr(owner, name, None)
    if original is None:
        return

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        said = point(*args, **kwargs)
        if said:
            stamp(said)
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)


def install() -> None:
    """Hook the points; the probe's file is named by ``$AMACS_CPU_PROBE`` of the warm server."""
    made = logging.getLogRecordFactory()

    def record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        rec = made(*args, **kwargs)
        stamp("log " + " ".join(str(rec.msg).split()[:4]))
        return rec

    logging.setLogRecordFactory(record)
    import aiohttp

    from amacs_server import warm
    from amacs_server.transport import emacs_face, server

    original = getattr(warm, "become_server")  # noqa: B009 - warm's import of it, which _child calls

    def forked(conn: Any, *args: Any, **kwargs: Any) -> Any:
        stamp("fork", asker_cpu=asker_cpu(conn))
        return original(conn, *args, **kwargs)

    setattr(warm, "become_server", forked)  # noqa: B010
    _wrap(server.AmacsEPCServer, "start_done", lambda *_a, **_k: "runtime built")
    _wrap(server.AmacsHandler, "_handle_call", lambda _self, _uid, meth, *_a, **_k: f"call {meth.value()}")
    _wrap(server.AmacsHandler, "_send", lambda _self, kind, *_a, **_k: f"sent {kind}" if kind != "amacs-events" else None)
    _wrap(aiohttp.ClientSession, "_request", lambda _self, method, url, *_a, **_k: f"http {method} {url}")
    _wrap(emacs_face.EmacsFace, "reply_delta", lambda _self, _text, last=False: "reply sent" if last else None)
    _wrap(emacs_face.EmacsFace, "reply", lambda *_a, **_k: "reply event")
    _wrap(emacs_face.EmacsFace, "turn_done", lambda *_a, **_k: "turn-done")


_PROFILES = os.environ.get("AMACS_CPU_PROFILE", "")  # a folder: each fork's steps profiled there


def _profiled(owner: Any, name: str, label: str, until: tuple[Any, str] | None = None) -> None:
    """Profile OWNER.NAME's thread CPU (cProfile with ``time.thread_time``) into the profiles'
    folder as PID-LABEL.prof: when it returns or, given UNTIL (owner, method), when that method is
    first called on the same thread."""
    import cProfile

    original = getattr(owner, name)
    state = threading.local()

    def dump() -> None:
        profile = getattr(state, "profile", None)
        if profile is not None:
            state.profile = None
            profile.disable()
            profile.dump_stats(os.path.join(_PROFILES, f"{os.getpid()}-{label}.prof"))

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if os.getpid() == _WARM:
            return original(*args, **kwargs)
        state.profile = cProfile.Profile(time.thread_time)
        state.profile.enable()
        try:
            return original(*args, **kwargs)
        finally:
            dump()

    setattr(owner, name, wrapper)
    if until is not None:
        later = getattr(*until)

        def stop_then(*args: Any, **kwargs: Any) -> Any:
            dump()
            return later(*args, **kwargs)

        setattr(until[0], until[1], stop_then)


def install_profiles() -> None:
    """With ``$AMACS_CPU_PROFILE``: profile the fork's main thread up to serving, the runtime's build,
    and the loop thread up to the first turn's end."""
    if not _PROFILES:
        return
    from amacs_server import serve, turns, warm
    from amacs_server.transport import emacs_face, server

    _profiled(warm, "become_server", "main", until=(server.AmacsEPCServer, "serve_forever"))
    _profiled(serve.RuntimeBuilder, "_run", "build")
    _profiled(turns.Turns, "_run_loop", "loop", until=(emacs_face.EmacsFace, "turn_done"))


def install_turn_profiles() -> None:
    """With ``$AMACS_CPU_PROFILE``: the calls from Emacs (each, on its worker), and the first turn on
    the loop thread in two parts: to the model request leaving (turn-pre), and from it to turn-done
    (turn-post)."""
    if not _PROFILES:
        return
    import cProfile

    import aiohttp

    from amacs_server.loop import primary
    from amacs_server.transport import emacs_face, server

    _profiled(server.AmacsHandler, "_handle_taken", "call")
    turn, request, done = primary.run_turn, aiohttp.ClientSession._request, emacs_face.EmacsFace.turn_done
    state: dict[str, Any] = {}

    def switch(label: str | None) -> None:
        profile = state.pop("profile", None)
        if profile is not None:
            profile.disable()
            profile.dump_stats(os.path.join(_PROFILES, f"{os.getpid()}-{state.pop('label')}.prof"))
        if label is not None and label not in state:
            state[label] = True
            state["label"], state["profile"] = label, cProfile.Profile(time.thread_time)
            state["profile"].enable()

    async def run_turn(*args: Any, **kwargs: Any) -> Any:
        switch("turn-pre")
        return await turn(*args, **kwargs)

    def requested(self: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "POST" and state.get("label") == "turn-pre":
            switch("turn-post")
        return request(self, method, *args, **kwargs)

    def turn_done(self: Any, *args: Any, **kwargs: Any) -> Any:
        if state.get("label") == "turn-post":
            switch(None)
        return done(self, *args, **kwargs)

    primary.run_turn = run_turn
    aiohttp.ClientSession._request = requested  # type: ignore[method-assign]
    emacs_face.EmacsFace.turn_done = turn_done  # type: ignore[method-assign]
