"""Tool calls in the research dataset (tool_calls table) and in the report (tool use per arm)."""

from __future__ import annotations

import json

import pytest

from amacs_server.research import dataset, report
from amacs_server.research.dataset import load
from tests.e2e import test_mcp_tools as real
from tests.fake_anthropic import FakeAnthropic

pytestmark = pytest.mark.e2e


def test_a_session_with_tool_calls_loads_into_tool_calls_and_the_report(tmp_path):
    runs_dir = tmp_path / "runs"
    run_id = "tools.r0"
    (runs_dir / run_id).mkdir(parents=True)
    fake = FakeAnthropic().start()
    try:  # a real session: a compulsion blocks one time call and lets the other through
        real.test_a_compulsion_sees_a_tool_call_and_blocks_it(fake, runs_dir / run_id / "home")
    finally:
        fake.stop()
    (runs_dir / run_id / "manifest.json").write_text(json.dumps({
        "run_id": run_id, "experiment": "real", "prompt": "tools", "variant": "builtin", "model": "fake",
        "backend": "anthropic", "model_name": "claude-sonnet-4-5", "rep": 0, "seed": 0, "turns": [],
        "status": "done", "cost": None, "turns_done": 1, "error": None}))
    con = load(runs_dir)
    assert dataset.counts(con)["tool_calls"] == 2
    rows = con.execute("SELECT run_id, arm, agent_id, server, tool, arguments->>'$.timezone', ok, blocked, "
                       "error, seconds >= 0, result_chars FROM tool_calls ORDER BY seq").fetchall()
    (r1, arm, *first), (_r2, _arm, *second) = rows
    assert r1 == run_id and arm
    assert first[:6] == ["primary", "time", "get_current_time", "Europe/Paris", False, True]
    assert first[6].startswith("blocked by compulsion compulsion-1 (no-paris)") and first[8] == 0
    assert second[:7] == ["primary", "time", "get_current_time", "Asia/Tokyo", True, False, None]
    assert second[7] is True and second[8] > 20
    assert report.main([str(runs_dir), "--runs", run_id]) == 0
    page = (runs_dir / "report.html").read_text()
    assert "MCP tools" in page and "time/get_current_time" in page
