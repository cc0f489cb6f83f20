"""The dataset of many runs (issue 15): ``amacs-server dataset RUNS_DIR``.

Generated runs (tests/research_fakes.py) are loaded and every table is compared with
what the generator wrote; a real session's home (a batch Emacs, the real server and the
fake model) is loaded too, so the loader is proven on real transcripts."""

import json
from pathlib import Path

import duckdb
import pytest

from amacs_server.research import dataset
from amacs_server.research.dataset import OPEN, PARAMS, TABLES, load
from tests.research_fakes import FakeRun, write_runs

RUNS = 40


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, list[FakeRun]]:
    runs_dir = tmp_path_factory.mktemp("runs")
    return runs_dir, write_runs(runs_dir, RUNS)


@pytest.fixture(scope="module")
def con(generated):
    runs_dir, _runs = generated
    connection = load(runs_dir, parquet=True)
    yield connection
    connection.close()


def by_run(con, sql: str) -> dict[str, int]:
    return dict(con.execute(sql).fetchall())


def test_row_counts_match_the_generated_runs(generated, con):
    _dir, runs = generated
    assert {r.manifest["status"] for r in runs} == {"done", "failed"}  # both kinds are in the sample
    assert dataset.counts(con) == {
        "runs": RUNS, "events": sum(r.events for r in runs), "model_calls": sum(r.model_calls for r in runs),
        "evals": sum(r.evals for r in runs), "blocks": sum(r.blocks for r in runs),
        "agents": sum(len(r.agents) for r in runs), "turns": sum(r.turns for r in runs),
        "scores": 0, "tool_calls": 0, "earlier_calls": 0}
    per_run = {"events": "SELECT run_id, count(*) FROM events GROUP BY 1",
               "model_calls": "SELECT run_id, count(*) FROM model_calls GROUP BY 1",
               "evals": "SELECT run_id, count(*) FROM evals GROUP BY 1",
               "eval_errors": "SELECT run_id, count(*) FILTER (WHERE NOT ok) FROM evals GROUP BY 1",
               "blocks": "SELECT run_id, count(*) FROM blocks GROUP BY 1"}
    for field, sql in per_run.items():
        got = by_run(con, sql)
        want = {r.run_id: getattr(r, field) for r in runs if getattr(r, field)}
        assert {k: v for k, v in got.items() if v} == want, field
    names = con.execute("SELECT run_id, event, count(*) FROM events GROUP BY ALL").fetchall()
    assert {(run, event): n for run, event, n in names} == {
        (r.run_id, e): n for r in runs for e, n in r.events_by_name.items()}
    costs = by_run(con, "SELECT run_id, sum(cost) FROM model_calls GROUP BY 1")
    assert all(costs[r.run_id] == pytest.approx(r.cost) for r in runs)
    # the runs table's own counts agree with the other tables
    assert con.execute("SELECT count(*) FROM runs r WHERE events != (SELECT count(*) FROM events e "
                       "WHERE e.run_id = r.run_id) OR agents != (SELECT count(*) FROM agents a "
                       "WHERE a.run_id = r.run_id)").fetchone() == (0,)


def test_agent_trees_match_the_generated_runs(generated, con):
    _dir, runs = generated
    got = con.execute("SELECT run_id, agent_id, parent_id, agent_type, template, state, steps FROM agents").fetchall()
    assert sorted(got) == sorted((r.run_id, a.id, a.parent, a.type, a.template, a.state, a.steps)
                                 for r in runs for a in r.agents.values())
    # every state says what happened: an agent_end's, or open at end (the primary, a failed run's viewpoints)
    states = {s for (s,) in con.execute("SELECT DISTINCT state FROM agents").fetchall()}
    assert states == {"done", "failed", "discarded", "quit", OPEN}
    assert con.execute("SELECT DISTINCT state FROM agents WHERE agent_type = 'primary'").fetchall() == [(OPEN,)]
    # steps are never NULL: an agent without an agent_end has its answered model calls
    assert con.execute("SELECT count(*) FROM agents WHERE steps IS NULL OR steps != (SELECT count(*) "
                       "FROM model_calls m WHERE m.run_id = agents.run_id AND m.agent_id = agents.agent_id "
                       "AND m.ok)").fetchone() == (0,)
    # an agent open at end lived until its session's last event; the others until their agent_end
    assert con.execute("""
        SELECT count(*) FROM agents a WHERE ended_at != CASE WHEN state = 'open at end'
            THEN (SELECT max(ts) FROM events e WHERE e.run_id = a.run_id AND e.session_id = a.session_id)
            ELSE (SELECT max(ts) FROM events e WHERE e.run_id = a.run_id AND e.agent_id = a.agent_id
                  AND e.event = 'agent_end') END""").fetchone() == (0,)
    primaries = con.execute("SELECT count(*), count(*) FILTER (WHERE parent_id IS NULL AND depth = 0) "
                            "FROM agents WHERE agent_type = 'primary'").fetchone()
    assert primaries == (RUNS, RUNS)  # one root per run
    # every parent is an agent of the same run
    assert con.execute("SELECT count(*) FROM agents c LEFT JOIN agents p ON p.run_id = c.run_id "
                       "AND p.session_id = c.session_id AND p.agent_id = c.parent_id "
                       "WHERE c.parent_id IS NOT NULL AND p.agent_id IS NULL").fetchone() == (0,)
    # an agent's model calls and cost are those of its own events
    assert con.execute("SELECT count(*) FROM agents a WHERE model_calls != (SELECT count(*) FROM model_calls m "
                       "WHERE m.run_id = a.run_id AND m.agent_id = a.agent_id)").fetchone() == (0,)


