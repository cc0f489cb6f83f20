"""Durable file writes: atomic replace for state, single-write append for logs."""

from __future__ import annotations

import errno
import os
from pathlib import Path


class PersistenceError(OSError):
    """A write failed; the message says what to do.  Nothing already on disk was damaged."""


def _explain(err: OSError, path: Path) -> str:
    if err.errno == errno.ENOSPC:
        return f"disk full while writing {path}: free some space, then retry"
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"no permission to write {path}: check the AMACS home's ownership"
    return f"could not write {path}: {err.strerror or err}"


def atomic_write(path: Path, text: str) -> None:
    """Replace PATH with TEXT atomically: temp file, fsync, rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    data = text.encode("utf-8")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise PersistenceError(err.errno or 0, _explain(err, path)) from err


def append_durably(path: Path, text: str) -> None:
    """Append TEXT to PATH in one write and fsync it.

    The cost does not depend on the file's size.  If the write fails part way (a
    full disk), the file is cut back to its old length so no half entry stays.
    """
    data = text.encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as err:
        raise PersistenceError(err.errno or 0, _explain(err, path)) from err
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, "short write")
            os.fsync(fd)
        except OSError as err:
            os.ftruncate(fd, size)
            raise PersistenceError(err.errno or 0, _explain(err, path)) from err
    finally:
        os.close(fd)
