"""Summarize a folder of transcripts with DuckDB: ``python -m amacs_server.transcripts DIR``.

Every JSONL line has the same top-level columns (docs/ARCHITECTURE.md, Persistence and git), so
DuckDB reads thousands of files directly; ``data`` is kept as JSON.  What a query names of a line
(its kind, its data's fields) it names through the records that declare them
(:mod:`~amacs_server.records`, :class:`Of`), here and in research's dataset.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .records import Blocked, EvalResultRecord, Fork, ModelResponse, Record, Rewind, json_path

# Where an experiment's run keeps the record of each earlier attempt (``<run>/attempts/<n>/``) when
# it runs again (``research.runs.keep_attempt``).
ATTEMPTS = "attempts"

if TYPE_CHECKING:
    import duckdb

COLUMNS = {
    "run_id": "VARCHAR", "session_id": "VARCHAR", "agent_id": "VARCHAR", "parent_id": "VARCHAR",
    "agent_type": "VARCHAR", "template": "VARCHAR", "seq": "BIGINT", "ts": "DOUBLE", "tick": "BIGINT",
    "event": "VARCHAR", "data": "JSON",
}


class Of:
    """A kind of transcript event as a query names it, from the record that declares it: in an
    f-string, ``{Of(ModelResponse)}`` is ``'model_response'`` and ``{Of(ModelResponse).usage.input_tokens}``
    the JSON path ``$.usage.input_tokens`` of its line's data.  The first name after the kind must
    be a field of the record (:func:`~amacs_server.records.json_path`), checked as the
    query is made: a field renamed in the records fails the readers' tests, not a report."""

    def __init__(self, record: type[Record], path: str = "") -> None:
        self._record, self._path = record, path

    def __getattr__(self, name: str) -> Of:
        if name.startswith("_"):
            raise AttributeError(name)
        if not self._path:
            return Of(self._record, json_path(self._record, name))
        return Of(self._record, f"{self._path}.{name}")

    def __str__(self) -> str:
        return self._path or f"'{self._record.kind}'"


RESPONSE, RESULT, BLOCKED = Of(ModelResponse), Of(EvalResultRecord), Of(Blocked)
REWIND, FORK = Of(Rewind), Of(Fork)


def home_steps(events: str = "events") -> str:
    """A query of the (run_id, session_id) of each file of EVENTS that only says a rewind or a fork
    of the home: each writes one of its own (persistence.history), a step of the home's history,
    not a session a server ran, and none of its agents; its ``steps`` is the kinds it says."""
    return (f"SELECT run_id, session_id, list(DISTINCT event) AS steps FROM {events} GROUP BY ALL "
            f"HAVING bool_and(event IN ({REWIND}, {FORK}))")


