"""A worker on a task queue of its own, and the conversations started on it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput, ConversationResult


@dataclass
class Env:
    """A worker's task queue on a client, and the folder its conversations' workspaces are in."""

    client: Client
    task_queue: str
    workspace: Path

    async def start(
        self, conversation: ConversationInput, workflow_id: str | None = None, **options: Any
    ) -> WorkflowHandle:
        """The conversation, started on this task queue (``options``: ``Client.start_workflow``'s)."""
        return await self.client.start_workflow(
            AgentWorkflow.run,
            conversation,
            id=workflow_id or f"test-{uuid.uuid4().hex[:10]}",
            task_queue=self.task_queue,
            **options,
        )

    async def run(self, conversation: ConversationInput) -> ConversationResult:
        return await (await self.start(conversation)).result()


@asynccontextmanager
async def running_worker(
    client: Client, workspace_root: Path, *, task_queue: str | None = None, **options: Any
) -> AsyncIterator[Env]:
    """A worker in this process (``build_worker``, with ``options``) on ``task_queue``, a fresh one
    unless given, its workspaces under ``workspace_root``; stopped when the block ends."""
    task_queue = task_queue or f"tq-{uuid.uuid4().hex[:10]}"
    async with build_worker(client, task_queue=task_queue, workspace_root=workspace_root, **options):
        yield Env(client=client, task_queue=task_queue, workspace=workspace_root)
