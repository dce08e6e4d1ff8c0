"""Interrupting a turn: a message that arrives while the model answers an older one (an agent with
``interrupt = true``), or the ``interrupt`` signal (any agent), cancels the call."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

from durable_agents.workflows import versioning

T = TypeVar("T")

INTERRUPTED_FAILURE_PATCH = versioning.patch("interrupted-call-failure", added=1)


class Interrupted(Exception):
    """The model call was cancelled because a newer message arrived, or the ``interrupt`` signal."""

    def __init__(self, detail: str = "a newer message arrived") -> None:
        super().__init__(detail)
        self.detail = detail


SIGNALLED = "interrupted by the interrupt signal"
"""Why a turn the ``interrupt`` signal ended has no answer (and its model call's event's detail)."""


async def unless_interrupted(call: Awaitable[T], interrupted: Callable[[], bool]) -> T:
    """``call``'s result, unless ``interrupted()`` turns true first: then the call is cancelled and,
    once its cancellation completed (a heartbeating activity hears it and aborts its request),
    ``Interrupted`` is raised. A call that completed meanwhile keeps its result."""
    task = asyncio.ensure_future(call)
    try:
        await workflow.wait_condition(lambda: task.done() or interrupted())
    except asyncio.CancelledError:  # the conversation's cancellation: the call's too, and waited for
        task.cancel()
        await workflow.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: however the call ended, the cancellation is what counts
        raise
    cancelled = not task.done()
    if cancelled:
        task.cancel()
    try:
        return await task
    except ActivityError as err:
        # A call cancelled for a newer message may fail instead of acknowledging (its provider
        # raised first): the turn was interrupted all the same.
        if cancelled:
            versioning.retired(INTERRUPTED_FAILURE_PATCH)
        if not isinstance(err.cause, CancelledError) and not cancelled:
            raise
    raise Interrupted
