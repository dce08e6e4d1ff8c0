"""A conversation's event stream as Server-Sent Events (``python starter.py serve``):

    curl -N http://127.0.0.1:8765/conversations/ID/events            # from the start
    curl -N http://127.0.0.1:8765/conversations/ID/events?from=12    # from offset 12

Each event is ``id: <offset>``, ``event: <type>``, ``data: <json>``. A browser's EventSource
reconnects with ``Last-Event-ID`` and gets the events after that one; the response ends after
the ``end`` event (or once a conversation that closed without one has been read).

However many clients read a conversation, the server follows it once (``fanout.Hub``); a client
that takes nothing while it falls ``KEPT_EVENTS`` behind is dropped (it reconnects after its last
event). The same server answers AG-UI and useChat runs (``runs.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_agents import runs
from durable_agents.fanout import Entry, Hub, Subscription
from durable_agents.settings import DEFAULT_TASK_QUEUE
from durable_agents.streaming import EventStreamResponse, QuietDrops

DEFAULT_PORT = 8765


# -- the app and its routes ----------------------------------------------------------------------


def app(client: Client, hub: Hub | None = None, task_queue: str = DEFAULT_TASK_QUEUE) -> Starlette:
    hub = hub or Hub(client)

    async def events(request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        try:
            start = _first_offset(request)
        except ValueError as e:
            return PlainTextResponse(f"{e}\n", status_code=400)
        if (missing := await _missing(client, workflow_id)) is not None:
            return missing
        subscription = hub.subscribe(workflow_id, start)
        return EventStreamResponse(_sse(subscription), subscription.dropped, failed=_sse_error)  # type: ignore[return-value]

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await hub.close()

    return Starlette(
        routes=[Route("/conversations/{workflow_id}/events", events), *runs.routes(client, hub, task_queue)],
        lifespan=lifespan,
    )


async def _missing(client: Client, workflow_id: str) -> Response | None:
    """A 404 (or 502) for a conversation that cannot be followed; None for one that can."""
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError as e:
        status = 404 if e.status == RPCStatusCode.NOT_FOUND else 502
        return PlainTextResponse(f"{workflow_id}: {e.message}\n", status_code=status)
    return None


def _first_offset(request: Request) -> int:
    """Where to start: after ``Last-Event-ID`` (a reconnect), else at ``?from=``, else 0."""
    last = request.headers.get("last-event-id")
    given, what = (last, "Last-Event-ID") if last is not None else (request.query_params.get("from"), "from")
    if given is None:
        return 0
    if not given.isdigit():
        raise ValueError(f"{what} must be an event offset (0, 1, 2, ...), not {given!r}")
    return int(given) + 1 if last is not None else int(given)


# -- our own format ---------------------------------------------------------------------------------


def _frame(entry: Entry) -> bytes:
    data = entry.event.model_dump_json(exclude_none=True)
    return f"id: {entry.offset}\nevent: {entry.event.type}\ndata: {data}\n\n".encode()


async def _sse(subscription: Subscription) -> AsyncIterator[bytes]:
    async for entry in subscription.events():
        yield entry.encoded("sse", _frame)


def _sse_error(error: Exception) -> bytes:
    return f"event: error\ndata: {json.dumps({'message': str(error)})}\n\n".encode()


# -- serving -------------------------------------------------------------------------------------


async def serve(client: Client, host: str, port: int, task_queue: str = DEFAULT_TASK_QUEUE) -> None:
    """Serve until interrupted; open streams are closed at once when it stops. Conversations that
    a run starts (``runs.py``) start on ``task_queue``."""
    logging.getLogger("uvicorn.error").addFilter(QuietDrops())
    config = uvicorn.Config(
        app(client, task_queue=task_queue),
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=1,
    )
    await uvicorn.Server(config).serve()
