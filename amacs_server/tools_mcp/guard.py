"""Runs one stdio MCP server and ends it, with everything it started, when the AMACS server dies.

``python -I -S guard.py COMMAND ARGS...``, started by the hub in a session of its own.
The server is its child, with the guard's stdin, stdout and stderr (the hub's pipes):
nothing passes through the guard.  The rule it keeps: the server lives no longer than
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
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1


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


def main(argv: list[str]) -> int:
    """Run ARGV as the server; its exit status, or 127 when it cannot be run."""
    if not argv:
        print("guard.py: no command", file=sys.stderr)
        return 2
    parent = os.getppid()
    signal.signal(signal.SIGTERM, _end_all)
    _on_parent_death(parent, signal.SIGTERM)
    guard = os.getpid()
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _on_parent_death(guard, signal.SIGKILL)  # the guard killed by itself: the server goes too
        try:
            os.execvp(argv[0], argv)
        except OSError as err:
            print(f"cannot run {argv[0]}: {err.strerror}", file=sys.stderr)
        os._exit(127)
    while True:
        try:
            done, status = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            return 0
        if done:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code
        if os.getppid() != parent:
            _end_all()
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
