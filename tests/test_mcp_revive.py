"""A tool server that dies: started again once, then down until mcp.json is written (hub, real server)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from amacs_server.tools_mcp.hub import McpError, McpHub
from tests.mcp_servers import TIME, time_server, write_config

pytestmark = pytest.mark.skipif(not TIME.exists(), reason="scripts/mcp-test-servers.sh installs the servers")


def _kill_time_server() -> None:
    """SIGKILL the time server this process started (through its guard), and wait for it to go."""
    mine = []
    for pid in subprocess.run(["pgrep", "-f", str(TIME)], capture_output=True, text=True).stdout.split():
        p = int(pid)
        while p > 1:  # a descendant of this test's process?
            try:
                p = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                break
            if p == os.getpid():
                mine.append(int(pid))
                break
    assert mine, "no time server of this test runs"
    for pid in mine:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)


def _call(hub: McpHub) -> object:
    hub.tool("time", "get_current_time")  # as the agent's call does: reads mcp.json again first
    return hub.call("time", "get_current_time", {"timezone": "UTC"})


def test_a_server_down_after_its_one_restart_starts_again_at_any_write_of_mcp_json(tmp_path):
    """Killed once: the call says it stopped (not that it died during the call, which it cannot
    know) and the next call is served by its one restart.  Killed again: it stays down, and the
    error says what brings it back; a write of mcp.json with the same text (a save of an unchanged
    file, `touch') does, said in the log."""
    path = write_config(tmp_path, {"time": time_server()})
    hub = McpHub(path, tmp_path / "logs")
    try:
        assert not _call(hub).is_error
        _kill_time_server()
        with pytest.raises(McpError) as first:
            _call(hub)
        assert str(first.value) == ("MCP server time has stopped (its connection closed at the call to "
                                    "get_current_time); it is started again at the next call, once")
        assert not _call(hub).is_error
        _kill_time_server()
        with pytest.raises(McpError) as second:
            _call(hub)
        assert str(second.value) == (
            "MCP server time stopped again (its connection closed at the call to get_current_time); it was "
            "started again once already, so it stays down; fix it, then save mcp.json (any write, even "
            "`touch mcp.json`) to start it again")
        with pytest.raises(McpError, match="is down .*started again once and is down again; fix it"):
            _call(hub)
        assert hub.status()[0]["state"] == "down"
        path.write_text(path.read_text())  # the same text: what a save of an unchanged file writes
        os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))  # even within the clock's grain
        assert not _call(hub).is_error
        assert hub.status()[0]["state"] == "ready"
    finally:
        hub.stop()
