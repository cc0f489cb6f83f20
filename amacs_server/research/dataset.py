"""One dataset of many runs: ``amacs-server dataset RUNS_DIR`` (docs/ARCHITECTURE.md, Research).

Every run of RUNS_DIR (``<run-id>/manifest.json`` and ``<run-id>/home/transcripts/*.jsonl``)
is loaded with DuckDB's own JSON reader (one scan over a glob, explicit columns: no
Python per line) into ``RUNS_DIR/dataset.duckdb``, and each table is written as Parquet
to ``RUNS_DIR/parquet/<table>.parquet`` for pandas/polars users.

Tables (every one but ``runs`` carries the run's parameters as columns: run_id (the
run's folder name), experiment, prompt, variant, model, backend, model_name, rep, seed,
status, arm):

- ``runs``: one row per run, its manifest (endpoint: the host its model calls went to, e.g.
  api.anthropic.com or 127.0.0.1:35029; turns, cost, turns_done, started_at, ended_at,
  seconds (from the run's start signal, its first turn reaching its server, to its last reply),
  startup_seconds (its Emacs's start to that signal), wall_seconds (started_at to ended_at),
  error, failed_turn, the phases emacs_started_at server_started_at first_turn_at first_request_at
  last_reply_at, cpus, order_seed and position: the run order's seed and its place in it), concurrency (the runs going at once over its time, itself included),
  and the counts of its events, sessions (a rewind's or a fork's own file is none), agents, model calls and evals.
- ``events``: one row per transcript event: session_id, agent_id, parent_id, agent_type,
  template, seq, ts, tick, event, data (JSON).
- ``model_calls``: one row per model call (``model_response``, or ``model_error``: ok
  false): input/output/cache_read/cache_write tokens, cost (NULL: the model's price is
  unknown; every sum of dollars over such a call is NULL too, its tokens are kept), latency_ms, stop_reason, error,
  thinking_chars (the size of its thinking text; NULL in transcripts that do not keep it).
- ``earlier_calls``: the model calls of the earlier attempts of runs that ran again
  (``<run-id>/attempts/<n>/transcripts``) and of judgements asked again (``judge``: its judge; NULL
  for a run's), as ``model_calls`` has them, with their ``attempt``: their cost is the runs' and the
  scores' earlier_cost; no other table holds them.
- ``evals``: one row per ``eval``: the form, and from its ``eval_result`` ok, error,
  result, seconds, and whether a compulsion blocked it.
- ``blocks``: one row per compulsion block (``blocked``): blocked_by (the compulsion), by_template, action, form, reason.
- ``agents``: one row per agent per session: its parent, type, template, name, depth,
  state (its last ``agent_end``'s, e.g. done/failed/discarded/quit; ``open at end`` when
  it has none: still alive when its session ended, as the primary always is),
  started_at (its ``agent_start``, else its first event), ended_at (its ``agent_end``,
  else its session's last event), steps (its ``agent_end``'s steps, else its answered
  model calls: the server's count), model calls, tokens, cost, evals, eval errors: the
  agent tree, rebuilt from the transcripts' agent_id/parent_id and the
  agent_start/agent_end events.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..records import (
    AgentEnd,
    AgentStart,
    Blocked,
    BudgetStop,
    Eval,
    EvalResultRecord,
    ModelError,
    ModelRequest,
    ModelResponse,
    ReplyBlocked,
    StepLimit,
    TickEnd,
    TickStart,
    ToolCall,
)
from ..transcripts import ATTEMPTS, COLUMNS, Of, home_steps
from .spec import arms_of

if TYPE_CHECKING:
    import duckdb

DB_NAME = "dataset.duckdb"
OPEN = "open at end"  # an agent's state without an agent_end: alive when its session ended
TABLES = ("runs", "events", "model_calls", "evals", "blocks", "agents", "turns", "scores", "tool_calls",
          "earlier_calls")
SCORE_COLUMNS = {
    "judge": "VARCHAR", "score": "DOUBLE", "rationale": "VARCHAR", "cost": "DOUBLE", "model": "VARCHAR",
    "status": "VARCHAR", "error": "VARCHAR", "scale_low": "BIGINT", "scale_high": "BIGINT", "input": "VARCHAR",
    "seconds": "DOUBLE", "earlier_cost": "DOUBLE", "estimated_where": "VARCHAR"}

MANIFEST_COLUMNS = {
    "run_id": "VARCHAR", "experiment": "VARCHAR", "prompt": "VARCHAR", "variant": "VARCHAR",
    "model": "VARCHAR", "backend": "VARCHAR", "model_name": "VARCHAR", "endpoint": "VARCHAR", "rep": "BIGINT",
    "seed": "BIGINT",
    "turns": "VARCHAR[]", "status": "VARCHAR", "cost": "DOUBLE", "turns_done": "BIGINT",
    "started_at": "DOUBLE", "ended_at": "DOUBLE", "seconds": "DOUBLE", "error": "VARCHAR", "failed_turn": "BIGINT",
    "emacs_started_at": "DOUBLE", "server_started_at": "DOUBLE", "first_request_at": "DOUBLE",
    "last_reply_at": "DOUBLE", "cpus": "BIGINT", "origin": "VARCHAR", "origin_commit": "VARCHAR",
    "unpriced_calls": "BIGINT",
    "first_turn_at": "DOUBLE", "startup_seconds": "DOUBLE", "wall_seconds": "DOUBLE", "order_seed": "BIGINT",
    "position": "BIGINT", "earlier_cost": "DOUBLE",
}


# The kinds of transcript event the tables are made of; their fields are named through them.
RESPONSE, ERROR, REQUEST, EVAL, RESULT = (Of(ModelResponse), Of(ModelError), Of(ModelRequest), Of(Eval),
                                          Of(EvalResultRecord))
BLOCKED, TOOL, START, END, HELD = Of(Blocked), Of(ToolCall), Of(AgentStart), Of(AgentEnd), Of(ReplyBlocked)
TICK, TICK_END, BUDGET, STEPS = Of(TickStart), Of(TickEnd), Of(BudgetStop), Of(StepLimit)


def _dollars(column: str, known: str = "ok") -> str:
    """The sum of COLUMN, unknown (NULL) when a row that should have dollars (KNOWN) has none:
    never the known part passed off as the whole."""
    return f"CASE WHEN bool_or({known} AND {column} IS NULL) THEN NULL ELSE sum({column}) END"


# The run's parameters, a column of every table (the contract's list, and the arm they make).
PARAMS = ("experiment", "prompt", "variant", "model", "backend", "model_name", "rep", "seed", "status", "arm")


def _quote(path: Path | str) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _struct(columns: dict[str, str]) -> str:
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in columns.items()) + "}"


def _params(alias: str) -> str:
    return ", ".join(f"{alias}.{p}" for p in PARAMS)


def build(con: duckdb.DuckDBPyConnection, runs_dir: Path) -> None:
    """Create every table in CON from the runs of RUNS_DIR."""
    manifests = sorted(runs_dir.glob("*/manifest.json"))
    if not manifests:
        raise SystemExit(f"no runs (*/manifest.json) in {runs_dir}")
    # The manifests are many small files: read here and handed to DuckDB as one file of lines (its
    # reader paid ~3 ms a file; this, 0.1 ms). One being replaced at this instant is skipped.
    with tempfile.TemporaryDirectory(prefix="amacs-manifests-") as tmp:
        lines = Path(tmp) / "manifests.jsonl"
        with lines.open("w", encoding="utf-8") as out:
            for path in manifests:
                try:
                    data = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
                if isinstance(data, dict):
                    out.write(json.dumps({**data, "folder": path.parent.name}, ensure_ascii=False) + "\n")
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE manifest AS
            SELECT folder, * EXCLUDE (folder)
            FROM read_json({_quote(lines)}, format='newline_delimited',
                           columns={_struct({**MANIFEST_COLUMNS, "folder": "VARCHAR"})})""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE params AS
        SELECT folder AS run_id, experiment, prompt, variant, model, backend, model_name, rep, seed, status,
               concat_ws(' / ', prompt, variant, model) AS arm
        FROM manifest""")
    transcripts = list(runs_dir.glob("*/home/transcripts/*.jsonl"))
    cols = {k: v for k, v in COLUMNS.items() if k != "run_id"}
    if transcripts:
        folder = r"regexp_extract(filename, '([^/\\]+)[/\\]home[/\\]transcripts[/\\][^/\\]+$', 1)"
        source = (f"SELECT {folder} AS run_id, * EXCLUDE (filename) FROM read_json("
                  f"{_quote(runs_dir / '*' / 'home' / 'transcripts' / '*.jsonl')}, format='newline_delimited', "
                  f"columns={_struct(cols)}, filename=true, ignore_errors=true)")
    else:  # no run wrote a transcript yet: empty tables with the columns
        source = ("SELECT " + ", ".join(["NULL::VARCHAR AS run_id"] + [f"NULL::{t} AS {c}" for c, t in cols.items()])
                  + " WHERE false")
    con.execute(f"""
        CREATE OR REPLACE TABLE events AS
        SELECT t.run_id, {', '.join('p.' + p for p in PARAMS)},
               t.session_id, t.agent_id, t.parent_id, t.agent_type, t.template, t.seq, t.ts, t.tick, t.event, t.data
        FROM ({source}) t LEFT JOIN params p USING (run_id)
        WHERE t.event IS NOT NULL""")
    ident = "run_id, {params}, session_id, agent_id, parent_id, agent_type, template, seq, ts, tick"
    calls = f"""event = {RESPONSE} AS ok,
               CAST(data->'{RESPONSE.usage.input_tokens}' AS BIGINT) AS input_tokens,
               CAST(data->'{RESPONSE.usage.output_tokens}' AS BIGINT) AS output_tokens,
               CAST(data->'{RESPONSE.usage.cache_read_tokens}' AS BIGINT) AS cache_read_tokens,
               CAST(data->'{RESPONSE.usage.cache_write_tokens}' AS BIGINT) AS cache_write_tokens,
               CAST(data->'{RESPONSE.cost}' AS DOUBLE) AS cost,
               CAST(data->'{RESPONSE.latency_ms}' AS DOUBLE) AS latency_ms,
               data->>'{RESPONSE.stop_reason}' AS stop_reason,
               data->>'{ERROR.error}' AS error,
               length(data->>'{RESPONSE.thinking}') AS thinking_chars"""
    con.execute(f"""
        CREATE OR REPLACE TABLE model_calls AS
        SELECT {ident.format(params=', '.join(PARAMS))}, {calls}
        FROM events WHERE event IN ({RESPONSE}, {ERROR})""")
    _earlier_calls(con, runs_dir, cols, ident, calls)
    e_ident = ", ".join(f"e.{c.strip()}" for c in ident.format(params=", ".join(PARAMS)).split(","))
    # An eval's result is its agent's next eval_result (ASOF), unless another eval came first.
    con.execute(f"""
        CREATE OR REPLACE TABLE evals AS
        WITH e AS (
            SELECT *, lead(seq) OVER (PARTITION BY run_id, session_id, agent_id ORDER BY seq) AS next_eval
            FROM events WHERE event = {EVAL}),
        r AS (SELECT run_id, session_id, agent_id, seq, ts, data FROM events WHERE event = {RESULT}),
        j AS (
            SELECT {e_ident}, e.data->>'{EVAL.form}' AS form,
                   CASE WHEN e.next_eval IS NULL OR r.seq < e.next_eval THEN r.data END AS rdata,
                   CASE WHEN e.next_eval IS NULL OR r.seq < e.next_eval THEN r.ts END AS rts
            FROM e ASOF LEFT JOIN r
              ON e.run_id = r.run_id AND e.session_id = r.session_id AND e.agent_id = r.agent_id AND r.seq > e.seq)
        SELECT * EXCLUDE (rdata, rts),
               CAST(rdata->'{RESULT.result.success}' AS BOOLEAN) AS ok,
               rdata->>'{RESULT.result.error}' AS error,
               rdata->>'{RESULT.result.result}' AS result,
               rts - ts AS seconds,
               coalesce(starts_with(rdata->>'{RESULT.result.error}', 'blocked by compulsion'), false) AS blocked
        FROM j""")
    con.execute(f"""
        CREATE OR REPLACE TABLE blocks AS
        SELECT {ident.format(params=', '.join(PARAMS))},
               data->>'{BLOCKED.by}' AS blocked_by, data->>'{BLOCKED.template}' AS by_template,
               data->>'{BLOCKED.action}' AS action, data->>'{BLOCKED.form}' AS form,
               data->>'{BLOCKED.reason}' AS reason
        FROM events WHERE event = {BLOCKED}""")
    con.execute(f"""
        CREATE OR REPLACE TABLE tool_calls AS
        SELECT {ident.format(params=', '.join(PARAMS))},
               data->>'{TOOL.server}' AS server, data->>'{TOOL.tool}' AS tool, data->'{TOOL.arguments}' AS arguments,
               CAST(data->'{TOOL.seconds}' AS DOUBLE) AS seconds,
               CAST(data->'{TOOL.result_chars}' AS BIGINT) AS result_chars,
               data->>'{TOOL.error}' AS error, data->>'{TOOL.error}' IS NULL AS ok,
               coalesce(CAST(data->'{TOOL.blocked}' AS BOOLEAN), false) AS blocked
        FROM events WHERE event = {TOOL}""")
    _turns(con)
    _scores(con, runs_dir)
    key = "run_id, session_id, agent_id"
    con.execute(f"""
        CREATE OR REPLACE TABLE agents AS
        WITH ids AS (  -- a rewind's or a fork's own file is not a session: it has no agent
            SELECT {key}, any_value(parent_id) AS parent_id, any_value(agent_type) AS agent_type,
                   any_value(template) AS template, min(ts) AS first_ts, max(ts) AS last_ts, count(*) AS events
            FROM events ANTI JOIN ({home_steps()}) USING (run_id, session_id) GROUP BY ALL),
        st AS (
            SELECT {key}, min(ts) AS started_at, any_value(data->>'{START.name}') AS name,
                   any_value(CAST(data->'{START.depth}' AS INTEGER)) AS depth
            FROM events WHERE event = {START} GROUP BY ALL),
        en AS (
            SELECT {key}, max(ts) AS ended_at, arg_max(data->>'{END.state}', seq) AS state,
                   arg_max(CAST(data->'{END.summary.steps}' AS INTEGER), seq) AS steps
            FROM events WHERE event = {END} GROUP BY ALL),
        se AS (SELECT run_id, session_id, max(ts) AS session_end FROM events GROUP BY ALL),
        mc AS (
            SELECT {key}, count(*) AS model_calls, count(*) FILTER (WHERE ok) AS answered,
                   sum(coalesce(input_tokens, 0) + coalesce(cache_read_tokens, 0) + coalesce(cache_write_tokens, 0))::BIGINT
                       AS input_tokens,
                   sum(output_tokens)::BIGINT AS output_tokens, {_dollars("cost")} AS cost,
                   count(*) FILTER (WHERE ok AND cost IS NULL) AS unpriced_calls
            FROM model_calls GROUP BY ALL),
        ev AS (
            SELECT {key}, count(*) AS evals, count(*) FILTER (WHERE NOT coalesce(ok, false)) AS eval_errors
            FROM evals GROUP BY ALL)
        SELECT ids.run_id, {_params('p')}, ids.session_id, ids.agent_id, ids.parent_id, ids.agent_type,
               ids.template, st.name,
               coalesce(st.depth, CASE WHEN ids.parent_id IS NULL THEN 0 END) AS depth,
               coalesce(en.state, '{OPEN}') AS state,
               coalesce(st.started_at, ids.first_ts) AS started_at,
               coalesce(en.ended_at, se.session_end, ids.last_ts) AS ended_at,
               coalesce(en.steps, mc.answered, 0) AS steps, ids.events,
               coalesce(mc.model_calls, 0) AS model_calls, coalesce(mc.input_tokens, 0) AS input_tokens,
               coalesce(mc.output_tokens, 0) AS output_tokens,
               CASE WHEN coalesce(mc.unpriced_calls, 0) > 0 THEN NULL ELSE coalesce(mc.cost, 0) END AS cost,
               coalesce(mc.unpriced_calls, 0) AS unpriced_calls,
               coalesce(ev.evals, 0) AS evals, coalesce(ev.eval_errors, 0) AS eval_errors
        FROM ids LEFT JOIN st USING ({key}) LEFT JOIN en USING ({key}) LEFT JOIN mc USING ({key})
                 LEFT JOIN ev USING ({key}) LEFT JOIN se USING (run_id, session_id)
                 LEFT JOIN params p ON p.run_id = ids.run_id""")
    con.execute(f"""
        CREATE OR REPLACE TABLE runs AS
        WITH s AS ({home_steps()}),  -- a rewind's or a fork's own file is not a session
        n AS (SELECT run_id, count(*) AS events, count(DISTINCT session_id) FILTER (WHERE s.steps IS NULL) AS sessions
              FROM events LEFT JOIN s USING (run_id, session_id) GROUP BY 1),
        a AS (SELECT run_id, count(*) AS agents, sum(model_calls)::BIGINT AS model_calls,
                     CASE WHEN sum(unpriced_calls) > 0 THEN NULL ELSE sum(cost) END AS model_cost,
                     sum(unpriced_calls)::BIGINT AS calls_unpriced,
                     sum(input_tokens)::BIGINT AS input_tokens, sum(output_tokens)::BIGINT AS output_tokens,
                     sum(evals)::BIGINT AS evals, sum(eval_errors)::BIGINT AS eval_errors
              FROM agents GROUP BY 1),
        b AS (SELECT run_id, count(*) AS blocks FROM blocks GROUP BY 1),
        -- the runs going at once, on average over this run's time (itself included: 1 alone)
        o AS (SELECT x.folder AS run_id,
                     sum(least(x.ended_at, y.ended_at) - greatest(x.started_at, y.started_at))
                         / any_value(x.ended_at - x.started_at) AS concurrency
              FROM manifest x JOIN manifest y ON y.started_at < x.ended_at AND y.ended_at > x.started_at
              WHERE x.ended_at > x.started_at GROUP BY 1)
        SELECT m.folder AS run_id, p.arm, m.* EXCLUDE (folder, run_id), o.concurrency,
               coalesce(n.sessions, 0) AS sessions, coalesce(n.events, 0) AS events,
               coalesce(a.agents, 0) AS agents, coalesce(a.model_calls, 0) AS model_calls,
               CASE WHEN coalesce(a.calls_unpriced, 0) = 0 THEN coalesce(a.model_cost, 0) END AS model_cost,
               coalesce(a.input_tokens, 0) AS input_tokens,
               coalesce(a.output_tokens, 0) AS output_tokens, coalesce(a.evals, 0) AS evals,
               coalesce(a.eval_errors, 0) AS eval_errors, coalesce(b.blocks, 0) AS blocks
        FROM manifest m JOIN params p ON p.run_id = m.folder
             LEFT JOIN n ON n.run_id = m.folder LEFT JOIN a ON a.run_id = m.folder LEFT JOIN b ON b.run_id = m.folder
             LEFT JOIN o ON o.run_id = m.folder
        ORDER BY m.folder""")


