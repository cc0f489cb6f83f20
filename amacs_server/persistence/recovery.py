"""Start-up checks, and recovery from the history the home already keeps.

A damaged file never stops the agent and is never silently replaced:

- ``consciousness.el`` that cannot be read is moved aside
  (``consciousness.el.corrupt-<time>``) and restored from the newest git
  commit of the home whose version reads.  The money spent is never reset by
  the damage: it is the largest of that version's figure, the figure still
  legible in the damaged file, and the sum of the model calls the
  transcripts record.
- ``memory.db`` that does not open or fails ``PRAGMA integrity_check`` is
  moved aside with its ``-wal`` and rebuilt (by the runtime): what can still
  be read from it, then the org files git keeps, which win.
- Bytes of an org file that are not UTF-8 read as U+FFFD (:func:`decode_utf8`).

Each recovery leaves a note the shell shows at hello.  What cannot be
recovered (a home that cannot be written, a full disk) is a
:class:`StartupError` whose message says which file, what is wrong and what to
do; the server prints it as its one line and Emacs shows it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..errors import AmacsError
from ..records import ModelResponse
from ..state.consciousness import Consciousness
from ..text.lisp import alist_loads
from .git_repo import GitFailed, HomeRepo

CONSCIOUSNESS = "consciousness.el"
# How far back git is searched for a version of consciousness.el that reads.
GIT_VERSIONS = 50
# Bytes the start-up probe writes: a disk with less than this free cannot take a tick.
PROBE_BYTES = 64 * 1024
_COST = re.compile(r"\(cost-so-far\s+\.\s+([-+0-9.eE]+)\)")


class StartupError(AmacsError, RuntimeError):
    """The server cannot start; the message (one line) says which file, what is wrong, what to do."""


def explain_os_error(err: OSError, home: Path, doing: str = "write", what: str | None = None) -> str:
    """ERR, met while trying to DOING WHAT (default: the file ERR names) in HOME, as one line
    that says what to do."""
    name = what or (err.filename if isinstance(err.filename, str) and err.filename else str(home))
    again = "then send again (or M-x amacs-restart)"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk holding the AMACS home {home} is full (could not {doing} {name}). Free some space there, {again}"
    if err.errno == errno.EROFS:
        return (f"the AMACS home {home} is on a read-only file system (could not {doing} {name}). "
                f"Point AMACS_HOME or amacs-home at a writable folder, or remount it read-write, {again}")
    if err.errno in (errno.EACCES, errno.EPERM):
        return (f"the AMACS home {home} is not writable by you (could not {doing} {name}: {err.strerror}). "
                f"Make it yours and writable (chmod -R u+w {home}), or point AMACS_HOME or amacs-home "
                f"at another folder, {again}")
    return f"could not {doing} {name} in the AMACS home {home}: {err.strerror or err}. Fix that, {again}"


# In a fork's folder while the fork is made (persistence.history): a fork cut short is never served.
FORK_UNFINISHED = ".fork-unfinished"


def check_home(home: Path) -> None:
    """Refuse to start, with what to do, when HOME cannot be written (read-only, full), or is a
    fork whose making was cut short (it would run with part of a mind).

    Writes PROBE_BYTES to a temporary file and removes it: cheaper than any tick,
    and it fails the way a tick's write would."""
    if (home / FORK_UNFINISHED).exists():
        raise StartupError(f"{home} is a fork whose making was cut short (its {FORK_UNFINISHED} says of what); "
                           f"remove it (rm -r {home}) and fork again, or give this Emacs another home")
    probe = home / f".write-test.{os.getpid()}.tmp"
    try:
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(bytes(PROBE_BYTES))
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    except OSError as err:
        raise StartupError(explain_os_error(err, home, what="a test file in it")) from err
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass


def stamp() -> str:
    """The time, for the names of files moved aside (UTC)."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def move_aside(path: Path, when: str) -> Path:
    """Rename PATH to ``PATH.corrupt-WHEN`` (a free name) and return the new path."""
    target = path.with_name(f"{path.name}.corrupt-{when}")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.corrupt-{when}-{n}")
        n += 1
    os.replace(path, target)
    return target


def decode_utf8(data: bytes) -> tuple[str, int | None]:
    """DATA as text, bytes that are not UTF-8 as U+FFFD; and the offset of the first such byte."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as err:
        return data.decode("utf-8", errors="replace"), err.start


def invalid_utf8_note(path: Path, offset: int) -> str:
    """The note the shell shows for an org file with bytes that are not UTF-8."""
    return (f"{path.name} has bytes that are not UTF-8 (the first at byte {offset}); they read as \ufffd. "
            "The file is left as it is.")


# -- consciousness.el -------------------------------------------------------------


def parse_consciousness(text: str) -> tuple[Consciousness, bool]:
    """TEXT as consciousness, and whether it holds the money spent; ValueError when it does not read.

    A file that reads but has no budget is kept (a person may write a few fields by hand);
    its money spent then comes from the other records (:func:`load_consciousness`)."""
    data = alist_loads(text)
    if not isinstance(data, dict):
        raise ValueError("not an alist")
    budget = data.get("budget")
    spent = budget.get("cost_so_far") if isinstance(budget, dict) else None
    has_spent = not isinstance(spent, bool) and isinstance(spent, int | float) and math.isfinite(spent)
    return Consciousness.from_elisp(text), has_spent


