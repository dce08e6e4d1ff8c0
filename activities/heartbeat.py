"""Heartbeats for activities that may run long: model calls, tool calls, MCP listings."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from temporalio import activity


@asynccontextmanager
async def heartbeating() -> AsyncIterator[Callable[[Any], None]]:
    """Heartbeat while a call runs, so a dead worker is noticed (and a cancellation heard) within the
    heartbeat timeout. Yields ``publish(details)``: progress that ``describe`` shows to watchers."""
    latest: list[Any] = []

    def publish(details: Any) -> None:
        latest[:] = [details]
        activity.heartbeat(*latest)

    timeout = activity.info().heartbeat_timeout
    if not timeout:
        yield publish
        return

    every = timeout.total_seconds() / 3
    # The timeout counts from the attempt's start on the server (``started_time``), not from here: an
    # attempt a busy worker took up late (seconds, under load, for one started eagerly) beats at once.
    late = time.time() - activity.info().started_time.timestamp()

    async def beat() -> None:
        # The first beat a third of the timeout after the start: a quick call sends none.
        await asyncio.sleep(min(max(every - late, 0.0), every))
        while True:
            activity.heartbeat(*latest)
            await asyncio.sleep(every)

    task = asyncio.create_task(beat())
    try:
        yield publish
    finally:
        task.cancel()
