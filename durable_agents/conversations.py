"""Client-side helpers for one conversation: start it as the starter does, send to it (starting it
if need be), and link to its page."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError

from durable_agents.settings import DEFAULT_TASK_QUEUE, DEFAULT_UI_URL
from workflows.agent import ROLLING_OVER, AgentWorkflow
from workflows.api import (
    AGENT_NAME,
    AGENT_STATUS,
    AgentOverrides,
    ConversationInput,
    ConversationResult,
    MessageInput,
)
from workflows.config import AgentSpec
from workflows.records import Reply


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
    return await client.start_workflow(
        AgentWorkflow.run,
        conversation,
        id=id,
        task_queue=task_queue,
        **_start_options(conversation, conversation.prompt or ""),
        **options,
    )


async def send_or_start(
    client: Client,
    workflow_id: str,
    text: str,
    *,
    agent: str | AgentSpec,
    overrides: AgentOverrides | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
    attempts: int = 50,
    **options: Any,
) -> Reply:
    """Send ``text`` to conversation ``workflow_id`` and return the reply, starting the conversation
    with ``agent`` (a name or inline settings) if it is not running: one update-with-start, so a
    stateless frontend needs no "does it exist?" round trip. The new conversation starts without a
    prompt and takes ``text`` as its first message; it is a chat unless ``overrides`` say otherwise.
    An id whose conversation has closed is refused (``WorkflowAlreadyStartedError``) unless
    ``options`` give another ``id_reuse_policy``; ``options`` go to ``WithStartWorkflowOperation``.

    A message refused while the conversation continues as new is sent again, up to ``attempts``
    times; any other refusal raises ``WorkflowUpdateFailedError``."""
    overrides = overrides or AgentOverrides()
    conversation = ConversationInput(
        await_first_message=True,
        agent=agent if isinstance(agent, str) else None,
        agent_spec=None if isinstance(agent, str) else agent,
        overrides=overrides.model_copy(update={"chat": True if overrides.chat is None else overrides.chat}),
    )
    message = MessageInput(text=text)
    options = {"id_reuse_policy": WorkflowIDReusePolicy.REJECT_DUPLICATE} | options
    for attempt in range(attempts):
        start = WithStartWorkflowOperation(
            AgentWorkflow.run,
            conversation,
            id=workflow_id,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            **_start_options(conversation, text),
            **options,
        )
        try:
            return await client.execute_update_with_start_workflow(
                AgentWorkflow.send_message, message, start_workflow_operation=start, result_type=Reply
            )
        except (WorkflowAlreadyStartedError, RPCError):
            # The operation's own future holds the start's error too: retrieved, asyncio keeps quiet.
            await asyncio.gather(start.workflow_handle(), return_exceptions=True)
            raise
        except WorkflowUpdateFailedError as e:
            rolling_over = isinstance(e.cause, ApplicationError) and e.cause.type == ROLLING_OVER
            if not rolling_over or attempt + 1 == attempts:
                raise
            await asyncio.sleep(0.2)
    raise AssertionError("unreachable")


def _start_options(conversation: ConversationInput, first_message: str) -> dict[str, Any]:
    """The Web UI summary and the search attributes a conversation starts with."""
    agent = conversation.agent or (conversation.agent_spec.name if conversation.agent_spec else "")
    return {
        "static_summary": conversation_summary(agent, first_message),
        "search_attributes": TypedSearchAttributes(
            [SearchAttributePair(AGENT_NAME, agent), SearchAttributePair(AGENT_STATUS, "running")]
        ),
    }


def ui_link(workflow_id: str, namespace: str = "default", ui_url: str = DEFAULT_UI_URL) -> str:
    """The Web UI page of a workflow (``ui_url``: ``Settings.ui_url``); the id is quoted, as the UI's
    own links do (``a/b`` is ``a%2Fb``)."""
    return f"{ui_url}/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"
