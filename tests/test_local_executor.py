"""The local executor's stop (research.cluster.LocalExecutor.close) with a run queued behind busy workers."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from amacs_server.research import cluster
from amacs_server.research.runs import Outcome, Prepared


@dataclass(frozen=True)
class _Run:
    run_id: str


def test_a_c_c_while_a_run_waits_for_a_worker_stops_and_leaves_that_run_to_do(tmp_path, monkeypatch):
    """C-c while a run submitted waits for a worker (every worker busy: runs going, runs making their
    last commit): the stop ends, the runs going end as interrupted, and the waiting run, which never
    started, is still to do: no outcome, its prepared Emacs discarded.  Its future, cancelled by the
    pool's shutdown and never taken up by a worker, is one concurrent.futures.wait never counts done:
    waited for, it hung the command (2 of 11 runs of test_c_c_twice_stops_a_run_in_its_last_commit_too
    with the lead's first hold; the second C-c of the race harness here)."""
    started: list[str] = []

    def run_one(run, runs_dir, stop, *_rest) -> Outcome:
        started.append(run.run_id)
        stop.wait(30)
        return Outcome(run_id=run.run_id, status="failed", cost=0.0, seconds=0.0, turns_done=0, started_at=0.0,
                       ended_at=0.0, error="interrupted")

    discarded: list[str] = []
    monkeypatch.setattr(cluster, "run_one", run_one)
    monkeypatch.setattr(cluster, "discard", lambda ready: discarded.append(ready.run.run_id))
    monkeypatch.setattr(cluster, "kill_strays", lambda runs_dir: None)
    executor = cluster.LocalExecutor(tmp_path, parallel=1, fork=False)  # two workers
    runs = [_Run(f"p.v.m.r{n}") for n in range(3)]
    executor.prepared[runs[2].run_id] = Prepared(runs[2], Path(tmp_path / runs[2].run_id))  # type: ignore[arg-type]
    for run in runs:
        executor.submit(run)  # type: ignore[arg-type]
    deadline = time.monotonic() + 10
    while len(started) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert started == ["p.v.m.r0", "p.v.m.r1"]
    stopping = threading.Thread(target=executor.close, daemon=True)
    stopping.start()
    stopping.join(10)
    assert not stopping.is_alive(), "the stop waits for a run that never started"
    assert discarded == ["p.v.m.r2"]
    assert sorted(o.run_id for o in executor.finished(0)) == ["p.v.m.r0", "p.v.m.r1"]


def test_a_c_c_while_a_run_is_being_started_leaves_it_known_going(tmp_path, monkeypatch):
    """A C-c the moment the pool has taken a run, before the executor had it among the runs going
    (rj8, cc8: LocalExecutor.submit's window): that run went on untracked, its end never said, and the
    stop did not wait for it.  Now the C-c comes once the run is known going: the stop ends it
    (interrupted) and it has its outcome, as every run started does."""
    import signal

    def run_one(run, runs_dir, stop, *_rest) -> Outcome:
        stop.wait(30)
        return Outcome(run_id=run.run_id, status="failed", cost=0.0, seconds=0.0, turns_done=0, started_at=0.0,
                       ended_at=0.0, error="interrupted")

    monkeypatch.setattr(cluster, "run_one", run_one)
    monkeypatch.setattr(cluster, "kill_strays", lambda runs_dir: None)
    executor = cluster.LocalExecutor(tmp_path, parallel=1, fork=False)
    taken = executor.pool.submit

    def submit_then_c_c(*args, **kwargs):
        future = taken(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # the person's C-c, between the pool taking the run and the rest
        return future

    monkeypatch.setattr(executor.pool, "submit", submit_then_c_c)
    run = _Run("p.v.m.r0")
    interrupted = False
    try:
        executor.submit(run)  # type: ignore[arg-type]
    except KeyboardInterrupt:
        interrupted = True
    assert interrupted, "the C-c was lost"
    assert list(executor.going.values()) == [run], "a run started and not known going"
    executor.close()
    assert [o.run_id for o in executor.finished(0)] == ["p.v.m.r0"]


def test_a_c_c_held_by_two_blocks_comes_after_the_outer():
    """The experiment's loop holds a C-c over a run's submit and its count; the executor's submit holds
    it too: the inner block must not raise it in the middle of the outer (the run then started, not
    counted going)."""
    import signal

    from amacs_server.research.runs import whole

    done: list[str] = []
    try:
        with whole():
            with whole():
                signal.raise_signal(signal.SIGINT)
                done.append("inner")
            done.append("outer")
    except KeyboardInterrupt:
        done.append("raised")
    assert done == ["inner", "outer", "raised"]


@dataclass(frozen=True)
class _Turns:
    run_id: str
    turns: tuple[str, ...] = ("hello",)
    base_url: str | None = None


def test_a_c_c_names_the_runs_it_lets_end_as_they_decide_not_as_the_transcripts_stood(tmp_path, monkeypatch):
    """One C-c said "1 run whose every turn got its reply ends first", then two runs ended done
    (newcomer9 #24): the count was taken from the transcripts at the C-c, and a run whose last reply
    came in the moment before it looked (within 10 ms of the stop) was let end too, uncounted.  The
    count is now of the runs' own decisions, waited for, and the runs are named."""
    def run_one(run, runs_dir, stop, _command, _ready, _trace, _ended, _hurry, decided) -> Outcome:
        stop.wait(30)
        time.sleep(0.1)  # its look comes after the C-c: its last reply came in between, or not
        let = run.run_id.endswith("r0")
        decided(let)
        time.sleep(0.3 if let else 0.0)  # the last commit, or killed
        return Outcome(run_id=run.run_id, status="done" if let else "failed", cost=0.0, seconds=0.0,
                       turns_done=1, started_at=0.0, ended_at=0.0, error=None if let else "interrupted")

    monkeypatch.setattr(cluster, "run_one", run_one)
    monkeypatch.setattr(cluster, "kill_strays", lambda runs_dir: None)
    executor = cluster.LocalExecutor(tmp_path, parallel=2, fork=False)
    runs = [_Turns(f"p.v.m.r{n}") for n in range(2)]
    for run in runs:
        executor.submit(run)  # type: ignore[arg-type]
    time.sleep(0.1)
    assert executor.finishing() == ["p.v.m.r0"]  # no transcripts: at the C-c neither had its reply
    executor.close()
    assert sorted((o.run_id, o.status) for o in executor.finished(0)) == [("p.v.m.r0", "done"),
                                                                       ("p.v.m.r1", "failed")]
