"""``amacs-server export RUNS_DIR --inspect DIR``: an experiment's runs as inspect_ai eval logs.

One log per arm (prompt / variant / model), ``DIR/<time>_<experiment>-<arm>_<id>.eval`` (named as
inspect names its logs, which is how it finds them), in inspect_ai's
``.eval`` log format (version 2): an inspect log is one task run against one model, and an arm is
exactly that (its model is one; another arm may have another), so ``inspect view`` lists the
arms side by side with their scores and ``evals_df`` has a row per arm.  Within an arm:

- a sample per run: its id the prompt's name, its epoch the repetition + 1 (inspect's epochs are
  repetitions of one input), its input the person's turns, its ``metadata`` the run (run_id,
  arm, variant, endpoint, status, seconds, startup_seconds, cost, earlier_cost: what the run's earlier
  attempts paid, order_seed, position);
- the primary's turns as the sample's messages (the person's input, the agent's reply);
- every agent's turns as model events inside a span per agent (the primary's and the
  subagents'), every eval and MCP tool call as a tool event in its agent's span;
- each judge's score as a score (its rationale the explanation);
- tokens and dollars as the sample's and the log's model usage (``total_cost`` null when the
  model's price is unknown): the calls of each run's last attempt;
- in the log's ``eval.metadata``, what the arm's runs cost, every attempt's (``cost``, of it
  ``earlier_cost``), where their calls went (``endpoint``), where the dollars come from (``price``:
  list prices for what another server reported are an estimate) and ``cost_words``, as the
  experiment's last line and the report say it;
- a failed run as an errored sample (its error the reason in words); a run a C-c stopped after its
  every turn got its reply (status ``stopped``: the experiment's resume records it done) is whole,
  no error, its ``metadata`` saying so.

Written from the dataset (:func:`~amacs_server.research.dataset.load`), with no inspect_ai
import: the format is read back by inspect_ai's own reader in the tests.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import uuid
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .dataset import cost_words, load
from .report import price_sources
from .runs import STOPPED_REPLIED

if TYPE_CHECKING:
    import duckdb

LOG_VERSION = 2


def _iso(ts: float | None) -> str | None:
    """TS (seconds since the epoch) as inspect's timestamps are written."""
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def _id(*parts: Any) -> str:
    """A stable id made of PARTS (the same export writes the same ids)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, "amacs:" + "/".join(map(str, parts))).hex[:22]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def _rows(con: duckdb.DuckDBPyConnection, sql: str, *params: Any) -> list[dict[str, Any]]:
    cursor = con.execute(sql, list(params))
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _usage(model: str, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Inspect's model usage (by model name) of ROWS (model calls): tokens, and dollars unless unknown."""
    answered = [r for r in rows if r["ok"]]
    if not answered:
        return {}
    tokens = {k: sum(int(r[k] or 0) for r in answered)
              for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")}
    unknown = any(r["cost"] is None for r in answered)
    return {model: {
        "input_tokens": tokens["input_tokens"], "output_tokens": tokens["output_tokens"],
        "total_tokens": sum(tokens.values()), "input_tokens_cache_read": tokens["cache_read_tokens"],
        "input_tokens_cache_write": tokens["cache_write_tokens"],
        "total_cost": None if unknown else round(sum(float(r["cost"] or 0) for r in answered), 8)}}


def _assistant(text: str | None, thinking: str | None, model: str) -> dict[str, Any]:
    content: str | list[dict[str, Any]] = text or ""
    if thinking:
        content = [{"type": "reasoning", "reasoning": thinking}, {"type": "text", "text": text or ""}]
    return {"role": "assistant", "content": content, "model": model, "source": "generate"}


def _events(con: duckdb.DuckDBPyConnection, run: str, model: str) -> list[dict[str, Any]]:
    """RUN's agents as spans, in order of their start: each turn a model event, each eval and tool
    call a tool event."""
    events: list[dict[str, Any]] = []
    agents = _rows(con, """SELECT session_id, agent_id, parent_id, agent_type, template, state, started_at, ended_at
                           FROM agents WHERE run_id = ? ORDER BY started_at, agent_id""", run)
    for agent in agents:
        key = (agent["session_id"], agent["agent_id"])
        span = _id(run, *key)
        events.append({"event": "span_begin", "id": span, "name": f"{agent['agent_id']} ({agent['agent_type']}"
                       f", {agent['template']})", "type": "agent", "timestamp": _iso(agent["started_at"]),
                       "working_start": 0.0, "metadata": {"agent_type": agent["agent_type"],
                                                          "template": agent["template"], "state": agent["state"],
                                                          "parent_id": agent["parent_id"]}})
        inner: list[tuple[float, dict[str, Any]]] = []
        for turn in _rows(con, """SELECT turn, input, reply, thinking, started_at, seconds, cost, model_calls
                                  FROM turns WHERE run_id = ? AND session_id = ? AND agent_id = ?""", run, *key):
            output = {"model": model, "completion": turn["reply"] or "", "choices": [{
                "message": _assistant(turn["reply"], turn["thinking"], model), "stop_reason": "stop"}]}
            inner.append((turn["started_at"] or 0.0, {
                "event": "model", "span_id": span, "timestamp": _iso(turn["started_at"]), "working_start": 0.0,
                "model": model, "input": [{"role": "user", "content": turn["input"] or "", "source": "input"}],
                "tools": [], "tool_choice": "none", "config": {}, "output": output,
                "working_time": turn["seconds"],
                "metadata": {"turn": turn["turn"], "model_calls": turn["model_calls"], "cost": turn["cost"]}}))
        for n, ev in enumerate(_rows(con, """SELECT ts, form, ok, error, result, seconds, blocked FROM evals
                                             WHERE run_id = ? AND session_id = ? AND agent_id = ?""", run, *key)):
            failed = ev["ok"] is False or ev["error"] is not None
            inner.append((ev["ts"] or 0.0, {
                "event": "tool", "span_id": span, "timestamp": _iso(ev["ts"]), "working_start": 0.0,
                "type": "function", "id": _id(run, *key, "eval", n), "function": "eval",
                "arguments": {"form": ev["form"] or ""}, "result": ev["result"] or "",
                "error": {"type": "unknown", "message": ev["error"] or "failed"} if failed else None,
                "working_time": ev["seconds"], "metadata": {"blocked": bool(ev["blocked"])}}))
        for n, call in enumerate(_rows(con, """SELECT ts, server, tool, arguments, seconds, error, blocked
                                               FROM tool_calls WHERE run_id = ? AND session_id = ? AND agent_id = ?""",
                                       run, *key)):
            arguments = json.loads(call["arguments"]) if call["arguments"] else {}
            inner.append((call["ts"] or 0.0, {
                "event": "tool", "span_id": span, "timestamp": _iso(call["ts"]), "working_start": 0.0,
                "type": "function", "id": _id(run, *key, "tool", n), "function": f"{call['server']}/{call['tool']}",
                "arguments": arguments if isinstance(arguments, dict) else {"arguments": arguments},
                "result": "", "error": {"type": "unknown", "message": call["error"]} if call["error"] else None,
                "working_time": call["seconds"], "metadata": {"blocked": bool(call["blocked"])}}))
        events += [e for _t, e in sorted(inner, key=lambda item: item[0])]
        events.append({"event": "span_end", "id": span, "timestamp": _iso(agent["ended_at"]), "working_start": 0.0})
    return events


def _sample(con: duckdb.DuckDBPyConnection, run: dict[str, Any], model: str) -> dict[str, Any]:
    """RUN (a row of the runs table) as an inspect sample."""
    run_id = run["run_id"]
    turns = list(run["turns"] or [])
    messages: list[dict[str, Any]] = []
    for turn in _rows(con, """SELECT turn, input, reply, thinking FROM turns WHERE run_id = ? AND agent_type = 'primary'
                              ORDER BY session_id, turn""", run_id):
        messages.append({"role": "user", "content": turn["input"] or "", "source": "input"})
        if turn["reply"]:
            messages.append(_assistant(turn["reply"], turn["thinking"], model))
    last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
    scores = {s["judge"]: {"value": s["score"], "explanation": s["rationale"] or "",
                           "metadata": {"judge_model": s["judge_model"], "cost": s["cost"],
                                        "earlier_cost": float(s["earlier_cost"] or 0.0),
                                        "scale": [s["scale_low"], s["scale_high"]]}}
              for s in _rows(con, """SELECT judge, score, rationale, judge_model, cost, earlier_cost, scale_low,
                                            scale_high
                                     FROM scores WHERE run_id = ? AND judged = 'done' AND score IS NOT NULL""", run_id)}
    calls = _rows(con, """SELECT ok, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost
                          FROM model_calls WHERE run_id = ?""", run_id)
    sample: dict[str, Any] = {
        "id": run["prompt"], "epoch": int(run["rep"] or 0) + 1,
        "input": turns[0] if len(turns) == 1 else [{"role": "user", "content": t, "source": "input"} for t in turns],
        "target": "", "messages": messages,
        "output": {"model": model, "completion": last["content"] if last and isinstance(last["content"], str) else "",
                   "choices": [{"message": last, "stop_reason": "stop"}] if last else []},
        "scores": scores,
        "metadata": {k: run.get(k) for k in (
            "run_id", "experiment", "arm", "prompt", "variant", "model", "backend", "model_name", "endpoint", "rep",
            "status", "error", "failed_turn", "turns_done", "seconds", "startup_seconds", "wall_seconds", "cost",
            "earlier_cost", "unpriced_calls", "order_seed", "position", "agents", "model_calls", "evals",
            "eval_errors", "blocks")} | {"earlier_cost": float(run.get("earlier_cost") or 0.0)},
        "events": _events(con, run_id, model),
        "model_usage": _usage(model, calls),
        "started_at": _iso(run["first_turn_at"] or run["started_at"]),
        "completed_at": _iso(run["ended_at"]),
        "total_time": run["wall_seconds"], "working_time": run["seconds"],
        "uuid": _id(run_id),
    }
    if run["status"] not in ("done", STOPPED_REPLIED):  # a run stopped after its every turn's reply is whole
        reason = run["error"] or f"the run is {run['status']}"
        sample["error"] = {"message": reason, "traceback": reason, "traceback_ansi": reason}
    return sample


def _metrics(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each judge's mean and standard error over the arm's scored samples, as inspect's results have them."""
    out = []
    judges = sorted({name for s in samples for name in s["scores"]})
    for judge in judges:
        values = [float(s["scores"][judge]["value"]) for s in samples if judge in s["scores"]]
        mean = sum(values) / len(values)
        stderr = (sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values)) ** 0.5 \
            if len(values) > 1 else 0.0
        out.append({"name": judge, "scorer": judge, "scored_samples": len(values),
                    "unscored_samples": len(samples) - len(values), "params": {},
                    "metrics": {"mean": {"name": "mean", "value": mean, "params": {}},
                                "stderr": {"name": "stderr", "value": stderr, "params": {}}}})
    return out


def _summary(sample: dict[str, Any]) -> dict[str, Any]:
    """SAMPLE as the log's list of samples has it (``summaries.json``)."""
    keys = ("id", "epoch", "input", "target", "metadata", "scores", "model_usage", "started_at", "completed_at",
            "total_time", "working_time", "uuid")
    return {**{k: sample[k] for k in keys if k in sample}, "completed": True,
            "message_count": len(sample["messages"]),
            **({"error": sample["error"]["message"]} if "error" in sample else {})}  # a summary's error is its words


def _money(mine: list[dict[str, Any]], sources: list[tuple[Any, ...]]) -> dict[str, Any]:
    """What the runs MINE (rows of the runs table) cost, as the log's metadata says it: every attempt's
    dollars (``cost``: the runs' own and their earlier attempts', None when a price is unknown), the
    earlier attempts' part (``earlier_cost``), where the model calls went (``endpoint``), where the
    dollars come from (``price``, in the words of the report's Prices table: list prices for what
    another server reported are an estimate) and ``cost_words``, as the experiment's last line says
    it.  A sample's ``model_usage`` is its last attempt's calls (the tokens they are for)."""
    def source(run: dict[str, Any]) -> tuple[Any, ...] | None:
        return next((r for r in sources if r[0] == run["model"] and r[2] == run["endpoint"]),
                    None) or next((r for r in sources if r[0] == run["model"]), None)

    earlier = round(sum(float(r["earlier_cost"] or 0) for r in mine), 6)
    known = all(r["cost"] is not None for r in mine)
    priced = [source(r) for r in mine]
    words = cost_words([(None if r["cost"] is None else float(r["cost"]) + float(r["earlier_cost"] or 0),
                         s[7] if s is not None else None) for r, s in zip(mine, priced, strict=True)], earlier=earlier)
    return {"cost": round(sum(float(r["cost"]) + float(r["earlier_cost"] or 0) for r in mine), 6) if known else None,
            "earlier_cost": earlier, "cost_words": words,
            "endpoint": ", ".join(sorted({str(r["endpoint"]) for r in mine if r["endpoint"]})) or None,
            "price": "; ".join(dict.fromkeys(s[6] for s in priced if s is not None)) or None}


def write_log(log: dict[str, Any], path: Path) -> None:
    """Write LOG (a whole eval log, its samples included) at PATH in inspect's ``.eval`` format, whole or
    not at all: a zip of ``header.json`` (the log without its samples), ``samples/<id>_epoch_<n>.json``
    (one a sample), ``summaries.json`` and ``_journal/start.json``, as inspect_ai writes it (deflate:
    its reader takes it; inspect-scout reads a folder of these, not of ``.json`` logs)."""
    def dump(data: Any) -> str:
        return json.dumps(data, ensure_ascii=False, default=str)

    header = {k: v for k, v in log.items() if k != "samples"}
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("_journal/start.json", dump({"version": log["version"], "eval": log["eval"], "plan": log["plan"]}))
        for sample in log["samples"]:
            z.writestr(f"samples/{sample['id']}_epoch_{sample['epoch']}.json", dump(sample))
        z.writestr("summaries.json", dump([_summary(s) for s in log["samples"]]))
        z.writestr("header.json", dump(header))
    tmp.replace(path)


def export(runs_dir: Path, out: Path) -> list[Path]:
    """Write RUNS_DIR's runs into OUT as one inspect eval log per arm; the files written."""
    con = load(runs_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = []
        runs = _rows(con, "SELECT * FROM runs ORDER BY arm, rep, run_id")
        sources = price_sources(con, runs_dir)
        for arm in dict.fromkeys(r["arm"] for r in runs):
            mine = [r for r in runs if r["arm"] == arm]
            first = mine[0]
            model = f"{first['backend'] or 'anthropic'}/{first['model_name'] or first['model']}"
            samples = [_sample(con, r, model) for r in mine]
            usage: dict[str, dict[str, Any]] = {}
            for s in samples:
                for name, u in s["model_usage"].items():
                    total = usage.setdefault(name, {k: 0 for k in u})
                    for k, v in u.items():
                        total[k] = None if v is None or total[k] is None else total[k] + v
            started = min((r["started_at"] for r in mine if r["started_at"] is not None), default=None)
            ended = max((r["ended_at"] for r in mine if r["ended_at"] is not None), default=None)
            experiment = first["experiment"] or runs_dir.name
            log: dict[str, Any] = {
                "version": LOG_VERSION, "status": "success",
                "eval": {
                    "eval_id": _id(runs_dir.resolve(), arm), "run_id": _id(runs_dir.resolve()),
                    "created": _iso(started) or datetime.now(UTC).isoformat(),
                    "task": f"{experiment}/{first['prompt']}/{first['variant']}/{first['model']}",
                    "task_id": _id(experiment, arm), "task_version": 0,
                    "task_display_name": f"{experiment}: {arm}",
                    "task_args": {"prompt": first["prompt"], "variant": first["variant"], "model": first["model"]},
                    "dataset": {"name": experiment, "location": str(runs_dir.resolve()), "samples": len(mine),
                                "sample_ids": list(dict.fromkeys(s["id"] for s in samples)), "shuffled": False},
                    "model": model, "config": {"epochs": max(s["epoch"] for s in samples)},
                    "metadata": {"arm": arm, "prompt": first["prompt"], "variant": first["variant"],
                                 "amacs_model": first["model"], "runs_dir": str(runs_dir.resolve()),
                                 "order_seed": first.get("order_seed"), "exported_by": "amacs-server export",
                                 **_money(mine, sources)},
                },
                "plan": {"name": "amacs", "steps": [{"solver": "amacs-session", "params": {}}]},
                "results": {"total_samples": len(samples),
                            "completed_samples": sum("error" not in s for s in samples),
                            "scores": _metrics(samples)},
                "stats": {"started_at": _iso(started) or "", "completed_at": _iso(ended) or "", "model_usage": usage},
                "samples": samples,
            }
            # inspect lists only files named as its own logs are: the time, the task, an id
            stamp = datetime.fromtimestamp(started or 0, UTC).strftime("%Y-%m-%dT%H-%M-%S+00-00")
            path = out / f"{stamp}_{_slug(experiment)}-{_slug(arm.replace(' / ', '-'))}_{_id(runs_dir.resolve(), arm)}.eval"
            write_log(log, path)
            written.append(path)
        return written
    finally:
        con.close()


CHECKOUT = Path(__file__).resolve().parents[2]  # the checkout, when the server runs from one (./amacs)


def view_hint(log_dir: Path, checkout: Path = CHECKOUT, search: str | None = None) -> str:
    """The command that shows the logs in LOG_DIR here: ``inspect`` when it is on the PATH (SEARCH, default
    the environment's), else the checkout's ``.venv-inspect/bin/inspect`` (made by ``scripts/inspect.sh``,
    which this says to run first when it has not been), both named by their whole paths: the command
    works typed in any folder, not only in the checkout."""
    import shutil

    on_path = shutil.which("inspect", path=search)
    if on_path is not None:
        return f"view them: inspect view --log-dir {log_dir}"
    venv = checkout / ".venv-inspect" / "bin" / "inspect"
    if venv.is_file():
        return f"view them: {venv} view --log-dir {log_dir}"
    script = checkout / "scripts" / "inspect.sh"
    if script.is_file():
        return (f"to view them, install inspect-ai once ({script}, a few minutes), then: "
                f"{venv} view --log-dir {log_dir}")
    return f"to view them: pip install inspect-ai (in a venv of its own), then inspect view --log-dir {log_dir}"


def main(argv: list[str] | None = None) -> int:
    """Write RUNS_DIR's runs as inspect_ai eval logs into --inspect DIR."""
    parser = argparse.ArgumentParser(prog="amacs-server export",
                                     description="Write the runs of RUNS_DIR as inspect_ai eval logs (one per arm).")
    parser.add_argument("runs_dir", type=Path, help="an experiment's runs folder (RUNS_DIR/<run-id>/manifest.json)")
    parser.add_argument("--inspect", type=Path, required=True, metavar="DIR",
                        help="the folder the logs go to (inspect view --log-dir DIR shows them)")
    args = parser.parse_args(argv)
    if not any(args.runs_dir.glob("*/manifest.json")):
        print(f"amacs-server export: no runs (*/manifest.json) in {args.runs_dir}", file=sys.stderr)
        return 2
    written = export(args.runs_dir, args.inspect)
    samples = sum(len([n for n in zipfile.ZipFile(p).namelist() if n.startswith("samples/")]) for p in written)
    print(f"{len(written)} inspect logs ({samples} samples, one per run; one log per arm) in {args.inspect}; "
          + view_hint(args.inspect))
    return 0


if __name__ == "__main__":
    sys.exit(main())
