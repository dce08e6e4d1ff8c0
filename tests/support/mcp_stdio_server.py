"""A stdio MCP server for the tests, built with the ``mcp`` SDK.

``python -m tests.support.mcp_stdio_server RUNS``: ``pid`` says which process answers (a test kills it by
that PID); ``crash`` appends a line to the file RUNS, then the server dies in the middle of the
call, so a test counts how often one call ran.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations


def app(runs: Path) -> MCPServer:
    server = MCPServer("test-stdio")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def pid() -> str:
        """Say which process answers."""
        return str(os.getpid())

    @server.tool()
    def crash(text: str) -> str:
        """Record the run, then die before answering."""
        with runs.open("a") as f:
            f.write(f"{os.getpid()} {text}\n")
        os._exit(1)

    return server


if __name__ == "__main__":
    app(Path(sys.argv[1])).run("stdio")
