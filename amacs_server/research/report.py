"""A report of many runs: ``amacs-server report RUNS_DIR`` (docs/ARCHITECTURE.md, Research).

Loads RUNS_DIR as the dataset does (:func:`amacs_server.research.dataset.load`) and
writes RUNS_DIR/report.html: one self-contained page (plotly.js inlined once; no
network) with
- cost and tokens per run, by experiment arm (prompt / variant / model) and agent type;
- their distributions across repetitions (a box per arm, every run a point);
- the eval error rate (blocked by a compulsion, or failed) and compulsion blocks per arm;
- the agent trees of chosen runs (``--runs ID,...``; by default a few: the most agents,
  the dearest, the first), an icicle of parent -> child labelled with type and template;
- a timeline of one run's agents (``--timeline ID``; by default the first chosen): each
  agent from its start to its end, its model calls and evals as marks.
``--open`` opens the page in a browser.
"""

from __future__ import annotations

import argparse
import difflib
import html
import sys
import time
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .dataset import arms_in_order, earlier_words, judging_cost, judging_words, load
from .runs import STOPPED_REPLIED, STOPPED_WORDS
from .spec import arms_of, planned_runs

if TYPE_CHECKING:
    import duckdb
    import plotly.graph_objects as go

TYPE_COLORS = {"primary": "#1f77b4", "task": "#ff7f0e", "viewpoint": "#2ca02c", "compulsion": "#d62728"}
DEFAULT_RUNS = 3


def _color(agent_type: str | None) -> str:
    return TYPE_COLORS.get(agent_type or "", "#7f7f7f")


def _usd(amount: float | None) -> str:
    """AMOUNT in dollars, or that it is unknown (a model with no price)."""
    return "cost unknown (no price)" if amount is None else f"${amount:.4f}"


