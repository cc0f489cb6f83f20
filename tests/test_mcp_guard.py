"""The guard a stdio MCP server runs under (amacs_server/tools_mcp/guard.py): its messages pass
through a line at a time, a too long one is kept in a private file and answered cut."""

from __future__ import annotations

import json
import subprocess
import sys

from amacs_server.tools_mcp import calls, guard

WRITER = ("import sys; sys.stdout.write('{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\\n'); "
          "sys.stdout.write('{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"x\":\"' + 'y' * (6 << 20) + '\"}}\\n'); "
          "sys.stdout.write('{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\\n')")


def test_a_long_message_is_kept_in_a_file_and_answered_cut_the_others_pass(tmp_path):
    out = subprocess.run([sys.executable, "-I", "-S", guard.__file__, "--spill", str(tmp_path / "r"),
                          sys.executable, "-c", WRITER], capture_output=True, timeout=60, check=True).stdout
    first, cut, last = [json.loads(line) for line in out.splitlines()]
    assert first == {"jsonrpc": "2.0", "id": 1, "result": {}} and last["id"] == 8
    assert cut["id"] == 7 and len(out) < 2 << 20
    [text] = [c["text"] for c in cut["result"]["content"]]
    assert cut["result"]["isError"] and text.startswith(calls.CUT_BY_GUARD)  # the SDK wants no structured content
    [kept] = (tmp_path / "r").iterdir()
    size = kept.stat().st_size
    assert text.startswith(f"[cut: the server's answer is {size} bytes; its first {guard.KEPT} follow, as the "
                           f"server wrote them; the whole answer is in {kept}]\n" + '{"jsonrpc":"2.0","id":7,')
    assert size == (6 << 20) + len('{"jsonrpc":"2.0","id":7,"result":{"x":""}}\n')
    assert kept.stat().st_mode & 0o777 == 0o600 and (tmp_path / "r").stat().st_mode & 0o777 == 0o700


def test_the_servers_exit_status_is_the_guards():
    run = subprocess.run([sys.executable, "-I", "-S", guard.__file__, sys.executable, "-c", "raise SystemExit(3)"],
                         timeout=60)
    assert run.returncode == 3


def test_a_server_log_over_its_bound_is_rotated_at_the_start(tmp_path, monkeypatch):
    import os

    from amacs_server import serve as entry

    log = tmp_path / "server.log"
    log.write_bytes(b"x" * (entry.MAX_SERVER_LOG + 1))
    saved = os.dup(2)
    try:
        entry._redirect_stderr(log)
        os.write(2, b"new session\n")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        monkeypatch.setattr("sys.stderr", sys.__stderr__)
    assert log.read_bytes() == b"new session\n"
    assert (tmp_path / "server.log.1").stat().st_size == entry.MAX_SERVER_LOG + 1


def test_stray_stdout_lines_are_one_log_line_per_server_per_burst(caplog):
    import logging

    from amacs_server.tools_mcp import logs

    logs.install()  # as the hub does
    sdk = logging.getLogger("mcp.client.stdio")
    logs.SERVER.set("noisy")  # the connection's task sets it; the SDK's tasks inherit it
    with caplog.at_level(logging.WARNING, logger="mcp.client.stdio"):
        for n in range(20_000):
            try:
                raise ValueError(f"invalid JSON: line {n} holds a secret-ish thing")
            except ValueError:
                sdk.exception("Failed to parse JSONRPC message from server")
    said = [r for r in caplog.records if r.name == "mcp.client.stdio"]
    assert len(said) == 1 and said[0].exc_info is None and "secret-ish" not in caplog.text
    assert said[0].getMessage().startswith("MCP server noisy wrote a line on its stdout that is not JSON-RPC")