# The JSON object in a model's answer (RAW): all of it, or the outermost {...} (an answer in a fence).
_OBJECT = r"""CASE WHEN json_valid(raw) THEN raw::JSON
                   WHEN json_valid(regexp_extract(raw, '(?s)\{.*\}', 0)) THEN regexp_extract(raw, '(?s)\{.*\}', 0)::JSON
              END"""
# The text of a request message M: its content, a string or a list of text blocks.
_TEXT = ("CASE WHEN json_type(m->'content') = 'VARCHAR' THEN m->>'content' "
         "ELSE array_to_string(list_transform(CAST(m->'content' AS JSON[]), lambda b: b->>'text'), '') END")


def _earlier_calls(con: duckdb.DuckDBPyConnection, runs_dir: Path, cols: dict[str, str], ident: str,
                   calls: str) -> None:
    """The table ``earlier_calls``: the model calls of the earlier attempts of runs that ran again
    (``<run>/attempts/<n>/transcripts``) and of judgements asked again
    (``<run>/judges/<judge>/attempts/<n>/judge.jsonl``), as ``model_calls`` has them and with their
    ``attempt`` and ``judge`` (NULL: the run's own); their cost is the runs' ``earlier_cost`` and the
    scores'.  No other table holds them: a run's figures are its last attempt's."""
    sources = []
    # A run's (<run>/attempts/<n>/transcripts/*.jsonl) and a judgement's (<run>/judges/<judge>/attempts/<n>/
    # judge.jsonl): the folder names the run, the judge (NULL: the run's own calls) and the attempt.
    for where, path, judge in (
            (runs_dir / "*" / ATTEMPTS / "*" / "transcripts" / "*.jsonl",
             r"'([^/\\]+)[/\\]attempts[/\\](\d+)[/\\]transcripts[/\\][^/\\]+$'", None),
            (runs_dir / "*" / "judges" / "*" / ATTEMPTS / "*" / "judge.jsonl",
             r"'([^/\\]+)[/\\]judges[/\\][^/\\]+[/\\]attempts[/\\](\d+)[/\\][^/\\]+$'",
             r"'[/\\]judges[/\\]([^/\\]+)[/\\]attempts[/\\]\d+[/\\][^/\\]+$'")):
        if any(runs_dir.glob(str(where.relative_to(runs_dir)))):
            sources.append(
                f"SELECT regexp_extract(filename, {path}, 1) AS run_id, "
                f"CAST(regexp_extract(filename, {path}, 2) AS INTEGER) AS attempt, "
                + (f"regexp_extract(filename, {judge}, 1)" if judge else "NULL::VARCHAR") + " AS judge, "
                f"* EXCLUDE (filename) FROM read_json({_quote(where)}, format='newline_delimited', "
                f"columns={_struct(cols)}, filename=true, ignore_errors=true)")
    source = " UNION ALL BY NAME ".join(f"({s})" for s in sources) or (
        "SELECT NULL::VARCHAR AS run_id, NULL::INTEGER AS attempt, NULL::VARCHAR AS judge, "
        + ", ".join(f"NULL::{t} AS {c}" for c, t in cols.items()) + " WHERE false")
    con.execute(f"""
        CREATE OR REPLACE TABLE earlier_calls AS
        SELECT attempt, judge, {ident.format(params=', '.join('p.' + p for p in PARAMS))}, {calls}
        FROM ({source}) t LEFT JOIN params p USING (run_id)
        WHERE event IN ({RESPONSE}, {ERROR})""")


