"""``amacs-server experiment SPEC``: run a spec's grid of headless sessions.

    amacs-server experiment SPEC [--runs-dir D] [--parallel N] [--budget USD] [--order random|grid]
                                 [--seed N] [--ray [ADDRESS]]

Runs go in a random order across arms and repetitions, drawn from a seed (the
spec's ``seed``, ``--seed``, else one drawn at the first start; kept in
``RUNS_DIR/order.json`` and each manifest's ``order_seed`` and ``position``), so
that neither time, nor the machine's load, nor warm-up lines up with an arm;
``--order grid`` (or the spec's ``order = "grid"``) runs them in the grid's order.

Runs go at most N at once (default the spec's ``parallel``), on this machine
or, with ``--ray``, as Ray tasks on a local Ray (no ADDRESS) or the cluster at
ADDRESS (see :mod:`.cluster`); both through the same loop: a progress bar
(done / running / failed, cost so far, ETA), a total budget (``--budget`` or
the spec's ``budget``, a ceiling as far as one can be: a run starts only if
what the runs' attempts cost, the runs going and its own, each at the most a
run has cost, fit it, one at a time until one has ended; the command says what
was spent, and how far over and why if a run cost more than that), and resume: a run whose manifest says
``done`` is skipped, a ``failed`` or ``running`` one (an interrupted
experiment) runs again from nothing; what each earlier attempt cost still
counts against the budget.

A run is done only when every turn of its script got the agent's reply; else it
failed, with the reason in words and the turn it stopped at (:mod:`.outcome`).
Once :data:`SAME_FAILURES` runs in a row fail for the same reason (a dead
endpoint, a refused key) no new run starts, and the command says so.  At the end
it prints one line per reason runs failed for.

Exit status: 0 every run done; 1 some run failed; 2 the spec or the command
line is wrong; 3 the budget was spent before every run started; 130
interrupted (C-c: the runs going are stopped, their manifests ``failed`` with
the error "interrupted (C-c); it runs again when you resume", and resume runs
them again; a run whose every turn got its reply finishes its teardown, its
server's last commit, and is recorded ``done``, unless C-c comes again: then it
is ``stopped``, error "stopped after its last reply (C-c): recorded done when
you resume", and the resume records it done without running it again).
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from .cluster import Executor, LocalExecutor, RayExecutor
from .dataset import cost_words
from .runs import (
    STOPPED,
    STOPPED_REPLIED,
    Outcome,
    base_url_of,
    durations,
    earlier_cost,
    finish_teardown,
    moved_origin,
    read_manifest,
    record_killed,
    whole,
)
from .spec import Experiment, Run, SpecError, load, run_order, unpriced

POLL = 0.5  # seconds between redraws while runs go
# No new run starts once this many runs in a row failed for the same reason (a dead endpoint,
# a refused key): the rest would fail so too.
SAME_FAILURES = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="amacs-server experiment",
                                     description="Run an experiment's grid of headless AMACS sessions.")
    parser.add_argument("spec", type=Path, help="the experiment's TOML file")
    parser.add_argument("--runs-dir", type=Path, help="where runs go (default: runs/<name> beside SPEC)")
    parser.add_argument("--parallel", type=int, help="runs at once (default: the spec's parallel)")
    parser.add_argument("--budget", type=float, help="dollars for the whole experiment (default: the spec's)")
    parser.add_argument("--order", choices=("random", "grid"), default=None,
                        help="runs in a seeded random order across arms and repetitions (default), or in the "
                             "grid's order (prompt, variant, model, repetition)")
    parser.add_argument("--seed", type=int, default=None,
                        help="the random order's seed (default: the spec's seed, else the one this runs "
                             "folder was started with, else a new one; kept in RUNS_DIR/order.json)")
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help="run each session as a Ray task: on a local Ray, or the cluster at ADDRESS")
    return parser


ORDER = "order.json"  # RUNS_DIR's run order and its seed: a resume keeps the order it started with


def order_seed(runs_dir: Path, given: int | None) -> int:
    """The seed of RUNS_DIR's random run order: GIVEN, else the one it was started with, else a new one."""
    if given is not None:
        return given
    try:
        kept = json.loads((runs_dir / ORDER).read_text(encoding="utf-8")).get("seed")
    except (OSError, ValueError, AttributeError):
        kept = None
    return kept if isinstance(kept, int) and not isinstance(kept, bool) else secrets.randbelow(2**31)


