"""A streamed model call's text and tool-call arguments, to the conversation's readers as they come
(workflows/events.py).

Over the fast channel (``delta_channel.py``) when one reaches a reader: every piece the provider
sends goes out at once, outside Temporal (no history event). Otherwise batched into the
conversation's event stream: what is new goes out every ``DELTA_INTERVAL`` as one ``text_delta``
event in one signal, so a long answer costs a few history events, not one per token (tool-call
arguments are not batched: ``model_call_finished`` carries them). Neither needs a last piece:
``model_call_finished`` carries the whole answer. The stream is for watchers: when it cannot be
reached, the model call goes on without it. An attempt that breaks off after streaming something
says so (``model_call_interrupted`` with its attempt), so a reader knows why the text stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from durable_agents.activities.delta_channel import DeltaSender, channel_scope
from durable_agents.workflows.events import (
    EVENTS_TOPIC,
    Event,
    ModelCallInterrupted,
    TextDelta,
    ToolCallDelta,
)

DELTA_INTERVAL = 0.5
"""Seconds between two batches of streamed text (each one signal in the conversation's history)."""


class StreamedParts:
    """What the provider reports as it streams (``on_text``, and ``tool_call`` for the adapters that
    stream arguments, see ``ResponseBuilder``), sent on as deltas."""

    def __init__(self, model_call: int, sender: DeltaSender | None, stream: WorkflowStreamClient) -> None:
        info = activity.info()
        self.model_call, self.attempt = model_call, info.attempt
        self._sender = sender
        self.topic = stream.topic(EVENTS_TOPIC)
        """The conversation's event stream, for batches (one topic handle of any event type)."""
        self._scope = channel_scope(activity.client(), info.workflow_namespace) if sender else ""
        self._key = info.workflow_id
        self.text = ""
        self.batched = 0
        """How much of ``text`` went to the event stream."""
        self._sent = 0
        self._calls: dict[int, tuple[str, str, str]] = {}
        self._calls_sent: dict[int, int] = {}
        self._readers: object = None
        """The channel's readers when a delta last went out: new readers get the text from the start."""

    def __call__(self, so_far: str) -> None:
        self.text = so_far
        if self.fast():
            self._send(self.delta(self._sent))
            self._sent = len(so_far)

    def tool_call(self, index: int, id: str, name: str, arguments: str) -> None:
        """Tool call ``index``'s id, name and argument text so far."""
        self._calls[index] = (id, name, arguments)
        if self.fast():
            start = self._calls_sent.get(index, 0)
            self._send(
                ToolCallDelta(
                    model_call=self.model_call,
                    attempt=self.attempt,
                    index=index,
                    call_id=id,
                    name=name,
                    start=start,
                    text=arguments[start:],
                )
            )
            self._calls_sent[index] = len(arguments)

    def delta(self, start: int) -> TextDelta:
        """The text from ``start`` on."""
        text = self.text[start:]
        return TextDelta(model_call=self.model_call, attempt=self.attempt, start=start, text=text)

    @property
    def started(self) -> bool:
        return bool(self.text or self._calls)

    def broke_off(self, error: BaseException) -> None:
        event = ModelCallInterrupted(
            model_call=self.model_call, reason="attempt_failed", attempt=self.attempt, detail=str(error)[:300]
        )
        if self._sender is not None and self._sender.readers(self._scope) is not None:
            self._send(event)
        else:
            self.topic.publish(event)

    def fast(self) -> bool:
        """Whether the channel reaches a reader now; readers that came since the last delta get
        everything from the start (a repeated start the dedupe rule takes in its stride)."""
        if self._sender is None:
            return False
        readers = self._sender.readers(self._scope)
        if readers is None:
            return False
        if readers != self._readers:
            self._readers, self._sent, self._calls_sent = readers, 0, {}
            for index, (id, name, arguments) in list(self._calls.items()):
                self.tool_call(index, id, name, arguments)
        return True

    def _send(self, event: Event) -> None:
        assert self._sender is not None
        self._sender.send(self._scope, self._key, event)


@asynccontextmanager
async def text_deltas(
    model_call: int | None, sender: DeltaSender | None = None
) -> AsyncIterator[StreamedParts | None]:
    """What to tell the provider to report as it streams (None when the call does not stream)."""
    if model_call is None:
        yield None
        return
    stream = WorkflowStreamClient.from_within_activity()
    parts = StreamedParts(model_call, sender, stream)

    async def flush() -> None:
        try:
            await stream.flush()  # a failed batch is sent again (deduplicated) with the next
        except Exception as e:
            activity.logger.warning("text deltas not sent: %s", e)

    async def send_batches() -> None:
        while True:
            await asyncio.sleep(DELTA_INTERVAL)
            if len(parts.text) > parts.batched and not parts.fast():
                parts.topic.publish(parts.delta(parts.batched))
                parts.batched = len(parts.text)
                await flush()

    task = asyncio.create_task(send_batches())
    try:
        yield parts
    except Exception as e:
        if parts.started:
            parts.broke_off(e)
            await flush()
        raise
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
