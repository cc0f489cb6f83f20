"""AMACS's MCP client as the MCP conformance suite runs it: ``python -m tests.mcp_conformance_client URL``.

The suite (@modelcontextprotocol/conformance, ``client --command ...``) starts a
server for one scenario (``MCP_CONFORMANCE_SCENARIO``), appends its URL, and
checks what the client did.  The client here is the World's own: an
:class:`~amacs_server.tools_mcp.hub.McpHub` reading an mcp.json that names the
URL, listing the tools and calling each with arguments built from its schema,
checked and converted as an agent's call is (tools_mcp.calls).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from amacs_server.tools_mcp import calls
from amacs_server.tools_mcp.hub import McpError, McpHub

SAMPLE = {"number": 2, "integer": 3, "string": "text", "boolean": True}


def sample_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """A value of the right type for each required argument of SCHEMA."""
    props = schema.get("properties") or {}
    return {name: SAMPLE.get(str((props.get(name) or {}).get("type")), "text")
            for name in schema.get("required") or []}


def main(url: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "mcp.json").write_text(json.dumps({"mcpServers": {"suite": {"url": url, "timeout": 20}}}))
        hub = McpHub(home / "mcp.json", home / "logs", {})
        try:
            hub.list_all(20)
            [status] = hub.status()
            print(json.dumps(status))
            if status["state"] != "ready":
                return 1
            for _server, tool in hub.tools():
                args = sample_arguments(tool.input_schema or {})
                checked = calls.arguments(args, tool.input_schema or {}, f"suite/{tool.name}")
                try:
                    value = calls.result(hub.call("suite", tool.name, checked), f"suite/{tool.name}")
                    print(json.dumps({"tool": tool.name, "arguments": checked, "result": value}))
                except McpError as err:
                    print(json.dumps({"tool": tool.name, "error": str(err)}))
        finally:
            hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[-1]))
