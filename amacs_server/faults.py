"""Fault injection for tests: the server killed with SIGKILL at a named point.

``AMACS_FAULT_POINT=NAME`` (or ``NAME@N``) makes :func:`point` kill this process
with SIGKILL the first (the Nth) time the code reaches ``point(NAME)``: a crash,
a kill -9 or the OOM killer at exactly that place of a tick.  The fault suite
(``tests/e2e/test_faults.py``) names every point; :data:`POINTS` lists them.

Unset (always, outside that suite) a point is one comparison: the variable is
read once, at import.  A line goes to stderr (``logs/server.log``) before the
kill, so a test that fails says where the server died.

Two points stand for a git killed while it holds a lock (the whole process
group dies, as when Emacs kills the server, or the machine stops): see
:func:`kill_holding_lock`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

# Every point, in the order a tick reaches them (``@N``: the Nth time, e.g. the second tick).
POINTS = (
    "submit.received",          # the EPC thread has the input; nothing is written yet
    "turn.start",               # the turn starts: before the write-ahead
    "write-ahead.done",         # the input is in agent-chat.org (synced); Emacs not yet told
    "write-ahead.confirmed",    # ... and Emacs was told (input-taken, saved) at the end of the step
    "observe.done",             # the context is assembled
    "infer.request",            # the model call is about to be made
    "infer.first-text",         # the first text of the reply was shown
    "infer.mid-stream",         # in the middle of the streamed reply
    "infer.response",           # the whole response is in, not yet parsed
    "say.written",              # the reply is in agent-chat.org, not yet shown as complete
    "say.shown",                # the reply was shown complete
    "eval.running",             # Emacs is evaluating the agent's eval (a kill 0.3 s after it was sent)
    "tool.call",                # the eval's MCP tool call is checked and about to be sent to its server
    "tool.answered",            # the tool server answered; the call not yet in the transcript or Emacs told
    "eval.result",              # the eval's result is back
    "record.done",              # monologue and scratchpad written
    "ltm.commit",               # memory.db's transaction is written, its COMMIT not yet run
    "persist.done",             # chat, consciousness.el and memory.db written
    "commit.queued",            # the tick's commit is queued for the worker
    "commit.synced",            # the worker synced the tick's files
    "commit.index-lock",        # git update-index holds .git/index.lock (git killed too)
    "commit.indexed",           # the index is written
    "commit.tree",              # the tree object is written
    "commit.object",            # the commit object is written, HEAD not yet moved
    "commit.ref-lock",          # git update-ref holds the branch's .lock (git killed too)
    "commit.done",              # HEAD moved
    "turn.done",                # the turn is over; the prompt not yet given back
)
# Points of a rewind and a fork (``amacs-server rewind``/``fork``, M-x amacs-rewind/amacs-fork), in
# the order they are reached; the commit's points (``commit.*``) and memory.db's (``ltm.commit``) are
# reached in them too.  tests/e2e/test_faults_history.py kills each.
REWIND_POINTS = (
    "rewind.start",             # a rewind cut short earlier is finished; nothing of this one done
    "rewind.kept",              # the home as it is, committed aside (no ref names it yet)
    "rewind.journaled",         # the journal is synced; nothing the home shows has changed
    "rewind.ref",               # the abandoned future's ref is made
    "rewind.head",              # HEAD is the tick's commit; the files are not yet
    "rewind.read-tree-lock",    # git read-tree holds .git/index.lock, checking the tick out (git killed too)
    "rewind.checked-out",       # the tracked files are the tick's
    "rewind.cut",               # the transcripts', logs' and shell history's later lines are cut (a file begun later is empty)
    "rewind.removed",           # the tool results kept after the tick and the logs (and shell draft) begun after it removed;
                                # rotations undone
    "rewind.spend",             # rewound-spend and budget-limit written
    "rewind.memory",            # memory.db is the tick's (its later versions in abandoned_items)
    "rewind.recorded",          # the rewind is said in agent-chat.org and a transcript
    "rewind.committed",         # the rewind's commit is made; the journal not yet removed
)
FORK_POINTS = (
    "fork.made",                # the folder the fork is made in exists, marked unfinished
    "fork.fetched",             # it has the history up to the tick
    "fork.checked-out",         # and the tick's files (memory.db is made meanwhile, in a thread)
    "fork.settings",            # the budget limit and settings copied
    "fork.copied",              # memory.db's item versions up to the tick copied
    "fork.memory",              # memory.db cut to the tick and vacuumed
    "fork.recorded",            # the fork is said in its agent-chat.org and a transcript
    "fork.committed",           # the fork's commit is made; still unfinished, not yet renamed to DEST
    "fork.renamed",             # DEST is the whole fork
)
# Points of the making of a home's memory snapshot (its server's packer thread; history.keep_memory_snapshot):
# tests/test_memory_snapshot.py kills each.
SNAPSHOT_POINTS = (
    "snapshot.written",         # the new snapshot is written under a name of its own, not yet synced nor renamed
    "snapshot.kept",            # it is renamed into place; the older one not yet removed
    "ready.written",            # the snapshot's ready copy is written under a name of its own, not yet synced nor renamed
)
HISTORY_POINTS = REWIND_POINTS + FORK_POINTS + SNAPSHOT_POINTS
# Points of ``amacs-server judge`` and ``experiment``: tests/e2e/test_judge.py and test_experiment.py kill them.
RESEARCH_POINTS = (
    "run.ended",                # an experiment's run ended (its Emacs exited); its manifest still says running
    "judge.asked",              # the judge's request is in its transcript; the model not yet asked
    "judge.scored",             # the judge model answered a run's score; nothing of it written yet
    "judge.written",            # score.json.tmp is written, not yet renamed to score.json
)
# Points of a turn whose eval runs a task or gets a tool result over its bound: tests/e2e/test_faults.py
# kills them in such a turn.
TURN_POINTS = (
    "talk.delivered",           # an event is in an agent's queue and its transcript; the tick state not yet saved
    "tool.kept",                # a tool's result is cut to its bound (the whole in its file); the eval not yet given it
)
# Not kills: the armed point raises a RuntimeError, a bug as Emacs and the log see one (:func:`bug`).
BUGS = ("ping.bug",)

_SPEC = os.environ.get("AMACS_FAULT_POINT") or None
_NAME, _, _NTH = (_SPEC or "").partition("@")
ARMED: str | None = _NAME or None
_TIMES = int(_NTH) if _NTH.isdigit() else 1
_hits = 0
_lock = threading.Lock()


def point(name: str) -> None:
    """Kill this process here if ``AMACS_FAULT_POINT`` names NAME (and this is its Nth time)."""
    if name != ARMED:
        return
    if _due():
        kill(name)


def bug(name: str) -> None:
    """Raise a RuntimeError here if NAME is the armed point: an unexpected exception (a bug),
    for the tests of what the person and ``logs/server.log`` see of one."""
    if name == ARMED and _due():
        raise RuntimeError(f"AMACS_FAULT_POINT {name}: an injected bug")


def point_later(name: str, seconds: float) -> None:
    """Kill this process SECONDS from now, from a thread, if NAME is the armed point (its Nth time):
    a kill while the loop waits (on Emacs's eval, say)."""
    if name != ARMED or not _due():
        return
    timer = threading.Timer(seconds, kill, (name,))
    timer.daemon = True
    timer.start()


def point_soon(name: str) -> None:
    """Kill this process once the loop's current step is over (the events it queued for Emacs
    are sent then), if NAME is the armed point (its Nth time).  On the loop thread."""
    if name != ARMED:
        return
    import asyncio  # noqa: PLC0415 - only when armed

    asyncio.get_running_loop().call_soon(point, name)


def armed(name: str) -> bool:
    """True when NAME is the point to fire now (counted as reached): the caller sets up the
    fault itself (:func:`kill_holding_lock`)."""
    return name == ARMED and _due()


def _due() -> bool:
    global _hits
    with _lock:
        _hits += 1
        return _hits == _TIMES


def kill(name: str) -> None:
    """Say where, then SIGKILL this process (no cleanup, no flush: a crash)."""
    try:
        os.write(2, f"AMACS_FAULT_POINT {name}: SIGKILL (pid {os.getpid()})\n".encode())
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def kill_holding_lock(name: str, command: Sequence[str], cwd: Path, lock: Path,
                      stdin: bytes = b"", env: dict[str, str] | None = None) -> None:
    """Start git COMMAND in CWD, feed it STDIN (left open), wait until it holds LOCK, then kill
    it and this process with SIGKILL: a crash mid-commit that leaves a stale LOCK.

    A process killed alone leaves its git child to finish (and remove its lock);
    Emacs kills the server's process group, and a machine that stops kills everything."""
    child = subprocess.Popen(list(command), cwd=cwd, env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=sys.stderr)
    assert child.stdin is not None
    if stdin:
        child.stdin.write(stdin)
        child.stdin.flush()
    deadline = time.monotonic() + 10
    while not lock.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    child.kill()
    child.wait()
    kill(f"{name} ({' '.join(command[:2])} held {lock.name}: {lock.exists()})")
