"""Where runs run: threads on this machine, or Ray tasks; the experiment loop uses either.

Both keep at most the experiment's bound of runs going (the loop submits no
more), and both turn a run that raised into a ``failed`` outcome, so the loop
sees only outcomes.

With Ray each run is ``ray.remote(run_one)``: the task writes the run's folder
itself, so RUNS_DIR must be on a filesystem every worker shares (NFS, a
cluster's shared disk); on a local Ray it is simply this machine's.  Each
worker needs Emacs with the packages epc and magit-section, and the server
package (``pip install amacs-server[research,cluster]``).  The driver's
``ANTHROPIC_*`` and ``OPENAI_*`` variables go to the workers in Ray's
runtime environment.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Protocol

from .forkserver import launcher
from .outcome import verdict
from .runs import (
    INTERRUPTED,
    Outcome,
    Prepared,
    discard,
    kill_strays,
    prepare,
    read_manifest,
    run_one,
    whole,
    write_manifest,
)
from .spec import Run

log = logging.getLogger("amacs.research")


class Executor(Protocol):
    """Runs handed over one by one; finished ones reported as they end."""

    def submit(self, run: Run) -> None:
        """Start RUN."""

    def finished(self, timeout: float) -> list[Outcome]:
        """The outcomes of runs that ended, waiting at most TIMEOUT seconds for one."""

    def close(self) -> None:
        """Stop: runs still going end ``failed``, interrupted (resumed later)."""


def _failed(run: Run, err: BaseException) -> Outcome:
    now = time.time()
    return Outcome(run_id=run.run_id, status="failed", cost=0.0, seconds=0.0, turns_done=0,
                   started_at=now, ended_at=now, error=f"{type(err).__name__}: {err}")


def mark_interrupted(run: Run, runs_dir: Path) -> None:
    """Say in RUN's manifest, if it still says running (its task was cancelled), that C-c stopped it."""
    folder = runs_dir / run.run_id
    data = read_manifest(folder)
    if data and data.get("status") == "running":
        write_manifest(folder, {**data, "status": "failed", "ended_at": time.time(), "error": INTERRUPTED})


def _sweep() -> None:
    """Remove the fork-server folders of experiments that were killed (their process is gone)."""
    for folder in Path(tempfile.gettempdir()).glob("amacs-fork-*-*"):
        try:
            pid = int(folder.name.split("-")[2])
            if folder.stat().st_uid != os.getuid():
                continue
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (ValueError, IndexError, OSError):
            continue


class ForkServer:
    """The fork server (:mod:`.forkserver`) of one experiment: started once, killed at the end."""

    def __init__(self, backends: Sequence[str]) -> None:
        _sweep()
        # 0700; a socket path must be short.  Named by this process: a killed experiment's is swept.
        self.folder = Path(tempfile.mkdtemp(prefix=f"amacs-fork-{os.getpid()}-"))
        self.socket = self.folder / "fork.sock"
        with (self.folder / "forkserver.log").open("wb") as log:
            # A process group of its own: a terminal's C-c reaches the experiment, which lets the runs
            # whose turns were all replied to end (their servers are its forks) before it kills this.
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "amacs_server.research.forkserver", str(self.socket), *backends],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, process_group=0)
        assert self.proc.stdout is not None
        try:
            line = self.proc.stdout.readline()
        except BaseException:  # C-c while it starts: the fork server goes too
            self.close()
            raise
        if line.strip() != b"ready":
            self.close()
            raise OSError(f"the fork server did not start (see {self.folder / 'forkserver.log'})")

    def command(self) -> list[str]:
        """A run's server command: the launcher, standard library only (``-S``)."""
        return [sys.executable, "-S", str(launcher()), str(self.socket)]

    def close(self) -> None:
        """Kill the fork server; the servers it forked stop with their runs."""
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


# Seconds a C-c waits for each run going to look at its replies (it does within ~10 ms of the stop, or
# within 0.2 s once its session is over), before it says which it lets end.
DECIDING = 2.0