def _pending(experiment: Experiment, runs_dir: Path) -> tuple[list[Run], dict[str, float | None], int, float]:
    """The runs still to do, the cost of each one done before (None: unknown), how many of those to
    do have a manifest (they failed, or were interrupted, before: they run again), and what earlier
    attempts cost: those of the runs to do again (their manifests' ``cost``) and the attempts before
    any (``earlier_cost``), whose model calls were paid too."""
    todo: list[Run] = []
    before: dict[str, float | None] = {}
    again, earlier = 0, 0.0
    for run in experiment.runs:
        manifest = read_manifest(runs_dir / run.run_id) or {}
        if manifest.get("status") == "done":
            cost = manifest.get("cost")  # unknown (null): only a run without a budget
            before[run.run_id] = None if cost is None else float(cost)
            earlier += float(manifest.get("earlier_cost") or 0.0)
        else:
            todo.append(run)
            again += bool(manifest)
            earlier += earlier_cost(manifest)  # its own cost and its attempts' before it
    return todo, before, again, earlier


def estimated_where(run: Run) -> str | None:
    """Where RUN's model ran when its dollars are list prices for what a server other than its
    provider's API reported (:func:`list_priced_elsewhere`), else None."""
    from ..config import DEFAULT_MODEL
    from ..inference.pricing import Price, endpoint_host, list_priced_elsewhere

    model = run.model_name or DEFAULT_MODEL
    return list_priced_elsewhere(run.backend, model, endpoint_host(run.backend, base_url_of(run)),
                                 {model: Price(*run.price)} if run.price else None)


def record_words(experiment: Experiment, runs_dir: Path) -> str:
    """What RUNS_DIR's manifests say of EXPERIMENT's runs, as its last line says it (after a C-c too):
    ``10 of 10 done, 0 failed, $0.4818 estimated at list prices (the model calls went to ...; $0.0322
    of it by earlier attempts of runs that ran again)``; the runs a C-c stopped, and the runs still to
    run (failed, stopped or not started), when there are any; those a second C-c stopped after their
    every turn got its reply (status ``stopped``) apart: the resume records them done.  The dollars are every attempt's: each
    manifest's ``cost`` and ``earlier_cost``, as the dataset and the report count them."""
    done = failed = stopped = replied = 0
    costs: list[tuple[float | None, str | None]] = []
    earlier = 0.0
    for run in experiment.runs:
        manifest = read_manifest(runs_dir / run.run_id) or {}
        status, cost = manifest.get("status"), manifest.get("cost", 0.0)
        before = float(manifest.get("earlier_cost") or 0.0)
        done += status == "done"
        stopped += status == "failed" and manifest.get("error") in STOPPED
        replied += status == STOPPED_REPLIED
        failed += status == "failed" and manifest.get("error") not in STOPPED
        earlier += before
        costs.append((None if cost is None else float(cost) + before, estimated_where(run)))
    total = len(experiment.runs)
    return (f"{done} of {total} done, {failed} failed" + (f", {stopped} interrupted" if stopped else "")
            + (f", {replied} stopped after {'its' if replied == 1 else 'their'} last reply (recorded done when "
               "you resume)" if replied else "")
            + (f", {total - done} to run" if done < total else "") + ", " + cost_words(costs, earlier=earlier))


def dollars(cost: float | None) -> str:
    """COST as dollars: cents, or tenths of a cent below one cent (a fake's runs cost that); None: unknown."""
    if cost is None:
        return "$? (no price)"
    return f"${cost:.2f}" if cost == 0 or cost >= 0.01 else f"${cost:.4f}"


