"""Following a conversation's event stream from outside (``starter.py watch``, ``chat``, the SSE
endpoint): offset-addressed events, across continue-as-new, until the conversation ends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from workflows.events import EVENTS_TOPIC, Ended, Event

POLL_COOLDOWN = timedelta(milliseconds=100)
"""How long a caught-up subscriber waits before it asks again (each ask is an update in history)."""


async def follow(
    client: Client, workflow_id: str, from_offset: int = 0, *, cooldown: timedelta = POLL_COOLDOWN
) -> AsyncIterator[tuple[int, Event]]:
    """(offset, event) from ``from_offset`` on, in order; ends after the ``end`` event, or when the
    conversation closed without one (terminated, timed out) and its log has been read."""
    stream = WorkflowStreamClient.create(client, workflow_id)
    async for item in stream.subscribe(EVENTS_TOPIC, from_offset, result_type=Event, poll_cooldown=cooldown):
        yield item.offset, item.data
        if isinstance(item.data, Ended):
            return


async def next_offset(client: Client, workflow_id: str) -> int:
    """The offset the next event will have: follow from here to see only what happens from now."""
    return await WorkflowStreamClient.create(client, workflow_id).get_offset()