def _rows(con: duckdb.DuckDBPyConnection, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return con.execute(sql, list(params)).fetchall()


class Page:
    """The report's sections, each a heading, a note and a figure or some HTML."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.figures = 0

    def section(self, title: str, note: str = "") -> None:
        anchor = "-".join(title.lower().split())
        self.parts.append(f"<h2 id='{html.escape(anchor)}'>{html.escape(title)}</h2>"
                          + (f"<p class='note'>{html.escape(note)}</p>" if note else ""))

    def figure(self, fig: go.Figure, height: int = 450) -> None:
        fig.update_layout(height=height, margin={"l": 60, "r": 20, "t": 40, "b": 60}, template="plotly_white")
        # plotly.js goes in once, with the first figure; the others use it
        self.parts.append(fig.to_html(full_html=False, include_plotlyjs=self.figures == 0,
                                      config={"displaylogo": False}))
        self.figures += 1

    def html(self, text: str) -> None:
        self.parts.append(text)

    def render(self, title: str) -> str:
        style = ("body{font-family:sans-serif;margin:24px;max-width:1300px}"
                 "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
                 "th{background:#f3f3f3}td:first-child{text-align:left}.note{color:#555}"
                 ".failures{color:#b00000;border:2px solid #d62728;padding:4px 12px;margin:12px 0}"
                 ".failures th{color:#b00000}"
                 ".arms{display:grid;gap:12px}.arm h3{font-size:15px;margin:4px 0}"
                 ".reply{border:1px solid #ddd;padding:6px;margin:6px 0;font-size:13px;white-space:pre-wrap}"
                 ".reply summary{cursor:pointer}.reply .full{margin-top:6px;border-top:1px solid #eee}")
        return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
                f"<meta name='amacs-figures' content='{self.figures}'>"
                f"<title>{html.escape(title)}</title><style>{style}</style></head><body>"
                f"<h1>{html.escape(title)}</h1>{''.join(self.parts)}</body></html>\n")


def _in_order(rows: list[tuple[Any, ...]], arms: list[str]) -> list[tuple[Any, ...]]:
    """ROWS (each an arm's first) in the order of ARMS (the spec's), as every table of arms is;
    rows of the same arm keep their order."""
    return sorted(rows, key=lambda r: arms.index(r[0]) if r[0] in arms else len(arms))


def _table(head: list[str], rows: list[tuple[Any, ...]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return html.escape("" if v is None else str(v))

    return ("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
            + "</table>")


def _by_type_bars(con: duckdb.DuckDBPyConnection, arms: list[str], value: str, title: str, unit: str) -> go.Figure:
    import plotly.graph_objects as go

    rows = _rows(con, f"""
        WITH n AS (SELECT arm, count(*) AS runs FROM runs GROUP BY arm)
        SELECT a.agent_type, a.arm, sum({value}) / any_value(n.runs)
        FROM agents a JOIN n USING (arm) GROUP BY 1, 2 ORDER BY 1, 2""")
    fig = go.Figure()
    for kind in sorted({r[0] for r in rows if r[0] is not None}):
        per = {arm: v for k, arm, v in rows if k == kind}
        fig.add_trace(go.Bar(name=kind, x=arms, y=[per.get(a, 0) for a in arms], marker_color=_color(kind)))
    fig.update_layout(barmode="stack", title=title, yaxis_title=unit, legend_title="agent type",
                      xaxis={"type": "category"})
    _nonnegative(fig, [v or 0 for *_k, v in rows])
    _no_data(fig, arms, {arm for _k, arm, v in rows if v}, "nothing answered")
    return fig


def _nonnegative(fig: go.Figure, values: list[float]) -> None:
    """FIG's y axis from zero up (a count or a cost is never negative); 0..1 when every value is 0."""
    if max(values, default=0) <= 0:
        fig.update_layout(yaxis_range=[0, 1])
    else:
        fig.update_layout(yaxis_rangemode="tozero")


def _no_data(fig: go.Figure, arms: list[str], with_data: set[str], words: str) -> None:
    """Say WORDS over each arm of ARMS not in WITH_DATA (its runs left nothing to draw), its label kept."""
    empty = [a for a in arms if a not in with_data]
    if not empty:
        return
    fig.add_trace(go_bar(arms))
    fig.update_layout(annotations=[*fig.layout.annotations, *(  # type: ignore[attr-defined]
        {"x": arm, "y": 0, "yref": "y", "text": words, "showarrow": False, "yanchor": "bottom",
         "font": {"color": "#d62728"}} for arm in empty)])


def go_bar(arms: list[str]) -> go.Bar:
    """An invisible bar per arm: every arm keeps its place on a category axis."""
    import plotly.graph_objects as go

    return go.Bar(x=arms, y=[0] * len(arms), showlegend=False, hoverinfo="skip")


# The phases of a run, as the manifest times them, and their names on the charts.
PHASES = (("emacs_started_at", "Emacs start"), ("server_started_at", "server start"),
          ("first_turn_at", "first turn (the run's start)"), ("first_request_at", "first request"),
          ("last_reply_at", "last reply"), ("ended_at", "stop"))


def _parallelism_of(concurrency: float | None, cpus: int | None) -> str:
    """A run's parallelism in words: the runs going at once over its time, on how many CPUs."""
    if concurrency is None:
        return "parallelism unknown"
    return f"{concurrency:.1f} runs at once on average" + (f" on {cpus} CPUs" if cpus else "")


def parallelism(con: duckdb.DuckDBPyConnection) -> str:
    """The runs' parallelism in words: the most at once, the mean over a run, the CPUs, the machine's load."""
    spans = _rows(con, "SELECT started_at, ended_at FROM runs WHERE ended_at > started_at")
    edges = sorted([(a, 1) for a, _b in spans] + [(b, -1) for _a, b in spans])
    most = going = 0
    for _t, step in edges:
        going += step
        most = max(most, going)
    mean, cpus = _rows(con, "SELECT avg(concurrency), max(cpus) FROM runs")[0]
    if not spans:
        return "no run has both a start and an end"
    return (f"runs went up to {most} at once, {mean or 1:.1f} on average over a run"
            + (f", on {cpus} CPUs" if cpus else "") + ": durations include waiting for a shared CPU")


WARM_UP = 2.0  # the first runs' mean duration this many times the others': said as a warm-up


def first_runs_note(con: duckdb.DuckDBPyConnection) -> str:
    """Words on the runs that went first (started before any run had ended) when they took much longer
    than the rest (:data:`WARM_UP`): a warm-up they alone paid (the model endpoint's, e.g. a fake just
    started, or the machine's), which falls on their arms; empty otherwise."""
    rows = _rows(con, """SELECT run_id, arm, position, seconds, started_at < (SELECT min(ended_at) FROM runs)
                         FROM runs WHERE status = 'done' AND seconds IS NOT NULL ORDER BY position, run_id""")
    first = [r for r in rows if r[4]]
    rest = [r[3] for r in rows if not r[4]]
    if not first or not rest:
        return ""
    mean_first, mean_rest = sum(r[3] for r in first) / len(first), sum(rest) / len(rest)
    if mean_first < WARM_UP * mean_rest:
        return ""
    arms = ", ".join(sorted({r[1] for r in first}))
    return (f"The {len(first)} runs that went first (started before any run ended: {arms}) took {mean_first:.3g} s "
            f"on average, the other {len(rest)} {mean_rest:.3g} s: a warm-up only they paid (of the model "
            "endpoint, e.g. a fake just started, or of the machine), inside their durations and so in their "
            "arms' means.")


def _phase_bars(con: duckdb.DuckDBPyConnection, arms: list[str]) -> go.Figure:
    """Where a run's time went, per arm on one axis: the mean seconds between its phases (done runs)."""
    import plotly.graph_objects as go

    segments = [(f"{a_label} to {b_label}", f"avg({b} - {a})")
                for (a, a_label), (b, b_label) in zip(PHASES, PHASES[1:], strict=False)]
    rows = _rows(con, f"""SELECT arm, {', '.join(sql for _l, sql in segments)}, count(*) FROM runs
                          WHERE status = 'done' GROUP BY arm ORDER BY arm""")
    per = {r[0]: r for r in rows}
    fig = go.Figure()
    colors = ("#c7c7c7", "#9edae5", "#1f77b4", "#aec7e8")
    for n, (label, _sql) in enumerate(segments):
        fig.add_trace(go.Bar(name=label, orientation="h", y=arms, marker_color=colors[n % len(colors)],
                             x=[max(0.0, per[a][n + 1] or 0.0) if a in per else 0 for a in arms],
                             hovertemplate="%{y}: %{x:.2f} s<extra>" + label + "</extra>"))
    fig.update_layout(annotations=[{"x": 0, "y": a, "xref": "x", "yref": "y", "text": "no run done", "showarrow": False,
                                    "xanchor": "left", "font": {"color": "#d62728"}} for a in arms if a not in per])
    fig.update_layout(barmode="stack",
                      title="Where a run's time went, process start-up included (mean of done runs)"
                            f"<br><sup>from its Emacs's start; {parallelism(con)}</sup>",
                      xaxis={"title": "seconds from the run's Emacs starting (start-up included)",
                             "rangemode": "tozero"},
                      yaxis={"type": "category", "automargin": True},
                      legend={"orientation": "h", "y": -0.3, "traceorder": "normal"})
    return fig


def _boxes(con: duckdb.DuckDBPyConnection, arms: list[str], value: str, title: str, unit: str,
           hover: str | None = None) -> go.Figure:
    """A box per arm over its done runs, every run a point; the others (failed, or stopped after their
    last reply) red crosses beside it (hover: why).
    HOVER: ``concurrency`` to say, for each run, how many runs went at once over its time."""
    import plotly.graph_objects as go

    rows = _rows(con, f"""SELECT arm, run_id, {value}, status = 'done',
                                 CASE WHEN status = ? THEN status || ' (' || ? || ')'
                                      ELSE 'failed: ' || coalesce(error, status) END,
                                 {'concurrency' if hover == 'concurrency' else 'NULL'}
                          FROM runs ORDER BY arm, rep, run_id""", STOPPED_REPLIED, STOPPED_WORDS)
    fig = go.Figure()

    def label(run: str, at_once: float | None) -> str:
        return run if at_once is None else f"{run} ({at_once:.1f} runs at once)"

    for arm in arms:
        mine = [(label(run, c), v) for a, run, v, done, _e, c in rows if a == arm and v is not None and done]
        fig.add_trace(go.Box(name=arm, x=[arm] * len(mine), y=[v for _r, v in mine], text=[r for r, _v in mine],
                             boxpoints="all", jitter=0.4, pointpos=0, marker_color="#1f77b4",
                             hovertemplate="%{text}: %{y}<extra></extra>"))
    failed = [(a, label(run, c), v, why) for a, run, v, done, why, c in rows if not done and v is not None]
    if failed:
        fig.add_trace(go.Scatter(name="failed run", mode="markers", x=[f[0] for f in failed],
                                 y=[f[2] for f in failed], text=[f"{f[1]} {f[3]}" for f in failed],
                                 marker={"symbol": "x", "size": 9, "color": "#d62728"},
                                 hovertemplate="%{text}: %{y}<extra></extra>"))
    fig.update_layout(title=title, yaxis_title=unit, showlegend=False, xaxis={"type": "category"})
    _nonnegative(fig, [r[2] for r in rows if r[2] is not None])
    done_arms = {a for a, _r, v, done, _e, _c in rows if v is not None and done}
    _no_data(fig, [a for a in arms if any(r[0] == a for r in failed)], done_arms, "no run done (red: failed)")
    _no_data(fig, [a for a in arms if not any(r[0] == a for r in failed)], done_arms, "no data")
    return fig


def _evals_and_blocks(con: duckdb.DuckDBPyConnection, arms: list[str]) -> tuple[go.Figure, go.Figure]:
    import plotly.graph_objects as go

    rates = {arm: (n, failed, blocked) for arm, n, failed, blocked in _rows(con, """
        SELECT arm, count(*), count(*) FILTER (WHERE NOT coalesce(ok, false) AND NOT blocked),
               count(*) FILTER (WHERE blocked)
        FROM evals GROUP BY arm""")}
    errors = go.Figure()
    for name, idx, color in (("failed", 1, "#ff7f0e"), ("blocked by a compulsion", 2, "#d62728")):
        errors.add_trace(go.Bar(name=name, x=arms, marker_color=color,
                                y=[rates[a][idx] / rates[a][0] if rates.get(a, (0,))[0] else 0 for a in arms],
                                text=[f"{rates[a][idx]} of {rates[a][0]}" if a in rates else "" for a in arms]))
    errors.update_layout(barmode="stack", title="Eval error rate per arm", yaxis_title="share of evals",
                         yaxis_tickformat=".0%", yaxis_rangemode="tozero", xaxis={"type": "category"})
    if not any(failed + blocked for _n, failed, blocked in rates.values()):
        _say(errors, "no eval errors in these runs" if rates else "no evals in these runs")
        errors.update_layout(showlegend=False)
    blocks = go.Figure()
    rows = _rows(con, """
        WITH n AS (SELECT arm, count(*) AS runs FROM runs GROUP BY arm)
        SELECT coalesce(b.by_template, '?'), b.arm, count(*) / any_value(n.runs), count(*)
        FROM blocks b JOIN n USING (arm) GROUP BY 1, 2 ORDER BY 1, 2""")
    for template in sorted({r[0] for r in rows}):
        per = {arm: (mean, total) for t, arm, mean, total in rows if t == template}
        blocks.add_trace(go.Bar(name=template, x=arms, y=[per.get(a, (0, 0))[0] for a in arms],
                                text=[f"{per.get(a, (0, 0))[1]} in all" for a in arms]))
    blocks.update_layout(barmode="stack", title="Compulsion blocks per run, per arm (by the compulsion's template)",
                         yaxis_title="blocks per run", legend_title="compulsion", yaxis_rangemode="tozero",
                         xaxis={"type": "category"})
    if not rows:  # an empty grid says nothing: the arms, a zero axis and the words
        blocks.add_trace(go.Bar(x=arms, y=[0] * len(arms), showlegend=False, hoverinfo="skip"))
        _say(blocks, "no compulsion blocks in these runs")
    return errors, blocks


def _say(fig: go.Figure, text: str) -> None:
    """FIG has nothing to draw: a 0..1 axis, and TEXT across the middle of the plot."""
    fig.update_layout(yaxis_range=[0, 1], annotations=[{
        "text": text, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False,
        "font": {"size": 18, "color": "#555"}}])


def _tree(con: duckdb.DuckDBPyConnection, run: str) -> go.Figure:
    import plotly.graph_objects as go

    rows = _rows(con, """
        SELECT session_id, agent_id, parent_id, agent_type, template, state, cost, model_calls
        FROM agents WHERE run_id = ? ORDER BY started_at""", run)
    sessions = sorted({r[0] for r in rows})

    def key(session: str, agent: str) -> str:
        return agent if len(sessions) == 1 else f"{session}/{agent}"

    known = {key(s, a) for s, a, *_ in rows}
    ids, labels, parents, colors, hover = [], [], [], [], []
    for session, agent, parent, kind, template, state, cost, calls in rows:
        ids.append(key(session, agent))
        parent_key = key(session, parent) if parent else ""
        parents.append(parent_key if parent_key in known else "")
        labels.append(f"{agent}<br>{kind} / {template}")
        colors.append(_color(kind))
        hover.append(f"state {state}, {calls} model calls, {_usd(cost)}")
    fig = go.Figure(go.Icicle(ids=ids, labels=labels, parents=parents, marker={"colors": colors},
                              textfont={"color": "white", "size": 13},  # readable on every type's colour
                              text=hover, hovertemplate="%{label}<br>%{text}<extra></extra>",
                              tiling={"orientation": "h"}, root={"color": "white"}))
    fig.update_layout(title=f"Agent tree of {run} (colour: type)")
    return fig


def _timeline(con: duckdb.DuckDBPyConnection, run: str) -> go.Figure:
    """RUN's agents, one row each (labelled on the y axis), from start to end on the run's own clock.

    The x axis is the run's clock, zero at its start signal (its first turn reaching its server; start-up
    before it is negative), shown from where its server serves to its last event, each
    phase of the run (PHASES) a dotted line, the title saying how many runs went at once; each
    agent's bar at its real times, each model call a line from its request to its response (its
    latency) ending in a dot, each eval a diamond just under its agent's row; hover for details."""
    import plotly.graph_objects as go

    span = _rows(con, """
        SELECT r.started_at, r.ended_at, min(e.ts), max(e.ts), r.sessions, r.first_turn_at
        FROM runs r LEFT JOIN events e USING (run_id) WHERE r.run_id = ? GROUP BY ALL""", run)
    started, ended, first_ts, last_ts, sessions, first_turn = span[0] if span else (None, None, None, None, 0, None)
    starts = [t for t in (started, first_ts) if t is not None]
    # zero: the run's start signal, as every duration of the report counts it (else its first record)
    t0 = first_turn if first_turn is not None else (min(starts) if starts else 0.0)
    t1 = max(t for t in (ended, last_ts, t0) if t is not None)
    rows = _rows(con, """
        SELECT session_id, agent_id, agent_type, template, state, started_at, ended_at, steps, model_calls, cost
        FROM agents WHERE run_id = ? ORDER BY started_at, agent_id""", run)

    def key(session: str, agent: str) -> str:
        return agent if sessions <= 1 else f"{session}/{agent}"

    # one row per agent, the first started at the top
    row_of = {key(r[0], r[1]): len(rows) - 1 - i for i, r in enumerate(rows)}
    fig = go.Figure()
    for kind in sorted({r[2] or "?" for r in rows}):
        mine = [r for r in rows if (r[2] or "?") == kind]
        fig.add_trace(go.Bar(
            name=kind, orientation="h", y=[row_of[key(r[0], r[1])] for r in mine],
            base=[r[5] - t0 for r in mine], x=[max(r[6] - r[5], (t1 - t0) / 500) for r in mine],
            width=0.5, marker_color=_color(kind), opacity=0.45, textposition="none",
            text=[f"{r[1]} ({r[3]}): {r[4]}, {r[7]} steps, {r[8]} model calls, {_usd(r[9])}" for r in mine],
            hovertemplate="%{text}<br>%{base:.2f} s to %{customdata:.2f} s<extra></extra>",
            customdata=[r[6] - t0 for r in mine]))
    calls = _rows(con, """
        SELECT session_id, agent_id, ts, latency_ms, ok, stop_reason, input_tokens, output_tokens, cost
        FROM model_calls WHERE run_id = ? ORDER BY ts""", run)
    xs: list[float | None] = []
    ys: list[float | None] = []
    for session, agent, ts, latency, *_rest in calls:
        y = row_of[key(session, agent)] + 0.12
        xs += [ts - t0 - (latency or 0) / 1000, ts - t0, None]
        ys += [y, y, None]
    fig.add_trace(go.Scatter(name="model call (request to response)", mode="lines", x=xs, y=ys,
                             line={"color": "black", "width": 2}, hoverinfo="skip", legendgroup="calls",
                             showlegend=False))
    fig.add_trace(go.Scatter(
        name="model call (request to response)", mode="markers", legendgroup="calls",
        x=[c[2] - t0 for c in calls], y=[row_of[key(c[0], c[1])] + 0.12 for c in calls],
        marker={"symbol": "circle", "size": 6, "color": ["black" if c[4] else "#d62728" for c in calls]},
        text=[f"{c[1]}: {'answered, ' + str(c[5]) if c[4] else 'failed'}, {c[6] or 0} in / {c[7] or 0} out, "
              f"{_usd(c[8]) if c[4] else '$0'}, {(c[3] or 0) / 1000:.2f} s" for c in calls],
        hovertemplate="%{text}<br>at %{x:.2f} s<extra></extra>"))
    evals = _rows(con, "SELECT session_id, agent_id, ts, coalesce(ok, false), form, error FROM evals WHERE run_id = ?",
                  run)
    fig.add_trace(go.Scatter(
        name="eval (red: error)", mode="markers", x=[e[2] - t0 for e in evals],
        y=[row_of[key(e[0], e[1])] - 0.12 for e in evals],
        text=[html.escape(str(e[4])[:80]) + ("" if e[3] else "<br>" + html.escape(str(e[5])[:80])) for e in evals],
        hovertemplate="%{text}<br>at %{x:.2f} s<extra></extra>",
        marker={"symbol": "diamond", "size": 7, "color": ["#2ca02c" if e[3] else "#d62728" for e in evals],
                "line": {"width": 0.5, "color": "white"}}))
    labels = [""] * len(rows)
    for r in rows:
        labels[row_of[key(r[0], r[1])]] = f"{key(r[0], r[1])} ({r[4]})"
    marks = _rows(con, f"SELECT {', '.join(p for p, _label in PHASES)}, concurrency, cpus FROM runs WHERE run_id = ?",
                  run)
    when = dict(zip([p for p, _label in PHASES], marks[0][:len(PHASES)], strict=True)) if marks else {}
    concurrency, cpus = (marks[0][len(PHASES)], marks[0][len(PHASES) + 1]) if marks else (None, None)
    shown = {p: t - t0 for p, t in when.items() if t is not None}
    # the view is from where the server serves to the last event (the phases outside it are named in
    # the title): the agents' activity fills the width instead of a sliver of the run; zoom out for the rest
    begun = [v for v in (shown.get("server_started_at"), (first_ts - t0) if first_ts is not None else None)
             if v is not None]
    left = min(begun, default=0.0) - 0.5
    shapes, notes = [], []
    for phase, label in PHASES:
        if phase in shown:
            shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": shown[phase], "x1": shown[phase],
                           "y0": 0, "y1": 1, "line": {"color": "#888", "width": 1, "dash": "dot"}})
            notes.append({"x": shown[phase], "y": 1, "xref": "x", "yref": "paper", "text": label, "showarrow": False,
                          "yanchor": "top", "xanchor": "left", "font": {"size": 10, "color": "#555"}})
    right = max(left + 1.0, ((last_ts - t0) if last_ts is not None else (t1 - t0)) + 1.0)
    before = [f"{label} at {shown[p]:.1f} s" for p, label in PHASES
              if p in shown and not left <= shown[p] <= right]
    fig.update_layout(shapes=shapes, annotations=notes)
    fig.update_layout(
        barmode="overlay",
        title=f"Timeline of {run}'s agents ({_parallelism_of(concurrency, cpus)})"
              + (f"<br><sup>outside the view: {', '.join(before)}; zoom out to see</sup>" if before else ""),
        xaxis={"title": "seconds from the run's start (its first turn reaching the server; start-up is "
                        "before 0)" if first_turn is not None else "seconds from the run's first record",
               "range": [left, right],
               "zeroline": False},
        yaxis={"tickmode": "array", "tickvals": list(range(len(rows))), "ticktext": labels, "automargin": True,
               "range": [-0.6, len(rows) - 0.4]},
        legend={"orientation": "h", "y": -0.25 if len(rows) > 3 else -0.4})
    return fig


