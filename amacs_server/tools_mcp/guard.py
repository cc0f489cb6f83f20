"""Runs one stdio MCP server: ends it with the AMACS server, and keeps its messages small.

``python -I -S guard.py --spill DIR COMMAND ARGS...``, started by the hub in a session
of its own.  The server is its child, with the guard's stdin and stderr (the hub's
pipes).  Its stdout passes through the guard a line (a message) at a time: a line
longer than :data:`MAX_LINE` bytes is kept whole in a private file in DIR, and the
AMACS server gets in its place a result of the same id whose text says so and holds
the line's first :data:`KEPT` bytes.  So neither process ever holds a huge message
(the SDK read a 60 MB one in 13 minutes, at 720 MB).

The other rule it keeps: the server lives no longer than
the AMACS server, even a SIGKILLed one whose server is stuck in a call and never reads
the end of its stdin.  On Linux the kernel tells the guard its parent died
(``PR_SET_PDEATHSIG``), and the server that the guard died; elsewhere the guard
looks twice a second.  Then it kills its process
group (the server and its children).  When the server ends by itself, the guard ends
with its exit status.

Standard library only, imported by nothing: it runs as a script, in a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
MAX_LINE = 4 << 20  # bytes of one message from the server passed on as it is
KEPT = (1 << 20) - (8 << 10)  # bytes of a longer one shown (under the hub's own 1 MiB cut)
_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')


def _on_parent_death(parent: int, sig: int) -> None:
    """Ask for SIG when PARENT dies (Linux), and check it did not die already."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    if os.getppid() != parent:
        _end_all()


def _end_all(*_: object) -> None:
    """Kill the process group (the server and its children), then the guard."""
    with contextlib.suppress(OSError):
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os._exit(137)


class _Relay:
    """The server's stdout to the guard's, a line at a time, a long line kept in a file instead."""

    def __init__(self, source: int, spill: str | None) -> None:
        self.source, self.spill, self.count = source, spill, 0

    def run(self) -> None:
        line = bytearray()
        spilled: tuple[str, int, bytes] | None = None  # (path, fd, the line's start) while spilling
        while chunk := os.read(self.source, 1 << 16):
            while chunk:
                end = chunk.find(b"\n")
                part, chunk = (chunk, b"") if end < 0 else (chunk[:end + 1], chunk[end + 1:])
                if spilled is not None:
                    os.write(spilled[1], part)
                else:
                    line += part
                    if len(line) > MAX_LINE and not line.endswith(b"\n"):
                        spilled = self._spill(bytes(line))
                        line.clear()
                        continue
                if part.endswith(b"\n"):
                    if spilled is not None:
                        self._send(self._cut(*spilled))
                        spilled = None
                    else:
                        self._send(bytes(line))
                        line.clear()
        if line:
            self._send(bytes(line))

    def _spill(self, start: bytes) -> tuple[str, int, bytes]:
        self.count += 1
        folder = self.spill or "."
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = os.path.join(folder, f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{self.count}.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, start)
        return path, fd, start[:KEPT]

    def _cut(self, path: str, fd: int, start: bytes) -> bytes:
        size = os.lseek(fd, 0, os.SEEK_END)
        os.close(fd)
        found = _ID.search(start[:4096])
        if found is None:
            print(f"a message of {size} bytes with no id, kept in {path}, was not passed on", file=sys.stderr)
            return b""
        note = (f"[cut: the server's answer is {size} bytes; its first {KEPT} follow, as the server wrote them; "
                f"the whole answer is in {path}]\n")
        text = note + start.decode("utf-8", "ignore")
        # An error to the SDK, which would otherwise want the tool's structured content; the hub
        # knows the note (calls.CUT_BY_GUARD) and gives the agent the text as the result.
        result = {"content": [{"type": "text", "text": text}], "isError": True, "resultType": "complete"}
        head = b'{"jsonrpc":"2.0","id":' + found.group(1) + b',"result":'
        return head + json.dumps(result, ensure_ascii=False).encode("utf-8") + b"}\n"

    def _send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(1, view):]


def main(argv: list[str]) -> int:
    """Run ARGV (after ``--spill DIR``) as the server; its exit status, or 127 when it cannot be run."""
    spill = None
    if argv[:1] == ["--spill"] and len(argv) > 1:
        spill, argv = argv[1], argv[2:]
    if not argv:
        print("guard.py: no command", file=sys.stderr)
        return 2
    parent = os.getppid()
    signal.signal(signal.SIGTERM, _end_all)
    _on_parent_death(parent, signal.SIGTERM)
    guard = os.getpid()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _on_parent_death(guard, signal.SIGKILL)  # the guard killed by itself: the server goes too
        os.dup2(write, 1)
        os.close(read)
        os.close(write)
        try:
            os.execvp(argv[0], argv)
        except OSError as err:
            print(f"cannot run {argv[0]}: {err.strerror}", file=sys.stderr)
        os._exit(127)
    os.close(write)
    relay = threading.Thread(target=_Relay(read, spill).run, daemon=True)
    relay.start()
    while True:
        try:
            done, status = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            return 0
        if done:
            relay.join(2)  # what the server wrote last is passed on
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code
        if os.getppid() != parent:
            _end_all()
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
