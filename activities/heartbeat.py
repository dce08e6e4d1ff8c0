"""Heartbeats for activities that may run long: model calls, tool calls, MCP listings."""

from __future__ import annotations

import asyncio
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

    async def beat() -> None:
        while True:  # the first beat after a third of the timeout: a quick call sends none
            await asyncio.sleep(timeout.total_seconds() / 3)
            activity.heartbeat(*latest)

    task = asyncio.create_task(beat())
    try:
        yield publish
    finally:
        task.cancel()
