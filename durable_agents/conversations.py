"""Client-side helpers for one conversation: start it as the starter does, and link to its page."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote, urlsplit

from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from durable_agents.connection import TASK_QUEUE
from durable_agents.dev_server import UI_PORT
from workflows.agent import AgentWorkflow
from workflows.models import AGENT_NAME, AGENT_STATUS, ConversationInput, ConversationResult


def conversation_summary(agent: str, prompt: str) -> str:
    """The one line the Web UI shows for a conversation."""
    short = " ".join(prompt.split())
    return f"{agent}: {short[:120]}{'…' if len(short) > 120 else ''}"


async def start_conversation(
    client: Client, conversation: ConversationInput, *, id: str, task_queue: str = TASK_QUEUE, **options: Any
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


UI_URL = "AGENT_UI_URL"
"""Where people open the Web UI, for the links we print (default: the embedded server's)."""


def ui_address() -> str:
    """The Web UI's base address from ``AGENT_UI_URL``; ``ValueError`` when it is no http(s) URL."""
    address = os.environ.get(UI_URL, "").strip().rstrip("/") or f"http://localhost:{UI_PORT}"
    parts = urlsplit(address)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{UI_URL} must be an http:// or https:// address, not {address!r}")
    return address


def ui_link(workflow_id: str, namespace: str = "default") -> str:
    """The Web UI page of a workflow; the id is quoted, as the UI's own links do (``a/b`` is ``a%2Fb``)."""
    return f"{ui_address()}/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"