def _cost_in(text: str) -> float | None:
    """The largest cost-so-far figure still legible in TEXT, or None."""
    found = []
    for match in _COST.finditer(text):
        try:
            value = float(match.group(1))
        except ValueError:
            continue
        if math.isfinite(value) and value >= 0:
            found.append(value)
    return max(found) if found else None


def spent_in_transcripts(folder: Path) -> float | None:
    """The dollars of every model call the transcripts in FOLDER record, or None if they record none."""
    total, seen = 0.0, False
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        try:
            with path.open("rb") as fh:
                for line in fh:
                    if f'"{ModelResponse.kind}"'.encode() not in line:
                        continue
                    try:
                        event = json.loads(line)
                        cost = event["data"]["cost"]
                    except (ValueError, KeyError, TypeError):
                        continue
                    if event.get("event") == ModelResponse.kind and isinstance(cost, int | float) \
                            and math.isfinite(cost) and cost >= 0:
                        total += float(cost)
                        seen = True
        except OSError:
            continue
    return total if seen else None


@dataclass
class GoodVersion:
    """A version of consciousness.el from git that reads."""

    sha: str
    consciousness: Consciousness
    newest: bool  # it is the version of the newest commit that has the file


def last_good_version(repo: HomeRepo, count: int = GIT_VERSIONS) -> GoodVersion | None:
    """The newest committed consciousness.el (of the last COUNT versions) that reads, or None."""
    try:
        shas = repo.file_versions(CONSCIOUSNESS, count)
    except (GitFailed, OSError):
        return None
    for i, sha in enumerate(shas):
        try:
            c, has_spent = parse_consciousness(repo.show(sha, CONSCIOUSNESS))
            if has_spent:
                return GoodVersion(sha, c, i == 0)
        except (GitFailed, OSError, ValueError):
            continue
    return None


def _largest_known(figures: dict[str, float | None]) -> tuple[str, float] | None:
    """The largest of the money-spent FIGURES that are known, with where it is from (the
    first such record on a tie); None when no record knows it."""
    known = {k: v for k, v in figures.items() if v is not None}
    if not known:
        return None
    source = max(known, key=lambda k: known[k])
    return source, known[source]


def recover_consciousness(home: Path, repo: HomeRepo, data: bytes, problem: str) -> tuple[Consciousness, str]:
    """consciousness.el in HOME holds DATA, which does not read (PROBLEM): move it aside and
    restore it from git; return the consciousness and the note for the person.

    The money spent is the largest figure any record gives (never less than before the damage)."""
    path = home / CONSCIOUSNESS
    aside = move_aside(path, stamp())
    good = last_good_version(repo)
    c = good.consciousness if good is not None else Consciousness()
    figures = {"git": good.consciousness.budget.cost_so_far if good is not None else None,
               "the damaged file": _cost_in(data.decode("utf-8", errors="replace")),
               "the transcripts": spent_in_transcripts(home / "transcripts")}
    largest = _largest_known(figures)
    if largest is not None:
        c.budget.cost_so_far = largest[1]
    head = f"{CONSCIOUSNESS} could not be read ({problem}); it was moved to {aside.name}"
    if good is not None:
        head += f" and restored from git (commit {good.sha[:10]}, tick {c.current_tick})"
    else:
        head += "; git holds no version that reads, so the agent starts from a fresh state"
    if largest is not None:
        money = f"The money spent so far stays counted: ${c.budget.cost_so_far:.4f} (from {largest[0]})."
    else:
        money = ("No record of the money spent was found (no git version, no transcripts), so the budget "
                 "counts from $0.00: check what was spent with your API provider.")
    return c, f"{head}. {money}"


def _count_spent_elsewhere(home: Path, repo: HomeRepo, c: Consciousness) -> tuple[Consciousness, str | None]:
    """C read from a consciousness.el without the money spent: take it from git or the transcripts
    (the larger), so a file written by hand never resets the budget; the person is told."""
    good = last_good_version(repo)
    figures = {"git": good.consciousness.budget.cost_so_far if good is not None else None,
               "the transcripts": spent_in_transcripts(home / "transcripts")}
    largest = _largest_known(figures)
    if largest is None:
        return c, None  # a fresh home: nothing was spent
    source, spent = largest
    c.budget.cost_so_far = max(c.budget.cost_so_far, spent)
    return c, (f"{CONSCIOUSNESS} holds no record of the money spent; it stays counted: "
               f"${c.budget.cost_so_far:.4f} (from {source}).")


def load_consciousness(home: Path, repo: HomeRepo) -> tuple[Consciousness, str | None]:
    """consciousness.el from HOME, or restored (:func:`recover_consciousness`) with a note."""
    path = home / CONSCIOUSNESS
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Consciousness(), None
    except OSError as err:
        raise StartupError(explain_os_error(err, home, "read")) from err
    try:
        c, has_spent = parse_consciousness(data.decode("utf-8"))
    except ValueError as err:  # UnicodeDecodeError too
        problem = " ".join(str(err).split())[:160] or type(err).__name__
    else:
        return (c, None) if has_spent else _count_spent_elsewhere(home, repo, c)
    try:
        return recover_consciousness(home, repo, data, problem)
    except OSError as err:
        raise StartupError(explain_os_error(err, home, "move aside")) from err
