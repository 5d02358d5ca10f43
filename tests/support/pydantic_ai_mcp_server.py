"""A stdio MCP server (the ``mcp`` SDK's own) with one side-effecting tool, for the Pydantic AI bridge's tests.

``stamp(text)`` appends ``text`` to the file named by its first argument and
returns ``stamped <text>``, so a test counts its executions across processes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("stamps")


@server.tool()
def stamp(text: str) -> str:
    """Stamp ``text`` (an effect: a line in the ledger)."""
    with Path(sys.argv[1]).open("a") as out:
        out.write(text + "\n")
    return f"stamped {text}"


if __name__ == "__main__":
    server.run("stdio")
