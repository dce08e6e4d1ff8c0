"""The client's side of our names on the wire (workflows/wire.py): which name a conversation is sent.

Clients of this release send the namespaced names (``durable_agents.decide``, ...). A conversation
a worker of the previous release runs knows only the old ones (a rolling deploy, a conversation
pinned to its build, or a worker not yet upgraded), and so does a run that worker started, whoever
runs it now. ``WireNames``, a client interceptor on every client ``connect`` makes and on every
client of an ``AgentPlugin``, finds out in this one place:

- an update or a query that the conversation refuses because it knows no handler of that name is
  sent again under the old name (a refused update leaves nothing in history, a query never does);
- a signal cannot be refused (a worker keeps one it has no handler for, unhandled), so it goes under
  the namespaced name only to a run that uses them: one whose first workflow task recorded the
  marker ``workflows.wire.PATCH``; any other run gets it under the old name, which every release
  serves. That costs one read of the run's first events per signal.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    FetchWorkflowHistoryEventsInput,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    SignalWorkflowInput,
    StartWorkflowUpdateInput,
    StartWorkflowUpdateWithStartInput,
    WorkflowHistoryEventFilterType,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
)

from workflows.wire import PATCH, old_name

_FIRST_EVENTS = 50
"""Events read at most for the marker: it is among the commands of the run's first workflow task."""


class WireNames(Interceptor):
    """A client interceptor: each namespaced name goes out as the conversation knows it (see above)."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _WireNames(next)


class _WireNames(OutboundInterceptor):
    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        try:
            return await self.next.query_workflow(input)
        except WorkflowQueryFailedError as e:
            if (old := old_name(input.query)) is None or not _unknown("Query", input.query, e.message):
                raise
        return await self.next.query_workflow(dataclasses.replace(input, query=old))

    async def start_workflow_update(self, input: StartWorkflowUpdateInput) -> WorkflowUpdateHandle[Any]:
        handle = await self.next.start_workflow_update(input)
        if (old := old_name(input.update)) is None or not await _refused_as_unknown(handle, input.update):
            return handle
        return await self.next.start_workflow_update(dataclasses.replace(input, update=old))

    async def start_update_with_start_workflow(
        self, input: StartWorkflowUpdateWithStartInput
    ) -> WorkflowUpdateHandle[Any]:
        handle = await self.next.start_update_with_start_workflow(input)
        update = input.update_workflow_input
        if (old := old_name(update.update)) is None or not await _refused_as_unknown(handle, update.update):
            return handle
        # The conversation runs now (started here or before): the update alone, under the old name.
        return await self.next.start_workflow_update(
            StartWorkflowUpdateInput(
                id=input.start_workflow_input.id,
                run_id=handle.workflow_run_id,
                first_execution_run_id=None,
                update_id=None,
                update=old,
                args=update.args,
                wait_for_stage=update.wait_for_stage,
                headers=update.headers,
                ret_type=update.ret_type,
                rpc_metadata=input.rpc_metadata,
                rpc_timeout=input.rpc_timeout,
            )
        )

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        if (old := old_name(input.signal)) is not None and not await self._uses_namespaced_names(input):
            input = dataclasses.replace(input, signal=old)
        await self.next.signal_workflow(input)

    async def _uses_namespaced_names(self, input: SignalWorkflowInput) -> bool:
        """Did the run's first workflow task record ``PATCH``? False for a run none completed yet."""
        events = self.next.fetch_workflow_history_events(
            FetchWorkflowHistoryEventsInput(
                id=input.id,
                run_id=input.run_id,
                page_size=_FIRST_EVENTS,
                next_page_token=None,
                wait_new_event=False,
                event_filter_type=WorkflowHistoryEventFilterType.ALL_EVENT,
                skip_archival=True,
                rpc_metadata=input.rpc_metadata,
                rpc_timeout=input.rpc_timeout,
            )
        )
        completed = False
        async for event in events:
            if _patch_id(event) == PATCH:
                return True
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                completed = True
            elif completed and event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                return False  # past the first task's commands
            if event.event_id >= _FIRST_EVENTS:
                return False
        return False


def _unknown(kind: str, name: str, message: str) -> bool:
    """Is ``message`` the SDK's refusal of a ``kind`` ("Query", "Update") it has no handler for?"""
    return message.startswith(f"{kind} handler for '{name}' expected but not found")


async def _refused_as_unknown(handle: WorkflowUpdateHandle[Any], name: str) -> bool:
    """Was the update refused because the conversation knows no handler ``name``? A refusal is the
    update's outcome at once (the SDK keeps it on the handle); an accepted update has none yet, or
    its result."""
    outcome = handle._known_outcome
    if outcome is None or not outcome.HasField("failure"):
        return False
    try:
        await handle.result()
    except WorkflowUpdateFailedError as e:
        return _unknown("Update", name, str(getattr(e.cause, "message", e.cause)))
    return False


def _patch_id(event: HistoryEvent) -> str | None:
    """The id of the patch a ``workflow.patched`` marker records; None for any other event."""
    if not event.HasField("marker_recorded_event_attributes"):
        return None
    marker = event.marker_recorded_event_attributes
    if marker.marker_name != "core_patch" or "patch-data" not in marker.details:
        return None
    for payload in marker.details["patch-data"].payloads:
        try:
            patch = json.loads(payload.data)
        except ValueError:
            continue
        if isinstance(patch, dict):
            return str(patch.get("id", ""))
    return None
