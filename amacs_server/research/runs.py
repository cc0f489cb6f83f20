"""One run of an experiment: a headless session in its own folder, and its manifest.

:func:`run_one` is the whole of a run, and is what a Ray task runs: it makes
``RUNS_DIR/<run-id>/`` afresh, writes ``manifest.json`` as ``running``, copies
the variant's skills into ``home/skills/``, and starts a batch Emacs that loads
``amacs-batch.el`` (package data of the server) and drives ``*amacs-shell*`` as a
person would: the shell starts the server (``sys.executable -m amacs_server``)
with ``AMACS_HOME=<run>/home``, each turn is typed and waited for, then Emacs
stops the server and exits.  The manifest then says ``done`` when every turn got
the agent's reply (read from the transcripts: :mod:`.outcome`), else ``failed``
with the reason in words and ``failed_turn``, with the cost and the seconds; ``stopped``
when a C-c stopped it after its every turn got its reply, until the experiment's
resume records it done.

The cost of a run is read from its transcripts: the sum of ``data.cost`` of
every ``model_response`` event in ``home/transcripts/*.jsonl`` (every agent's
model calls, the primary's and the tasks'), the same numbers the dataset sums;
None (unknown) when a call's cost is null (a model nobody priced), never a part
counted as the whole: ``unpriced_calls`` says how many.
"""

from __future__ import annotations

import functools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from .. import faults
from ..errors import AmacsError
from ..inference.pricing import endpoint_host
from ..persistence.git_repo import UNCOMMITTED, CommitWorker, HomeRepo
from ..persistence.home_lock import STOPPING_WAIT, HomeInUse, HomeLock
from ..records import ModelRequest, ModelResponse, TickEnd, TickStart, scan
from ..transcripts import ATTEMPTS
from .outcome import verdict
from .spec import Run, skill_folders

MANIFEST = "manifest.json"
TRACE = "trace.txt"
# Where Emacs finds epc and magit-section: Debian's elpa-* packages, or the person's
# ~/.emacs.d/elpa (named outright: a run's Emacs has its own HOME).
ELPA_DIRS = ("/usr/share/emacs/site-lisp/elpa", "~/.emacs.d/elpa")
EMACS = "emacs"
INTERRUPTED = "interrupted (C-c); it runs again when you resume"
# A run a second C-c stopped after its last reply whose home the resume can make whole (its last commit,
# or Emacs's end, was left: done_on_resume): the resume records it done (finish_teardown), not run again.
INTERRUPTED_REPLIED = "stopped after its last reply (C-c): recorded done when you resume"
# The status of such a run until the resume records it done: not a failure, every turn replied to.
STOPPED_REPLIED = "stopped"
STOPPED_WORDS = "every turn replied to, its end cut short by a C-c: recorded done when the experiment resumes"
# The errors of a run C-c stopped: counted as interrupted, not failed.
STOPPED = (INTERRUPTED, INTERRUPTED_REPLIED,
           # the words of INTERRUPTED_REPLIED in a runs folder earlier versions stopped
           "interrupted (C-c) after its every turn got its reply; the resume records it done, its home made "
           "whole, or runs it again if that cannot be done",
           "stopped after its last reply (C-c twice): recorded done when you resume")
KILLED = "the experiment was killed while it ran; it ran again"
RESULT = "batch-result.json"  # Emacs writes it once the session is over, before it stops the server
WATCH_EVERY = 0.01  # seconds between looks for it


@dataclass(frozen=True)
class Outcome:
    """How a run ended: ``status`` is ``done``, ``failed`` (then ``error`` says why), or
    :data:`STOPPED_REPLIED` (a C-c stopped it after its every turn got its reply: ``error``
    :data:`INTERRUPTED_REPLIED`)."""

    run_id: str
    status: str
    cost: float | None  # None: some model call's price is unknown
    seconds: float
    turns_done: int
    started_at: float
    ended_at: float
    error: str | None = None
    failed_turn: int | None = None  # the first turn of the script without the agent's reply
    phases: dict[str, float | None] = field(default_factory=dict)  # PHASES: when each happened
    unpriced_calls: int = 0  # model calls whose price is unknown (their tokens are in the dataset)
    gave: str = ""  # what the job gave, on its console line (a judgement's score)


@contextmanager
def whole() -> Iterator[None]:
    """A C-c during the block is raised after it, not in it: a line printed whole and once (rich
    writes its buffer, then empties it: a C-c between the two printed the line again with the next),
    an outcome taken from the executor and counted, not dropped between the two.  Inside another
    block, the outer one holds the C-c until it ends."""
    if threading.current_thread() is not threading.main_thread() or _HOLDING:
        yield
        return
    pressed: list[int] = []
    before = signal.signal(signal.SIGINT, lambda number, frame: pressed.append(number))
    _HOLDING.append(True)
    try:
        yield
    finally:
        _HOLDING.pop()
        signal.signal(signal.SIGINT, before)
    if pressed:
        raise KeyboardInterrupt


_HOLDING: list[bool] = []  # a whole() block is going (main thread only)


def elisp_dir() -> Path:
    """The AMACS elisp: package data ``amacs_server/elisp`` (in a checkout a link to ``elisp/``)."""
    return Path(str(resources.files("amacs_server") / "elisp"))


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest of the run in FOLDER, or None when it has none (or an unreadable one)."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_manifest(folder: Path, data: dict[str, Any]) -> None:
    """Write FOLDER's manifest whole or not at all (a killed experiment leaves no half file)."""
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, folder / MANIFEST)


