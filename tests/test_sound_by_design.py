"""Research results sound by design: a seeded random run order, durations from the run's start
signal, and arms compared by the difference of their means with its 95% interval.

The newcomer's case: the shipped debate's first four runs were all of one arm and paid Emacs's
and the server's start-up, so "Duration of each run" showed a difference between the arms that
was the run order's.  Here: the order interleaves the arms (its seed kept), a run's start-up is
kept out of its duration, and a comparison says what a constructed dataset's known answer is, or
that n is too small to tell."""

import statistics
from pathlib import Path

import duckdb
import pytest

from amacs_server.research.compare import MIN_N, difference, permutation_p
from amacs_server.research.experiment import ORDER, order_seed
from amacs_server.research.report import compare_arms
from amacs_server.research.runs import Outcome, durations, manifest
from amacs_server.research.spec import load, run_order

SPEC = """
[experiment]
name = "order"
repetitions = 5

[[prompts]]
name = "q"
turns = ["hello"]

[[variants]]
name = "two-views"

[[variants]]
name = "three-views"

[[models]]
name = "fake"
"""


@pytest.fixture
def grid(tmp_path):
    path = tmp_path / "experiment.toml"
    path.write_text(SPEC)
    return load(path).runs


def test_runs_go_in_a_seeded_random_order_across_arms(grid):
    assert [r.variant for r in grid] == ["two-views"] * 5 + ["three-views"] * 5  # the grid: arm lines up with time
    ordered = run_order(grid, 7)
    assert sorted(r.run_id for r in ordered) == sorted(r.run_id for r in grid)  # a permutation
    assert [r.run_id for r in run_order(grid, 7)] == [r.run_id for r in ordered]  # same seed, same order
    assert [r.run_id for r in run_order(grid, 8)] != [r.run_id for r in ordered]
    assert [r.position for r in ordered] == list(range(10)) and {r.order_seed for r in ordered} == {7}
    assert [r.run_id for r in run_order(grid, None)] == [r.run_id for r in grid]  # --order grid: as before
    # over seeds, neither arm goes first: the mean position of each arm is the middle (4.5), where the
    # grid puts two-views at 2 and three-views at 7
    means = {v: statistics.mean(r.position for s in range(400) for r in run_order(grid, s) if r.variant == v)
             for v in ("two-views", "three-views")}
    assert all(abs(m - 4.5) < 0.25 for m in means.values()), means
    # and the first four runs, the ones that pay start-up at parallel 4, are rarely of one arm
    one_arm = sum(len({r.variant for r in run_order(grid, s)[:4]}) == 1 for s in range(400)) / 400
    assert one_arm < 0.1, one_arm


def test_the_seed_is_kept_in_the_runs_folder_and_the_manifest(grid, tmp_path):
    (tmp_path / ORDER).write_text('{"order": "random", "seed": 1234}')
    assert order_seed(tmp_path, None) == 1234  # a resume keeps the order it started with
    assert order_seed(tmp_path, 5) == 5  # the spec's or --seed wins
    fresh = order_seed(tmp_path / "none", None)
    assert isinstance(fresh, int) and fresh >= 0
    run = run_order(grid, 1234)[3]
    written = manifest(run, "running", 0.0)
    assert written["order_seed"] == 1234 and written["position"] == 3


def test_a_runs_start_up_is_kept_out_of_its_duration():
    # a first run: its Emacs and server start inside it (3 s), then 1.5 s of work, then 0.4 s to stop
    first = Outcome(run_id="a", status="done", cost=0.0, seconds=5.0, turns_done=1, started_at=100.0,
                    ended_at=105.0, phases={"emacs_started_at": 100.1, "server_started_at": 102.0,
                                            "first_turn_at": 103.1, "first_request_at": 103.15,
                                            "last_reply_at": 104.6})
    said = durations(first)
    assert said["seconds"] == pytest.approx(1.5)  # from the first turn to the last reply
    assert said["startup_seconds"] == pytest.approx(3.0) and said["wall_seconds"] == 5.0
    # a run prepared ahead: its Emacs started 40 s before the experiment started it; it waited 0.2 s more
    ahead = Outcome(run_id="p", status="done", cost=0.0, seconds=1.0, turns_done=1, started_at=140.0,
                    ended_at=141.0, phases={"emacs_started_at": 100.0, "first_turn_at": 140.2,
                                            "last_reply_at": 140.9})
    assert durations(ahead)["startup_seconds"] == pytest.approx(0.2)
    failed = Outcome(run_id="b", status="failed", cost=0.0, seconds=9.0, turns_done=0, started_at=0.0,
                     ended_at=9.0, error="timed out", phases={"emacs_started_at": 0.0, "first_turn_at": 2.0})
    assert durations(failed)["seconds"] == pytest.approx(7.0)  # no reply: to its end
    never = Outcome(run_id="c", status="failed", cost=0.0, seconds=1.0, turns_done=0, started_at=0.0,
                    ended_at=1.0, error="could not run", phases={})
    assert durations(never)["seconds"] is None  # no turn reached a server: no duration of work


