"""The report (issue 15): ``amacs-server report RUNS_DIR`` opened in headless Chromium.

The page is generated for generated runs, then Chromium (Debian's ``chromium``) takes a
screenshot and dumps the DOM after its scripts ran: plotly drew every chart (an
``svg.main-svg`` per figure) and no script raised (a ``window.onerror`` injected at the
top of a copy of the page writes a marker element; a page that throws proves it does)."""

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from amacs_server.research import report
from amacs_server.research.dataset import load
from tests.research_fakes import write_runs


def needs_chromium(test):
    test = pytest.mark.e2e(test)
    return pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")(test)


WIDTH, HEIGHT = 1400, 3000
MARKER = "amacs-js-error"
ON_ERROR = ("<script>window.onerror = function (msg) { var d = document.createElement('div'); "
            f"d.id = '{MARKER}'; d.textContent = String(msg); document.documentElement.appendChild(d); }};</script>")


def chromium(url: str, *args: str) -> str:
    run = subprocess.run(["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--window-size={WIDTH},{HEIGHT}", "--virtual-time-budget=10000", *args, url],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def watched_copy(page: Path) -> Path:
    """PAGE with the onerror marker installed before any other script."""
    text = page.read_text(encoding="utf-8")
    copy = page.with_name("watched-" + page.name)
    copy.write_text(text.replace("<head>", "<head>" + ON_ERROR, 1), encoding="utf-8")
    return copy


def png_info(path: Path) -> tuple[int, int, int]:
    """Width, height and the compressed pixel bytes (IDAT) of the PNG at PATH, checking it decodes."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    zlib.decompress(idat)  # the pixels decode
    return width, height, len(idat)


@needs_chromium
def test_report_renders_every_chart_in_headless_chromium(tmp_path, capsys):
    runs = write_runs(tmp_path / "runs", 24)
    chosen = [runs[0].run_id, runs[9].run_id]
    assert report.main([str(tmp_path / "runs"), "--runs", ",".join(chosen), "--timeline", runs[9].run_id]) == 0
    page = tmp_path / "runs" / "report.html"
    assert str(page) in capsys.readouterr().out
    text = page.read_text(encoding="utf-8")
    figures = int(re.search(r"<meta name='amacs-figures' content='(\d+)'>", text)[1])
    assert figures == 9 + len(chosen) + 1  # 9 charts, a tree per chosen run, the timeline
    # self-contained: plotly.js is inlined once, nothing is fetched
    assert "<script src=" not in text and "src=\"http" not in text and len(text) > 3_000_000
    assert text.count("window.PlotlyConfig") == 1
    assert text.count("Plotly.newPlot") == figures
    for run in chosen:
        assert f"Agent tree of {run}" in text
    watched = watched_copy(page)

    dom = chromium(watched.as_uri(), "--dump-dom")
    assert f'id="{MARKER}"' not in dom, re.search(f'id="{MARKER}">([^<]*)', dom)
    assert dom.count('class="plotly-graph-div') == figures
    assert dom.count('<svg class="main-svg"') >= figures
    assert dom.count('class="slice') >= 5 * len(chosen)  # the trees' agents were drawn (icicle slices)
    assert 'class="boxlayer' in dom and 'class="barlayer' in dom

    shot = tmp_path / "report.png"
    chromium(watched.as_uri(), f"--screenshot={shot}")
    width, height, pixels = png_info(shot)
    assert (width, height) == (WIDTH, HEIGHT)
    # a blank page of this size compresses to ~20 KB; the charts to ~10 times that
    assert pixels > 100_000


@needs_chromium
def test_a_script_error_shows_the_marker(tmp_path):
    """The check above can fail: a page whose script throws gets the marker."""
    page = tmp_path / "broken.html"
    page.write_text("<html><head></head><body><script>undefinedFunction();</script></body></html>")
    dom = chromium(watched_copy(page).as_uri(), "--dump-dom")
    assert re.search(f'id="{MARKER}">[^<]*undefinedFunction', dom)


def arms_of(con) -> list[str]:
    return [r[0] for r in con.execute("SELECT DISTINCT arm FROM runs ORDER BY arm").fetchall()]


def annotations(fig) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def test_eval_errors_and_blocks_say_so_when_there_are_none(tmp_path):
    """No eval errors and no blocks (the shipped debate): each chart says so over a 0..1 axis with
    the arms labelled, not an empty grid or an axis from -100%."""
    write_runs(tmp_path / "clean", 8, errors=False)
    con = load(tmp_path / "clean")
    assert con.execute("SELECT count(*) FILTER (WHERE NOT ok), count(*) FROM evals").fetchone()[0] == 0
    arms = arms_of(con)
    errors, blocks = report._evals_and_blocks(con, arms)
    assert annotations(errors) == ["no eval errors in these runs"]
    assert annotations(blocks) == ["no compulsion blocks in these runs"]
    for fig in (errors, blocks):
        assert tuple(fig.layout.yaxis.range) == (0, 1)
        assert any(list(t.x) == arms for t in fig.data)  # the arm labels stay on the x axis
    # with errors and blocks: bars, an axis from zero, no such words
    write_runs(tmp_path / "errors", 16)
    con = load(tmp_path / "errors")
    errors, blocks = report._evals_and_blocks(con, arms_of(con))
    assert annotations(errors) == annotations(blocks) == []
    assert errors.layout.yaxis.rangemode == blocks.layout.yaxis.rangemode == "tozero"
    assert sum(sum(t.y) for t in blocks.data) > 0


def test_timeline_spans_the_run_with_every_call_and_agents_labelled_on_the_y_axis(tmp_path):
    runs = write_runs(tmp_path, 8)
    run = max(runs, key=lambda r: len(r.agents))
    con = load(tmp_path)
    fig = report._timeline(con, run.run_id)
    # the x axis is the run's own clock, zero at its start signal (its first turn reaching the server, as
    # every duration counts it; the axis says so), shown from its server's start (before zero) to its last
    # event; each phase a dotted line named at the top; the Emacs start, outside the view, in the title at
    # the same clock (negative: before the run's start)
    m = run.manifest
    zero = m["first_turn_at"]
    assert 1.5 <= zero - m["started_at"] < 2.0  # after Emacs and the server started
    lo, hi = fig.layout.xaxis.range
    last = con.execute("SELECT max(ts) FROM events WHERE run_id = ?", [run.run_id]).fetchone()[0]
    assert lo == pytest.approx(m["server_started_at"] - zero - 0.5) and hi == pytest.approx(last - zero + 1.0)
    assert "first turn reaching the server" in fig.layout.xaxis.title.text
    lines = sorted(shape.x0 for shape in fig.layout.shapes)
    wanted = [m[k] - zero for k in ("emacs_started_at", "server_started_at", "first_turn_at", "first_request_at",
                                    "last_reply_at", "ended_at") if m[k] is not None]
    assert lines == pytest.approx(sorted(wanted))
    assert [a.text for a in fig.layout.annotations][:3] == ["Emacs start", "server start",
                                                            "first turn (the run's start)"]
    assert "runs at once on average on 2 CPUs" in fig.layout.title.text
    assert f"outside the view: Emacs start at {m['emacs_started_at'] - zero:.1f} s" in fig.layout.title.text
    assert m["emacs_started_at"] - zero < 0
    bars = [t for t in fig.data if t.type == "bar"]
    starts = dict(con.execute("SELECT agent_id, started_at - ? FROM agents WHERE run_id = ?",
                              [zero, run.run_id]).fetchall())
    ticks = dict(zip(fig.layout.yaxis.tickvals, fig.layout.yaxis.ticktext, strict=True))
    assert len(ticks) == len(run.agents)  # one row per agent, labelled on the axis
    for bar in bars:
        assert bar.textposition == "none"  # no labels at the bar ends
        for y, base in zip(bar.y, bar.base, strict=True):
            agent = ticks[y].split(" (")[0]
            assert base == pytest.approx(starts[agent]) and base >= -1e-9  # at its real time, from the start
    primary = next(label for label in ticks.values() if label.startswith("primary "))
    assert primary == "primary (open at end)"
    # every model call is its own mark, at its response's time
    calls = next(t for t in fig.data if t.type == "scatter" and t.mode == "markers" and "model call" in t.name)
    assert len(calls.x) == run.model_calls == len(set(calls.x))


def test_boxes_start_at_zero_and_the_tree_text_is_readable(tmp_path):
    write_runs(tmp_path, 8)
    con = load(tmp_path)
    arms = arms_of(con)
    assert report._boxes(con, arms, "model_calls", "t", "u").layout.yaxis.rangemode == "tozero"
    run = con.execute("SELECT run_id FROM runs ORDER BY run_id LIMIT 1").fetchone()[0]
    tree = report._tree(con, run).data[0]
    assert tree.textfont.color == "white"  # on the types' saturated colours, dark blue included


@needs_chromium
def test_empty_charts_show_their_words_and_arms_in_chromium(tmp_path):
    write_runs(tmp_path / "runs", 8, errors=False)
    assert report.main([str(tmp_path / "runs")]) == 0
    dom = chromium((tmp_path / "runs" / "report.html").as_uri(), "--dump-dom")
    assert "no eval errors in these runs" in dom and "no compulsion blocks in these runs" in dom
    con = load(tmp_path / "runs")
    for arm in arms_of(con):  # on the x axes of the box plots, the error rate and the blocks
        assert dom.count(f'data-unformatted="{arm}"') >= 5, arm