NOT_STARTED = "not started: the experiment stopped before them (run the same command again to resume)"


def _failures(page: Page, con: duckdb.DuckDBPyConnection, not_started: list[str]) -> None:
    """First on the page, in red: the runs that failed, one row per reason (how many, at which turns, which),
    and the runs of the spec NOT_STARTED (the experiment stopped before them, or is still going); the runs
    stopped after their last reply (:data:`~.runs.STOPPED_REPLIED`) in a note of their own."""
    rows = _rows(con, """
        SELECT coalesce(error, 'still ' || status || ': no reason recorded'), count(*), string_agg(DISTINCT failed_turn::VARCHAR, ', '),
               string_agg(run_id, ', ' ORDER BY run_id)
        FROM runs WHERE status NOT IN ('done', ?) GROUP BY 1 ORDER BY 2 DESC, 1""", STOPPED_REPLIED)
    stopped = [r for (r,) in _rows(con, "SELECT run_id FROM runs WHERE status = ? ORDER BY run_id", STOPPED_REPLIED)]
    if stopped:  # not failures: the resume records them done, not run again
        page.html(f"<p class='note'>{len(stopped)} {'run' if len(stopped) == 1 else 'runs'} {STOPPED_REPLIED} "
                  f"({html.escape(STOPPED_WORDS)}): {html.escape(_cut_ids(', '.join(stopped)))}.</p>")
    if not rows and not not_started:
        return
    total = _rows(con, "SELECT count(*) FROM runs")[0][0] + len(not_started)
    failed = sum(r[1] for r in rows)
    unstarted = [(NOT_STARTED, len(not_started), "", _cut_ids(", ".join(not_started)))] if not_started else []
    heading = (f"{failed} of {total} runs failed" + (f", {len(not_started)} not started" if not_started else "")
               if failed else f"{len(not_started)} of {total} runs not started")
    page.html(f"<div class='failures'><h2 id='failures'>{heading}</h2>"
              "<p>A run is done only when every turn of its script got the agent's reply. "
              "These did not (their data below is what they left):</p>"
              + _table(["reason", "runs", "stopped at turn", "runs (ids)"],
                       [(reason, n, turns or "", _cut_ids(ids)) for reason, n, turns, ids in rows] + unstarted)
              + "</div>")


