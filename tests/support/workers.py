"""A worker on a task queue of its own, and the conversations started on it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client, WorkflowHandle

from workflows.agent import AgentWorkflow
from workflows.api import ConversationInput, ConversationResult


@dataclass
class Env:
    client: Client
    task_queue: str
    workspace: Path

    async def start(self, conversation: ConversationInput, workflow_id: str | None = None) -> WorkflowHandle:
        return await self.client.start_workflow(
            AgentWorkflow.run,
            conversation,
            id=workflow_id or f"test-{uuid.uuid4().hex[:10]}",
            task_queue=self.task_queue,
        )

    async def run(self, conversation: ConversationInput) -> ConversationResult:
        return await (await self.start(conversation)).result()
