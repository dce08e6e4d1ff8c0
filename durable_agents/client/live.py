"""Following a conversation's event stream from outside (``starter.py watch``, ``chat``, the SSE
endpoint): offset-addressed events, across continue-as-new, until the conversation ends.

A follower holds nothing of the conversation's: it reads the log with the stream's *query* (no
update slot, no history event) and waits for the next change on the run's history, a server-side
long poll that costs the workflow nothing. Every event is published in a workflow task, so a
``WorkflowTaskCompleted`` is the one change worth a query; a follower that goes away, however it
goes, leaves nothing behind. Streamed deltas come faster beside it (``live``), over the fast
channel when one reaches this process.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import math
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.workflow_streams import PollInput, PollResult, WorkflowStreamClient
from temporalio.service import RPCError, RPCStatusCode

from durable_agents.activities.delta_channel import DeltaListener, channel_scope, delta_listener
from durable_agents.workflows.events import EVENTS_TOPIC, Ended, Event

log = logging.getLogger(__name__)

POLL_QUERY = "__temporal_workflow_stream_poll"
"""The stream's read of retained events (a query: it waits for nothing and records nothing). Its
name is the contrib's documented wire name (temporalio/contrib/workflow_streams/README.md), which
it does not export; its client reads by update, or by this query only once the run has closed."""

QUERY_RETRY = (timedelta(milliseconds=100), timedelta(seconds=5))
"""First and longest wait before a failed read is tried again (doubling between them)."""

_CLOSED_RUN = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
}


@contextlib.asynccontextmanager
async def listening(
    client: Client, database_url: str | None, folder: Path | None
) -> AsyncIterator[DeltaListener | None]:
    """This process's reader of the fast channel (``activities/delta_channel.py``) for ``client``'s
    conversations, or None when it cannot listen (then the activities' batches are what it gets)."""
    listener = delta_listener(database_url, folder)
    try:
        await listener.start(channel_scope(client, client.namespace))
    except Exception as e:
        log.warning("not listening for streamed deltas (the batches in the event stream come instead): %s", e)
        await listener.aclose()
        yield None
        return
    try:
        yield listener
    finally:
        await listener.aclose()


async def live(
    client: Client, workflow_id: str, from_offset: int = 0, deltas: DeltaListener | None = None
) -> AsyncIterator[tuple[int | None, Event]]:
    """``follow``'s events and, with ``deltas``, the fast channel's for this conversation as they come
    (offset None: they are not in the log). A fast event of a model call comes after the log's start
    of that call: a reader that joins mid-answer reads the log up to the call first, so the text
    does not come before what led to it (read from a ``from_offset`` past that start, at once)."""
    if deltas is None:
        async for item in follow(client, workflow_id, from_offset):
            yield item
        return
    queue: asyncio.Queue[tuple[int | None, Event] | BaseException | None] = asyncio.Queue()
    unsubscribe = deltas.subscribe(workflow_id, lambda event: queue.put_nowait((None, event)))

    async def durable() -> None:
        try:
            async for item in follow(client, workflow_id, from_offset):
                queue.put_nowait(item)
            queue.put_nowait(None)
        except Exception as e:
            queue.put_nowait(e)

    reader = asyncio.create_task(durable())
    started = math.inf if from_offset else 0
    """The latest model call whose start the log has given (all, for a reader that starts later)."""
    held: dict[int, list[tuple[int | None, Event]]] = {}
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            at, event = item
            call = getattr(event, "model_call", None)
            if at is None and call is not None and call > started:
                held.setdefault(call, []).append(item)
                continue
            yield item
            if at is not None and call is not None and call > started:
                started = call
                for early in sorted(c for c in held if c <= started):
                    for waited in held.pop(early):
                        yield waited
    finally:
        unsubscribe()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


async def follow(client: Client, workflow_id: str, from_offset: int = 0) -> AsyncIterator[tuple[int, Event]]:
    """(offset, event) from ``from_offset`` on, in order; ends after the ``end`` event, or when the
    conversation closed without one (terminated, timed out) and its log has been read."""
    offset = from_offset
    previous: WorkflowHandle | None = None  # the run that continued as new into this one
    while True:
        run = (await client.get_workflow_handle(workflow_id).describe()).run_id
        handle = client.get_workflow_handle(workflow_id, run_id=run)
        changed = asyncio.Event()
        changed.set()  # read once before the first change
        watcher = asyncio.create_task(_last_change(handle, changed))
        try:
            while True:
                await changed.wait()
                changed.clear()
                closed = watcher.done()
                items, offset = await _read(client, handle, offset, previous)
                previous = None
                for at, event in items:
                    yield at, event
                    if isinstance(event, Ended):
                        return
                if closed:
                    break
        finally:
            watcher.cancel()
        if watcher.result() != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            return
        previous = handle


async def _last_change(handle: WorkflowHandle, changed: asyncio.Event) -> EventType.ValueType:
    """Sets ``changed`` at each completed workflow task of the run; returns how the run closed. A
    failed long poll is tried again (from the start of the run: a few events read twice)."""
    try:
        return await _wait_for_close(handle, changed)
    finally:
        changed.set()  # the last read, once the run has closed


async def _wait_for_close(handle: WorkflowHandle, changed: asyncio.Event) -> EventType.ValueType:
    wait, longest = (d.total_seconds() for d in QUERY_RETRY)
    while True:
        try:
            async for event in handle.fetch_history_events(wait_new_event=True, skip_archival=True):
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                    changed.set()
                elif event.event_type in _CLOSED_RUN:
                    return event.event_type
            return EventType.EVENT_TYPE_UNSPECIFIED
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                raise
        changed.set()
        await asyncio.sleep(wait)
        wait = min(wait * 2, longest)


async def _read(
    client: Client, handle: WorkflowHandle, offset: int, previous: WorkflowHandle | None
) -> tuple[list[tuple[int, Event]], int]:
    """Every retained event from ``offset`` on, and the offset after them. A run that began after a
    continue-as-new carries only the newest events: what it lacks is read from ``previous``."""
    found = await read_batches(client, handle, offset)
    if previous is not None and found and found[0][0] > offset:
        older = await read_batches(client, previous, offset, until=found[0][0])
        found = older + found
    return found, (found[-1][0] + 1 if found else offset)


async def read_batches(
    client: Client, handle: WorkflowHandle, offset: int, *, until: int | None = None
) -> list[tuple[int, Event]]:
    """The run's retained events from ``offset`` (before ``until``), as many queries as it takes.
    Offsets before the oldest retained event give that one onwards."""
    found: list[tuple[int, Event]] = []
    while until is None or offset < until:
        batch, offset, more = await read_batch(client, handle, offset, until=until)
        found += batch
        if not more:
            break
    return found


async def read_batch(
    client: Client, handle: WorkflowHandle, offset: int, *, until: int | None = None
) -> tuple[list[tuple[int, Event]], int, bool]:
    """One query's events from ``offset`` (before ``until``; an answer holds up to 1 MB), the offset
    after them, and whether more are ready."""
    result = await _query(handle, PollInput(topics=[EVENTS_TOPIC], from_offset=offset))
    converter = client.data_converter.payload_converter
    found: list[tuple[int, Event]] = []
    for item in result.items:
        if until is not None and item.offset >= until:
            return found, until, False
        payload = Payload()
        payload.ParseFromString(base64.b64decode(item.data))
        found.append((item.offset, converter.from_payload(payload, Event)))  # type: ignore[arg-type]
    return found, max(offset, result.next_offset), result.more_ready


async def _query(handle: WorkflowHandle, poll: PollInput) -> PollResult:
    """The poll query's answer; tried again while no worker answers (it may be restarting)."""
    wait, longest = (d.total_seconds() for d in QUERY_RETRY)
    while True:
        try:
            return await handle.query(POLL_QUERY, poll, result_type=PollResult)
        except RPCError as e:
            if e.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                raise
        await asyncio.sleep(wait)
        wait = min(wait * 2, longest)


async def next_offset(client: Client, workflow_id: str) -> int:
    """The offset the next event will have: follow from here to see only what happens from now."""
    return await WorkflowStreamClient.create(client, workflow_id).get_offset()