def _cut_ids(ids: str) -> str:
    """IDS, a list of run ids, cut to 400 characters."""
    return ids if len(ids) < 400 else ids[:400] + " ..."


SAMPLE = 3  # final replies shown per arm
SHORT = 280  # characters of a reply shown before it is opened


def _final_replies(page: Page, con: duckdb.DuckDBPyConnection, arms: list[str]) -> None:
    """The primary's last reply of a few runs of each arm, the arms side by side; the full text on click."""
    rows = _rows(con, """
        WITH last AS (
            SELECT run_id, arg_max(reply, turn) AS reply, max(turn) AS turn
            FROM turns WHERE agent_type = 'primary' GROUP BY run_id)
        SELECT r.arm, r.run_id, r.status, l.turn, l.reply,
               row_number() OVER (PARTITION BY r.arm ORDER BY r.status <> 'done', r.rep, r.run_id) AS n
        FROM runs r LEFT JOIN last l USING (run_id) ORDER BY r.arm, n""")
    columns = []
    for arm in arms:
        mine = [r for r in rows if r[0] == arm]
        cells = []
        for _arm, run, status, turn, reply, _n in mine[:SAMPLE]:
            text = reply or "(no reply)"
            head = html.escape(text if len(text) <= SHORT else text[:SHORT] + " ...")
            where = f"{run}" + (f", turn {turn}" if turn else "") + ("" if status == "done" else f" ({status})")
            cells.append(f"<details class='reply'><summary><b>{html.escape(where)}</b><br>{head}</summary>"
                         f"<div class='full'>{html.escape(text)}</div></details>")
        more = f"<p class='note'>{len(mine) - SAMPLE} more runs: the turns table has them all.</p>" \
            if len(mine) > SAMPLE else ""
        columns.append(f"<div class='arm'><h3>{html.escape(arm)}</h3>{''.join(cells)}{more}</div>")
    page.html(f"<div class='arms' style='grid-template-columns:repeat({max(1, len(arms))}, 1fr)'>"
              + "".join(columns) + "</div>")


