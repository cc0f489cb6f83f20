"""What a stdio MCP server says besides its answers: its stderr, and stray lines on its stdout.

- Its stderr goes to ``logs/mcp-NAME.log`` through a pipe the hub reads: each line is
  scrubbed (a server may print its environment), and the file is rotated at
  :data:`MAX_LOG` bytes (one older file, ``mcp-NAME.log.1``), whatever the server prints.
- A line on its stdout that is not JSON-RPC is one line in the server's log per burst
  (the first, then a count at most every :data:`BURST` seconds), not the SDK's
  traceback per line: the traceback quoted the line, and 20,000 lines made 18 MB.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import time
from pathlib import Path
from typing import BinaryIO, TextIO

from ..scrub import Scrubber

MAX_LOG = 1 << 20  # bytes of logs/mcp-NAME.log before it is rotated
MAX_LINE = 1 << 14  # bytes of one stderr line kept (the rest of a longer one is cut)
BURST = 60.0  # seconds between two lines about a server's stray stdout

SERVER = contextvars.ContextVar[str | None]("amacs_mcp_server", default=None)  # whose connection runs here
log = logging.getLogger("amacs.mcp")


class StderrLog:
    """A server's stderr: a pipe to hand the process, read by a thread into the rotated, scrubbed log."""

    def __init__(self, path: Path, scrub: Scrubber) -> None:
        self.path, self.scrub = path, scrub
        path.parent.mkdir(parents=True, exist_ok=True)
        read, write = os.pipe()
        self.pipe: TextIO = os.fdopen(write, "w", encoding="utf-8", buffering=1)  # the process's stderr
        self._read: BinaryIO = os.fdopen(read, "rb")
        threading.Thread(target=self._copy, name=f"amacs-mcp-log-{path.stem}", daemon=True).start()

    def say(self, line: str) -> None:
        """Write LINE (the hub's own, e.g. "starting") into the log, in order with the server's."""
        with contextlib.suppress(OSError, ValueError):
            print(line, file=self.pipe)

    def close(self) -> None:
        """Close the hub's end of the pipe (the thread ends once the server's ends are closed too)."""
        with contextlib.suppress(OSError):
            self.pipe.close()

    def _copy(self) -> None:
        try:
            out = self.path.open("ab")
            with self._read:
                while line := self._read.readline(MAX_LINE):
                    text = self.scrub.text(line.decode("utf-8", "replace"))
                    if out.tell() + len(text) > MAX_LOG:
                        out.close()
                        with contextlib.suppress(OSError):
                            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
                        out = self.path.open("ab")
                    out.write(text.encode("utf-8"))
                    out.flush()
            out.close()
        except OSError as err:
            log.warning("cannot write %s: %s", self.path, err)


class StrayStdout(logging.Filter):
    """On the SDK's stdio logger: a line that is not JSON-RPC becomes one line per server per burst."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, tuple[float, int]] = {}  # server -> (when last said, lines since)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Failed to parse JSONRPC message"):
            return True
        name = SERVER.get() or "?"
        now = time.monotonic()
        with self._lock:
            said, since = self._seen.get(name, (-BURST, 0))
            if now - said < BURST:
                self._seen[name] = (said, since + 1)
                return False
            self._seen[name] = (now, 0)
        more = f" ({since} more since the last such line)" if since else ""
        record.msg, record.args, record.exc_info, record.exc_text = (
            f"MCP server {name} wrote a line on its stdout that is not JSON-RPC; it is ignored{more}; "
            f"a server must print its own messages to stderr (logs/mcp-{name}.log)"), (), None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


STRAY = StrayStdout()


def install() -> None:
    """Put the stray-stdout filter on the SDK's stdio logger (once)."""
    logger = logging.getLogger("mcp.client.stdio")
    if STRAY not in logger.filters:
        logger.addFilter(STRAY)
