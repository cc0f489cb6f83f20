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
from tests.research_fakes import write_runs

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")]

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


def test_report_renders_every_chart_in_headless_chromium(tmp_path, capsys):
    runs = write_runs(tmp_path / "runs", 24)
    chosen = [runs[0].run_id, runs[9].run_id]
    assert report.main([str(tmp_path / "runs"), "--runs", ",".join(chosen), "--timeline", runs[9].run_id]) == 0
    page = tmp_path / "runs" / "report.html"
    assert str(page) in capsys.readouterr().out
    text = page.read_text(encoding="utf-8")
    figures = int(re.search(r"<meta name='amacs-figures' content='(\d+)'>", text)[1])
    assert figures == 7 + len(chosen) + 1  # 7 charts, a tree per chosen run, the timeline
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


def test_a_script_error_shows_the_marker(tmp_path):
    """The check above can fail: a page whose script throws gets the marker."""
    page = tmp_path / "broken.html"
    page.write_text("<html><head></head><body><script>undefinedFunction();</script></body></html>")
    dom = chromium(watched_copy(page).as_uri(), "--dump-dom")
    assert re.search(f'id="{MARKER}">[^<]*undefinedFunction', dom)