BOOTSTRAP = 2000  # resamples for a mean's 95% interval


def bootstrap_interval(values: list[float], resamples: int = BOOTSTRAP, seed: int = 0) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of the means of RESAMPLES resamples of VALUES (with replacement),
    seeded: the same report for the same data.  One value: that value twice."""
    import random

    if not values:
        raise ValueError("no values")
    if len(values) == 1:
        return values[0], values[0]
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    return means[int(0.025 * (resamples - 1))], means[int(round(0.975 * (resamples - 1)))]


def _scores(page: Page, con: duckdb.DuckDBPyConnection, arms: list[str]) -> None:
    """Per judge: each arm's mean score with its bootstrap 95% interval, every run a point; a table of them."""
    import plotly.graph_objects as go

    judges = _rows(con, """SELECT judge, min(scale_low), max(scale_high), count(*) FILTER (WHERE judged = 'done'),
                                  count(*) FILTER (WHERE judged <> 'done'), sum(cost)
                           FROM scores GROUP BY judge ORDER BY judge""")
    if not judges:
        return
    page.section("Scores", "Each judge's scores per arm (amacs-server judge RUNS_DIR JUDGE): every judged run a "
                           f"point (hover: its rationale); the diamond is the arm's mean, the bar its bootstrap 95% "
                           f"interval ({BOOTSTRAP} resamples).")
    table = []
    for judge, low, high, n_done, n_failed, cost in judges:
        rows = _rows(con, """SELECT arm, run_id, score, rationale FROM scores
                             WHERE judge = ? AND judged = 'done' AND score IS NOT NULL ORDER BY arm, run_id""", judge)
        fig = go.Figure()
        means, lows, highs, named = [], [], [], []
        for arm in arms:
            mine = [r for r in rows if r[0] == arm]
            if not mine:
                continue
            values = [float(r[2]) for r in mine]
            mean = sum(values) / len(values)
            lo, hi = bootstrap_interval(values)
            named.append(arm)
            means.append(mean)
            lows.append(mean - lo)
            highs.append(hi - mean)
            table.append((judge, arm, len(values), mean, lo, hi))
            fig.add_trace(go.Box(name=arm, x=[arm] * len(values), y=values, boxpoints="all", jitter=0.3,
                                 pointpos=0, fillcolor="rgba(0,0,0,0)", line={"color": "rgba(0,0,0,0)"},
                                 marker={"color": "#1f77b4", "opacity": 0.6}, showlegend=False,
                                 text=[f"{r[1]}: {html.escape(str(r[3])[:200])}" for r in mine],
                                 hovertemplate="%{text}<br>score %{y}<extra></extra>"))
        fig.add_trace(go.Scatter(name="mean, 95% interval", x=named, y=means, mode="markers",
                                 marker={"symbol": "diamond", "size": 12, "color": "#d62728"},
                                 error_y={"type": "data", "symmetric": False, "array": highs, "arrayminus": lows,
                                          "thickness": 2, "width": 10, "color": "#d62728"},
                                 hovertemplate="%{x}: mean %{y:.2f}<extra></extra>"))
        fig.update_layout(title=f"{judge}: score per arm ({n_done} runs judged"
                                + (f", {n_failed} failed" if n_failed else "") + f"; {_usd(cost)})",
                          yaxis={"title": f"score ({low} to {high})", "range": [low - 0.5, high + 0.5],
                                 "dtick": 1},
                          boxmode="overlay",
                          xaxis={"type": "category", "categoryorder": "array", "categoryarray": arms})
        _no_data(fig, arms, set(named), "not judged")
        page.figure(fig)
    page.html(_table(["judge", "arm", "runs judged", "mean score", "95% interval low", "95% interval high"], table))


