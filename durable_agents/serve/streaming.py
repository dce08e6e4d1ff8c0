"""An event stream as an ASGI response that a client cannot hold up: it ends the moment the
client's subscription is dropped (``fanout``), even while a write to a client that reads nothing
waits, and it ends quietly when the client goes away."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from durable_agents.serve.fanout import Dropped

log = logging.getLogger(__name__)

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
"""No cache or proxy holds the events back."""

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


class EventStreamResponse:
    """``frames`` as the body of a ``text/event-stream`` response (other media types too); ``failed``
    makes the last frame when they stop on an error."""

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        dropped: asyncio.Event,
        *,
        failed: Callable[[Exception], bytes],
        media_type: str = "text/event-stream",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._frames, self._dropped, self._failed = frames, dropped, failed
        self._headers = [
            (b"content-type", f"{media_type}; charset=utf-8".encode()),
            *((k.lower().encode(), v.encode()) for k, v in {**SSE_HEADERS, **(headers or {})}.items()),
        ]

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self._headers})
        tasks = [
            asyncio.ensure_future(self._pump(send)),
            asyncio.ensure_future(_gone(receive)),
            asyncio.ensure_future(self._dropped.wait()),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self._frames.aclose()  # type: ignore[attr-defined]
        if self._dropped.is_set():
            log.info("dropped a client of %s that fell too far behind", scope.get("path"))

    async def _pump(self, send: Send) -> None:
        try:
            async for frame in self._frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
        except Dropped:
            return  # the connection closes unfinished: the client reconnects after its last event
        except Exception as e:
            await send({"type": "http.response.body", "body": self._failed(e), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _gone(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class QuietDrops(logging.Filter):
    """Uvicorn's error line for a response left unfinished: that is how a dropped client is closed."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "ASGI callable returned without completing response."
