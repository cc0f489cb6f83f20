#!/usr/bin/env bash
# MCP servers nobody here wrote, for the tests (tests/e2e/test_mcp_*.py): in
# .mcp-servers/ of this checkout, apart from .venv.  mcp-server-time and
# mcp-server-git from PyPI in a venv of their own; the reference server
# (@modelcontextprotocol/server-everything) and the conformance suite
# (@modelcontextprotocol/conformance) from npm.  Safe to run again: it skips what is there.
# The conformance suite is pinned to 0.1.13: 0.1.14 and later need Node 22 (fs.globSync),
# and Debian's Node is 20.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.mcp-servers
mkdir -p "$dir"
if [ ! -x "$dir/venv/bin/mcp-server-time" ] || [ ! -x "$dir/venv/bin/mcp-server-git" ]; then
  echo "== installing mcp-server-time and mcp-server-git into $dir/venv"
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install -q --disable-pip-version-check mcp-server-time mcp-server-git
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "== npm is missing: installing nodejs and npm (Debian)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi
if [ ! -d "$dir/node/node_modules/@modelcontextprotocol/server-everything" ] \
   || ! grep -q '"version": "0.1.13"' "$dir/node/node_modules/@modelcontextprotocol/conformance/package.json" 2>/dev/null; then
  echo "== installing @modelcontextprotocol/server-everything and conformance into $dir/node"
  mkdir -p "$dir/node"
  npm install --silent --no-audit --no-fund --prefix "$dir/node" \
    @modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/conformance@0.1.13 >/dev/null
fi