def earlier_cost(before: dict[str, Any] | None) -> float:
    """What the earlier attempts of a run cost, from the manifest BEFORE its start replaced it (its
    cost and the attempts' before it): a run that failed and runs again has cost that too."""
    if not before or before.get("status") == "done":
        return 0.0
    return round(float(before.get("cost") or 0.0) + float(before.get("earlier_cost") or 0.0), 6)


def manifest(run: Run, status: str, started_at: float, outcome: Outcome | None = None,
             earlier: float = 0.0) -> dict[str, Any]:
    """The manifest of RUN: its parameters, then its OUTCOME (none yet while it runs); EARLIER, what its
    earlier attempts cost (:func:`earlier_cost`), kept apart from this attempt's ``cost``."""
    return {
        "run_id": run.run_id, "experiment": run.experiment, "prompt": run.prompt, "variant": run.variant,
        "model": run.model, "backend": run.backend, "model_name": run.model_name,
        "endpoint": endpoint_host(run.backend, base_url_of(run)), "rep": run.rep,
        "seed": run.seed, "order_seed": run.order_seed, "position": run.position,
        "turns": list(run.turns), "status": status,
        "origin": f"{run.origin[0]}@{run.origin[1]}" if run.origin else None, "origin_commit": run.origin_commit,
        "cost": outcome.cost if outcome else 0.0, "earlier_cost": earlier,
        "unpriced_calls": outcome.unpriced_calls if outcome else 0, "turns_done": outcome.turns_done if outcome else 0,
        "started_at": started_at, "ended_at": outcome.ended_at if outcome else None,
        **durations(outcome), "error": outcome.error if outcome else None,
        "failed_turn": outcome.failed_turn if outcome else None,
        **{k: (outcome.phases if outcome else {}).get(k) for k in PHASES},
        "cpus": os.cpu_count(),
    }


def durations(outcome: Outcome | None) -> dict[str, float | None]:
    """OUTCOME's durations, each measured from the run's start signal (its first turn reaching its
    server), so that no run's process start-up counts as its work:

    - ``seconds``: from the first turn to the last reply (a run with no reply: to its end);
      None when no turn reached the server;
    - ``startup_seconds``: the start-up the run waited for: from its start (the later of its Emacs's
      start and the experiment starting it) to the first turn; a run prepared ahead, whose Emacs and
      server started while the runs before it went, counts only what was not ready by its turn;
    - ``wall_seconds``: from the experiment starting it to its end (start-up and stop included)."""
    if outcome is None:
        return {"seconds": None, "startup_seconds": None, "wall_seconds": None}
    first, last, spawned = (outcome.phases.get(k) for k in ("first_turn_at", "last_reply_at", "emacs_started_at"))
    end = last if last is not None and outcome.status in ("done", STOPPED_REPLIED) else outcome.ended_at
    return {"seconds": None if first is None else round(max(0.0, end - first), 3),
            "startup_seconds": None if first is None or spawned is None
            else round(max(0.0, first - max(spawned, outcome.started_at)), 3),
            "wall_seconds": outcome.seconds}


def transcript_totals(home: Path) -> tuple[float | None, float, int]:
    """The dollars (None: some call's price is unknown), the seconds of every model call in HOME's
    transcripts, and how many calls had no known price."""
    cost = seconds = 0.0
    unpriced = 0
    for line in scan(sorted((home / "transcripts").glob("*.jsonl")), ModelResponse):
        response = line.event
        if not isinstance(response, ModelResponse):
            continue
        if response.cost is None:
            unpriced += 1
        else:
            cost += float(response.cost)
        seconds += float(response.latency_ms or 0.0) / 1000
    return (None if unpriced else cost), seconds, unpriced


PHASES = ("emacs_started_at", "server_started_at", "first_turn_at", "first_request_at", "last_reply_at")
_SERVING = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .* serving on 127\.0\.0\.1:", re.M)


