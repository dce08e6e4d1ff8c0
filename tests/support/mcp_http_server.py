"""A streamable-HTTP MCP server for the tests, built with the ``mcp`` SDK.

``python -m tests.support.mcp_http_server PORT VARIANT TOKEN [legacy]``: variant ``v1`` offers ``echo``
and ``fail``; ``v2`` adds ``reverse``. Requests without ``Authorization: Bearer TOKEN`` get 401.
``legacy`` refuses the modern ``server/discover`` probe, so clients open a session with the
handshake of older servers; a restarted server answers 404 to such a session.
"""

from __future__ import annotations

import json
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations


def app(variant: str, token: str, legacy: bool = False):
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
        if legacy and scope["type"] == "http" and scope["method"] == "POST":
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            request = json.loads(body)
            if isinstance(request, dict) and request.get("method") == "server/discover":
                error = {"code": -32601, "message": "Method not found"}
                answer = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "error": error}).encode()
                headers = [(b"content-type", b"application/json")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": answer})
                return

            replayed = False

            async def replay():  # the body once, then whatever follows (a disconnect)
                nonlocal replayed
                if replayed:
                    return await receive()
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}

            await inner(scope, replay, send)
            return
        await inner(scope, receive, send)

    return guarded


if __name__ == "__main__":
    port, variant, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    legacy = sys.argv[4:] == ["legacy"]
    uvicorn.run(app(variant, token, legacy), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
