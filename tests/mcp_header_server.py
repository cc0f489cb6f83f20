"""A streamable HTTP MCP server whose one tool says which of the request's headers it got
(tests of mcp.json's ``headers``): ``python tests/mcp_header_server.py PORT``."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import Context, MCPServer


def main() -> None:
    server = MCPServer("headers")

    @server.tool()
    def seen_headers(ctx: Context) -> dict[str, str]:
        """The request's X-Amacs-Test and Authorization headers, as the server got them."""
        headers = ctx.headers or {}
        return {"x_amacs_test": headers.get("x-amacs-test", ""), "authorization": headers.get("authorization", "")}

    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))


if __name__ == "__main__":
    main()