class LocalExecutor:
    """Each run in a thread of this process (the session itself is Emacs and the server).

    A run's server is forked from a :class:`ForkServer` that has imported the server and the
    SDKs of BACKENDS once; each run is still a new Emacs and a new server process, in a new
    home.  Without a fork server (FORK false, or it could not start) each run's server is
    ``python -m amacs_server``.  The runs to come next are prepared ahead (:meth:`prepare`):
    their Emacs and server start while the runs before them go, and wait to be started.
    A run whose turns were all replied to counts as going no more (:meth:`busy`) while its
    server makes its last commit and exits; its outcome comes once it has (:func:`run_one`)."""

    def __init__(self, runs_dir: Path, parallel: int, backends: Sequence[str] = ("anthropic",),
                 fork: bool = True, trace: bool = False, ahead: int | None = None) -> None:
        self.runs_dir = runs_dir
        # Runs kept prepared: as many as go at once, and at least 2: at parallel 1 a start-up
        # (~0.3-0.6 s) takes longer than a run at zero latency, so one was rarely ready in
        # time; at parallel 2 on 2 cores a third start-up in flight cost more than it saved
        # (16 runs, load 3.4-4.4, alternating, n=4 each: 175 vs 155 runs/min, medians).
        self.ahead = max(parallel, 2) if ahead is None else ahead
        self.trace = trace  # each run keeps the times of its steps (runs.read_trace)
        # Twice PARALLEL: a run whose server is stopping and the run started in its place.
        self.pool = ThreadPoolExecutor(max_workers=2 * parallel, thread_name_prefix="amacs-run")
        self.going: dict[Future[Outcome], Run] = {}
        self.sessions: set[str] = set()  # runs whose session is not over
        self.changed = threading.Event()  # set when a session is over or a run has ended
        self.stop = threading.Event()
        self.hurry = threading.Event()  # a second C-c: runs finishing their teardown are stopped too
        self.decided: dict[str, bool] = {}  # after the stop: whether each run that looked is let finish
        self.prepared: dict[str, Prepared] = {}
        self.handed: dict[Future[Outcome], Prepared] = {}  # each submitted run's prepared Emacs
        self.forks: ForkServer | None = None
        if fork:
            try:
                self.forks = ForkServer([b for b in backends if b in ("anthropic", "openai")])
            except OSError as err:
                log.warning("runs start their servers from nothing: %s", err)

    def _command(self) -> list[str] | None:
        return self.forks.command() if self.forks is not None else None

    def prepare(self, runs: Sequence[Run]) -> None:
        """Start the Emacs (and so the server) of the first of RUNS, the next to be submitted (as
        many as it keeps ready), unless started already; each waits, ready, until it is submitted."""
        for run in runs[:self.ahead]:
            if run.run_id not in self.prepared and not self.stop.is_set():
                self.prepared[run.run_id] = prepare(run, self.runs_dir, self._command(), gated=True,
                                                    trace=self.trace)

    def submit(self, run: Run) -> None:
        """Start RUN in a thread (its prepared Emacs, if it has one).  A C-c comes after RUN is in
        GOING: one started and not known there ran on untracked, its end never said, or one taken from
        the prepared and not yet started was neither discarded nor run."""

        def ended() -> None:
            self.sessions.discard(run.run_id)
            self.changed.set()

        def decided(let: bool) -> None:
            self.decided[run.run_id] = let
            self.changed.set()

        with whole():
            ready = self.prepared.pop(run.run_id, None)
            self.sessions.add(run.run_id)
            future = self.pool.submit(run_one, run, self.runs_dir, self.stop, self._command(), ready, self.trace,
                                      ended, self.hurry, decided)
            self.going[future] = run
            if ready is not None:
                self.handed[future] = ready
            future.add_done_callback(lambda _f: ended())

    def busy(self) -> int:
        """Runs whose session is not over (those whose server is stopping are not counted)."""
        return len(self.sessions)

    def finishing(self) -> list[str]:
        """Stop the runs going (a C-c) and wait, up to :data:`DECIDING` seconds, until each has looked at
        its replies (:func:`run_one`); the ids of those let end, every turn replied to, each recorded
        done as it ends.  Counted as they decide, not as the transcripts stood at the C-c: a reply
        written between the two (the run looks within 10 ms) lets that run end too.  A C-c meanwhile
        stops them all (none is let end)."""
        going = [(f, run) for f, run in self.going.items() if not f.done()]
        self.stop.set()
        self.pool.shutdown(wait=False, cancel_futures=True)  # a run not started never decides: still to do
        deadline = time.monotonic() + DECIDING
        try:
            while (time.monotonic() < deadline and any(
                    not f.done() and run.run_id in self.sessions and run.run_id not in self.decided
                    for f, run in going)):
                self.changed.wait(0.02)
                self.changed.clear()
        except KeyboardInterrupt:
            self.hurry.set()
            return []

        def lets(future: Future[Outcome], run: Run) -> bool:
            if run.run_id in self.decided:
                return self.decided[run.run_id]
            if future.cancelled():
                return False
            if future.done():  # it ended before it looked: as it would have, or not
                return future.exception() is None and future.result().status == "done"
            if run.run_id not in self.sessions:  # its session is over: only its teardown is left
                return True
            return verdict(self.runs_dir / run.run_id / "home", len(run.turns), run.base_url).failed_turn is None

        return [run.run_id for f, run in going if lets(f, run)]

    def finished(self, timeout: float) -> list[Outcome]:
        """Outcomes of the threads that ended, waiting at most TIMEOUT seconds for one to end, or for
        a session to be over (then maybe none)."""
        self.changed.clear()  # before the look: a change after it wakes the wait below at once
        done = [f for f in self.going if f.done()]
        if not done:
            self.changed.wait(timeout)
            done = [f for f in self.going if f.done()]
        out = []
        for future in done:
            run = self.going.pop(future)
            self.handed.pop(future, None)
            err = future.exception()
            out.append(_failed(run, err) if err else future.result())
        return out

    def close(self) -> None:
        """Stop the runs still going (each ends ``failed``, interrupted) and wait for them to say so;
        a run finishing its teardown ends as it would have, unless a C-c comes meanwhile."""
        self.stop.set()
        self.pool.shutdown(wait=False, cancel_futures=True)
        # A run submitted while every worker was busy, cancelled by that shutdown, never started: it is
        # still to do, and its prepared Emacs is discarded below.  Its future is cancelled but never
        # "notified" (no worker took it up), and concurrent.futures.wait never counts such a future
        # done: waited for, it hung the command (seen as test_c_c_twice's rare hang).
        for future in [f for f in self.going if f.cancelled()]:
            run = self.going.pop(future)
            ready = self.handed.pop(future, None)
            if ready is not None:
                self.prepared[run.run_id] = ready
        # Waited for by their futures, not by joining the threads: a C-c that interrupts a thread's
        # join (Python 3.11) marks that thread as ended while it still runs, and nothing waits for it.
        try:
            wait(self.going)
        except KeyboardInterrupt:  # C-c again: those finishing are stopped too
            self.hurry.set()
            wait(self.going)
        self.pool.shutdown(wait=True)
        for ready in self.prepared.values():  # prepared, never started: still to do
            discard(ready)
        self.prepared.clear()
        kill_strays(self.runs_dir)  # one whose start the C-c cut short is in no list
        if self.forks is not None:
            self.forks.close()


