"""The AMACS home as a git repository: one commit per tick (docs/ARCHITECTURE.md, Persistence and git).

Commits are made off the loop thread by one :class:`CommitWorker` per home, in
tick order: the prompt returns without waiting for git.
GitPython, which makes or opens the repository and sets its configuration,
is imported when the first commit is made, on the worker: its ~30 ms import
is not on the server's start-up path.  Commits themselves are git
plumbing commands.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

from .. import faults
from ..errors import AmacsError
from ..files import sync_paths

log = logging.getLogger("amacs.git")

# shell-history is Emacs's input ring (M-p) and shell-draft the input typed and not yet sent:
# the person's, not the agent's mind; neither is committed.
GITIGNORE = ("memory.db*\ntranscripts/\nlogs/\nserver.json\nserver.pid\n.*.tmp\nshell-history\n.server.lock\n"
             "rewound-spend\nshell-draft\nbudget-limit\n")
# Lines added to GITIGNORE after homes were made with it: appended to an existing home's file.
GITIGNORE_ADDED = ("shell-history", ".server.lock", "rewound-spend", "shell-draft", "budget-limit")
# Without /proc (so no way to see which processes use the repository), a lock this old is stale.
STALE_LOCK_SECONDS = 10.0
# How long a commit waits for a live git (the person's own, or one a killed server left running)
# to release its lock.
LOCK_WAIT_SECONDS = 5.0
# Loose objects are packed every PACK_EVERY commits, in a thread of its own so
# commits never wait for it (git allows both at once: `repack -d' deletes only
# loose objects it packed).  git's own `gc --auto' is off: it waits for 6,700
# loose objects, which for a growing agent-chat.org is gigabytes.
PACK_EVERY = 25
# Consecutive versions of a file are the best delta bases; they sort next to
# each other, so a small window finds them and keeps `repack' cheap.
# One thread at low priority: the loop thread keeps the other core (measured: a
# roll-up at ~5,000 ticks took 26 s with every core).
PACK_ARGS = ("-c", "pack.threads=1", "repack", "-d", "-q", "--geometric=2", "--window=4", "--depth=50")
PACK_NICE = 10


# A commit message's eval form and result are cut at these lengths (git log stays readable;
# the whole of both is in the transcript).
EVAL_FORM_CHARS = 2000
EVAL_RESULT_CHARS = 1000


class CommitError(AmacsError, RuntimeError):
    """The commit failed; the tick's files are on disk and the next commit will carry them."""


class GitFailed(AmacsError, RuntimeError):
    """A git command exited with an error (its stderr is the message)."""


def commit_message(tick: int, thread: str | None, mood: str, monologue: str, *, eval_form: str | None = None,
                   eval_result: str | None = None, eval_error: str | None = None) -> str:
    """``[TICK 42][thread-id][mood] monologue`` on one line; after an eval, a body with its
    form and its result or error, each cut at a length a log reads well at (the transcript
    has them whole): the history shows eval -> result -> reply, the reply in
    agent-chat.org.  The message is the tick's own record: a commit made behind a backlog
    carries the files as they are when it runs (:class:`CommitWorker`), later ticks' too."""
    subject = f"[TICK {tick}][{thread or 'no-thread'}][{mood}] {' '.join(monologue.split())}"
    if eval_form is None:
        return subject
    outcome = (f"error: {_cut(eval_error, EVAL_RESULT_CHARS)}" if eval_error is not None
               else f"result: {_cut(eval_result or '(none)', EVAL_RESULT_CHARS)}")
    body = f"eval: {_cut(eval_form, EVAL_FORM_CHARS)}\n{outcome}"
    return f"{subject}\n\n" + body.replace("\0", "\ufffd")  # a NUL cannot be in git's arguments


def _cut(text: str, limit: int) -> str:
    """TEXT, or its first LIMIT characters and how many more there are."""
    text = text.strip()
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit:,} more characters]"


