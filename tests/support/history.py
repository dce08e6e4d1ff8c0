"""What a conversation's workflow history shows: its activities, their attempts, its events."""

from __future__ import annotations

import json

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle


async def activity_calls(handle: WorkflowHandle) -> list[tuple[str, bool]]:
    """(activity name, ran locally) in the order they were scheduled: server-scheduled ones by their
    ActivityTaskScheduled event, local ones by their marker."""
    calls = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            calls.append((event.activity_task_scheduled_event_attributes.activity_type.name, False))
        elif event.marker_recorded_event_attributes.marker_name == "core_local_activity":
            [data] = event.marker_recorded_event_attributes.details["data"].payloads
            calls.append((json.loads(data.data)["activity_type"], True))
    return calls


async def activity_types(handle: WorkflowHandle) -> list[str]:
    """Activity names in the order they were scheduled (local ones too), from history."""
    return [name for name, _ in await activity_calls(handle)]


async def last_attempts(handle: WorkflowHandle) -> dict[str, int]:
    """Each activity type's highest attempt (a started event records the attempt that ended)."""
    names: dict[int, str] = {}
    attempts: dict[str, int] = {}
    async for e in handle.fetch_history_events():
        if e.HasField("activity_task_scheduled_event_attributes"):
            names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.HasField("activity_task_started_event_attributes"):
            started = e.activity_task_started_event_attributes
            name = names[started.scheduled_event_id]
            attempts[name] = max(attempts.get(name, 0), started.attempt)
    return attempts


async def event_types(handle: WorkflowHandle) -> list[int]:
    return [event.event_type async for event in handle.fetch_history_events()]