def _cost(cost: float | None) -> str:
    return "cost unknown (no price)" if cost is None else f"${cost:.4f}"


def counts(done: int, running: int, failed: int, cost: float) -> str:
    """The progress line's numbers: ``10 done · 0 running · 0 failed · $0.49``."""
    return f"{done} done · {running} running · {failed} failed · {dollars(cost)}"


class _Counts(TextColumn):
    def __init__(self) -> None:
        super().__init__("")

    def render(self, task: Task) -> Text:
        fields = task.fields
        return Text(counts(fields["done"], fields["running"], fields["failed"], fields["cost"]))


PIPED_WIDTH = 160  # columns of the progress bar's line when stderr is no terminal (a pipe, a log)


def progress_console() -> Console:
    """The console the progress bar and each run's line go to: stderr, as wide as its terminal; when it is
    none (piped, a log file), :data:`PIPED_WIDTH` columns, not the 80 Rich assumes, which cut the bar's
    last line (``$0.45 0:00:… ETA 0:00:…``)."""
    return Console(stderr=True, width=None if sys.stderr.isatty() else PIPED_WIDTH)


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), _Counts(), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=console)


def took(outcome: Outcome) -> str:
    """OUTCOME's time as its console line says it: a run's duration, its ``seconds`` (from its first
    turn to its last reply: the report's duration), and its ``wall_seconds`` (start-up and stop too);
    a judgement's ``seconds``."""
    if "first_turn_at" not in outcome.phases:  # a judgement, or a run that never got going
        return f"{outcome.seconds:.1f} s"
    seconds = durations(outcome)["seconds"]
    return (f"{seconds:.1f} s duration, " if seconds is not None else "") + f"{outcome.seconds:.1f} s wall"


def failure(outcome: Outcome) -> str:
    """OUTCOME's reason with the turn it stopped at: ``turn 1: model endpoint unreachable: URL``."""
    turn = f"turn {outcome.failed_turn}: " if outcome.failed_turn else ""
    return f"{turn}{outcome.error}"


def same_failures(outcomes: list[Outcome]) -> str | None:
    """The reason the last :data:`SAME_FAILURES` of OUTCOMES all failed for, if they did (C-c aside)."""
    last = outcomes[-SAME_FAILURES:]
    if len(last) < SAME_FAILURES or any(o.status != "failed" or o.error in STOPPED for o in last):
        return None
    reasons = {o.error for o in last}
    return last[0].error if len(reasons) == 1 else None


def _letting_words(letting: list[str]) -> str:
    """What a C-c says of the runs LETTING (their ids) it lets finish (:meth:`LocalExecutor.finishing`)."""
    one = len(letting) == 1
    return (f"C-c: {len(letting)} {'run' if one else 'runs'} whose every turn got its reply "
            f"{'ends' if one else 'end'} first (the last commit) and {'is' if one else 'are'} recorded done "
            f"(C-c again to stop {'it' if one else 'them'} now): {', '.join(letting)}")


class Jobs(Protocol):
    """What :func:`execute` drives: runs (:class:`~.cluster.Executor`) or judgements, one by one."""

    def submit(self, job: Any) -> None:
        """Start JOB (it has a ``run_id``)."""

    def finished(self, timeout: float) -> list[Outcome]:
        """The outcomes of jobs that ended, waiting at most TIMEOUT seconds for one."""

    def close(self) -> None:
        """Stop: start nothing more."""


# Dollars a sum of costs may pass the budget by and still be within it (float sums: 0.0018 + 0.0006).
CENT_DUST = 1e-9


def expected_cost(costs: Sequence[float | None]) -> float | None:
    """What a job about to start is expected to cost: the most one of COSTS (the jobs ended) cost;
    None when none ended yet (or none has a known cost)."""
    known = [cost for cost in costs if cost is not None]
    return max(known) if known else None