def _turns(con: duckdb.DuckDBPyConnection) -> None:
    """The ``turns`` table: one row per turn of each agent, what it was asked and what it replied.

    The primary's turn is its ticks from one with the person's input (``tick_start``'s human) to the
    next; its reply is what its ticks said (``tick_end``'s reply, as agent-chat.org has it; not one a
    compulsion held back), joined by blank lines.  A subagent's turn is its steps up to the model
    answer that ends it (no eval: its default action; or a failed call, or the budget's stop); it was
    asked the user messages of its first request after its last answer, and its reply is its last
    non-empty one (its answer).  Thinking is the model responses' ``thinking`` text, where kept."""
    params = ", ".join(f"p.{c}" for c in PARAMS)
    con.execute(f"""
        CREATE OR REPLACE TABLE turns AS
        WITH ps AS (  -- the few fields a turn needs, not the events' data (a request is ~10 KB)
            SELECT run_id, session_id, agent_id, agent_type, template, seq, ts, tick, event,
                   CASE WHEN event = {TICK} THEN data->>'{TICK.human}' END AS human,
                   CASE WHEN event = {TICK_END} THEN data->>'{TICK_END.response.reply}' END AS said,
                   CASE WHEN event = {RESPONSE} THEN data->>'{RESPONSE.thinking}' END AS thought,
                   CASE WHEN event = {RESPONSE} THEN CAST(data->'{RESPONSE.cost}' AS DOUBLE) END AS paid
            FROM events WHERE agent_type = 'primary' AND event <> {REQUEST}),
        pe AS (
            SELECT *, sum(CASE WHEN event = {TICK} AND human IS NOT NULL THEN 1 ELSE 0 END)
                          OVER (PARTITION BY run_id, session_id, agent_id ORDER BY seq ROWS UNBOUNDED PRECEDING)
                          AS turn,
                      bool_or(event = {HELD}) OVER (PARTITION BY run_id, session_id, agent_id, tick)
                          AS held
            FROM ps),
        primary_turns AS (
            SELECT run_id, session_id, agent_id, any_value(agent_type) AS agent_type,
                   any_value(template) AS template, turn,
                   arg_min(human, seq) FILTER (WHERE event = {TICK}) AS input,
                   string_agg(said, chr(10) || chr(10) ORDER BY seq)
                       FILTER (WHERE coalesce(said, '') <> '' AND NOT coalesce(held, false)) AS reply,
                   string_agg(thought, chr(10) || chr(10) ORDER BY seq) FILTER (WHERE coalesce(thought, '') <> '')
                       AS thinking,
                   count(*) FILTER (WHERE event IN ({RESPONSE}, {ERROR})) AS model_calls,
                   count(*) FILTER (WHERE event = {EVAL}) AS evals,
                   min(ts) AS started_at, max(ts) - min(ts) AS seconds,
                   CASE WHEN bool_or(event = {RESPONSE} AND paid IS NULL) THEN NULL
                        ELSE coalesce(sum(paid), 0) END AS cost
            FROM pe WHERE turn > 0 GROUP BY run_id, session_id, agent_id, turn),
        se AS (
            SELECT run_id, session_id, agent_id, agent_type, template, seq, ts, event,
                   CASE WHEN event = {RESPONSE} THEN data->>'{RESPONSE.raw}' END AS raw,
                   CASE WHEN event = {RESPONSE} THEN data->>'{RESPONSE.thinking}' END AS thought,
                   CASE WHEN event = {RESPONSE} THEN CAST(data->'{RESPONSE.cost}' AS DOUBLE) END AS paid
            FROM events WHERE agent_type <> 'primary'),
        so AS (SELECT *, {_OBJECT} AS answer FROM se),
        sn AS (
            SELECT *, 1 + coalesce(sum(CASE
                         WHEN event = {RESPONSE} THEN coalesce(answer->>'$.eval', '') = ''
                         ELSE event IN ({ERROR}, {BUDGET}, {STEPS}) END::INTEGER)
                       OVER (PARTITION BY run_id, session_id, agent_id ORDER BY seq
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS turn
            FROM so),
        firsts AS (
            SELECT run_id, session_id, agent_id, turn, min(seq) AS seq
            FROM sn WHERE event = {REQUEST} GROUP BY ALL),
        asked AS (  -- only each turn's first request is read
            SELECT f.run_id, f.session_id, f.agent_id, f.turn, e.data->'{REQUEST.request.messages}' AS messages
            FROM firsts f JOIN events e USING (run_id, session_id, agent_id, seq)),
        asked_text AS (
            SELECT run_id, session_id, agent_id, turn,
                   list_transform(CAST(messages AS JSON[]), lambda m: m->>'role') AS roles,
                   CAST(messages AS JSON[]) AS msgs
            FROM asked),
        inputs AS (
            SELECT run_id, session_id, agent_id, turn,
                   array_to_string(list_transform(
                       list_slice(msgs, len(roles) + 2 - coalesce(list_position(list_reverse(roles), 'assistant'),
                                                                 len(roles) + 1), len(msgs)),
                       lambda m: {_TEXT}), chr(10) || chr(10)) AS input
            FROM asked_text),
        sub_turns AS (
            SELECT run_id, session_id, agent_id, any_value(agent_type) AS agent_type,
                   any_value(template) AS template, turn,
                   arg_max(answer->>'$.reply', seq) FILTER (WHERE coalesce(answer->>'$.reply', '') <> '') AS reply,
                   string_agg(thought, chr(10) || chr(10) ORDER BY seq) FILTER (WHERE coalesce(thought, '') <> '')
                       AS thinking,
                   count(*) FILTER (WHERE event IN ({RESPONSE}, {ERROR})) AS model_calls,
                   count(*) FILTER (WHERE event = {EVAL}) AS evals,
                   min(ts) AS started_at, max(ts) - min(ts) AS seconds,
                   CASE WHEN bool_or(event = {RESPONSE} AND paid IS NULL) THEN NULL
                        ELSE coalesce(sum(paid), 0) END AS cost
            FROM sn GROUP BY run_id, session_id, agent_id, turn
            HAVING count(*) FILTER (WHERE event IN ({REQUEST}, {RESPONSE}, {ERROR})) > 0),
        everyone AS (
            SELECT run_id, session_id, agent_id, agent_type, template, turn, input, reply, thinking, model_calls,
                   evals, started_at, seconds, cost FROM primary_turns
            UNION ALL
            SELECT t.run_id, t.session_id, t.agent_id, t.agent_type, t.template, t.turn, i.input, t.reply,
                   t.thinking, t.model_calls, t.evals, t.started_at, t.seconds, t.cost
            FROM sub_turns t LEFT JOIN inputs i USING (run_id, session_id, agent_id, turn))
        SELECT e.run_id, {params}, e.session_id, e.agent_id, e.agent_type, e.template, e.turn::BIGINT AS turn,
               e.input, e.reply, e.thinking, e.model_calls, e.evals, e.started_at, e.seconds, e.cost
        FROM everyone e LEFT JOIN params p USING (run_id)
        ORDER BY e.run_id, e.session_id, e.started_at, e.agent_id, e.turn""")