def phases(home: Path) -> dict[str, float | None]:
    """When the server of HOME started serving (its log's line), the first turn reached it (the
    primary's first ``tick_start`` with the person's input: the run's start signal), the first model
    request of any agent, and the primary's last reply (its last ``tick_end`` with a reply); None for
    what did not happen."""
    found: dict[str, float | None] = {"server_started_at": None, "first_turn_at": None, "first_request_at": None,
                                      "last_reply_at": None}
    try:
        serving = _SERVING.search((home / "logs" / "server.log").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        serving = None
    if serving:  # the log's clock is local time, to the millisecond
        found["server_started_at"] = datetime.strptime(serving.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    for line in scan(sorted((home / "transcripts").glob("*.jsonl")), TickStart, ModelRequest, TickEnd):
        event, ts, primary = line.event, line.ts, line.agent_type == "primary"
        if isinstance(event, TickStart) and primary and event.human is not None:
            turn = found["first_turn_at"]
            found["first_turn_at"] = ts if turn is None else min(turn, ts)
        elif isinstance(event, ModelRequest):
            first = found["first_request_at"]
            found["first_request_at"] = ts if first is None else min(first, ts)
        elif isinstance(event, TickEnd) and primary and (event.response or {}).get("reply"):
            last = found["last_reply_at"]
            found["last_reply_at"] = ts if last is None else max(last, ts)
    return found


def base_url_of(run: Run, env: Mapping[str, str] | None = None) -> str | None:
    """The base URL RUN's model calls go to: its spec's, else the one its Emacs inherits from ENV
    (default: this process's); None: its provider's own API."""
    var = "OPENAI_BASE_URL" if run.backend == "openai" else "ANTHROPIC_BASE_URL"
    return run.base_url or (os.environ if env is None else env).get(var) or None


def run_environment(run: Run, folder: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of RUN's Emacs (and so of its server): BASE without AMACS_ settings, plus the run's."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("AMACS_")}
    env.update(HOME=str(folder / "emacs-home"), AMACS_HOME=str(folder / "home"), AMACS_SEED=str(run.seed),
               AMACS_BACKEND=run.backend, AMACS_DRIVER_TURNS=json.dumps(list(run.turns)))
    if run.model_name:
        env["AMACS_MODEL"] = run.model_name
    if run.run_budget is not None:
        env["AMACS_BUDGET_LIMIT"] = repr(run.run_budget)
    if run.base_url:
        env["OPENAI_BASE_URL" if run.backend == "openai" else "ANTHROPIC_BASE_URL"] = run.base_url
    if run.price is not None:  # the spec's price of the run's model ("": whatever model the run uses)
        env["AMACS_PRICES"] = json.dumps({run.model_name or "": list(run.price)})
    return env


def _package_setup() -> str:
    """The form that activates the packages in :data:`ELPA_DIRS`, as package.el does."""
    dirs = " ".join(json.dumps(os.path.expanduser(d)) for d in ELPA_DIRS if os.path.isdir(os.path.expanduser(d)))
    return f"(progn (require 'package) (dolist (d (list {dirs})) (add-to-list 'package-directory-list d)) (package-initialize))"


@functools.cache
def package_dirs() -> tuple[str, ...] | None:
    """The folders ``package-initialize`` puts on the load path, asked of Emacs once per process
    (each run's Emacs would spend ~0.1 s on it); None when Emacs could not say."""
    roots = tuple(os.path.realpath(os.path.expanduser(d)) for d in ELPA_DIRS)
    try:
        out = subprocess.run([EMACS, "-Q", "--batch", "--eval", _package_setup(), "--eval",
                              "(dolist (d load-path) (princ d) (terpri))"],
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return tuple(d for d in out.stdout.splitlines() if os.path.realpath(d).startswith(roots))


def compiled_dir() -> Path | None:
    """The checkout's byte-compiled elisp (``.elc/`` beside ``elisp/``, scripts/setup.sh's) when it is
    newer than every source; None otherwise (a run then loads the sources, ~40 ms slower)."""
    source = elisp_dir().resolve()
    compiled = source.parent / ".elc"
    try:
        stamp = (compiled / ".stamp").stat().st_mtime
        return compiled if all(el.stat().st_mtime <= stamp for el in source.glob("*.el")) else None
    except OSError:
        return None


# Loading the elisp collects garbage ~6 times at Emacs's default threshold (800 KB), half of the
# load's CPU; amacs-batch-run sets a session's own threshold once it is loaded.
LOAD_GC = "(setq gc-cons-threshold (* 64 1024 1024))"


def emacs_command(batch_file: Path) -> list[str]:
    """The batch Emacs that runs the session described by BATCH_FILE: the packages' folders on its
    load path (or package.el to find them), the compiled elisp first when it is up to date."""
    dirs = package_dirs()
    setup = ["--eval", _package_setup()] if dirs is None else [arg for d in dirs for arg in ("-L", d)]
    compiled = compiled_dir()
    return [EMACS, "-Q", "--batch", "--eval", LOAD_GC, *setup, *(["-L", str(compiled)] if compiled else []),
            "-L", str(elisp_dir()), "-l", "amacs-batch", "--eval", f"(amacs-batch-run {json.dumps(str(batch_file))})"]


def _children(pid: int) -> list[int]:
    """The processes whose parent is PID (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid):
            found.append(int(stat.parent.name))
    return found


def _server_pid(home: Path) -> int | None:
    """The pid of HOME's server, as its ``server.json`` says (None without one that reads)."""
    try:
        return int(json.loads((home / "server.json").read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _kill(proc: subprocess.Popen[bytes], home: Path) -> None:
    """Kill PROC (the Emacs) and the process groups of its children (Emacs makes each its own: the server)."""
    pids = set(_children(proc.pid))
    server = _server_pid(home)
    if server is not None:
        pids.add(server)
    proc.kill()
    proc.wait()
    for pid in pids:
        try:
            group = os.getpgid(pid)
            if group != os.getpgrp():
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _hold(proc: subprocess.Popen[bytes], home: Path) -> list[int]:
    """Stop (SIGSTOP) PROC's process group (the run's Emacs) and its server's, and wait until every
    thread of each is stopped (half a second at most): nothing of the run writes while it is looked
    at.  The groups stopped, for :func:`_release` (or :func:`_kill`, whose SIGKILL ends them stopped)."""
    pids = [proc.pid]
    server = _server_pid(home)
    if server is not None:
        pids.append(server)
    groups: list[int] = []
    for pid in pids:
        try:
            group = os.getpgid(pid)
            if group != os.getpgrp() and group not in groups:
                os.killpg(group, signal.SIGSTOP)
                groups.append(group)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline and not all(_stopped(pid) for pid in pids):
        time.sleep(0.002)
    return groups


def _stopped(pid: int) -> bool:
    """Whether every thread of PID is stopped (or PID is gone)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return all((task / "stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t", "Z", "X")
                   for task in tasks)
    except (OSError, IndexError):
        return True


def _release(groups: list[int]) -> None:
    """Let the process GROUPS :func:`_hold` stopped go on."""
    for group in groups:
        try:
            os.killpg(group, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass


def kill_strays(runs_dir: Path) -> None:
    """Kill what this process started in a run's folder under RUNS_DIR and still runs (an Emacs whose
    start a C-c cut short before it was recorded), with its children's process groups."""
    root = runs_dir.resolve()
    for pid in _children(os.getpid()):
        try:
            if not Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(root):
                continue
            for child in _children(pid):
                group = os.getpgid(child)
                if group != os.getpgrp():
                    os.killpg(group, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (OSError, ChildProcessError):
            pass


def _copy_skills(run: Run, home: Path) -> None:
    """Copy every ``<skill>/`` of the variant's folders into HOME/skills/ (a later folder wins)."""
    target = home / "skills"
    target.mkdir(parents=True, exist_ok=True)
    for folder in run.skills:
        for skill in skill_folders(folder):
            shutil.copytree(skill, target / skill.name, dirs_exist_ok=True)


def _wait(proc: subprocess.Popen[bytes], timeout: float, stop: threading.Event | None,
          watch: Callable[[], bool] | None = None, finishing: Callable[[], bool] | None = None) -> int | None:
    """PROC's exit status, seen the moment it exits (a pidfd; Popen.wait sleeps up to 50 ms between
    looks); None when TIMEOUT seconds pass or STOP is set first (looked at every 0.2 s), unless
    FINISHING says the run only finishes its teardown then (it is waited for; TIMEOUT still holds).
    WATCH is called every :data:`WATCH_EVERY` seconds meanwhile, until it returns True."""
    deadline = time.monotonic() + timeout
    try:
        exited: int | None = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux, or it has exited already
        exited = None
    try:
        while True:
            if watch is not None and watch():
                watch = None
            left = max(0.0, min(0.2 if watch is None else WATCH_EVERY, deadline - time.monotonic()))
            try:
                if exited is None:
                    return proc.wait(timeout=left)
                select.select([exited], [], [], left)
                code = proc.poll()
                if code is not None:
                    return code
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() >= deadline:
                return None
            if stop is not None and stop.is_set():
                if watch is not None and watch():  # the session may have ended since the last look
                    watch = None
                if finishing is None or not finishing():
                    return None
    finally:
        if exited is not None:
            os.close(exited)


def _interrupted(code: int | None, stop: threading.Event | None) -> bool:
    """Whether the run was stopped by C-c: STOP set, or set just after Emacs died of the same C-c.
    An Emacs that exited 0 saw every turn end and its server exit 0 (its last commit made): a C-c
    during that teardown, which the run was let finish, stopped nothing."""
    if stop is None or code == 0:
        return False
    return stop.is_set() or (code is not None and stop.wait(0.5))


def record_killed(run: Run, runs_dir: Path) -> dict[str, Any] | None:
    """The manifest of RUN in RUNS_DIR (None: it has none); one a killed experiment left ``running``
    is first recorded ``failed`` as its transcripts tell it: what it paid and the turns it got
    replies to (so that what a resume counts as paid before, its progress bar's dollars too, has it)."""
    folder = runs_dir.resolve() / run.run_id
    before = read_manifest(folder)
    if before is None or before.get("status") != "running":
        return before
    cost, _seconds, unpriced = transcript_totals(folder / "home")
    judged = verdict(folder / "home", len(run.turns), run.base_url, killed=KILLED)
    why = before.get(RERUN)
    error = KILLED if why is None else f"the experiment was killed after its every turn had its reply, but {why}; it ran again"
    before = {**before, "status": "failed", "error": error, "unpriced_calls": unpriced,
              "cost": None if cost is None else round(cost, 6), "turns_done": judged.replied,
              "failed_turn": judged.failed_turn}
    write_manifest(folder, before)
    return before


@dataclass
class Prepared:
    """A run whose folder is made and whose Emacs is started (:func:`prepare`)."""

    run: Run
    folder: Path
    proc: subprocess.Popen[bytes] | None = None
    emacs_started: float | None = None
    gated: bool = False  # it waits for "go" on its standard input; False: it starts at once
    error: str | None = None  # it could not be prepared
    trace: Path | None = None  # where the run's marks go (:func:`mark`), if anywhere

    def mark(self, name: str, at: float | None = None) -> None:
        """Append the mark NAME (at AT, default now) to the run's trace, if it keeps one."""
        if self.trace is not None:
            with self.trace.open("a", encoding="utf-8") as out:
                out.write(f"{name} {time.time() if at is None else at:.6f}\n")


def read_trace(folder: Path) -> dict[str, float]:
    """The marks of the run in FOLDER (``trace.txt``: Emacs's and the experiment's), each at its
    first time; {} when it kept none."""
    marks: dict[str, float] = {}
    try:
        lines = (folder / TRACE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return marks
    for line in lines:
        name, _, at = line.partition(" ")
        try:
            marks.setdefault(name, float(at))
        except ValueError:
            continue
    return marks


def prepare(run: Run, runs_dir: Path, server_command: list[str] | None = None, gated: bool = False,
            trace: bool = False) -> Prepared:
    """Make RUN's folder afresh (``RUNS_DIR/<run-id>/``) and start its Emacs.

    GATED: Emacs starts the server and says hello, then waits for the line ``go`` on its standard
    input (a pipe: :func:`run_one` writes it; it ends when this process does, and Emacs then
    exits as never started) before it types the first turn, so a run's start-up can overlap
    the runs going before it.  SERVER_COMMAND starts the run's server (default ``python -m
    amacs_server``; the local executor's is the fork server's launcher, :mod:`.forkserver`).
    TRACE: the run keeps the times of its steps in ``trace.txt`` (:func:`read_trace`).
    No manifest is written here: a run prepared and never started is a run still to do.  A run that
    failed or was interrupted before starts again from nothing but its manifest, which stays until
    the run's start replaces it (a C-c before then leaves the record of how it ended before), and
    its earlier attempts, each kept in ``attempts/<n>/`` (:func:`keep_attempt`)."""
    folder = runs_dir.resolve() / run.run_id
    before = record_killed(run, runs_dir)
    if before is not None and before.get("status") != "done":
        keep_attempt(folder, before)
    _clear(folder)
    home = folder / "home"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # the run's conversation and shell: its owner's only
    home.mkdir()
    (folder / "emacs-home").mkdir()
    ready = Prepared(run, folder, gated=gated, trace=folder / TRACE if trace else None)
    try:
        if run.origin is not None:  # a counterfactual arm: the run starts from a fork of the home at the tick
            from ..persistence import history  # noqa: PLC0415 - only for a spec that forks

            # the tick's commit as the spec was read: a rewind of the home since then is refused, not
            # forked at another mind of the same tick number
            history.fork(Path(run.origin[0]), run.origin[1], home, locked=True,  # the spec checked no server serves it
                         commit=_still_there(Path(run.origin[0]), run.origin_commit))
        _copy_skills(run, home)
        batch = folder / "batch.json"
        batch.write_text(json.dumps({
            "turns": list(run.turns), "max_steps": run.max_steps,
            "server_command": server_command or [sys.executable, "-m", "amacs_server"], "wait": run.timeout,
            "result": str(folder / RESULT), "shell": str(folder / "shell.txt"), "parent": os.getpid(),
            **({"go": True} if gated else {}),
            **({"trace": str(ready.trace)} if ready.trace else {})}), encoding="utf-8")
        with (folder / "emacs.log").open("wb") as log:
            ready.emacs_started = time.time()
            ready.mark("spawn", ready.emacs_started)
            # A process group of its own: a terminal's C-c (SIGINT to its foreground group) reaches the
            # experiment, which stops the runs going, and not the Emacs of a run whose every turn got its
            # reply, which is let stop its server (the last commit) and exit as it would have.
            ready.proc = subprocess.Popen(emacs_command(batch), env=run_environment(run, folder), cwd=folder,
                                          stdin=subprocess.PIPE if gated else subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, process_group=0)
    except (OSError, AmacsError) as err:  # AmacsError: the fork of the home it starts from could not be made
        ready.error = f"could not run: {err}"
    return ready


def moved_origin(runs: list[Run], runs_dir: Path) -> str | None:
    """What is wrong when a run of RUNS forks a home at another commit than the runs done before in
    RUNS_DIR started from (their manifests' ``origin_commit``): the home was rewound and went on
    since, and the same tick number is another mind; None when nothing is."""
    for run in runs:
        if run.origin is None or run.origin_commit is None:
            continue
        before = read_manifest(runs_dir / run.run_id) or {}
        was = before.get("origin_commit")
        if before.get("status") == "done" and isinstance(was, str) and was != run.origin_commit:
            home, tick = run.origin
            from ..persistence import history  # noqa: PLC0415 - only for a spec that forks

            said = (f"{home}@{tick} is commit {run.origin_commit[:12]} now, but run {run.run_id} was forked from "
                    f"commit {was[:12]}: {home} was rewound since and tick {tick} is another mind. ")
            if history.on_line(Path(home), was):
                return (said + f"To go on from the mind the runs done started from, write from = \"{home}@{was[:12]}\"; "
                        "to start from the new one, a new --runs-dir")
            ref = history.abandoned_with(Path(home), was)
            return (said + "The mind the runs done started from is no longer in its history"
                    + (f" (the rewind left it on the abandoned future kept on git ref {ref}, a fork "
                       "cannot start from: a fork starts from a tick of the home's history as it stands)" if ref else "")
                    + ", so the runs left cannot start from it: to start from the new one, a new --runs-dir "
                    "(the runs done here stay readable: dataset, report)")
    return None


def _still_there(home: Path, commit: str | None) -> str | None:
    """COMMIT, when it is still of HOME's history as it stands; else AmacsError saying so."""
    if commit is None:
        return None
    from ..persistence import history  # noqa: PLC0415 - only for a spec that forks

    history.origin_commit(home, commit)
    return commit


def keep_attempt(folder: Path, before: dict[str, Any]) -> None:
    """Move the record of the earlier attempt of the run in FOLDER (its manifest BEFORE, its
    transcripts, its Emacs's log and shell text) to ``attempts/<n>/`` (n from 1), before the run
    starts again from nothing: what it paid for stays readable.  An attempt kept already (the run
    was prepared again and never started) is not kept twice."""
    root = folder / ATTEMPTS
    kept = [int(p.name) for p in root.iterdir() if p.name.isdigit()] if root.is_dir() else []
    last = max(kept, default=0)
    if last and (read_manifest(root / str(last)) or {}).get("started_at") == before.get("started_at"):
        return
    target = root / str(last + 1)
    target.mkdir(parents=True)
    write_manifest(target, before)
    for source, name in ((folder / "home" / "transcripts", "transcripts"), (folder / "emacs.log", "emacs.log"),
                         (folder / "shell.txt", "shell.txt")):
        if source.exists():
            os.replace(source, target / name)


def _clear(folder: Path) -> None:
    """Remove what FOLDER holds but its manifest (the record of the run's earlier end) and its earlier
    attempts; FOLDER itself too when it has no manifest."""
    if not (folder / MANIFEST).is_file():
        shutil.rmtree(folder, ignore_errors=True)
        return
    for entry in folder.iterdir():
        if entry.name in (MANIFEST, ATTEMPTS):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


# In the manifest of a run recorded done when the experiment resumed (:func:`finish_teardown`): how.
ON_RESUME = "recorded_on_resume"
IN_TEARDOWN = "stopped in its teardown: every turn had its reply"
BEFORE_END = "stopped after its last reply, before its session's end: every turn had its reply and the last turn had ended"
COMMITTED = "its last commit was made on resume"
WHOLE = "its server had made its last commit"
NO_SHELL = "no shell.txt: its Emacs was stopped before it wrote the shell's text"
# In the manifest of a run every turn of which had its reply, yet run again on resume: why.
RERUN = "rerun_because"


@dataclass(frozen=True)
class Resumed:
    """What the resume made of a run stopped after every turn of it had its reply
    (:func:`finish_teardown`): recorded done (OUTCOME), or run again (OUTCOME None); WORDS say how
    it was stopped, or why it runs again."""

    outcome: Outcome | None
    words: str


def _last_turn_over(home: Path, max_steps: int) -> tuple[int | None, bool]:
    """The tick of the primary's last ``tick_end`` in HOME's transcripts (None: it has none), and whether
    the last turn had ended there: that tick's response has no eval (a response without one ends the
    turn: the agent waits for the person), or the turn had used its MAX_STEPS ticks; a tick begun and
    not ended, or an eval whose next tick was still to come, is a turn going on."""
    final: int | None = None
    over = False
    ticks = 0
    for line in scan(sorted((home / "transcripts").glob("*.jsonl")), TickStart, TickEnd):
        if line.agent_type != "primary":
            continue
        event = line.event
        if isinstance(event, TickStart):
            ticks = 1 if event.human is not None else ticks + 1
            over = False
        elif isinstance(event, TickEnd) and isinstance(line.tick, int):
            final = line.tick
            over = not (event.response or {}).get("eval") or ticks >= max_steps
    return final, over


def _lock_home(home: Path, wait: float) -> HomeLock | None:
    """HOME's server lock, taken once no server holds it (waited for up to WAIT seconds: a killed
    experiment's server may still be making its last commit); None if one still does then."""
    lock = HomeLock(home, headless=True)
    deadline = time.monotonic() + wait
    while True:
        try:
            lock.acquire(stopping_wait=0)
            return lock
        except HomeInUse:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.2)


def _finished(run: Run, folder: Path) -> tuple[int, int, float | None] | str | None:
    """What the record of RUN in FOLDER, stopped, says of its end, changing nothing: None when some
    turn has no reply; why it runs again all the same when the session did not end as a finished one
    does (Emacs said it failed, or the last turn was still going on); else the turns replied to, the
    primary's last tick, and when Emacs said the session was over (None: it had not)."""
    home = folder / "home"
    judged = verdict(home, len(run.turns), run.base_url)
    if judged.failed_turn is not None:
        return None
    said: Any = None
    session_ended: float | None = None
    try:
        said = json.loads((folder / RESULT).read_text(encoding="utf-8"))
        session_ended = (folder / RESULT).stat().st_mtime
    except (OSError, ValueError):
        pass
    if session_ended is not None and (not isinstance(said, dict) or said.get("error") is not None):
        return f"its Emacs said the session failed: {said.get('error') if isinstance(said, dict) else said}"
    final, over = _last_turn_over(home, run.max_steps)
    if final is None or not over:
        return "its last turn was still going on (the reply's eval asked for another step)"
    return judged.replied, final, session_ended


def done_on_resume(run: Run, folder: Path) -> bool:
    """Whether the resume will record RUN, in FOLDER, stopped with its Emacs and server gone, done
    (:func:`finish_teardown`), from what it leaves; nothing is changed."""
    from ..persistence import history  # noqa: PLC0415 - only for a run stopped after its last reply

    found = _finished(run, folder)
    if not isinstance(found, tuple):
        return False
    home = folder / "home"
    late = history.late_look(home)
    if late is not None:  # the commit it asked for is made on resume, or cannot be
        return isinstance(late, tuple)
    try:  # a record of a tick committed since is removed on resume (the commit made, its record not)
        return history.last_tick(home) >= found[1]
    except history.HistoryError:
        return False


def finish_teardown(run: Run, runs_dir: Path, wait: float = STOPPING_WAIT) -> Resumed | None:
    """Record RUN done, without running it again, when it was stopped after it finished: its manifest
    says ``running`` (the experiment was killed) or interrupted (C-c), but its transcripts hold every
    turn's reply and the last turn had ended (:func:`_last_turn_over`).  What is left of a session
    then (Emacs seeing the turn end, writing :data:`RESULT` and ``shell.txt``, its server's stop) adds
    nothing to the run's record but the shell's text and the last tick's commit; a subagent still at
    work would be stopped by the session's end too, not waited for.  So the home is made whole as its
    server's next start would make it (the tick it asked to commit and did not is committed from the
    bytes the tick ended with: :func:`~amacs_server.persistence.history.late_commit`), and the run is
    done with the cost its transcripts paid; its ``ended_at`` is when its session was over (its
    result's time) or, without a result, its last reply.

    None when its manifest says neither, or some turn has no reply: it runs again.  A Resumed without
    an outcome, saying why, for a run every turn of which had its reply that runs again all the same:
    the last turn was still going on, its server never asked for the last tick's commit (killed between
    the reply and the commit: the tick's files are not known whole), a file changed since, a server
    still holds the home after WAIT seconds, or Emacs said the session failed; the manifest keeps why
    (:data:`RERUN`), and so does the attempt's record."""
    from ..persistence import history  # noqa: PLC0415 - only for a run stopped after its last reply

    folder = runs_dir.resolve() / run.run_id
    home = folder / "home"
    before = read_manifest(folder)
    if before is None or not (before.get("status") in ("running", STOPPED_REPLIED)
                              or (before.get("status") == "failed" and before.get("error") in STOPPED)):
        return None
    finished = _finished(run, folder)
    if finished is None:
        return None

    def rerun(why: str) -> Resumed:
        write_manifest(folder, {**before, RERUN: why})
        return Resumed(None, why)

    if isinstance(finished, str):
        return rerun(finished)
    replied, final, session_ended = finished
    lock = _lock_home(home, wait)
    if lock is None:
        return rerun(f"a server still held its home after {wait:g} s")
    try:
        late = history.late_commit(home)
        if isinstance(late, str):
            return rerun(f"its last tick cannot be committed: {late}")
        if late is not None:
            commits = CommitWorker(HomeRepo(home), record=True)
            commits.submit_snapshot(*late)
            commits.stop()
        try:
            whole = history.last_tick(home) >= final and not (home / UNCOMMITTED).exists()
        except history.HistoryError:
            whole = False
    finally:
        lock.release()
    if not whole:
        return rerun(f"it was stopped before its server asked for tick {final}'s commit, so its home "
                     "is not known whole")
    cost, _, unpriced = transcript_totals(home)
    started = float(before["started_at"])
    found = phases(home)
    ended = max(session_ended or found.get("last_reply_at") or started, started)
    outcome = Outcome(run_id=run.run_id, status="done", cost=None if cost is None else round(cost, 6),
                      unpriced_calls=unpriced, seconds=round(ended - started, 3), turns_done=replied,
                      started_at=started, ended_at=ended,
                      phases={"emacs_started_at": before.get("emacs_started_at"), **found})
    how = f"{IN_TEARDOWN if session_ended is not None else BEFORE_END}; {COMMITTED if late is not None else WHOLE}"
    if not (folder / "shell.txt").exists():
        how += f" ({NO_SHELL})"
    write_manifest(folder, {**manifest(run, "done", started, outcome, float(before.get("earlier_cost") or 0.0)),
                            ON_RESUME: how})
    return Resumed(outcome, "stopped in its teardown" if session_ended is not None
                   else "stopped after its last reply, before its session's end")


def discard(ready: Prepared) -> None:
    """Stop a prepared run that will not start: its Emacs and server killed, its folder removed but
    an earlier manifest (it is still to do, as it was before)."""
    if ready.proc is not None:
        _kill(ready.proc, ready.folder / "home")
        if ready.proc.stdin is not None:
            ready.proc.stdin.close()
    _clear(ready.folder)


def run_one(run: Run, runs_dir: Path, stop: threading.Event | None = None,
            server_command: list[str] | None = None, prepared: Prepared | None = None,
            trace: bool = False, session_ended: Callable[[], None] | None = None,
            hurry: threading.Event | None = None, decided: Callable[[bool], None] | None = None) -> Outcome:
    """Run RUN headless into ``RUNS_DIR/<run-id>/`` and return how it ended.

    PREPARED is the run made ready by :func:`prepare` (gated: it starts now); without it
    the run is prepared here, with SERVER_COMMAND (and TRACE, :func:`prepare`).  The run's time
    and its time limit count from here.

    SESSION_ENDED is called once the session is over with every turn replied to (Emacs has written
    :data:`RESULT` and the transcripts say so), while its server still makes its last commit
    and exits: the next run may start then.  The outcome, and the manifest's ``done``, wait
    for Emacs's exit, which waits for the server's: a run is never recorded done before
    its home is complete.

    STOP, when set (C-c), ends the run: Emacs and its server killed, the manifest
    ``failed`` with the error :data:`INTERRUPTED` (resume runs it again); but a run whose
    every turn has its reply in the transcripts by then (Emacs about to see the last turn
    end, or its server making the last commit; looked at with the run held still, so that
    no reply is written between the look and the kill: :func:`_hold`) is let finish and is recorded as it ends,
    ``done`` with its home whole, unless HURRY is set too (a second C-c): then its error is
    :data:`INTERRUPTED_REPLIED`, its status :data:`STOPPED_REPLIED`, when the resume will record it
    done (:func:`done_on_resume`), else :data:`INTERRUPTED`.  DECIDED is called once, with whether
    the run is let finish, when it has looked at its replies after STOP was set.  Never raises for a
    run that goes wrong: that is a ``failed`` outcome (and manifest)."""
    started = time.time()
    ready = prepared or prepare(run, runs_dir, server_command, trace=trace)
    folder, home = ready.folder, ready.folder / "home"
    ready.mark("start", started)
    earlier = earlier_cost(read_manifest(folder))  # the earlier attempt's record, kept until now
    write_manifest(folder, manifest(run, "running", started, earlier=earlier))
    error: str | None = ready.error
    turns_done = 0
    failed_turn: int | None = None
    proc = ready.proc
    replied = threading.Event()  # the session is over and every turn got its reply: only the teardown is left

    def session_over() -> bool:
        """Whether Emacs has said the session is over; SESSION_ENDED called then if every turn was replied to."""
        if not (folder / RESULT).exists():
            return False
        if verdict(home, len(run.turns), run.base_url).failed_turn is None:
            replied.set()
            ready.mark("ended")
            if session_ended is not None:
                session_ended()
        return True

    answered: list[bool] = []  # at the C-c: every turn had its reply in the transcripts (looked at once)
    told: list[bool] = []  # DECIDED was called
    killed: list[bool] = []

    def kill() -> None:
        """Kill the run's Emacs and server, once (a pid is not looked up again after its process is reaped)."""
        if proc is not None and not killed:
            killed.append(True)
            _kill(proc, home)

    def finishing() -> bool:
        """Whether the run, STOP set, is let go on: every turn got its reply, only its end is left."""
        if hurry is not None and hurry.is_set():
            return False
        if not answered and replied.is_set():
            answered.append(True)  # the session is over: only its teardown is left
        elif not answered and proc is not None:
            # Held still while looked at: a reply written between the look and the kill would be paid
            # for, recorded, and thrown away with the run (and paid again when it runs again).
            held = _hold(proc, home)
            try:
                answered.append(verdict(home, len(run.turns), run.base_url).failed_turn is None)
            finally:
                if not answered or not answered[0]:
                    kill()  # as it was held: nothing written after the look
                _release(held)  # let go on (the killed ones die of their SIGKILL)
        if answered and decided is not None and not told:
            told.append(True)
            decided(answered[0])
        return bool(answered) and answered[0]

    if proc is not None:
        try:
            if ready.gated and proc.stdin is not None:
                try:
                    proc.stdin.write(b"go\n")
                    proc.stdin.close()
                except OSError:  # Emacs is gone: its exit status says why
                    pass
                ready.mark("go-sent")
            try:
                watch = session_over if session_ended is not None or stop is not None else None
                code = _wait(proc, run.timeout, stop, watch, finishing)
            except BaseException:
                kill()
                raise
            ready.mark("emacs-exited")
            if code != 0:
                kill()  # also the server of an Emacs that died of a C-c
            if _interrupted(code, stop):
                # Said as the resume will take it, from what the killed run left (a second C-c may
                # come before the run looked at its replies, or after).
                error = INTERRUPTED_REPLIED if done_on_resume(run, folder) else INTERRUPTED
            elif code is None:
                code, error = -1, f"timed out after {run.timeout:g} s"
            said_error: str | None = None
            try:
                said = json.loads((folder / RESULT).read_text(encoding="utf-8"))
                said_error = said.get("error") if isinstance(said.get("error"), str) else None
            except (OSError, ValueError):
                pass
            if error is None and code != 0:
                error = (f"timed out after {run.timeout:g} s" if said_error and "did not end within" in said_error
                         else f"Emacs exited {code}" + (f" ({said_error})" if said_error else ""))
            judged = verdict(home, len(run.turns), run.base_url, killed=error, shell=folder / "shell.txt")
            turns_done, failed_turn = judged.replied, judged.failed_turn
            error = error if error in STOPPED else judged.reason
            ready.mark("judged")
        except OSError as err:
            error = f"could not run: {err}"
    ended = time.time()
    cost, _, unpriced = transcript_totals(home)
    outcome = Outcome(run_id=run.run_id,
                      status=STOPPED_REPLIED if error == INTERRUPTED_REPLIED else "failed" if error else "done",
                      cost=None if cost is None else round(cost, 6), unpriced_calls=unpriced,
                      seconds=round(ended - started, 3), turns_done=turns_done, started_at=started,
                      ended_at=ended, error=error, failed_turn=failed_turn if error else None,
                      phases={"emacs_started_at": ready.emacs_started, **phases(home)})
    faults.point("run.ended")
    write_manifest(folder, manifest(run, outcome.status, started, outcome, earlier))
    ready.mark("recorded")
    return outcome
