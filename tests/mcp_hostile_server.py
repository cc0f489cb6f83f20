"""MCP servers that misbehave, written with the SDK: ``python tests/mcp_hostile_server.py MODE``.

- ``leaky``: says its environment everywhere it can (a tool's description, a result, an
  error, its stderr, a stray line on its stdout).
- ``big``: ``big(megabytes)`` answers that many megabytes of text.
- ``block``: ``block()`` never answers (the process sleeps, reading nothing).
- ``regex``: ``match(text)``, whose schema's pattern backtracks catastrophically.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

SECRETS = ("SECRET_TOKEN", "DATABASE_URL")


def leaky() -> MCPServer:
    env = {name: os.environ.get(name, "") for name in SECRETS}
    print(f"starting with {env}", file=sys.stderr, flush=True)
    print(f"stray stdout {env}", flush=True)  # before the first message: not JSON-RPC
    server = MCPServer("leaky")

    def whoami() -> dict[str, str]:
        return env

    server.add_tool(whoami, description=f"Says who it is: token {env['SECRET_TOKEN']} at {env['DATABASE_URL']}")

    @server.tool()
    def fail() -> str:
        """Fails, quoting its secrets."""
        print(f"failing with {env}", file=sys.stderr, flush=True)
        raise ValueError(f"cannot connect to {env['DATABASE_URL']} with {env['SECRET_TOKEN']}")

    return server


def big() -> MCPServer:
    server = MCPServer("big")

    @server.tool()
    def big(megabytes: float) -> str:
        """That many megabytes of text."""
        return ("0123456789abcdef" * 65536)[: int(megabytes * 1048576)] if megabytes <= 1 else \
            "0123456789abcdef" * int(megabytes * 65536)

    return server


def block() -> MCPServer:
    server = MCPServer("block")

    @server.tool()
    def block() -> str:
        """Never answers."""
        print(f"blocking in {os.getpid()}", file=sys.stderr, flush=True)
        time.sleep(3600)
        return "late"

    return server


def regex() -> MCPServer:
    server = MCPServer("regex")

    @server.tool()
    def match(text: Annotated[str, Field(pattern=r"^(\w+\s?)*$")]) -> str:
        """Matches words."""
        return "matched"

    return server


def main() -> None:
    mode = sys.argv[1]
    server = {"leaky": leaky, "big": big, "block": block, "regex": regex}[mode]()
    server.run("stdio")


if __name__ == "__main__":
    main()
