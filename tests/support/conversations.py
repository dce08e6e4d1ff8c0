"""Waiting on a running conversation, and finding its files."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import WorkflowHandle

from stores.workspaces import folder_name
from workflows.agent import AgentWorkflow
from workflows.records import ApprovalRecord


def workspace_of(root: Path, handle: WorkflowHandle) -> Path:
    """The conversation's workspace folder under ``root``: keyed by workflow id and first run id."""
    assert handle.first_execution_run_id, "needs the handle start_workflow returned"
    return root / folder_name(f"{handle.id}/{handle.first_execution_run_id}")


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
