"""Waiting on a running conversation, talking to it, and finding its files."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from durable_agents.stores.workspaces import folder_name
from durable_agents.workflows.agent import ROLLING_OVER, AgentWorkflow
from durable_agents.workflows.api import ConversationInput, MessageInput
from durable_agents.workflows.records import ApprovalRecord
from tests.support.workers import Env

POLLS = 1200
"""Polls, 50 ms apart, before a wait gives up (a minute, more on a loaded machine)."""


def workspace_of(root: Path, handle: WorkflowHandle) -> Path:
    """The conversation's workspace folder under ``root``: keyed by workflow id and first run id."""
    assert handle.first_execution_run_id, "needs the handle start_workflow returned"
    return root / folder_name(f"{handle.id}/{handle.first_execution_run_id}")


async def child_workspace(env: Env, child: WorkflowHandle) -> Path:
    """A child's workspace folder: its own, keyed by its id and first run id like any conversation's."""
    return env.workspace / folder_name(f"{child.id}/{(await child.describe()).run_id}")


async def wait_for_pending(
    handle: WorkflowHandle, count: int = 1, timeout: float = 10.0
) -> list[ApprovalRecord]:
    """Poll the ``pending_approvals`` query until ``count`` approvals wait."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        pending = await handle.query(AgentWorkflow.pending_approvals)
        if len(pending) >= count:
            return pending
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"expected {count} pending approvals, have {len(pending)}")
        await asyncio.sleep(0.05)


async def until_state(handle: WorkflowHandle, state: str, timeout: float = 10.0) -> None:
    """Wait until the conversation's ``status`` query says ``state`` (whichever run answers it)."""
    for _ in range(int(timeout / 0.025)):
        if (await handle.query(AgentWorkflow.status)).state == state:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"{handle.id} never reached {state}")


async def until_queued(handle: WorkflowHandle, count: int) -> None:
    """Wait until the conversation (whichever run) holds ``count`` queued messages."""
    for _ in range(400):
        if (await handle.query(AgentWorkflow.status)).queued_messages == count:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"never {count} queued messages")


async def find_workflows(client: Client, query: str, count: int = 1, timeout: float = 15.0) -> list[str]:
    """Workflow ids the visibility store finds for ``query``, sorted, once it finds ``count`` (it lags
    a little)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        ids = sorted([wf.id async for wf in client.list_workflows(query)])
        if len(ids) >= count or asyncio.get_running_loop().time() > deadline:
            return ids
        await asyncio.sleep(0.2)


async def running_activity(handle: WorkflowHandle, name: str, attempt: int = 1) -> None:
    """Wait until an attempt >= ``attempt`` of the activity ``name`` has started."""
    for _ in range(POLLS):
        for pending in (await handle.describe()).raw_description.pending_activities:
            if (
                pending.activity_type.name == name
                and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                and pending.attempt >= attempt
            ):
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} attempt {attempt} never started")


async def delegating(env: Env) -> tuple[WorkflowHandle, WorkflowHandle]:
    """The shipped delegator, its scribe waiting for a person; the parent's and the child's handles."""
    parent = await env.start(ConversationInput(prompt="Save my note.", agent="delegator"))
    await wait_for_pending(parent)
    return parent, env.client.get_workflow_handle_for(AgentWorkflow.run, f"{parent.id}/call_1_0")


async def send(handle: WorkflowHandle, text: str) -> str:
    """A message, sent again while the conversation continues as new."""
    while True:
        try:
            return (await handle.execute_update(AgentWorkflow.send_message, MessageInput(text=text))).text
        except WorkflowUpdateFailedError as e:
            if getattr(e.cause, "type", None) != ROLLING_OVER:
                raise
            await asyncio.sleep(0.1)