def fits(budget: float | None, spent: float, running: int, expected: float | None) -> bool:
    """Whether one more job may start under BUDGET (None: no budget): what is SPENT, the RUNNING jobs
    and its own, each of those at the EXPECTED cost (:func:`expected_cost`), fit it.  With no job
    ended yet, nothing tells what one costs: one goes at a time until the first ends."""
    if budget is None:
        return True
    if spent >= budget:
        return False
    if expected is None:
        return running == 0
    return spent + (running + 1) * expected <= budget + CENT_DUST


def budget_words(spent: float, budget: float, left: int, noun: str, not_started: str, again: str) -> str:
    """The last line about the budget: what was spent of it, how it was kept (:func:`fits`), how far
    over it went, if over, and why; the LEFT jobs not started (NOUN: ``run``, ``judgement``)."""
    over = spent - budget
    kept = (f"a {noun} starts only if what is spent, the {noun}s going and its own, each at the most a "
            f"{noun} had cost, fit it; until one has ended, one goes at a time")
    words = f"Budget spent: ${spent:.4f} of ${budget:.4f}"
    if over > CENT_DUST:
        words += (f", over by ${over:.4f} ({kept}; but a {noun} can cost more than was expected of it (the most "
                  f"one had cost before it started; the first {noun} goes before any cost is known), and none is "
                  "stopped halfway: it would be paid for and thrown away)")
    else:
        words += f" ({kept})"
    return words + (f"; {left} {not_started} ({again})." if left else ".")


def first_alone_words(todo: Sequence[Run], budget: float | None, spent: float,
                      known: Sequence[float | None]) -> str | None:
    """What is said before the first of TODO starts when nothing but its own limit bounds what it spends
    and that limit is above what is left of BUDGET: no run's cost is KNOWN, so it goes alone
    (:func:`fits`), and its ``run_budget`` (its server's limit) is larger, or there is none.  None
    otherwise.  Its limit is not lowered to the budget left: a model call is not stopped halfway, so
    such a run would still pass it by a call, and fail, paid for and thrown away."""
    if budget is None or not todo or expected_cost(known) is not None or spent >= budget:
        return None
    left, limit = budget - spent, todo[0].run_budget
    if limit is not None and limit <= left + CENT_DUST:
        return None
    bound = ("nothing but its time limit bounds what it spends (the spec has no run_budget)" if limit is None
             else f"only the spec's run_budget (${limit:.4f} a run) bounds what it spends")
    return (f"no run's cost is known yet, so the first goes alone, and {bound}: more than the ${left:.4f} "
            "left of the budget, which it can pass (C-c stops it)")