def test_run_parameters_are_columns_of_every_table(generated, con):
    _dir, runs = generated
    for table in TABLES:
        columns = {r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()}
        assert set(PARAMS) | {"run_id"} <= columns, table
    manifests = {r.run_id: r.manifest for r in runs}
    for table in ("runs", "events", "model_calls", "evals", "agents", "blocks", "turns"):
        rows = con.execute(f"SELECT DISTINCT run_id, experiment, prompt, variant, model, backend, model_name, "
                           f"rep, seed, status FROM {table}").fetchall()
        assert rows, table
        for run_id, *values in rows:
            m = manifests[run_id]
            assert values == [m[k] for k in ("experiment", "prompt", "variant", "model", "backend", "model_name",
                                             "rep", "seed", "status")], (table, run_id)
    runs_rows = con.execute("SELECT run_id, cost, turns_done, turns, error FROM runs").fetchall()
    assert {r[0]: (r[1], r[2], r[3], r[4]) for r in runs_rows} == {
        k: (m["cost"], m["turns_done"], m["turns"], m["error"]) for k, m in manifests.items()}


def test_evals_are_paired_with_their_results(con):
    unmatched = con.execute("SELECT count(*) FROM evals WHERE ok IS NULL").fetchone()
    assert unmatched == (0,)
    blocked = con.execute("SELECT count(*) FROM evals WHERE blocked").fetchone()
    assert blocked == con.execute("SELECT count(*) FROM blocks").fetchone()
    assert con.execute("SELECT count(*) FROM evals WHERE form LIKE '%my-undefined-function%' AND ok").fetchone() \
        == (0,)


def test_parquet_files_are_readable_by_duckdb_with_the_same_counts(generated, con):
    runs_dir, _runs = generated
    fresh = duckdb.connect()
    for table, n in dataset.counts(con).items():
        path = runs_dir / "parquet" / f"{table}.parquet"
        assert fresh.execute(f"SELECT count(*) FROM '{path}'").fetchone() == (n,), table
    assert fresh.execute(f"SELECT count(DISTINCT run_id) FROM '{runs_dir / 'parquet' / 'events.parquet'}'"
                         ).fetchone() == (RUNS,)