class RayExecutor:
    """Each run a Ray task, on a local Ray (ADDRESS None) or the cluster at ADDRESS."""

    def __init__(self, runs_dir: Path, parallel: int, address: str | None) -> None:
        import ray

        self.ray = ray
        env = {k: v for k, v in os.environ.items() if k.startswith(("ANTHROPIC_", "OPENAI_"))}
        if address is None:
            ray.init(address="local", include_dashboard=False, num_cpus=parallel,
                     _node_ip_address="127.0.0.1", runtime_env={"env_vars": env},
                     log_to_driver=False, configure_logging=False)
        else:
            ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=False,
                     configure_logging=False)
        self.task = ray.remote(num_cpus=1, max_retries=0)(run_one)
        self.runs_dir = runs_dir
        self.going: dict[Any, Run] = {}

    def submit(self, run: Run) -> None:
        """Start RUN as a Ray task."""
        self.going[self.task.remote(run, self.runs_dir)] = run

    def finished(self, timeout: float) -> list[Outcome]:
        """Outcomes of the tasks that ended."""
        if not self.going:
            return []
        ready, _ = self.ray.wait(list(self.going), num_returns=1, timeout=timeout)
        out = []
        for ref in ready:
            run = self.going.pop(ref)
            try:
                out.append(self.ray.get(ref))
            except Exception as err:  # noqa: BLE001 - a task that died is a failed run
                out.append(_failed(run, err))
        return out

    def close(self) -> None:
        """Cancel what is left, mark it interrupted, and leave Ray."""
        for ref in self.going:
            self.ray.cancel(ref, force=True)
        self.ray.shutdown()
        for run in self.going.values():
            mark_interrupted(run, self.runs_dir)