LISTED = "listed (AMACS's price list)"


def price_sources(con: duckdb.DuckDBPyConnection, runs_dir: Path) -> list[tuple[Any, ...]]:
    """Where each model's dollars come from, per model and endpoint: (model, model name, endpoint, runs,
    tokens, dollars, words, where), WHERE the words of :func:`list_priced_elsewhere` when its dollars are
    list prices for what a server other than the provider's API reported (an estimate), else None."""
    from ..config import DEFAULT_MODEL
    from ..inference.pricing import endpoint_host, is_local, list_priced_elsewhere, listed_price
    from .spec import SpecError, models_of

    try:
        entries = models_of(runs_dir / "experiment.toml") if (runs_dir / "experiment.toml").is_file() else {}
    except SpecError:
        entries = {}
    rows = []
    for model, model_name, backend, endpoint, n, tokens, unpriced, dollars in _rows(con, """
            SELECT model, any_value(model_name), any_value(backend), endpoint, count(*),
                   sum(input_tokens + output_tokens)::BIGINT, sum(coalesce(unpriced_calls, 0))::BIGINT,
                   sum(coalesce(cost, model_cost))
            FROM runs GROUP BY model, endpoint ORDER BY model, endpoint"""):
        entry = entries.get(model)
        name = model_name or (entry.model if entry else None) or DEFAULT_MODEL
        # A run recorded before the manifest said its endpoint: the spec's, if it can still be read.
        host = endpoint or (endpoint_host(backend or "anthropic", entry.base_url) if entry else None)
        where = None
        if entry is not None and entry.price is not None:
            source = f"the spec's price: ${entry.price.input:g} in, ${entry.price.output:g} out per million tokens"
        elif unpriced == 0 and listed_price(name) is not None:
            where = list_priced_elsewhere(backend or "anthropic", name, host)
            source = LISTED + (f", estimated: the model calls went to {where}" if where else "")
        elif unpriced == 0 and (entry is None or is_local(entry.base_url)):
            source = "free: served on this machine" + (f" ({entry.base_url})" if entry and entry.base_url else "")
        else:
            source = ("unknown: no price listed or given, so its dollars are not counted (its tokens are); give "
                      "one as price = {input = ..., output = ...} in its [[models]] entry")
        rows.append((model, name, host or "?", n, tokens, dollars, source, where))
    return rows


def _prices(page: Page, sources: list[tuple[Any, ...]]) -> None:
    """Where each model's dollars come from (SOURCES, :func:`price_sources`): listed, listed but for
    another server's tokens (an estimate), the spec's price, free (a server on this machine), or unknown
    (then the page shows tokens, and says how to give a price)."""
    if any(r[6] != LISTED for r in sources):
        page.html("<p><b>Prices.</b> Where each model's dollars come from:</p>"
                  + _table(["model", "model name", "endpoint", "runs", "tokens (in + out)", "price"],
                           [(*r[:5], r[6]) for r in sources]))


def cost_words(con: duckdb.DuckDBPyConnection, runs_cost: float, sources: list[tuple[Any, ...]],
               unpriced: int) -> str:
    """What the experiment cost, for the page's first line: the runs' dollars (RUNS_COST and their
    earlier attempts', the total said first and the earlier attempts as part of it, in the one
    parenthesis that says which are estimates), and when they were judged, the judging's beside them
    and the sum."""
    earlier = float(_rows(con, "SELECT coalesce(sum(earlier_cost), 0) FROM runs")[0][0])
    runs_cost += earlier  # a run that failed and ran again: its earlier attempts were paid too
    estimated = estimated_words(sources)
    notes = [estimated] if estimated else []
    notes += [f"{unpriced} runs' cost is unknown"] if unpriced else []
    notes += [earlier_words(earlier)] if earlier else []
    notes += ["see Prices"] if estimated or unpriced else []
    said = (" of the runs whose cost is known" if unpriced else "") + (f" ({'; '.join(notes)})" if notes else "")
    judging = judging_words(con)
    if not judging:
        return f"${runs_cost:.4f} in all{said}"
    return f"runs ${runs_cost:.4f}{said}, {judging}, ${runs_cost + judging_cost(con)[0]:.4f} in all"


def estimated_words(sources: list[tuple[Any, ...]]) -> str:
    """What of the dollars of SOURCES (:func:`price_sources`) are list prices for another server's
    tokens, in words for the page's first lines (empty when none are)."""
    wheres = sorted({r[7] for r in sources if r[7]})
    if not wheres:
        return ""
    estimated = sum(r[5] or 0 for r in sources if r[7])
    every = all(r[7] or not r[5] for r in sources)
    if all(r[7] and r[5] == 0 for r in sources):  # an answer reports tokens, at a list price never nothing
        return f"no model call got an answer: the model is at {'; '.join(wheres)}"
    return (f"{'all' if every else f'${estimated:.4f} of it'} estimated at list prices: the model calls "
            f"went to {'; '.join(wheres)}")


COMPARED = (("seconds", "duration, first turn to last reply", " s"), ("coalesce(cost, model_cost)", "cost", " $"),
            ("model_calls", "model calls", ""), ("input_tokens + output_tokens", "tokens (in + out)", ""))


def compare_arms(con: duckdb.DuckDBPyConnection, arms: list[str]) -> list[tuple[Any, ...]]:
    """Each arm against the first (the reference): per measure of the done runs (:data:`COMPARED`) and
    per judge's scores, the means, the difference and its 95% interval, and what it says."""
    from .compare import difference

    if len(arms) < 2:
        return []
    measures: list[tuple[str, str, dict[str, list[float]]]] = []
    for column, label, unit in COMPARED:
        rows = _rows(con, f"SELECT arm, {column} FROM runs WHERE status = 'done'")
        if column.startswith("coalesce(cost") and any(v is None for _a, v in rows):
            continue  # some cost is unknown: no difference of dollars is made of the known part
        values: dict[str, list[float]] = {}
        for arm, v in rows:
            if v is not None:
                values.setdefault(arm, []).append(float(v))
        measures.append((label, unit, values))
    for (judge,) in _rows(con, "SELECT DISTINCT judge FROM scores ORDER BY judge"):
        values = {}
        for arm, v in _rows(con, "SELECT arm, score FROM scores WHERE judge = ? AND judged = 'done' "
                                 "AND score IS NOT NULL", judge):
            values.setdefault(arm, []).append(float(v))
        measures.append((f"score: {judge}", "", values))
    reference = arms[0]
    out: list[tuple[Any, ...]] = []
    for label, unit, values in measures:
        for arm in arms[1:]:
            if not values.get(reference) or not values.get(arm):
                out.append((label, f"{arm} vs {reference}", len(values.get(arm, [])),
                            len(values.get(reference, [])), None, None, None, "no runs to compare"))
                continue
            d = difference(values[reference], values[arm])
            interval = f"{d.low:+.3g} to {d.high:+.3g}" if d.low is not None and d.high is not None else "—"
            out.append((label, f"{arm} vs {reference}", d.n_arm, d.n_reference, d.mean_arm, d.mean_reference,
                        f"{d.difference:+.3g} ({interval})", d.words(unit)))
    return out


