"""Durable file writes: atomic replace for state, single-write append for logs.

Every write is crash-safe (a killed process leaves the old or the new content,
never half an entry).  Each write also fsyncs, unless it runs inside
:func:`deferred_sync`: then the caller promises a later :func:`sync_paths`
(the commit worker does it before the tick's commit, off the loop thread).

Every file is made 0600: the home holds the person's conversations
(:func:`secure_home` makes an existing home private).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from .errors import AmacsError

_deferred: ContextVar[bool] = ContextVar("amacs_deferred_sync", default=False)
log = logging.getLogger("amacs.files")
# What the server's process creates: files 0600, folders 0700 (see secure_home).
UMASK = 0o077


@contextmanager
def deferred_sync() -> Iterator[None]:
    """Writes inside skip their fsync: whoever calls this syncs the files later (:func:`sync_paths`).

    Only for writes that are not a write-ahead: the person's input is always
    synced before the model is called."""
    token = _deferred.set(True)
    try:
        yield
    finally:
        _deferred.reset(token)


# The fsyncs of one call run this many at a time: the file system commits them in one journal
# transaction, where one after another each waits for its own while other writers keep the
# journal busy (a 20,000-tick fork's 54 months: 170-206 ms one by one at load 7, 24-56 ms at
# once).  The threads cost ~5-8 ms of CPU per call of that size.
SYNC_THREADS = 8


def _fsync(path: Path) -> bool:
    """fsync PATH; False when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _each(paths: list[Path]) -> list[bool]:
    """:func:`_fsync` of each of PATHS, up to SYNC_THREADS at once; raises the first error."""
    if len(paths) < 2:
        return [_fsync(path) for path in paths]
    with ThreadPoolExecutor(min(SYNC_THREADS, len(paths))) as pool:
        return list(pool.map(_fsync, paths))


def sync_paths(paths: Iterable[Path], *, folders: bool = True) -> None:
    """fsync each existing file of PATHS and (FOLDERS) the folders they are in, for renames;
    every file is synced before any folder."""
    paths = list(paths)
    synced = _each(paths)
    if folders:
        _each(sorted({path.parent for path, done in zip(paths, synced, strict=True) if done}))


class PersistenceError(AmacsError, OSError):
    """A write failed; the message says what to do.  Nothing already on disk was damaged."""


def _explain(err: OSError, path: Path) -> str:
    if err.errno == errno.ENOSPC:
        return f"disk full while writing {path}: free some space, then retry"
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"no permission to write {path}: check the AMACS home's ownership"
    return f"could not write {path}: {err.strerror or err}"


def atomic_write(path: Path, text: str) -> None:
    """Replace PATH with TEXT atomically: temp file, fsync (unless deferred), rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    data = text.encode("utf-8")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if not _deferred.get():
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise PersistenceError(err.errno or 0, _explain(err, path)) from err


def append_durably(path: Path, text: str) -> None:
    """Append TEXT to PATH in one write and fsync it (unless deferred).

    The cost does not depend on the file's size.  If the write fails part way (a
    full disk), the file is cut back to its old length so no half entry stays.
    """
    data = text.encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as err:
        raise PersistenceError(err.errno or 0, _explain(err, path)) from err
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, "short write")
            if not _deferred.get():
                os.fsync(fd)
        except OSError as err:
            os.ftruncate(fd, size)
            raise PersistenceError(err.errno or 0, _explain(err, path)) from err
    finally:
        os.close(fd)


def secure_home(home: Path) -> int:
    """Make HOME private: the folder 0700, nothing in it readable or writable by others.

    The server runs with umask :data:`UMASK` (``__main__``), so what it, SQLite
    (``memory.db`` and its ``-wal``/``-shm``) and git create from then on is
    0600/0700 anyway; this fixes a home made before, when files were 0644 in a
    0755 folder and other local users could read the person's conversations.
    Group and other bits are taken off every file and folder under HOME; the
    owner's bits stay (git's read-only objects stay read-only).  Inside ``.git``
    only the folder itself is changed: once HOME is 0700 nobody else can reach
    what is in it, and walking every object of a long history would slow the
    start.  Symbolic links are neither followed nor changed.  A file that cannot
    be changed (not ours, a read-only disk) is logged, never fatal.  Returns the
    number of paths changed.
    """
    changed = 0

    def private(path: Path, mode: int) -> None:
        nonlocal changed
        if stat.S_IMODE(mode) & 0o077:
            try:
                os.chmod(path, stat.S_IMODE(mode) & ~0o077)
                changed += 1
            except OSError as err:
                log.warning("could not make %s private: %s", path, err.strerror or err)

    try:
        private(home, os.lstat(home).st_mode)
    except OSError:
        return 0
    for folder, dirs, files in os.walk(home):
        root = Path(folder)
        for name in [*dirs, *files]:
            path = root / name
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if not stat.S_ISLNK(mode):
                private(path, mode)
        if root == home:
            dirs[:] = [d for d in dirs if d != ".git"]
    return changed


def write_back_soon(fd: int) -> None:
    """Start writing the file FD's new bytes to disk, without waiting (Linux: the advice that its
    pages will not be needed starts their writeback): a file copied now and synced later (a fork's
    months and memory.db, copied beside git's walk) is then mostly written by its sync."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        try:
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:  # only the sync is longer
            pass


def copy_range(src: int, out: int, size: int) -> None:
    """SIZE bytes of the file SRC to OUT, in the kernel (copy_file_range; sendfile where it cannot)."""
    done = 0
    try:
        while done < size:
            step = os.copy_file_range(src, out, size - done, done, done)
            if step == 0:
                return
            done += step
    except OSError:  # another file system, or a kernel without it
        if done:
            raise
        while done < size:
            step = os.sendfile(out, src, done, size - done)
            if step == 0:
                return
            done += step
