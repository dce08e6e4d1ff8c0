"""A streamed model call's text, to the conversation's event stream as it comes (workflows/events.py).

Batched: what is new goes out every ``DELTA_INTERVAL`` as one ``text_delta`` event in one signal,
so a long answer costs a few history events, not one per token. The rest of the answer needs no
last batch: ``model_call_finished`` carries the whole text. The stream is for watchers: when it
cannot be reached, the model call goes on without it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from workflows.events import EVENTS_TOPIC, TextDelta
from workflows.messages import OnText

DELTA_INTERVAL = 0.5
"""Seconds between two batches of streamed text (each one signal in the conversation's history)."""


@asynccontextmanager
async def text_deltas(model_call: int | None) -> AsyncIterator[OnText | None]:
    """``on_text`` for the provider (None when the call does not stream): the text so far."""
    if model_call is None:
        yield None
        return
    attempt = activity.info().attempt
    stream = WorkflowStreamClient.from_within_activity()
    topic = stream.topic(EVENTS_TOPIC, type=TextDelta)
    text, sent = "", 0

    def on_text(so_far: str) -> None:
        nonlocal text
        text = so_far

    async def send_batches() -> None:
        nonlocal sent
        while True:
            await asyncio.sleep(DELTA_INTERVAL)
            if len(text) > sent:
                topic.publish(TextDelta(model_call=model_call, attempt=attempt, start=sent, text=text[sent:]))
                sent = len(text)
                try:
                    await stream.flush()  # a failed batch is sent again (deduplicated) with the next
                except Exception as e:
                    activity.logger.warning("text deltas not sent: %s", e)

    task = asyncio.create_task(send_batches())
    try:
        yield on_text
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