def report_arms(con: duckdb.DuckDBPyConnection, runs_dir: Path) -> tuple[list[str], str | None, str]:
    """The arms of the runs in the order the spec (RUNS_DIR's copy) lists them, the reference arm the
    others are compared with, and why it is the reference, in words."""
    arms = arms_in_order(con, runs_dir)
    if not arms:
        return [], None, ""
    spec = arms_of(runs_dir / "experiment.toml")
    if spec is None:
        return arms, arms[0], (f"the first by name: the spec ({runs_dir / 'experiment.toml'}) could not "
                               "be read for its order or its reference")
    _listed, reference, named = spec
    recorded = set(arms)
    first = "the first arm the spec lists (its first prompt, variant and model)"
    how = "; name another with reference = \"VARIANT\" (or a model's or prompt's name) in its [experiment]"
    if named is None:
        return arms, arms[0], first + how
    if reference in recorded:
        return arms, reference, f"the spec's reference = \"{named}\""
    return arms, arms[0], f"{first}: the spec's reference = \"{named}\" has no runs here"


def _arms_compared(page: Page, con: duckdb.DuckDBPyConnection, arms: list[str], reference: str | None,
                   why: str) -> None:
    """The section comparing each arm with the REFERENCE (WHY: in words): differences with their 95%
    intervals."""
    from .compare import EXACT_UP_TO, MIN_N, RESAMPLES

    if reference is None:
        return
    rows = compare_arms(con, [reference, *(a for a in arms if a != reference)])
    if not rows:
        return
    page.section("Arms compared", f"Each arm against {reference}, the reference ({why}): the difference of "
                                  "the means over done runs (the arm's minus the reference's), "
                                  f"its 95% interval (a seeded bootstrap, {RESAMPLES} resamples, each arm "
                                  "resampled on its own) and a permutation test's p-value (exact up to "
                                  f"{EXACT_UP_TO} labellings). With fewer than {MIN_N} runs in an arm it says "
                                  "it cannot tell. A run's duration (its seconds) is from its first turn "
                                  "reaching its server to its last reply: the model's answers, the evals, the "
                                  "subagents, and any wait for a CPU the runs shared; Emacs's and the server's "
                                  "start-up are not counted (startup_seconds), and runs went in a random order "
                                  "(see order). " + first_runs_note(con))
    page.html(_table(["measure", "arms", "n", "n (reference)", "mean", "mean (reference)",
                      "difference (95% interval)", "what it says"], rows))
    seeds = _rows(con, "SELECT DISTINCT order_seed FROM runs")
    said = ", ".join("grid (not random)" if seed is None else str(seed) for (seed,) in seeds)
    page.html(f"<p class='note' id='order'>Run order: {html.escape(said)}"
              + (" (the seed of the random order across arms and repetitions)" if any(seed is not None for (seed,) in seeds) else "")
              + ".</p>")


def no_such_runs(con: duckdb.DuckDBPyConnection, runs_dir: Path, named: list[str]) -> str | None:
    """What is wrong with the run names NAMED on the command line, or None: those none of the runs
    of RUNS_DIR (in CON) is named, and the names it has nearest each, else its first few."""
    have = sorted(r[0] for r in _rows(con, "SELECT run_id FROM runs"))
    missing = list(dict.fromkeys(n for n in named if n not in have))
    if not missing:
        return None
    near = list(dict.fromkeys(n for m in missing for n in difflib.get_close_matches(m, have, n=2, cutoff=0.6)))
    shown = near or have[:3]
    return (f"no such run{'s' if len(missing) > 1 else ''}: {', '.join(missing)}; "
            + (f"did you mean {' or '.join(shown)}? " if near else "")
            + f"a run is named as its folder in {runs_dir} ({len(have)} run{'s' if len(have) != 1 else ''}"
            + ("" if near else f": {', '.join(shown)}{', ...' if len(have) > len(shown) else ''}") + ")")


def choose_runs(con: duckdb.DuckDBPyConnection, wanted: list[str]) -> list[str]:
    """WANTED if given (:func:`no_such_runs` checked them); else the run with the most agents, the
    dearest, the first."""
    if wanted:
        return wanted
    picks = [r[0] for sql in ("SELECT run_id FROM runs ORDER BY agents DESC, run_id LIMIT 1",
                              "SELECT run_id FROM runs ORDER BY coalesce(cost, model_cost) DESC, run_id LIMIT 1",
                              "SELECT run_id FROM runs ORDER BY run_id LIMIT 1") for r in _rows(con, sql)]
    return list(dict.fromkeys(picks))[:DEFAULT_RUNS]


