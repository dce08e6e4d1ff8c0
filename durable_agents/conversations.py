"""Client-side helpers for one conversation: start it as the starter does, and link to its page."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from durable_agents.settings import DEFAULT_TASK_QUEUE, DEFAULT_UI_URL
from workflows.agent import AgentWorkflow
from workflows.api import AGENT_NAME, AGENT_STATUS, ConversationInput, ConversationResult


def conversation_summary(agent: str, prompt: str) -> str:
    """The one line the Web UI shows for a conversation."""
    short = " ".join(prompt.split())
    return f"{agent}: {short[:120]}{'…' if len(short) > 120 else ''}"


async def start_conversation(
    client: Client,
    conversation: ConversationInput,
    *,
    id: str,
    task_queue: str = DEFAULT_TASK_QUEUE,
    **options: Any,
) -> WorkflowHandle[AgentWorkflow, ConversationResult]:
    """Start a conversation with its Web UI summary, and AgentName and AgentStatus set at the start
    (the workflow then writes no search attribute until its status changes). ``options`` go to
    ``Client.start_workflow``."""
    agent = conversation.agent or (conversation.agent_spec.name if conversation.agent_spec else "")
    return await client.start_workflow(
        AgentWorkflow.run,
        conversation,
        id=id,
        task_queue=task_queue,
        static_summary=conversation_summary(agent, conversation.prompt),
        search_attributes=TypedSearchAttributes(
            [SearchAttributePair(AGENT_NAME, agent), SearchAttributePair(AGENT_STATUS, "running")]
        ),
        **options,
    )


def ui_link(workflow_id: str, namespace: str = "default", ui_url: str = DEFAULT_UI_URL) -> str:
    """The Web UI page of a workflow (``ui_url``: ``Settings.ui_url``); the id is quoted, as the UI's
    own links do (``a/b`` is ``a%2Fb``)."""
    return f"{ui_url}/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"
