"""The World's tools: MCP servers, as the person configures them in ``AMACS_HOME/mcp.json``.

Named ``tools_mcp``, not ``mcp``: the official SDK is the package ``mcp``.
"""