def test_a_difference_with_a_known_answer():
    noise = [0.31, -0.52, 0.14, 0.87, -0.25, -0.9, 0.45, 0.02, -0.33, 0.61,
             -0.12, 0.73, -0.68, 0.2, -0.05, 0.38, -0.47, 0.55, -0.81, 0.09]
    a = [10 + e for e in noise]
    b = [12 + e for e in reversed(noise)]  # the same spread, 2 higher
    d = difference(a, b)
    assert d.difference == pytest.approx(2.0)
    assert d.low is not None and d.high is not None and d.p is not None
    assert d.low < 2.0 < d.high and d.low > 1.0 and d.high < 3.0  # the interval holds the answer, not 0
    assert d.p < 0.001 and "higher by 2" in d.words(" s")
    same = difference(a, [10 + e for e in reversed(noise)])
    assert same.low is not None and same.high is not None
    assert same.low < 0 < same.high and same.words().startswith("no difference shown")
    fives = difference([5.0] * 5, [5.0] * 5)  # newcomer6: "+0 (+0 to +0) no difference shown ..."
    assert fives.words() == "no difference: every run of both arms had the same value (5)"
    few = difference(a[:3], b[:2])
    assert not few.enough and few.low is None and "too few runs to tell (n = 3 and 2" in few.words()
    assert MIN_N == 5


def test_the_permutation_test_is_exact_where_it_fits():
    p, exact = permutation_p([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert exact and p == pytest.approx(2 / 20)  # of C(6,3) = 20 labellings, the two extremes
    p, exact = permutation_p([float(i) for i in range(15)], [float(i) + 0.5 for i in range(15)])
    assert not exact and p > 0.5  # C(30,15) labellings: drawn, seeded


def constructed(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    """A dataset with a known answer: arm b's runs take 2 s longer than arm a's, their costs and scores
    come from one distribution, and arm c has 2 runs."""
    con = duckdb.connect(str(tmp_path / "d.duckdb"))
    con.execute("""CREATE TABLE runs (run_id VARCHAR, arm VARCHAR, status VARCHAR, seconds DOUBLE, cost DOUBLE,
                   model_cost DOUBLE, model_calls BIGINT, input_tokens BIGINT, output_tokens BIGINT,
                   order_seed BIGINT)""")
    con.execute("""CREATE TABLE scores (run_id VARCHAR, arm VARCHAR, judge VARCHAR, score DOUBLE, judged VARCHAR)""")
    spread = [0.1 * ((7 * i) % 11) for i in range(12)]
    for i, e in enumerate(spread):
        for arm, extra in (("a", 0.0), ("b", 2.0)):
            con.execute("INSERT INTO runs VALUES (?, ?, 'done', ?, ?, ?, 4, 1000, 100, 42)",
                        [f"{arm}{i}", arm, 3.0 + e + extra, 0.05 + e / 100, 0.05 + e / 100])
            con.execute("INSERT INTO scores VALUES (?, ?, 'quality', ?, 'done')", [f"{arm}{i}", arm, 3 + i % 3])
    for i in range(2):
        con.execute("INSERT INTO runs VALUES (?, 'c', 'done', 9.0, 0.1, 0.1, 4, 1000, 100, 42)", [f"c{i}"])
    return con


def test_the_report_compares_arms_with_the_known_answer(tmp_path):
    rows = {(r[0], r[1]): r for r in compare_arms(constructed(tmp_path), ["a", "b", "c"])}
    duration = rows[("duration, first turn to last reply", "b vs a")]
    assert duration[2:4] == (12, 12) and "+2 (" in duration[6] and duration[7].startswith("higher by 2 s")
    assert rows[("cost", "b vs a")][7].startswith("no difference shown")
    assert rows[("score: quality", "b vs a")][7].startswith("no difference shown")
    assert rows[("duration, first turn to last reply", "c vs a")][7].startswith("too few runs to tell (n = 12 and 2")