def _scores(con: duckdb.DuckDBPyConnection, runs_dir: Path) -> None:
    """The ``scores`` table: one row per run and judge (``amacs-server judge``), its score.json."""
    params = ", ".join(f"p.{c}" for c in PARAMS)
    if any(runs_dir.glob("*/judges/*/score.json")):
        folder = r"regexp_extract(filename, '([^/\\]+)[/\\]judges[/\\][^/\\]+[/\\][^/\\]+$', 1)"
        source = (f"SELECT {folder} AS run_id, * EXCLUDE (filename) FROM read_json("
                  f"{_quote(runs_dir / '*' / 'judges' / '*' / 'score.json')}, format='auto', "
                  f"columns={_struct(SCORE_COLUMNS)}, filename=true)")
    else:  # nothing judged yet: the table with its columns
        source = ("SELECT NULL::VARCHAR AS run_id, " + ", ".join(f"NULL::{t} AS {c}" for c, t in SCORE_COLUMNS.items())
                  + " WHERE false")
    con.execute(f"""
        CREATE OR REPLACE TABLE scores AS
        SELECT s.run_id, {params}, s.judge, s.score, s.rationale, s.cost, s.model AS judge_model,
               s.status AS judged, s.error AS judge_error, s.scale_low, s.scale_high, s.input AS judge_input,
               s.seconds, s.earlier_cost, s.estimated_where
        FROM ({source}) s LEFT JOIN params p USING (run_id)
        ORDER BY s.judge, s.run_id""")


