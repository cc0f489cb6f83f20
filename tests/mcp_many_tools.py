"""An MCP server with many tools, each with a long description: a tools listing that grows.

``python tests/mcp_many_tools.py N`` (stdio) offers N tools, ``tool_0`` .. ``tool_{N-1}``,
each described in ~400 characters, as a server with a large API does.  Written with the
official SDK's server side; nothing of AMACS is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from mcp.server.mcpserver import MCPServer

DESCRIPTION = ("Looks up the record numbered {n} in the inventory of the warehouse and returns its "
               "fields: the item's name, its shelf, how many are in stock, when it was last counted, "
               "who counted it, the supplier's name and address, the price paid per unit and the "
               "price asked, and any note the last person to touch it left. The NUMBER argument "
               "picks a line of the record; leave it out for the whole record.")


def _tool(n: int) -> Callable[[int], str]:
    def tool(number: int = 0) -> str:
        return f"record {n}, line {number}"

    return tool


def main() -> None:
    server = MCPServer("many-tools")
    for n in range(int(sys.argv[1])):
        server.add_tool(_tool(n), name=f"tool_{n}", description=DESCRIPTION.format(n=n))
    server.run("stdio")


if __name__ == "__main__":
    main()
