"""Deleting a conversation and erasing a user: each one ``ErasureWorkflow`` (workflows/erasure.py)
run on the conversations' task queue, whose worker holds the stores. The erasure's own run is
deleted from Temporal once its report is read: it named what it erased."""

from __future__ import annotations

import hashlib

from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError

from durable_agents.activities.lifecycle import delete_run
from durable_agents.settings import DEFAULT_TASK_QUEUE
from durable_agents.workflows.erasure import ErasureReport, ErasureRequest, ErasureWorkflow


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
        if isinstance(e.cause, ApplicationError) and e.cause.non_retryable:
            raise ErasureRefused(e.cause.message) from e
        raise
    await delete_run(client, handle.id, handle.result_run_id or "")
    return report