def execute(todo: Sequence[Any], executor: Jobs, parallel: int, budget: float | None, spent: float,
            total: int, name: str, console: Console,
            known: Sequence[float | None] = ()) -> tuple[list[Outcome], list[Any], str | None]:
    """Run TODO through EXECUTOR, PARALLEL at once, while one more fits BUDGET (:func:`fits`: SPENT
    and what finishes, the jobs going and the next, at the most a job cost: those ended, and KNOWN,
    the costs of jobs done before) and runs do not keep failing for one reason.

    Returns the outcomes, the runs never started, and the reason that stopped them early (None: the
    budget, or nothing, stopped them)."""
    queue = list(todo)
    outcomes: list[Outcome] = []
    running = 0
    stopped: str | None = None
    # A run whose session is over while its server stops counts no more against PARALLEL (the
    # executor's busy()), unless a budget must see its cost before the next run starts.
    busy = getattr(executor, "busy", None) if budget is None else None
    closed = False
    with _progress(console) as progress:
        bar = progress.add_task(f"{name} ({total} runs)", total=total, completed=total - len(todo),
                                done=total - len(todo), running=0, failed=0, cost=spent)

        said: set[str] = set()

        def ended(outcome: Outcome) -> None:
            """Count OUTCOME on the bar and print its line, once, whole (a C-c comes after it)."""
            nonlocal running, spent
            if outcome.run_id in said:
                return
            with whole():
                running -= 1
                spent += outcome.cost or 0.0
                outcomes.append(outcome)
                # as the last line counts them: a run a C-c stopped is neither done nor failed
                failed = sum(o.status == "failed" and o.error not in STOPPED for o in outcomes)
                done = total - len(todo) + sum(o.status == "done" for o in outcomes)
                progress.update(bar, advance=1, running=running, done=done, failed=failed, cost=spent)
                why = f"  {failure(outcome)}" if outcome.error else ""
                gave = f"{outcome.gave}  " if outcome.gave else ""
                progress.console.print(f"{outcome.status:6} {outcome.run_id}  {gave}{_cost(outcome.cost)}  "
                                       f"{took(outcome)}{why}", markup=False, highlight=False, soft_wrap=True,
                                       style={"failed": "red", STOPPED_REPLIED: "yellow"}.get(outcome.status))
                said.add(outcome.run_id)

        try:
            while queue or running:
                while (queue and (running if busy is None else busy()) < parallel and stopped is None
                       and fits(budget, spent, running, expected_cost([*known, *(o.cost for o in outcomes)]))):
                    with whole():  # a C-c after: a run submitted is counted going
                        executor.submit(queue.pop(0))
                        running += 1
                if not running:
                    break  # the budget is spent, or runs keep failing, and nothing is going
                ahead = getattr(executor, "prepare", None)  # the next runs' start-up overlaps these
                if ahead is not None and queue and stopped is None and (budget is None or spent < budget):
                    ahead(queue)  # the executor prepares as many of the first as it keeps ready
                progress.update(bar, running=running)
                for outcome in executor.finished(POLL):
                    ended(outcome)
                    stopped = stopped or same_failures(outcomes)
        except KeyboardInterrupt:
            finishing = getattr(executor, "finishing", None)
            if finishing is not None:  # this machine's jobs: each says how it ended, as it ends
                for outcome in executor.finished(0):  # those that had ended: said before what the C-c lets end
                    ended(outcome)
                letting = finishing()
                if letting:
                    words = getattr(executor, "letting_words", _letting_words)
                    progress.console.print(words(letting), markup=False, highlight=False, soft_wrap=True)
                closed = True
                executor.close()
                for outcome in executor.finished(0):
                    ended(outcome)
                for outcome in getattr(executor, "handed", []):  # those a C-c took between handed and said
                    ended(outcome)
                # Nothing goes now: a run the stop cancelled before it started has no outcome (it is
                # still to do, as the last line counts it).
                running = 0
                progress.update(bar, running=0)
            raise
        finally:
            if not closed:
                executor.close()
    return outcomes, queue, stopped


def summary(outcomes: list[Outcome]) -> list[str]:
    """One line per reason runs failed for: how many, at which turns, the reason."""
    by_reason: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        if outcome.status == "failed":
            by_reason.setdefault(outcome.error or "?", []).append(outcome)
    lines = []
    for reason, runs in sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0])):
        turns = sorted({o.failed_turn for o in runs if o.failed_turn})
        at = f" (at turn {', '.join(map(str, turns))})" if turns else ""
        lines.append(f"  {len(runs)} {'run' if len(runs) == 1 else 'runs'} failed{at}: {reason}")
    return lines