def test_command_prints_a_summary_and_a_truncated_line_is_skipped(tmp_path, capsys):
    runs = write_runs(tmp_path, 3)
    killed = next((tmp_path / runs[0].run_id / "home" / "transcripts").glob("*.jsonl"))
    with killed.open("a") as f:
        f.write('{"run_id": "x", "session_id": "x", "agent_id": "prim')  # a run killed mid-write
    assert dataset.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "3 runs loaded" in out and "rows per table" in out and "dataset.duckdb" in out
    con = duckdb.connect(str(tmp_path / "dataset.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM events").fetchone() == (sum(r.events for r in runs),)
    assert (tmp_path / "parquet" / "agents.parquet").exists()


@pytest.mark.e2e
def test_a_real_session_loads_with_its_agents(tmp_path):
    """Two real sessions (a batch Emacs, the real server, the fake model): a nested task tree,
    and a compulsion that blocks an eval; each home wrapped as RUNS_DIR/<id>/home."""
    from tests.e2e import test_agents as real
    from tests.e2e.agent_fakes import scripted_run
    from tests.fake_anthropic import FakeAnthropic

    runs_dir = tmp_path / "runs"
    sessions = {"nested.r0": real.test_websearch_shaped_task_spawns_two_subtasks_and_combines,
                "compulsion.r0": real.test_compulsion_blocks_the_fourth_task_and_only_it_can_quit}
    for rep, (run_id, session) in enumerate(sessions.items()):
        (runs_dir / run_id).mkdir(parents=True)  # the harness puts the session's HOME beside its AMACS home
        fake = FakeAnthropic().start()
        try:
            home = runs_dir / run_id / "home"
            session(fake, home, scripted_run(fake, home))
        finally:
            fake.stop()
        (runs_dir / run_id / "manifest.json").write_text(json.dumps({
            "run_id": run_id, "experiment": "real", "prompt": run_id.split(".")[0], "variant": "builtin",
            "model": "fake", "backend": "anthropic", "model_name": "claude-sonnet-4-5", "rep": rep, "seed": rep,
            "turns": [], "status": "done", "cost": None, "turns_done": 1, "error": None}))
    con = load(runs_dir)
    lines = [json.loads(line) for p in sorted(runs_dir.glob("*/home/transcripts/*.jsonl"))
             for line in p.read_text().splitlines()]
    assert dataset.counts(con)["events"] == len(lines)
    assert dataset.counts(con)["model_calls"] == sum(e["event"] in ("model_response", "model_error") for e in lines)
    assert dataset.counts(con)["evals"] == sum(e["event"] == "eval" for e in lines)
    tree = {(run, agent): (parent, kind, template, state) for run, agent, parent, kind, template, state in
            con.execute("SELECT run_id, agent_id, parent_id, agent_type, template, state FROM agents").fetchall()}
    assert tree == {
        ("nested.r0", "primary"): (None, "primary", "core", OPEN),
        ("nested.r0", "task-1"): ("primary", "task", "researcher", "done"),
        ("nested.r0", "task-2"): ("task-1", "task", "researcher", "done"),
        ("nested.r0", "task-3"): ("task-1", "task", "researcher", "done"),
        ("compulsion.r0", "primary"): (None, "primary", "core", OPEN),
        ("compulsion.r0", "compulsion-1"): ("primary", "compulsion", "spawn-limiter", "quit"),
        ("compulsion.r0", "task-2"): ("primary", "task", "researcher", "done"),
        ("compulsion.r0", "task-3"): ("primary", "task", "researcher", "done"),
        ("compulsion.r0", "task-4"): ("primary", "task", "researcher", "done"),
    }
    depths = dict(con.execute("SELECT agent_id, depth FROM agents WHERE run_id = 'nested.r0'").fetchall())
    assert depths == {"primary": 0, "task-1": 1, "task-2": 2, "task-3": 2}
    blocks = con.execute("SELECT run_id, blocked_by, by_template, action FROM blocks").fetchall()
    assert blocks == [("compulsion.r0", "compulsion-1", "spawn-limiter", "eval")]
    blocked = con.execute("SELECT agent_id, ok, form FROM evals WHERE blocked").fetchall()
    assert blocked == [("primary", False, '(agent-task "researcher" "job 4")')]
    spent = con.execute("SELECT count(*), sum(cost) > 0, bool_and(input_tokens > 0) FROM model_calls").fetchone()
    assert spent == (sum(e["event"] == "model_response" for e in lines), True, True)
    # every agent's model_response has the same fields: a subagent's call has its stop_reason too
    fields = {(e["agent_type"], tuple(sorted(e["data"]))) for e in lines if e["event"] == "model_response"}
    assert {kind for kind, _f in fields} == {"primary", "task", "compulsion"}
    assert len({f for _k, f in fields}) == 1, fields
    assert con.execute("SELECT agent_type, count(*) FROM model_calls WHERE stop_reason IS NULL GROUP BY 1"
                       ).fetchall() == []
    # steps: the agent_end's, else (the primary, open at end) its answered model calls, as the server counts
    steps = con.execute("SELECT agent_id, state, steps, model_calls FROM agents WHERE run_id = 'nested.r0' "
                        "ORDER BY agent_id").fetchall()
    assert all(n is not None and n == calls for _a, _s, n, calls in steps), steps
    ended = con.execute("SELECT count(*), count(*) FILTER (WHERE a.steps = CAST(e.data->'$.steps' AS INTEGER)) "
                        "FROM agents a JOIN events e ON e.run_id = a.run_id AND e.session_id = a.session_id "
                        "AND e.agent_id = a.agent_id AND e.event = 'agent_end'").fetchone()
    assert ended[0] >= 7 and ended[0] == ended[1]
    assert con.execute("SELECT prompt, model_cost > 0 FROM runs ORDER BY run_id").fetchall() == [
        ("compulsion", True), ("nested", True)]


def test_a_folder_without_runs_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no runs"):
        load(tmp_path / "missing")
    with pytest.raises(SystemExit, match="no runs"):
        load(tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_turns_are_what_each_agent_was_asked_and_replied(generated, con):
    """The primary: a row per turn of the script it began, asked the person's words, its replies (tick_end's);
    a subagent: a row per answer that ended its steps (no eval), its reply the answer's; thinking where kept."""
    runs_dir, runs = generated
    for run in runs[:12]:
        rows = con.execute("SELECT agent_id, agent_type, turn, input, reply, thinking, model_calls, evals, cost "
                           "FROM turns WHERE run_id = ? ORDER BY agent_id, turn", [run.run_id]).fetchall()
        events = [json.loads(line) for path in (runs_dir / run.run_id / "home" / "transcripts").glob("*.jsonl")
                  for line in path.read_text().splitlines()]
        primary = [r for r in rows if r[0] == "primary"]
        humans = [e["data"]["human"] for e in events if e["event"] == "tick_start" and e["data"]["human"]]
        assert [r[3] for r in primary] == humans == run.manifest["turns"][:len(humans)]
        assert [r[2] for r in primary] == list(range(1, len(humans) + 1))
        replies = [e["data"]["response"]["reply"] for e in events if e["event"] == "tick_end"]
        assert [r[4] for r in primary] == [r for r in replies if r][:len(primary)]
        for agent_id, kind, *_rest in rows:
            assert kind == run.agents[agent_id].type
        for row in (r for r in rows if r[1] == "viewpoint"):
            assert row[3] == "[primary] Ban cars?" and row[4] == f"{row[0]} says so", row
        answered = [e for e in events if e["event"] == "model_response"]
        assert sum(r[6] for r in rows) == len(answered)
        assert sum(r[8] for r in rows) == pytest.approx(sum(e["data"]["cost"] for e in answered))
        kept = [e["data"]["thinking"] for e in answered if e["data"].get("thinking")]
        assert sorted(t for r in rows if r[5] for t in r[5].split("\n\n")) == sorted(kept)
    sizes = con.execute("SELECT count(*) FILTER (WHERE thinking_chars > 0), count(*) FILTER (WHERE thinking_chars = 0),"
                        " count(*) FILTER (WHERE thinking_chars IS NULL AND ok) FROM model_calls").fetchone()
    assert all(sizes), sizes  # some kept, some empty, some from transcripts without the key


def test_transcripts_counts_agents_not_names(generated):
    """``amacs-server transcripts`` over many runs: every run's primary and viewpoints are agents of their
    own (the names repeat from run to run)."""
    from amacs_server.transcripts import summarize

    runs_dir, runs = generated
    summary = summarize(runs_dir)
    by_type: dict[str, int] = {}
    for run in runs:
        for agent in run.agents.values():
            by_type[agent.type] = by_type.get(agent.type, 0) + 1
    assert summary["agents_by_type"] == by_type and by_type["primary"] == RUNS
    assert summary["agents"] == sum(len(r.agents) for r in runs)
    assert summary["agents_per_run"] == {r.session_id: len(r.agents) for r in runs}


def test_concurrency_is_the_runs_going_at_once_over_a_run(tmp_path):
    """Three runs: A alone for 10 s, B inside A's second half, C after both: A 1.5, B 2, C 1."""
    runs = write_runs(tmp_path, 3)
    spans = {runs[0].run_id: (100.0, 110.0), runs[1].run_id: (105.0, 110.0), runs[2].run_id: (200.0, 204.0)}
    for run in runs:
        path = tmp_path / run.run_id / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["started_at"], manifest["ended_at"] = spans[run.run_id]
        path.write_text(json.dumps(manifest))
    con = load(tmp_path)
    assert dict(con.execute("SELECT run_id, concurrency FROM runs").fetchall()) == {
        runs[0].run_id: 1.5, runs[1].run_id: 2.0, runs[2].run_id: 1.0}
    from amacs_server.research.report import parallelism

    assert parallelism(con).startswith("runs went up to 2 at once, 1.5 on average over a run, on 2 CPUs")
