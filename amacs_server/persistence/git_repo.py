"""The AMACS home as a git repository: one commit per tick (RFC v4 §8.2)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import git

GITIGNORE = "memory.db*\ntranscripts/\nlogs/\nserver.json\nserver.pid\n.*.tmp\n"
STALE_LOCK_SECONDS = 10.0


class CommitError(RuntimeError):
    """The commit failed; the tick's files are on disk and the next commit will carry them."""


def commit_message(tick: int, thread: str | None, mood: str, monologue: str) -> str:
    """``[TICK 42][thread-id][mood] monologue`` on one line."""
    line = " ".join(monologue.split())
    return f"[TICK {tick}][{thread or 'no-thread'}][{mood}] {line}"


class HomeRepo:
    """Git operations on the AMACS home."""

    def __init__(self, home: Path) -> None:
        self.home = home
        if (home / ".git").exists():
            self.repo = git.Repo(home)
        else:
            self.repo = git.Repo.init(home)
        with self.repo.config_writer() as cfg:  # commits work on a machine with no git identity
            if not cfg.has_option("user", "name"):
                cfg.set_value("user", "name", "AMACS")
                cfg.set_value("user", "email", "amacs@localhost")
        ignore = home / ".gitignore"
        if not ignore.exists():
            ignore.write_text(GITIGNORE, encoding="utf-8")
        self._tracked: set[str] = set(self.repo.git.ls_files().splitlines())

    def clear_stale_lock(self) -> str | None:
        """Remove a leftover ``index.lock``; return a note for the shell, or None.

        The server is the only writer of this repository, so a lock older than
        a few seconds was left by a process that died mid-commit.
        """
        lock = Path(self.repo.git_dir) / "index.lock"
        if not lock.exists():
            return None
        age = time.time() - lock.stat().st_mtime
        if age < STALE_LOCK_SECONDS:
            raise CommitError(
                f"git is busy: {lock} is {age:.0f} s old; the tick is saved on disk and "
                "the next tick's commit will include it"
            )
        lock.unlink(missing_ok=True)
        return f"removed a stale {lock} ({age:.0f} s old) left by a crashed git"

    def commit(self, files: Iterable[Path], message: str) -> tuple[str, str | None]:
        """Commit FILES as they are on disk; return the commit hexsha and a note (or None).

        One ``git commit -- paths`` process per tick (about 5 ms; GitPython's
        index API took 26 ms); ``git add`` runs only for files not yet tracked.
        """
        note = self.clear_stale_lock()
        paths = [".gitignore", *(str(p.relative_to(self.home)) for p in files if p.exists())]
        try:
            new = [p for p in paths if p not in self._tracked]
            if new:
                self.repo.git.add("--", *new)
                self._tracked.update(new)
            self.repo.git.commit("-q", "--no-verify", "--allow-empty", "-m", message, "--", *paths)
            sha = self.repo.head.commit.hexsha
        except (git.GitError, OSError, ValueError) as err:
            raise CommitError(f"git commit failed: {err}; the tick is saved on disk") from err
        return sha, note

    def log(self, count: int = 20) -> list[str]:
        """The subjects of the last COUNT commits, newest first."""
        return [subject for _sha, subject in self.recent(count)]

    def recent(self, count: int = 20) -> list[tuple[str, str]]:
        """(sha, subject) of the last COUNT commits, newest first."""
        if not self.repo.head.is_valid():
            return []
        return [(c.hexsha, str(c.summary)) for c in self.repo.iter_commits(max_count=count)]