def _ignore_also(ignore: Path, names: Iterable[str]) -> None:
    """Append to the .gitignore IGNORE each of NAMES it lacks (a line of its own); the rest stays."""
    try:
        text = ignore.read_text(encoding="utf-8", errors="replace")
        lines = set(text.splitlines())
        missing = [name for name in names if name not in lines]
        if missing:
            with ignore.open("a", encoding="utf-8") as fh:
                fh.write(("" if text.endswith("\n") or not text else "\n") + "".join(f"{n}\n" for n in missing))
    except OSError as err:  # a read-only home: git status shows the file, nothing worse
        log.warning("could not add %s to %s: %s", ", ".join(names), ignore, err)


class HomeRepo:
    """Git operations on the AMACS home (thread-safe: one lock around every git call)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        ignore = home / ".gitignore"
        if not ignore.exists():
            ignore.write_text(GITIGNORE, encoding="utf-8")
        else:
            _ignore_also(ignore, GITIGNORE_ADDED)
        self._lock = threading.RLock()
        self._prepared = False
        self._parent: str | None = None  # HEAD as this process last set it (None: read it)
        self._running: set[int] = set()  # pids of the git commands this object runs now
        self._env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
        for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
            self._env.pop(name, None)

    def prepare(self) -> None:
        """Make (or open) the repository and set what commits need; once, before the first commit."""
        with self._lock:
            if self._prepared:
                return
            import git  # noqa: PLC0415 - GitPython, off the start-up path (module docstring)

            try:
                repo = git.Repo(self.home) if (self.home / ".git").exists() else git.Repo.init(self.home)
                with repo.config_writer() as cfg:  # commits work on a machine with no git identity
                    if not cfg.has_option("user", "name"):
                        cfg.set_value("user", "name", "AMACS")
                        cfg.set_value("user", "email", "amacs@localhost")
                    if not cfg.has_option("gc", "auto"):  # the commit worker packs (PACK_EVERY)
                        cfg.set_value("gc", "auto", "0")
                    if not cfg.has_option("maintenance", "auto"):
                        cfg.set_value("maintenance", "auto", "false")
            except (git.GitError, OSError, ValueError) as err:
                raise CommitError(f"cannot set up the git repository in {self.home}: {err}; "
                                  "the tick is saved on disk") from err
            self._prepared = True

    def _git(self, *args: str, nice: int = 0) -> str:
        command = ["nice", "-n", str(nice), "git", *args] if nice and shutil.which("nice") else ["git", *args]
        with subprocess.Popen(command, cwd=self.home, env=self._env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
            self._running.add(proc.pid)  # this server's own: no lock of theirs is stale (clear_stale_lock)
            try:
                stdout, stderr = proc.communicate()
            finally:
                self._running.discard(proc.pid)
        if proc.returncode != 0:
            raise GitFailed(f"git {args[0]} failed ({proc.returncode}): {stderr.strip()}")
        return stdout.strip()

    def _git_input(self, data: bytes, *args: str) -> str:
        """git ARGS with DATA on its standard input; its output."""
        done = subprocess.run(["git", *args], cwd=self.home, env=self._env, input=data, capture_output=True,
                              check=False)
        if done.returncode != 0:
            raise GitFailed(f"git {args[0]} failed ({done.returncode}): "
                            f"{done.stderr.decode(errors='replace').strip()}")
        return done.stdout.decode().strip()

    def _locks(self) -> list[Path]:
        """The lock files a commit can leave: the index's, config's, HEAD's and the refs'."""
        git_dir = self.home / ".git"
        found = [git_dir / name for name in ("index.lock", "config.lock", "HEAD.lock", "packed-refs.lock")]
        found = [lock for lock in found if lock.exists()]
        refs = git_dir / "refs"
        if refs.is_dir():
            found += sorted(refs.rglob("*.lock"))
        return found

    def clear_stale_lock(self) -> str | None:
        """Remove the lock files no live process holds; return a note for the shell, or None.

        A git killed mid-commit (with the server: Emacs kills its process group,
        and a machine that stops kills everything) leaves ``index.lock`` or a
        ref's ``.lock``, and every later commit fails on it.  Git
        writes no owner into its locks: a lock is held while a git process
        works in this repository.  This server's own commits run under the
        repository's lock and its repack takes none of these, so a lock is
        stale when no other git process has the home as its working folder
        (read from /proc; without /proc, when it is older than
        STALE_LOCK_SECONDS).  A live one (the person's git, or one a killed
        server left running) is waited for, up to LOCK_WAIT_SECONDS.
        """
        locks = self._locks()
        if not locks:
            return None
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        unheld = 0  # looks in a row that found the locks and no git at work
        while locks:
            users = git_processes_in(self.home, ignore=self._running)
            if users is None:  # no /proc: the age decides
                if min(_age(lock) for lock in locks) >= STALE_LOCK_SECONDS:
                    break
            elif not users:
                # Stale only when seen so twice, a pause apart: a git about to rename its
                # lock into place was once not seen in /proc under load (CI), and its
                # lock, 0 s old, was taken for stale.
                unheld += 1
                if unheld >= 2:
                    break
            else:
                unheld = 0
            if time.monotonic() >= deadline and users != []:  # none at work: one more look decides
                who = f"git (pid {', '.join(map(str, users))}) is working in it" if users else "it is recent"
                raise CommitError(f"git is busy: {locks[0]} exists and {who}; the tick is saved on disk "
                                  "and the next tick's commit will include it")
            time.sleep(0.05)
            locks = self._locks()
        if not locks:
            return None
        removed = []
        for lock in locks:
            age = _age(lock)
            lock.unlink(missing_ok=True)
            removed.append(f"{lock.relative_to(self.home)} ({age:.0f} s old)")
        log.warning("removed stale git locks: %s", ", ".join(removed))
        return f"removed a stale {', '.join(removed)} that no running git held (a git killed mid-commit left it)"

    def _head(self) -> str | None:
        try:
            return self._git("rev-parse", "-q", "--verify", "HEAD^{commit}") or None
        except GitFailed:
            return None

    def commit(self, files: Iterable[Path], message: str,
               blobs: Mapping[str, bytes] | None = None) -> tuple[str, str | None]:
        """Commit FILES as they are on disk, and BLOBS (path in the home -> content) as given
        (a file whose content at the tick must be exact though the disk may have moved on);
        return the commit hexsha and a note (or None).

        Plumbing, so each file is hashed once and only if its stat changed:
        ``update-index`` (writes the blobs), ``write-tree``, ``commit-tree``,
        ``update-ref``.  ``git commit -- paths`` hashed a changed file twice and
        ran ``gc --auto`` after every commit.  Always a new commit, even if
        nothing changed (one commit per tick).
        """
        with self._lock:
            note = self.clear_stale_lock()  # before prepare: a config.lock stops it too
            self.prepare()
            exact = dict(blobs or {})
            paths = [".gitignore", *(name for p in files if p.exists()
                                     and (name := str(p.relative_to(self.home))) not in exact)]
            try:
                if faults.armed("commit.index-lock"):
                    faults.kill_holding_lock("commit.index-lock", ["git", "update-index", "--add", "--stdin"],
                                             self.home, self.home / ".git" / "index.lock",
                                             stdin=b".gitignore\n", env=self._env)
                self._git("update-index", "--add", "--", *paths)
                for name, data in exact.items():
                    blob = self._git_input(data, "hash-object", "-w", "--stdin")
                    self._git("update-index", "--add", "--cacheinfo", f"100644,{blob},{name}")
                faults.point("commit.indexed")
                tree = self._git("write-tree")
                faults.point("commit.tree")
                try:
                    sha = self._commit_tree(tree, message, self._parent or self._head())
                except GitFailed:  # HEAD moved under us (a person's own commit): once more
                    sha = self._commit_tree(tree, message, self._head())
            except (GitFailed, OSError, ValueError) as err:
                self._parent = None
                raise CommitError(f"git commit failed: {err}; the tick is saved on disk") from err
            self._parent = sha
            return sha, note

    def _commit_tree(self, tree: str, message: str, parent: str | None) -> str:
        """A commit of TREE on PARENT, and HEAD moved to it only if HEAD is still PARENT."""
        sha = self._git("commit-tree", tree, *(("-p", parent) if parent else ()), "-m", message)
        faults.point("commit.object")
        if faults.armed("commit.ref-lock"):
            faults.kill_holding_lock("commit.ref-lock", ["git", "update-ref", "--stdin"], self.home,
                                     self.home / ".git" / "HEAD.lock", env=self._env,
                                     stdin=f"start\nupdate HEAD {sha} {parent or ''}".rstrip().encode() + b"\nprepare\n")
        subject = message.partition("\n")[0]  # the reflog's line
        self._git("update-ref", "-m", f"commit: {subject}", "HEAD", sha, parent or "")
        faults.point("commit.done")
        return sha

    def forget_head(self) -> None:
        """HEAD was moved by another (a rewind): the next commit reads it again."""
        with self._lock:
            self._parent = None

    def pack(self) -> None:
        """Pack loose objects (geometric: small packs roll up, big ones stay).  Runs beside commits."""
        self._git(*PACK_ARGS, nice=PACK_NICE)

    def file_versions(self, name: str, count: int) -> list[str]:
        """The shas of the last COUNT commits that changed NAME, newest first ([] without history)."""
        if not (self.home / ".git").exists() or self._head() is None:
            return []
        return self._git("log", f"--max-count={count}", "--format=%H", "--", name).split()

    def show(self, sha: str, name: str) -> str:
        """NAME as commit SHA has it (GitFailed if it has none)."""
        done = subprocess.run(["git", "show", f"{sha}:{name}"], cwd=self.home, env=self._env,
                              capture_output=True, check=False)
        if done.returncode != 0:
            raise GitFailed(f"git show failed ({done.returncode}): {done.stderr.decode(errors='replace').strip()}")
        return done.stdout.decode("utf-8")

    def log(self, count: int = 20) -> list[str]:
        """The subjects of the last COUNT commits, newest first."""
        return [subject for _sha, subject in self.recent(count)]

    def recent(self, count: int = 20) -> list[tuple[str, str]]:
        """(sha, subject) of the last COUNT commits, newest first (does not wait for a commit
        being made: git updates HEAD atomically)."""
        if self._head() is None:
            return []
        out = self._git("log", f"--max-count={count}", "--format=%H %s")
        return [(line[:40], line[41:]) for line in out.splitlines()]


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def git_processes_in(folder: Path, ignore: Collection[int] = ()) -> list[int] | None:
    """The pids of git processes working in FOLDER or below it, but those in IGNORE;
    None where /proc cannot tell (not Linux)."""
    proc = Path("/proc")
    if not (proc / "self" / "cwd").exists():
        return None
    try:
        target = folder.resolve()
    except OSError:
        return None
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if not (entry / "comm").read_text().startswith("git"):
                continue
            cwd = (entry / "cwd").resolve(strict=True)
        except OSError:  # gone, or another user's: not ours to wait for
            continue
        if int(entry.name) in ignore:
            continue
        if cwd == target or target in cwd.parents:
            found.append(int(entry.name))
    return found


Report = Callable[[str, str], None]


class CommitWorker:
    """One thread that makes the home's commits, in the order they were asked for.

    :meth:`submit` returns at once.  Before each commit the worker fsyncs the
    files (the loop thread wrote them without fsync, see
    :func:`~.files.deferred_sync`), so a tick is durable once its commit is made.
    If the worker falls behind (ticks faster than commits), a commit carries
    whatever is on disk when it runs and the next ones of the backlog are
    cheap (unchanged files are not hashed again): still one commit per tick, in order.
    Failures and notes go to REPORT(text, kind) (from the worker thread).
    """

    def __init__(self, repo: HomeRepo, report: Report | None = None) -> None:
        self.repo = repo
        self.report: Report = report or (lambda text, kind: log.warning("%s: %s", kind, text))
        self._queue: queue.Queue[tuple[list[Path], str, dict[str, bytes]] | None] = queue.Queue()
        self._cond = threading.Condition()
        self._pending = 0
        self._pending_subjects: list[str] = []  # oldest first
        self._since_pack = 0
        self._synced: dict[Path, tuple[int, int, int]] = {}  # (inode, size, mtime) at the last fsync
        self._thread: threading.Thread | None = None
        self._packer: threading.Thread | None = None
        self.commit_ms: list[float] = []  # each commit's time, fsyncs included (for benchmarks)
        self.pack_ms: list[float] = []

    def submit(self, files: Iterable[Path], message: str, blobs: Mapping[str, bytes] | None = None) -> None:
        """Commit FILES (and BLOBS, :meth:`HomeRepo.commit`) with MESSAGE after every commit
        submitted before (returns at once)."""
        with self._cond:
            self._pending += 1
            self._pending_subjects.append(message.partition("\n")[0])
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="amacs-git", daemon=True)
                self._thread.start()
        self._queue.put((list(files), message, dict(blobs or {})))

    @property
    def pending(self) -> int:
        """Commits asked for and not yet made."""
        return self._pending

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted commit is made; False if TIMEOUT passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    def recent(self, count: int = 20, wait: float = 2.0) -> list[tuple[str, str]]:
        """(sha, subject) of the last COUNT commits, newest first, after waiting up to WAIT
        seconds for the submitted ones; those still pending then have the sha ``pending``."""
        if wait > 0:
            self.flush(wait)
        with self._cond:
            pending = [("pending", subject) for subject in reversed(self._pending_subjects)]
        return (pending + self.repo.recent(count))[:count]

    def stop(self, timeout: float = 30.0) -> bool:
        """Make the pending commits, then end the thread; False if TIMEOUT passed first."""
        done = self.flush(timeout)
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join(max(0.0, timeout))
        return done

    def wait_packed(self, timeout: float | None = None) -> None:
        """Wait for a running repack (stop does not: an interrupted repack loses nothing)."""
        packer = self._packer
        if packer is not None:
            packer.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            files, message, blobs = item
            t0 = time.perf_counter()
            try:
                self._sync_changed(files)
                faults.point("commit.synced")
                _sha, note = self.repo.commit(files, message, blobs)
            except CommitError as err:
                self.report(str(err), "warning")
            except Exception as err:  # the worker must outlive any one commit
                log.exception("commit failed")
                self.report(f"git commit failed: {err!r}; the tick is saved on disk", "warning")
            else:
                if note:
                    self.report(note, "info")
            finally:
                self.commit_ms.append((time.perf_counter() - t0) * 1000)
                self._since_pack += 1
                with self._cond:
                    self._pending -= 1
                    self._pending_subjects.pop(0)
                    self._cond.notify_all()
            if self._since_pack >= PACK_EVERY and (self._packer is None or not self._packer.is_alive()):
                self._since_pack = 0
                self._packer = threading.Thread(target=self._pack, name="amacs-git-pack", daemon=True)
                self._packer.start()

    def _sync_changed(self, files: list[Path]) -> None:
        """fsync the files that changed since the last sync; their folder too if one was replaced."""
        changed, replaced = [], False
        for path in files:
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            old = self._synced.get(path)
            if old != key:
                changed.append(path)
                replaced = replaced or old is None or old[0] != st.st_ino
                self._synced[path] = key
        if changed:
            sync_paths(changed, folders=replaced)

    def _pack(self) -> None:
        t0 = time.perf_counter()
        try:
            self.repo.pack()
        except (GitFailed, OSError) as err:
            log.warning("git repack failed: %s", err)
        self.pack_ms.append((time.perf_counter() - t0) * 1000)