def build_report(con: duckdb.DuckDBPyConnection, runs_dir: Path, runs: list[str], timeline: str | None) -> Page:
    """The page for the dataset in CON."""
    page = Page()
    arms, reference, why = report_arms(con, runs_dir)
    recorded = {r[0] for r in _rows(con, "SELECT run_id FROM runs")}
    not_started = [r for r in planned_runs(runs_dir / "experiment.toml") or [] if r not in recorded]
    _failures(page, con, not_started)
    status = _rows(con, "SELECT coalesce(status, '?'), count(*), sum(coalesce(cost, model_cost)) FROM runs GROUP BY 1 ORDER BY 1")
    status += [("not started", len(not_started), 0.0)] if not_started else []
    unpriced = _rows(con, "SELECT count(*) FROM runs WHERE cost IS NULL OR unpriced_calls > 0")[0][0]
    sources = price_sources(con, runs_dir)
    page.html(f"<p>{sum(n for _s, n, _c in status)} runs in {html.escape(str(runs_dir))}: "
              + ", ".join(f"{n} {html.escape(s)}" for s, n, _c in status)
              + "; " + html.escape(cost_words(con, sum(c or 0 for *_x, c in status), sources, unpriced)) + ".</p>")
    page.html(_table(
        ["arm (prompt / variant / model)", "runs", "done", "failed", "mean cost $", "mean tokens", "evals",
         "eval errors", "blocks"],
        [(*r[:4], "unknown (no price)" if r[4] is None and r[9] else r[4], *r[5:9]) for r in _in_order(_rows(con, """
            SELECT arm, count(*), count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed'),
                   CASE WHEN bool_or(cost IS NULL OR unpriced_calls > 0) THEN NULL ELSE avg(coalesce(cost, model_cost)) END,
                   avg(input_tokens + output_tokens)::BIGINT, sum(evals)::BIGINT,
                   sum(eval_errors)::BIGINT, sum(blocks)::BIGINT, bool_or(cost IS NULL OR unpriced_calls > 0)
            FROM runs GROUP BY arm"""), arms)]))
    _prices(page, sources)
    # the tick's commit beside it (a rewind uses a tick's number again): none in a run an older AMACS made
    origins = _in_order(_rows(con, """
        SELECT arm, string_agg(DISTINCT origin || coalesce(' (commit ' || left(origin_commit, 12) || ')', ''), ', ')
        FROM runs WHERE origin IS NOT NULL GROUP BY arm ORDER BY arm"""), arms)
    if origins:  # counterfactual arms (the spec's from): compared from the fork point on
        page.html("<p>Each run of these arms started from a fork of a home at a tick, so the arms share that "
                  "history: what this page counts (cost, tokens, turns, replies) is from the fork point on.</p>")
        page.html(_table(["arm", "forked from (home@tick, and its commit)"], origins))
    _arms_compared(page, con, arms, reference, why)
    page.section("Final replies", f"The primary agent's last reply in up to {SAMPLE} runs of each arm (done "
                                  "runs first); click one for its full text. Every turn of every agent is in the "
                                  "dataset's turns table.")
    _final_replies(page, con, arms)
    _scores(page, con, arms)
    page.section("Cost and tokens per arm and agent type", "Mean per run of the arm, stacked by agent type.")
    page.figure(_by_type_bars(con, arms, "a.cost", "Cost per run by agent type", "dollars per run"))
    page.figure(_by_type_bars(con, arms, "a.input_tokens + a.output_tokens", "Tokens per run by agent type",
                              "tokens per run (in + out)"))
    page.section("Across repetitions", "One box per arm; each point is a run (hover: its id).")
    page.figure(_boxes(con, arms, "coalesce(cost, model_cost)", "Cost of each run", "dollars"))
    page.figure(_boxes(con, arms, "model_calls", "Model calls of each run", "model calls"))
    page.figure(_boxes(con, arms, "seconds", "Duration of each run, from its first turn to its last reply "
                       f"(process start-up not counted)<br><sup>{parallelism(con)}</sup>", "seconds",
                       hover="concurrency"))
    warm = first_runs_note(con)
    if warm:
        page.html(f"<p class='note'>{html.escape(warm)}</p>")
    page.figure(_boxes(con, arms, "startup_seconds", "Start-up each run waited for, to its first turn (Emacs, "
                       "server, hello; a run prepared ahead counts only what was not ready when it was started)",
                       "seconds"))
    page.figure(_phase_bars(con, arms), height=max(300, 140 + 50 * len(arms)))
    page.section("Evals and compulsions")
    errors, blocks = _evals_and_blocks(con, arms)
    page.figure(errors)
    page.figure(blocks)
    page.section("MCP tools", "Tool calls per arm (the dataset's tool_calls table): calls, the runs that made "
                              "them, errors, calls a compulsion blocked, and the median seconds of a call.")
    page.html(_table(["arm", "server/tool", "calls", "runs", "errors", "blocked", "median s"], _in_order(_rows(con, """
        SELECT arm, server || '/' || tool, count(*), count(DISTINCT run_id),
               count(*) FILTER (WHERE NOT ok AND NOT blocked), count(*) FILTER (WHERE blocked), median(seconds)
        FROM tool_calls GROUP BY 1, 2 ORDER BY 1, 2"""), arms) or [("no tool calls in these runs", "", "", "", "", "", "")]))
    page.section("Agent trees", "Parent to child, left to right; hover for state, model calls and cost.")
    for run in runs:
        page.figure(_tree(con, run), height=420)
    if timeline:
        page.section("Timeline", "The run from its start to its end; each agent a row, from its start to its "
                                 "end (open at end: to its session's last event); black: model calls, a line "
                                 "from request to response; diamonds: evals. Hover for details, drag to zoom.")
        page.figure(_timeline(con, timeline), height=max(300, 60 + 40 * len(_rows(
            con, "SELECT 1 FROM agents WHERE run_id = ?", timeline))))
    return page


def main(argv: list[str] | None = None) -> int:
    """Write RUNS_DIR/report.html (and open it with --open)."""
    parser = argparse.ArgumentParser(prog="amacs-server report",
                                     description="Draw the runs of RUNS_DIR as one self-contained HTML page"
                                                 " (RUNS_DIR/report.html).")
    parser.add_argument("runs_dir", type=Path, help="an experiment's runs folder (RUNS_DIR/<run-id>/manifest.json)")
    parser.add_argument("--runs", default="", help="run ids (comma-separated) whose agent trees are drawn")
    parser.add_argument("--timeline", default=None, help="the run whose agents' timeline is drawn")
    parser.add_argument("-o", "--output", type=Path, default=None, help="default: RUNS_DIR/report.html")
    parser.add_argument("--open", action="store_true", help="open the report in a browser")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    con = load(args.runs_dir)
    wanted = [r for r in args.runs.split(",") if r.strip()]
    wrong = no_such_runs(con, args.runs_dir, wanted + ([args.timeline] if args.timeline else []))
    if wrong is not None:
        con.close()
        print(f"amacs-server report: {wrong}", file=sys.stderr)
        return 2
    runs = choose_runs(con, wanted)
    timeline = args.timeline or (runs[0] if runs else None)
    name = con.execute("SELECT any_value(experiment) FROM runs").fetchone()
    page = build_report(con, args.runs_dir, runs, timeline)
    con.close()
    out = args.output or args.runs_dir / "report.html"
    out.write_text(page.render(f"AMACS experiment {name[0] if name and name[0] else args.runs_dir.name}"),
                   encoding="utf-8")
    print(f"{out} ({page.figures} charts, {out.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - start:.2f} s")
    if args.open:
        webbrowser.open(out.resolve().as_uri())
    return 0


if __name__ == "__main__":
    sys.exit(main())
