"""Deleting a conversation and erasing a user: each one ``ErasureWorkflow`` (workflows/erasure.py)
run on the conversations' task queue, whose worker holds the stores. The erasure's own run is
deleted from Temporal once its report is read: it named what it erased. And the retention: a pass
of ``RetentionWorkflow`` (workflows/retention.py) now, or the Schedule of passes."""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
    WorkflowFailureError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from durable_agents.activities.lifecycle import delete_run
from durable_agents.settings import DEFAULT_TASK_QUEUE
from durable_agents.workflows.erasure import ErasureReport, ErasureRequest, ErasureWorkflow
from durable_agents.workflows.retention import RetentionRequest, RetentionWorkflow

RETENTION_SCHEDULE = "durable-agents-retention"


class ErasureRefused(Exception):
    """Nothing was erased, for the reason given (a running conversation, an unknown id)."""


async def delete_conversation(
    client: Client, workflow_id: str, *, cancel: bool = False, task_queue: str = DEFAULT_TASK_QUEUE
) -> ErasureReport:
    """Remove a conversation and its sub-agents from Temporal and from every store; a running one is
    refused (``ErasureRefused``) unless ``cancel``: then it is cancelled first."""
    return await erase(client, ErasureRequest(workflow_ids=[workflow_id], cancel=cancel), task_queue)


async def forget_user(
    client: Client, user: str, *, tenant: str | None = None, task_queue: str = DEFAULT_TASK_QUEUE
) -> ErasureReport:
    """Every conversation of ``user`` (in ``tenant``, or in every tenant) cancelled and removed
    everywhere, and the user's spend in the ledger kept only as anonymous totals. Asked again, it
    joins the erasure still running, or finds what is left."""
    return await erase(client, ErasureRequest(user=user, tenant=tenant, cancel=True), task_queue)


async def erase(
    client: Client, request: ErasureRequest, task_queue: str = DEFAULT_TASK_QUEUE
) -> ErasureReport:
    """Run the erasure (or join the same one running) and return its report."""
    digest = hashlib.sha256(request.model_dump_json(exclude={"cancel"}).encode()).hexdigest()[:20]
    handle = await client.start_workflow(
        ErasureWorkflow.run,
        request,
        id=f"durable-agents-erasure-{digest}",  # no user's name in the id
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    try:
        report = await handle.result()
    except WorkflowFailureError as e:
        await delete_run(client, handle.id, handle.result_run_id or "")
        cause = e.cause.cause if isinstance(e.cause, ActivityError) else e.cause  # an activity's refusal
        if isinstance(cause, ApplicationError) and cause.non_retryable:
            raise ErasureRefused(cause.message) from e
        raise
    await delete_run(client, handle.id, handle.result_run_id or "")
    return report


async def run_retention(
    client: Client, *, retention: timedelta | None = None, task_queue: str = DEFAULT_TASK_QUEUE
) -> RetentionRequest:
    """One retention pass now (``retention`` None: the namespace's); what it removed."""
    handle = await client.start_workflow(
        RetentionWorkflow.run,
        _retention(retention),
        id=f"{RETENTION_SCHEDULE}-{uuid.uuid4().hex[:12]}",
        task_queue=task_queue,
    )
    return await handle.result()


async def schedule_retention(
    client: Client,
    *,
    every: timedelta,
    retention: timedelta | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
) -> None:
    """The Schedule of retention passes, created, or updated to these settings if it exists: safe
    to run from every worker's start script. One pass at a time (a pass still running when the next
    is due makes it skip)."""
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            RetentionWorkflow.run, _retention(retention), id=RETENTION_SCHEDULE, task_queue=task_queue
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )
    try:
        await client.create_schedule(RETENTION_SCHEDULE, schedule)
    except ScheduleAlreadyRunningError:

        def update(_: ScheduleUpdateInput) -> ScheduleUpdate:
            return ScheduleUpdate(schedule=schedule)

        await client.get_schedule_handle(RETENTION_SCHEDULE).update(update)


def _retention(retention: timedelta | None) -> RetentionRequest:
    return RetentionRequest(retention_seconds=retention.total_seconds() if retention is not None else None)