def main(argv: list[str]) -> int:
    """The ``experiment`` command; see the module's docstring for the exit status."""
    args = _parser().parse_args(argv)
    try:
        experiment = load(args.spec)
    except SpecError as err:
        print(f"amacs-server experiment: {err}", file=sys.stderr)
        return 2
    table = experiment.spec.experiment
    parallel = table.parallel if args.parallel is None else args.parallel
    if parallel < 1:
        print("amacs-server experiment: --parallel must be at least 1", file=sys.stderr)
        return 2
    budget = args.budget if args.budget is not None else table.budget
    nobody_priced = unpriced(experiment.runs)
    if nobody_priced and (budget is not None or table.run_budget is not None):
        run = nobody_priced[0]
        print(f"amacs-server experiment: a budget needs prices, and model {run.model!r} "
              f"({run.model_name or 'the default model'}"
              + (f" at {run.base_url}" if run.base_url else "") + ") has none: give its [[models]] entry "
              "price = {input = ..., output = ...} (dollars per million tokens), or drop the budget "
              "(budget, run_budget, --budget) to run it with its cost unknown", file=sys.stderr)
        return 2
    runs_dir = (args.runs_dir or args.spec.resolve().parent / "runs" / experiment.name).resolve()
    runs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if args.spec.resolve() != runs_dir / "experiment.toml":
        shutil.copyfile(args.spec, runs_dir / "experiment.toml")
    how = args.order or table.order
    seed = None if how == "grid" else order_seed(runs_dir, args.seed if args.seed is not None else table.seed)
    if seed is not None and seed < 0:
        print("amacs-server experiment: --seed must be 0 or more", file=sys.stderr)
        return 2
    (runs_dir / ORDER).write_text(json.dumps({"order": how, "seed": seed}) + "\n", encoding="utf-8")
    experiment = replace(experiment, runs=run_order(experiment.runs, seed))
    for run in experiment.runs:  # stopped once finished: recorded done, not run (and paid) again
        resumed = finish_teardown(run, runs_dir)
        if resumed is not None and resumed.outcome is not None:
            print(f"{experiment.name}: {run.run_id} was {resumed.words}, every turn replied to: "
                  f"recorded done ({_cost(resumed.outcome.cost)}), its home whole; it does not run again",
                  flush=True)
        elif resumed is not None:
            print(f"{experiment.name}: {run.run_id} had every turn replied to, but {resumed.words}: "
                  "it runs again", flush=True)
        if resumed is None or resumed.outcome is None:
            record_killed(run, runs_dir)  # what it paid counts as paid before, on the bar too
    todo, before, again, earlier = _pending(experiment, runs_dir)
    if todo and (moved := moved_origin(experiment.runs, runs_dir)) is not None:  # the mind the done runs forked
        print(f"amacs-server experiment: {moved}", file=sys.stderr)
        return 2
    spent = sum(cost or 0.0 for cost in before.values()) + earlier
    total = len(experiment.runs)
    print(f"{experiment.name}: {total} runs in {runs_dir}; {total - len(todo)} done before, "
          f"{len(todo)} to run" + (f" ({again} of them again: failed or interrupted before)" if again else "")
          + f", {parallel} at once"
          + (f", in a random order (seed {seed}; --order grid for the grid's)" if seed is not None
             else ", in the grid's order")
          + (f", on Ray {args.ray or '(local)'}" if args.ray is not None else ""),
          flush=True)
    if not todo:
        return 0
    if (first := first_alone_words(todo, budget, spent, list(before.values()))) is not None:
        print(f"{experiment.name}: {first}", flush=True)
    try:  # a C-c while the executor starts (its fork server imports the SDKs) is said the same way
        executor: Executor = (RayExecutor(runs_dir, parallel, args.ray or None) if args.ray is not None
                              else LocalExecutor(runs_dir, parallel, sorted({run.backend for run in todo})))
        outcomes, left, stopped = execute(todo, executor, parallel, budget, spent, total, experiment.name,
                                          progress_console(), list(before.values()))
    except KeyboardInterrupt:
        print(f"{experiment.name}: interrupted: {record_words(experiment, runs_dir)}; run the same command "
              "again to resume.", flush=True)
        return 130
    spent += sum(o.cost or 0.0 for o in outcomes)
    failed = [o for o in outcomes if o.status == "failed"]
    print(f"{experiment.name}: {record_words(experiment, runs_dir)}", flush=True)
    for line in summary(outcomes):
        print(line, flush=True)
    if stopped is not None and left:
        print(f"Stopped early: the last {SAME_FAILURES} runs failed the same way ({stopped}); "
              f"{len(left)} runs not started. Fix the cause and run the same command again to resume.",
              flush=True)
    elif budget is not None and (left or spent > budget + CENT_DUST):
        print(budget_words(spent, budget, len(left), "run", "runs not started",
                           "re-run with a larger --budget to run them"), flush=True)
    return 1 if failed else 3 if left else 0
