"""The history as the agent's queryable memory: which ticks a text appears in.

Three sources, each line found with its tick: the subjects of the tick commits
(``[TICK 42][thread][mood] monologue``), the monologue's lines (every month),
and the diffs of the tick commits (the lines a tick added or removed, in any
tracked file but the tick state, which is the server's).  A match is a
case-insensitive substring.  Without a tick, the diffs of the last
:data:`DIFF_TICKS` commits are searched with git's pickaxe (``log -S``: the
commits that changed how often the text occurs); with one, that tick's diff
and lines only.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import AmacsError
from .git_repo import git_env
from .monologue import MonologueLog

SOURCES = ("subject", "monologue", "diff")
_TICK = re.compile(r"^\[TICK (\d+)\]")
LINE_CHARS = 300  # a line found is cut to this many characters around the match
# Without a tick, the diffs of the last this many commits are searched: git's pickaxe inflates
# every changed blob (5,000 ticks: ~80 s, 500: ~10 s on 2 cores at load 13; the call waits 10 s).
DIFF_TICKS = 200
# Never a diff of these: the tick state is the server's (its conversation would match anything said).
NOT_SEARCHED = ("tick-state.json",)


class HistorySearchError(AmacsError, RuntimeError):
    """The history cannot be searched (no git, git failed); the message says why."""


@dataclass(frozen=True)
class Found:
    """A line with the text: its TICK, where it is (a source of :data:`SOURCES`), its FILE for a
    diff ("+" or "-" starts the LINE: added or removed)."""

    tick: int
    where: str
    line: str
    file: str | None = None

    def to_dict(self) -> dict[str, object]:
        """As the agent gets it."""
        out: dict[str, object] = {"tick": self.tick, "in": self.where, "line": self.line}
        if self.file is not None:
            out["file"] = self.file
        return out


def _cut(line: str, at: int, size: int) -> str:
    """LINE, or LINE_CHARS of it around the match at AT (SIZE long)."""
    if len(line) <= LINE_CHARS:
        return line
    start = max(0, min(at - (LINE_CHARS - size) // 2, len(line) - LINE_CHARS))
    return ("…" if start else "") + line[start:start + LINE_CHARS] + ("…" if start + LINE_CHARS < len(line) else "")


def _match(line: str, needle: str) -> str | None:
    at = line.lower().find(needle)
    return None if at < 0 else _cut(line, at, len(needle))


def _git(home: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=home, capture_output=True, env=git_env(), check=False)
    if done.returncode != 0:
        raise HistorySearchError(f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode("utf-8", errors="replace")


def search(home: Path, query: str, *, tick: int | None = None, limit: int = 20,
           sources: tuple[str, ...] = SOURCES) -> list[Found]:
    """The lines of HOME's history holding QUERY, newest tick first, at most LIMIT; only
    tick TICK's if given, only from SOURCES."""
    needle = query.lower()
    if not needle.strip():
        raise HistorySearchError("say what to search for")
    if not (home / ".git").is_dir():
        return []
    found: list[Found] = []
    if "subject" in sources:
        for line in _git(home, "log", "--format=%s").splitlines():
            head = _TICK.match(line)
            if head and (tick is None or int(head[1]) == tick) and (cut := _match(line, needle)):
                found.append(Found(int(head[1]), "subject", cut))
    if "monologue" in sources:
        for number, text in MonologueLog(home / "monologue.org").read():
            if (tick is None or number == tick) and (cut := _match(text, needle)):
                found.append(Found(number, "monologue", cut))
    if "diff" in sources:
        found += _diffs(home, needle, query, tick, limit)
    seen: set[tuple[int, str]] = set()
    out = []
    for hit in sorted(found, key=lambda h: -h.tick):  # stable: a tick's subject, then monologue, then diff
        key = (hit.tick, " ".join(hit.line.split()))
        if hit.where == "monologue" and any(k[0] == hit.tick and key[1] in k[1] for k in seen):
            continue  # the subject has that monologue already
        seen.add(key)
        out.append(hit)
    return out[:limit]


def _diffs(home: Path, needle: str, query: str, tick: int | None, limit: int) -> list[Found]:
    """The added and removed lines holding NEEDLE in the tick commits' diffs (TICK's only if given)."""
    excluded = [f":(exclude){name}" for name in NOT_SEARCHED]
    shape = ["--format=%x01%s", "-p", "--no-color", "--no-ext-diff", "--unified=0", "--", ".", *excluded]
    if tick is None:
        older = _git(home, "rev-list", "--max-count=1", f"--skip={DIFF_TICKS}", "HEAD").strip()
        span = f"{older}..HEAD" if older else "HEAD"
        out = _git(home, "log", "-i", f"-S{query}", f"--max-count={limit}", span, *shape)
    else:
        sha = _tick_commit(home, tick)
        if sha is None:
            return []
        out = _git(home, "show", sha, *shape)
    found: list[Found] = []
    number: int | None = None
    file: str | None = None
    in_hunk = False
    for line in out.splitlines():
        if line.startswith("\x01"):
            head = _TICK.match(line[1:])
            number, in_hunk = (int(head[1]) if head else None), False
        elif line.startswith("diff --git "):
            in_hunk, file = False, None
        elif not in_hunk:
            if line.startswith("--- a/"):
                file = line[6:]
            elif line.startswith("+++ b/"):
                file = line[6:]
            elif line.startswith("@@"):
                in_hunk = True
        elif line.startswith("@@"):
            continue
        elif number is not None and line[:1] in ("+", "-") and (cut := _match(line[1:], needle)):
            found.append(Found(number, "diff", line[0] + cut, file))
    return found


def _tick_commit(home: Path, tick: int) -> str | None:
    """The newest commit of HEAD's line made by tick TICK (not a rewind's or fork's, which say so)."""
    prefix = f"[TICK {tick}]["
    for line in _git(home, "log", "--format=%H %s").splitlines():
        subject = line[41:]
        if subject.startswith(prefix) and not subject[len(prefix):].startswith(("rewind]", "fork]", "abandoned]")):
            return line[:40]
    return None
