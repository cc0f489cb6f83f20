"""The MCP servers nobody here wrote, as the tests use them (installed by scripts/mcp-test-servers.sh)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SERVERS = ROOT / ".mcp-servers"
TIME = SERVERS / "venv" / "bin" / "mcp-server-time"
GIT = SERVERS / "venv" / "bin" / "mcp-server-git"
EVERYTHING = SERVERS / "node" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
CONFORMANCE = SERVERS / "node" / "node_modules" / ".bin" / "conformance"


def install() -> None:
    """Install the servers if they are missing (the script skips what is there)."""
    subprocess.run([str(ROOT / "scripts" / "mcp-test-servers.sh")], check=True, capture_output=True, timeout=600)


def write_config(home: Path, servers: dict[str, Any]) -> Path:
    """HOME/mcp.json with SERVERS as its mcpServers."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}, indent=2))
    return path


def hostile_server(mode: str, **extra: Any) -> dict[str, Any]:
    """An mcp.json entry for tests/mcp_hostile_server.py in MODE (leaky, big, block, regex, badtools)."""
    return {"command": sys.executable, "args": [str(ROOT / "tests" / "mcp_hostile_server.py"), mode], **extra}


def time_server(**extra: Any) -> dict[str, Any]:
    return {"command": str(TIME), **extra}


def git_server(repo: Path, **extra: Any) -> dict[str, Any]:
    return {"command": str(GIT), "args": ["--repository", str(repo)], **extra}


def everything_server(**extra: Any) -> dict[str, Any]:
    return {"command": "node", "args": [str(EVERYTHING), "stdio"], **extra}
