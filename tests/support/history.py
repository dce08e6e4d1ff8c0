"""What a conversation's workflow history shows: its activities, their attempts, its events."""

from __future__ import annotations

import json

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory


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


async def no_task_failures(handle: WorkflowHandle) -> None:
    """Assert that no workflow task of the run failed (a replay that went wrong, a bad input)."""
    failed = [
        e
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert failed == [], f"{handle.id}: {failed[0].workflow_task_failed_event_attributes.failure.message}"


async def run_histories(client: Client, workflow_id: str, first_run_id: str | None) -> list[WorkflowHistory]:
    """Every run's history, first to last, following continue-as-new."""
    histories, run_id = [], first_run_id
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.append(history)
        last = history.events[-1]
        if not last.HasField("workflow_execution_continued_as_new_event_attributes"):
            return histories
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