def connect(folder: Path) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every transcript in or below FOLDER as the view ``events``."""
    import duckdb

    files = sorted(folder.rglob("*.jsonl"))
    if not files:
        raise SystemExit(f"no transcripts (*.jsonl) in or below {folder}")
    con = duckdb.connect()
    cols = ", ".join(f"'{k}': '{v}'" for k, v in COLUMNS.items())
    pattern = str(folder / "**" / "*.jsonl").replace("'", "''")  # the folder's own files too
    con.sql(f"CREATE VIEW events AS SELECT * FROM read_json('{pattern}', format='newline_delimited', "
            f"columns={{{cols}}}, filename=true)")
    return con


def experiment_run(transcript: Path) -> dict[str, Any] | None:
    """The experiment run whose home TRANSCRIPT is in (``RUNS_DIR/<run>/home/transcripts/*.jsonl``, beside
    its ``manifest.json``): its folder (what a manifest and the dataset call ``run_id``) and its arm;
    for one of its earlier attempts (``RUNS_DIR/<run>/attempts/<n>/transcripts/*.jsonl``, beside
    that attempt's manifest) the attempt's number too; None for a transcript of any other home."""
    if len(transcript.parents) < 4 or transcript.parent.name != "transcripts":
        return None
    attempt = transcript.parents[1].name.isdigit() and transcript.parents[2].name == ATTEMPTS
    if not attempt and transcript.parents[1].name != "home":
        return None
    try:
        manifest = json.loads((transcript.parents[1 if attempt else 2] / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    arm = " / ".join(str(manifest.get(k)) for k in ("prompt", "variant", "model"))
    if attempt:
        return {"run": transcript.parents[3].name, "arm": arm, "attempt": int(transcript.parents[1].name)}
    return {"run": transcript.parents[2].name, "arm": arm}


def summarize(folder: Path) -> dict[str, Any]:
    """Sessions (runs and judgements), agents per session, agents, tokens and cost per agent type,
    eval error rate, blocks by compulsions, and the rewinds and forks the transcripts say.

    A run is a session a server ran; a judgement (``judges/<judge>/judge.jsonl`` of an experiment's
    run) is a session too, counted apart; an agent is counted once per session it lived in (the
    same name in two runs is two agents).  A rewind's or a fork's own file is neither
    (:func:`home_steps`)."""
    con = connect(folder)
    con.sql(f"CREATE TEMP TABLE steps AS {home_steps()}")
    # The sessions servers ran: not the file of a rewind or fork (counted apart, as what it is).
    con.sql("CREATE TEMP VIEW lived AS SELECT * FROM events ANTI JOIN steps USING (run_id, session_id)")

    def rows(sql: str) -> list[tuple[Any, ...]]:
        return con.sql(sql).fetchall()

    # An agent is its id within its session: every run has a "primary" and its own viewpoints.
    agents = rows("SELECT run_id, count(DISTINCT (session_id, agent_id)) FROM lived GROUP BY run_id ORDER BY run_id")
    # A transcript line's run_id is its server session; an experiment's run is the folder it is in.
    files = {session: Path(file) for session, file in
             rows("SELECT run_id, any_value(filename) FROM lived GROUP BY run_id ORDER BY run_id")}
    where = {session: experiment_run(file) for session, file in files.items()}
    in_runs = {session: {**run, "agents": dict(agents)[session]} for session, run in where.items() if run}
    # A judgement (``RUNS_DIR/<run>/judges/<judge>/judge.jsonl``) is a session of its own, not a run.
    judgements = {session for session, file in files.items() if file.parent.parent.name == "judges"}
    # An earlier attempt of a run that ran again (kept in ``<run>/attempts/<n>/``), or of a judgement
    # asked again (``<run>/judges/<judge>/attempts/<n>/judge.jsonl``): a session, not a run.
    earlier = {session for session, run in in_runs.items() if "attempt" in run} | {
        session for session, file in files.items()
        if len(file.parents) > 3 and file.parents[1].name == ATTEMPTS and file.parents[3].name == "judges"}
    # A rewind is its ref: one a served home makes says so in its own file and again in the
    # server's session (a session begun after the tick keeps that line alone).
    rewinds = rows(f"SELECT count(DISTINCT data->>'{REWIND.ref}') FROM events WHERE event = {REWIND}")[0][0]
    forks = rows(f"SELECT count(*) FILTER (WHERE list_contains(steps, {FORK})) FROM steps")[0][0]
    usage = rows(f"""
        SELECT agent_type, count(*),
               sum(CAST(data->'{RESPONSE.usage.input_tokens}' AS BIGINT)
                   + CAST(data->'{RESPONSE.usage.output_tokens}' AS BIGINT)),
               sum(CAST(data->'{RESPONSE.cost}' AS DOUBLE))
        FROM events WHERE event = {RESPONSE} GROUP BY agent_type ORDER BY agent_type""")
    evals = rows(f"""
        SELECT count(*), count(*) FILTER (WHERE CAST(data->'{RESULT.result.success}' AS BOOLEAN) = false)
        FROM events WHERE event = {RESULT}""")[0]
    blocks = rows(f"""
        SELECT data->>'{BLOCKED.by}', data->>'{BLOCKED.template}', count(*) FROM events WHERE event = {BLOCKED}
        GROUP BY 1, 2 ORDER BY 1""")
    types = rows("""
        SELECT agent_type, count(DISTINCT (run_id, session_id, agent_id)) FROM lived
        GROUP BY agent_type ORDER BY agent_type""")
    return {
        "sessions": len(agents),  # every session: the runs, their judgements, and earlier attempts of either
        "runs": len(agents) - len(judgements) - len(earlier),
        "earlier_attempts": len(earlier),
        "judgements": len(judgements),
        "agents_per_run": {run: n for run, n in agents},  # by server session (a transcript line's run_id)
        # each session that ran in an experiment's run folder: that run (its folder) and its arm
        **({"experiment_runs": in_runs} if in_runs else {}),
        "agents": sum(n for _t, n in types),
        "agents_by_type": {t: n for t, n in types},
        "model_calls_tokens_cost_by_type": {
            t: {"calls": calls, "tokens": int(tokens or 0), "cost": round(float(c or 0), 6)}
            for t, calls, tokens, c in usage},
        "evals": evals[0],
        "eval_errors": evals[1],
        "eval_error_rate": round(evals[1] / evals[0], 4) if evals[0] else 0.0,
        "blocks_by_compulsion": [{"by": by, "template": tmpl, "blocks": n} for by, tmpl, n in blocks],
        "rewinds": rewinds,  # each left an abandoned future on a git ref
        "forks": forks,  # the forks this home's history went through (it, or a home it was forked from)
    }


def main(argv: list[str] | None = None) -> int:
    """Print the summary of a transcripts folder as JSON."""
    parser = argparse.ArgumentParser(prog="amacs-server transcripts",
                                     description="Summarize the transcripts in or below a folder, as JSON.")
    parser.add_argument("folder", nargs="?", help="a folder with transcripts in or below it "
                                                  "(default: $AMACS_HOME/transcripts)")
    args = parser.parse_args(argv)
    if args.folder:
        folder = Path(args.folder)
    else:
        from .config import load_config

        folder = load_config().home / "transcripts"
    print(json.dumps(summarize(folder), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