def load(runs_dir: Path, *, parquet: bool = False) -> duckdb.DuckDBPyConnection:
    """Build RUNS_DIR/dataset.duckdb afresh from the runs of RUNS_DIR; a connection to it.

    With PARQUET, also write every table to RUNS_DIR/parquet/<table>.parquet."""
    import duckdb

    runs_dir = Path(runs_dir)
    if not any(runs_dir.glob("*/manifest.json")):
        raise SystemExit(f"no runs (*/manifest.json) in {runs_dir}")
    db = runs_dir / DB_NAME
    partial = db.with_name(DB_NAME + ".partial")
    for stale in (partial, partial.with_name(partial.name + ".wal")):
        stale.unlink(missing_ok=True)
    con = duckdb.connect(str(partial))
    try:
        build(con, runs_dir)
        if parquet:
            out = runs_dir / "parquet"
            out.mkdir(exist_ok=True)
            for table in TABLES:
                con.execute(f"COPY {table} TO {_quote(out / f'{table}.parquet')} (FORMAT parquet, COMPRESSION zstd)")
    except BaseException:
        con.close()
        partial.unlink(missing_ok=True)
        raise
    con.close()
    partial.replace(db)  # a reader never sees a half-built dataset
    db.with_name(DB_NAME + ".wal").unlink(missing_ok=True)
    return duckdb.connect(str(db))


def counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Rows per table."""
    return {t: int(_one(con, f"SELECT count(*) FROM {t}")) for t in TABLES}


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> Any:
    row = con.execute(sql).fetchone()
    return row[0] if row else None


def judging_cost(con: duckdb.DuckDBPyConnection) -> tuple[float, int, list[str], int]:
    """What judging the runs cost, apart from the runs (a judgement's model call is in its
    ``judges/<judge>/judge.jsonl``, never in the run's ``home/transcripts``, so the two never overlap):
    the known dollars of every judgement (a failed one's call was paid too, and so were those of a
    failed judgement asked again: its ``earlier_cost``), how many judgements,
    the judges, and how many judgements' cost is unknown (a model with no price)."""
    row = con.execute("""SELECT coalesce(sum(cost), 0) + coalesce(sum(earlier_cost), 0), count(*),
                                count(*) FILTER (WHERE cost IS NULL) FROM scores""").fetchone()
    judges = [r[0] for r in con.execute("SELECT DISTINCT judge FROM scores ORDER BY judge").fetchall()]
    return (float(row[0]), int(row[1]), judges, int(row[2])) if row else (0.0, 0, [], 0)


def judging_words(con: duckdb.DuckDBPyConnection) -> str:
    """``judging $0.0445 (1 judge: viewpoints-used, 10 judgements)``, and what earlier attempts of
    judgements asked again cost as part of it, as the runs' (:func:`earlier_words`); empty when nothing
    was judged."""
    dollars, n, judges, unknown = judging_cost(con)
    if not n:
        return ""
    earlier = float(_one(con, "SELECT coalesce(sum(earlier_cost), 0) FROM scores") or 0.0)
    rows = [(None if c is None else float(c) + float(e), w) for c, e, w in con.execute(
        "SELECT cost, coalesce(earlier_cost, 0), estimated_where FROM scores").fetchall()]
    wheres = sorted({w for _c, w in rows if w})
    listed = sum(c or 0.0 for c, w in rows if w)
    if wheres and unanswered(rows) and all(w for _c, w in rows):
        said, where = ": no model call got an answer", f"the model is at {'; '.join(wheres)}; "
    elif wheres and all(w or not c for c, w in rows):
        said, where = " estimated at list prices", f"the model calls went to {'; '.join(wheres)}; "
    elif wheres:
        said, where = "", f"${listed:.4f} of it estimated at list prices: the model calls went to {'; '.join(wheres)}; "
    else:
        said, where = "", ""
    return (f"judging ${dollars:.4f}{said} ({where}{len(judges)} judge{'s' if len(judges) != 1 else ''}: "
            f"{', '.join(judges)}, {n} judgement{'s' if n != 1 else ''}"
            + (f"; {unknown} of a model with no price, their cost unknown" if unknown else "")
            + (f"; {earlier_words(earlier, 'judgements')}" if earlier else "") + ")")


def arms_in_order(con: duckdb.DuckDBPyConnection, runs_dir: Path) -> list[str]:
    """The arms of the runs in the order the spec (RUNS_DIR's copy) lists them (prompts, then variants,
    then models: the reference arm first unless the spec names another), any it does not list after
    them by name; every table of runs by arm keeps this order."""
    recorded = [r[0] for r in con.execute("SELECT DISTINCT arm FROM runs ORDER BY arm").fetchall()]
    spec = arms_of(runs_dir / "experiment.toml")
    listed = spec[0] if spec is not None else []
    return [a for a in listed if a in recorded] + [a for a in recorded if a not in listed]


def earlier_words(earlier: float, noun: str = "runs") -> str:
    """What EARLIER attempts cost, said as part of the total before it (never added on top):
    ``$0.0322 of it by earlier attempts of runs that ran again``.  The experiment's last line, the
    dataset's summary, the report and the inspect export all say it so."""
    return f"${earlier:.4f} of it by earlier attempts of {noun} that ran again"


def unanswered(costs: Sequence[tuple[float | None, str | None]]) -> bool:
    """Whether COSTS ((dollars, where), as :func:`cost_words` takes them) say no model call got an
    answer: each estimated at list prices is known and nothing (an answer reports its tokens, and a
    list price is never nothing: a dead endpoint's runs are $0.0000)."""
    listed = [c for c, where in costs if where is not None]
    return bool(listed) and all(c is not None and c == 0 for c in listed)


def cost_words(costs: Sequence[tuple[float | None, str | None]], noun: str = "runs", earlier: float = 0.0) -> str:
    """COSTS ((dollars, where) of each run, its earlier attempts' included; dollars None: unknown;
    where: the words of :func:`~amacs_server.inference.pricing.list_priced_elsewhere`) as the
    experiment's last line says them: ``$0.4574 spent``, or for list prices of what another server
    than the provider's API reported, ``$0.4574 estimated at list prices (the model calls went to
    127.0.0.1:35029, not Anthropic's API)``; then, in the same parenthesis, how many cost what nobody
    knows, and how much of the total EARLIER attempts cost (:func:`earlier_words`)."""
    billed = sum(c or 0.0 for c, where in costs if where is None)
    estimated = sum(c or 0.0 for c, where in costs if where is not None)
    wheres = sorted({where for _c, where in costs if where is not None})
    unknown = sum(c is None for c, _where in costs)
    notes = []
    if wheres and not billed and unanswered(costs):
        words = f"${estimated:.4f}: no model call got an answer"
        notes.append(f"the model is at {'; '.join(wheres)}")
    elif wheres:
        words = f"${estimated:.4f} estimated at list prices"
        words = f"${billed:.4f} spent and {words}" if billed else words
        notes.append(f"the model calls went to {'; '.join(wheres)}")
    else:
        words = f"${billed:.4f} spent"
    if unknown:
        notes.append(f"and {unknown} {noun if unknown > 1 else noun.removesuffix('s')} of a model with no price: "
                     "cost unknown")
    if earlier:
        notes.append(earlier_words(earlier, noun))
    return words + (f" ({'; '.join(notes)})" if notes else "")


def _runs_cost_words(con: duckdb.DuckDBPyConnection, runs_dir: Path, earlier: float) -> str:
    """What the runs cost (EARLIER: their earlier attempts') as the experiment's last line, the report
    and the inspect export say it: estimated at list prices where another server than the provider's
    API reported the tokens (the report's Prices table)."""
    from .report import price_sources  # noqa: PLC0415 - the report reads the dataset

    sources = price_sources(con, runs_dir)

    def where(model: str, endpoint: str | None) -> str | None:
        row = (next((r for r in sources if r[0] == model and r[2] == endpoint), None)
               or next((r for r in sources if r[0] == model), None))
        return None if row is None else row[7]

    runs = con.execute("SELECT model, endpoint, cost, coalesce(earlier_cost, 0) FROM runs").fetchall()
    words = cost_words([(None if c is None else float(c) + float(e), where(m, ep)) for m, ep, c, e in runs],
                       earlier=earlier)
    return words if "estimated" in words else words.replace(" spent", "", 1)  # billed: the report's "runs $X"


def summary_text(con: duckdb.DuckDBPyConnection, runs_dir: Path, seconds: float) -> str:
    """One screen: runs by status and by arm (the spec's order), what they cost (earlier attempts
    included, and said as part of it), rows per table, where the files are."""
    def paid(total: float | None, earlier: float) -> str:
        return f"${(total or 0) + earlier:.4f}" + (f" ({earlier_words(earlier)})" if earlier else "")

    by_status = con.execute("""SELECT status, count(*), sum(cost), coalesce(sum(earlier_cost), 0) FROM runs
                               GROUP BY 1 ORDER BY 1""").fetchall()
    by_arm = {arm: (n, c, e) for arm, n, c, e in con.execute(
        "SELECT arm, count(*), sum(cost), coalesce(sum(earlier_cost), 0) FROM runs GROUP BY 1").fetchall()}
    arms = [(arm, *by_arm[arm]) for arm in arms_in_order(con, runs_dir)]
    lines = [f"{sum(n for _s, n, _c, _e in by_status)} runs loaded from {runs_dir} in {seconds:.2f} s"]
    from .runs import STOPPED_REPLIED, STOPPED_WORDS

    lines += [f"  {status or '(none)':<10} {n:>6} runs  {paid(c, e)}"
              + (f"  ({STOPPED_WORDS})" if status == STOPPED_REPLIED else "") for status, n, c, e in by_status]
    lines.append(f"{len(arms)} arms (prompt / variant / model):")
    lines += [f"  {arm:<48} {n:>5} runs  {paid(c, e)}" for arm, n, c, e in arms[:12]]
    if len(arms) > 12:
        lines.append(f"  ... and {len(arms) - 12} more")
    judging = judging_words(con)
    earlier = sum(e for _s, _n, _c, e in by_status)
    runs_words = _runs_cost_words(con, runs_dir, earlier)
    if judging or earlier or "estimated" in runs_words:  # what the experiment cost: its runs (their earlier
        runs_cost = sum(c or 0 for _s, _n, c, _e in by_status) + earlier  # attempts too) and their judging
        lines.append(f"cost: runs {runs_words}"
                     + (f", {judging}, ${runs_cost + judging_cost(con)[0]:.4f} in all" if judging else " in all"))
    lines.append("rows per table:")
    lines += [f"  {t:<12} {n:>10,}" for t, n in counts(con).items()]
    lines.append(f"DuckDB:  {runs_dir / DB_NAME}   (in Python: duckdb.connect(path).sql('SELECT ...'))")
    parquet = runs_dir / "parquet"
    if parquet.is_dir():
        lines.append(f"Parquet: {parquet}/<table>.parquet   (pandas.read_parquet / polars.read_parquet)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Load RUNS_DIR into DuckDB and Parquet, and print a summary."""
    parser = argparse.ArgumentParser(prog="amacs-server dataset",
                                     description="Load every run of RUNS_DIR into DuckDB"
                                                 " (RUNS_DIR/dataset.duckdb) and Parquet (RUNS_DIR/parquet/).")
    parser.add_argument("runs_dir", type=Path, help="an experiment's runs folder (RUNS_DIR/<run-id>/manifest.json)")
    parser.add_argument("--no-parquet", action="store_true", help="only the DuckDB file")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    con = load(args.runs_dir, parquet=not args.no_parquet)
    print(summary_text(con, args.runs_dir, time.perf_counter() - start))
    con.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
