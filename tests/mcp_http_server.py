"""A streamable-HTTP MCP server for the tests, built with the ``mcp`` SDK.

``python -m tests.mcp_http_server PORT VARIANT TOKEN``: variant ``v1`` offers ``echo`` and
``fail``; ``v2`` adds ``reverse``. Requests without ``Authorization: Bearer TOKEN`` get 401.
"""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations


def app(variant: str, token: str):
    server = MCPServer("test-http")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        """Say the text back."""
        return f"echo: {text}"

    @server.tool()
    def fail(text: str) -> str:
        """Always fails."""
        raise ToolError(f"cannot do {text!r}")

    if variant == "v2":

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def reverse(text: str) -> str:
            """Say the text backwards."""
            return text[::-1]

    inner = server.streamable_http_app()

    async def guarded(scope, receive, send):
        if (
            scope["type"] == "http"
            and dict(scope["headers"]).get(b"authorization") != f"Bearer {token}".encode()
        ):
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await inner(scope, receive, send)

    return guarded


if __name__ == "__main__":
    port, variant, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    uvicorn.run(app(variant, token), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
