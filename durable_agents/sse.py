"""A conversation's event stream as Server-Sent Events (``python starter.py serve``):

    curl -N http://127.0.0.1:8765/conversations/ID/events            # from the start
    curl -N http://127.0.0.1:8765/conversations/ID/events?from=12    # from offset 12

Each event is ``id: <offset>``, ``event: <type>``, ``data: <json>``. A browser's EventSource
reconnects with ``Last-Event-ID`` and gets the events after that one; the response ends after
the ``end`` event (or once a conversation that closed without one has been read).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_agents.live import follow

DEFAULT_PORT = 8765


def app(client: Client) -> Starlette:
    async def events(request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        try:
            start = _first_offset(request)
        except ValueError as e:
            return PlainTextResponse(f"{e}\n", status_code=400)
        try:
            await client.get_workflow_handle(workflow_id).describe()
        except RPCError as e:
            status = 404 if e.status == RPCStatusCode.NOT_FOUND else 502
            return PlainTextResponse(f"{workflow_id}: {e.message}\n", status_code=status)
        return StreamingResponse(
            _sse(client, workflow_id, start),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return Starlette(routes=[Route("/conversations/{workflow_id}/events", events)])


def _first_offset(request: Request) -> int:
    """Where to start: after ``Last-Event-ID`` (a reconnect), else at ``?from=``, else 0."""
    last = request.headers.get("last-event-id")
    given, what = (last, "Last-Event-ID") if last is not None else (request.query_params.get("from"), "from")
    if given is None:
        return 0
    if not given.isdigit():
        raise ValueError(f"{what} must be an event offset (0, 1, 2, ...), not {given!r}")
    return int(given) + 1 if last is not None else int(given)


async def _sse(client: Client, workflow_id: str, start: int) -> AsyncIterator[str]:
    async for offset, event in follow(client, workflow_id, start):
        yield f"id: {offset}\nevent: {event.type}\ndata: {event.model_dump_json(exclude_none=True)}\n\n"


async def serve(client: Client, host: str, port: int) -> None:
    """Serve until interrupted; open streams are closed at once when it stops."""
    config = uvicorn.Config(
        app(client), host=host, port=port, log_level="warning", timeout_graceful_shutdown=1
    )
    await uvicorn.Server(config).serve()
