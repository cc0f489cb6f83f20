"""A budget is a ceiling as far as one can be: a run (or a judgement) starts only if what is spent, the
runs going and its own, each at the most a run has cost, fit it; with none ended yet, one goes alone.

Found by a newcomer (newcomer8 #30, #41): ``experiment --budget 0.1 --parallel 2`` spent $0.1665 (two
runs started while the finished ones had cost $0.0834: the runs in flight were not counted), and
``judge --budget 0.01`` spent $0.0158."""

from io import StringIO

from rich.console import Console

from amacs_server.research.experiment import budget_words, execute, fits
from amacs_server.research.runs import Outcome


class Job:
    def __init__(self, n: int) -> None:
        self.run_id = f"p.v.m.r{n}"


class Paced:
    """An executor whose jobs end one per look, the oldest first, each at the next of COSTS; it keeps
    how many were going at each start."""

    def __init__(self, costs: list[float]) -> None:
        self.costs = list(costs)
        self.going: list[str] = []
        self.at_start: list[int] = []

    def submit(self, job: Job) -> None:
        self.at_start.append(len(self.going))
        self.going.append(job.run_id)

    def finished(self, timeout: float) -> list[Outcome]:
        if not self.going:
            return []
        run_id = self.going.pop(0)
        return [Outcome(run_id=run_id, status="done", cost=self.costs.pop(0), seconds=1.0, turns_done=1,
                        started_at=0.0, ended_at=1.0)]

    def close(self) -> None:
        pass


def run(costs: list[float], budget: float, parallel: int = 2, known: tuple[float, ...] = ()) -> tuple[
        list[Outcome], list[Job], Paced]:
    executor = Paced(costs)
    console = Console(file=StringIO(), width=160, color_system=None)
    outcomes, left, _stopped = execute([Job(n) for n in range(len(costs))], executor, parallel, budget, 0.0,
                                       len(costs), "debate", console, known)
    return outcomes, left, executor


def test_runs_in_flight_count_against_the_budget_at_the_most_a_run_cost():
    """Ten runs at $0.04, $0.10 at parallel 2: the first alone, then one beside the next while the
    three fit; $0.08 spent, never over (checking only finished runs started 4 and spent $0.16)."""
    outcomes, left, executor = run([0.04] * 10, 0.10)
    spent = sum(o.cost or 0.0 for o in outcomes)
    assert spent <= 0.10, spent
    assert len(outcomes) == 2 and len(left) == 8
    assert executor.at_start == [0, 0], executor.at_start  # one at a time: a third would not fit beside


def test_the_first_run_goes_alone_until_one_ends():
    """No run ended yet, nothing tells what one costs: at parallel 4, one goes, then the rest as they fit."""
    outcomes, _left, executor = run([0.01] * 6, 1.0, parallel=4)
    assert len(outcomes) == 6
    assert executor.at_start[:2] == [0, 0] and max(executor.at_start) == 3, executor.at_start


def test_costs_known_from_before_let_runs_go_at_once():
    """A resume knows what runs cost (those done before): no run goes alone."""
    _outcomes, _left, executor = run([0.01] * 4, 1.0, parallel=2, known=(0.01,))
    assert executor.at_start[:2] == [0, 1], executor.at_start


def test_a_run_dearer_than_expected_passes_the_budget_by_its_difference_and_the_line_says_so():
    """$0.03 first, then two at $0.05 that were expected at $0.03: over by $0.03, said with why."""
    outcomes, left, _executor = run([0.03, 0.05, 0.05, 0.05], 0.10)
    spent = sum(o.cost or 0.0 for o in outcomes)
    assert round(spent, 4) == 0.13 and len(left) == 1
    line = budget_words(spent, 0.10, len(left), "run", "runs not started",
                        "re-run with a larger --budget to run them")
    assert line.startswith("Budget spent: $0.1300 of $0.1000, over by $0.0300 (a run starts only if"), line
    assert "; but a run can cost more than was expected of it (the most one had cost before it started; the " \
        "first run goes before any cost is known), and none is stopped halfway: it would be paid for and thrown " \
        "away); 1 runs not started" in line, line
    assert line.endswith("; 1 runs not started (re-run with a larger --budget to run them)."), line


def test_within_the_budget_the_line_says_how_it_was_kept():
    line = budget_words(0.08, 0.10, 8, "judgement", "runs not judged", "re-run with a larger --budget "
                        "to judge them")
    assert line == ("Budget spent: $0.0800 of $0.1000 (a judgement starts only if what is spent, the judgements "
                    "going and its own, each at the most a judgement had cost, fit it; until one has ended, one goes at a time); "
                    "8 runs not judged (re-run with a larger --budget to judge them).")


def test_fits():
    assert fits(None, 5.0, 9, None)
    assert fits(0.1, 0.0, 0, None) and not fits(0.1, 0.0, 1, None)  # none ended: one at a time
    assert not fits(0.1, 0.1, 0, 0.0)  # spent: nothing starts, even a free one
    assert fits(0.0024, 0.0018, 0, 0.0006)  # a float sum a hair over is within it
    assert not fits(0.0027, 0.0018, 1, 0.0006)


def test_the_first_run_s_bound_is_said_when_it_is_above_the_budget_left():
    """newcomer9 #22: a --budget below one run: the first run went alone, passed it 4 times, and only
    the last line said why.  Said before it starts when its run_budget (or nothing) bounds it above the
    budget left; not when its run_budget is within it, nor once a run's cost is known."""
    from types import SimpleNamespace

    from amacs_server.research.experiment import first_alone_words

    capped, unbounded = SimpleNamespace(run_budget=0.4), SimpleNamespace(run_budget=None)
    assert first_alone_words([capped], 0.01, 0.0, []) == (
        "no run's cost is known yet, so the first goes alone, and only the spec's run_budget ($0.4000 a run) "
        "bounds what it spends: more than the $0.0100 left of the budget, which it can pass (C-c stops it)")
    assert "nothing but its time limit bounds what it spends (the spec has no run_budget): more than the " \
        "$0.0500 left" in first_alone_words([unbounded], 0.1, 0.05, [None])
    assert first_alone_words([capped], 1.0, 0.0, []) is None  # its run_budget fits the budget
    assert first_alone_words([capped], 0.01, 0.0, [0.04]) is None  # a run's cost is known: fits() bounds
    assert first_alone_words([capped], None, 0.0, []) is None
    assert first_alone_words([capped], 0.01, 0.01, []) is None  # spent: nothing starts
