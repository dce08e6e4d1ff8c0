"""What the worker's telemetry sees of a conversation: its labels, and each event it publishes.

Spans and metrics are made on the worker's side (durable_agents/worker/observer.py), never here:
the workflow names its agent, tenant and current turn (``AgentWorkflow.telemetry``, which the
observer reads when it schedules an activity) and hands each event of its stream to the observer
the worker registered, if any, while it is not replaying: a replayed turn reports nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from temporalio import workflow

OBSERVER = "durable_agents.observe"
"""The extern function a worker's observer registers (``workflow.extern_functions()``)."""


@dataclass(frozen=True)
class Labels:
    """What a conversation's spans and metrics are labelled with, as its workflow knows it now."""

    agent: str | None = None
    tenant: str | None = None
    turn: str | None = None
    """The id of the message the current turn answers; None between turns."""
    turn_started: datetime | None = None
    """When that turn began (None for a turn begun before this was kept)."""


def observe(event: Any) -> None:
    """In workflow code: tell the worker's observer of ``event``, unless this is a replay."""
    if workflow.unsafe.is_replaying_history_events():
        return
    observer = workflow.extern_functions().get(OBSERVER)
    if observer is not None:
        observer(event)
