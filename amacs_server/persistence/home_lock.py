"""One server per AMACS home: an exclusive lock held for the server's life.

Two servers on one home write over each other: a newcomer's two Emacs
sessions on one home wrote ``* Tick 41`` twice in ``agent-chat.org``, two
git commits for it, and two different budgets.  So a server takes an
exclusive ``flock`` on ``.server.lock`` in the home before it reads any of
it, and holds it until the process ends (the kernel releases it, also when
the process is killed).

The lock file says who holds it and whether that server is stopping (its
Emacs went; it finishes its tick and exits).  A server that finds the lock
taken waits for a stopping holder (a restart, or input sent just after the
connection dropped, starts the next server while the last one finishes);
otherwise it refuses at once, saying which server serves the home.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from .recovery import StartupError

log = logging.getLogger("amacs.home_lock")
LOCK_FILE = ".server.lock"
# A stopping server ends its tick and exits; Emacs kills it after
# `amacs-stop-grace' (8 s): a little longer than that.
STOPPING_WAIT = 12.0
POLL = 0.05


class HomeInUse(StartupError):
    """Another live server holds the home's lock."""


class HomeLock:
    """The exclusive lock on HOME for this process (see the module's text)."""

    def __init__(self, home: Path, headless: bool) -> None:
        self.path = home / LOCK_FILE
        self.headless = headless
        self._fd: int | None = None

    def acquire(self, stopping_wait: float = STOPPING_WAIT) -> None:
        """Take the lock, waiting up to STOPPING_WAIT for a holder that is stopping.

        Raises :class:`HomeInUse` when a server that is not stopping holds it
        (or a stopping one outlives the wait)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + stopping_wait
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as err:
                    if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        # A file system without locks (some network mounts): serve unguarded
                        # rather than not at all, and say so in the log.
                        log.warning("cannot lock %s (%s): two servers on this home would not be stopped",
                                    self.path, err)
                        os.close(fd)
                        return
                    holder = self._holder(fd)
                    if not holder.get("stopping") or time.monotonic() >= deadline:
                        raise HomeInUse(self._in_use(holder)) from None
                    time.sleep(POLL)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._write({"pid": os.getpid(), "headless": self.headless, "stopping": False})

    def release(self) -> None:
        """Let the lock go (a rewind or fork holds it only while it works)."""
        if self._fd is not None:
            os.close(self._fd)  # the kernel releases the flock with the descriptor
            self._fd = None

    def mark_stopping(self) -> None:
        """This server's Emacs went: a server started now may wait for the lock."""
        if self._fd is not None:
            self._write({"pid": os.getpid(), "headless": self.headless, "stopping": True})

    def _write(self, info: dict[str, Any]) -> None:
        assert self._fd is not None
        data = json.dumps(info).encode()
        # One pwrite of a few bytes, then the length: a reader sees the old or the new text.
        os.pwrite(self._fd, data, 0)
        os.ftruncate(self._fd, len(data))

    def _holder(self, fd: int) -> dict[str, Any]:
        """What the holder wrote, or {} while it writes (the next look reads it)."""
        try:
            info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        except ValueError:
            return {"stopping": True}  # half written: it is about to say; look again
        return info if isinstance(info, dict) else {}

    def _in_use(self, holder: dict[str, Any]) -> str:
        home = self.path.parent
        pid = holder.get("pid", "unknown")
        if holder.get("stopping"):
            return (f"the AMACS server (pid {pid}) that served {home} is still stopping after "
                    f"{STOPPING_WAIT:g} s; wait for it to exit (or kill it), then M-x amacs-restart")
        if holder.get("headless"):
            return (f"a headless AMACS server (pid {pid}) serves {home}: connect to it with "
                    "M-x amacs-connect and its token, or give this Emacs another home (AMACS_HOME or amacs-home)")
        return (f"another AMACS server (pid {pid}, started by another Emacs) serves {home}; two servers "
                "would write over each other's conversation. Use that Emacs, or quit it first, or give "
                "this one another home (AMACS_HOME or amacs-home)")
