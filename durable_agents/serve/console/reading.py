"""What the console's pages show, read from Temporal: the calls waiting for a person across
conversations and the client tools' calls waiting for an answer (as ``starter.py pending`` finds
them), the conversations newest first, and one
conversation whole. No page reads anything a client of the public API could not."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError

from durable_agents.client.conversations import (
    NoWorkerError,
    agent_state,
    ask,
    ask_or_why,
    conversation_history,
    newest_conversations,
    quoted,
    shown_once,
)
from durable_agents.client.search import prompt_condition
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import (
    AGENT_COST,
    AGENT_NAME,
    AGENT_PARENT,
    AGENT_TENANT,
    AGENT_USER,
    ConversationResult,
    ConversationStatus,
)
from durable_agents.workflows.messages import Message
from durable_agents.workflows.records import ApprovalRecord, ClientCall, ConversationHistory

CONTEXT_MESSAGES = 3
"""How many of a conversation's last messages an inbox item shows for context."""
MAX_TREE_DEPTH = 4
INBOX_QUERY_TIMEOUT = timedelta(seconds=4)
"""How long the inbox waits for each conversation's worker: one whose worker is gone is a warning
after this, not a page that hangs."""


@dataclass
class Waiting:
    """One tool call waiting for a person, as the inbox shows it."""

    workflow_id: str
    agent: str
    record: ApprovalRecord
    context: list[Message]

    @property
    def arguments(self) -> str:
        return json.dumps(self.record.arguments, indent=2, ensure_ascii=False, sort_keys=True)


@dataclass
class Asking:
    """One client tool's call waiting for its result (``ask_user``: the user's answer)."""

    workflow_id: str
    agent: str
    call: ClientCall


@dataclass
class Inbox:
    items: list[Waiting] = field(default_factory=list)
    asking: list[Asking] = field(default_factory=list)
    """Client tools' calls waiting for an answer (conversations whose AgentStatus is
    ``waiting_for_client``), oldest first."""
    warnings: list[str] = field(default_factory=list)
    """Conversations whose worker did not answer: named, not the whole inbox lost."""

    @property
    def agents(self) -> list[str]:
        return sorted({item.agent for item in self.items})

    @property
    def tools(self) -> list[str]:
        return sorted({item.record.tool for item in self.items})

    def filtered(self, agent: str, tool: str, order: str) -> list[Waiting]:
        """Those of ``agent`` and ``tool`` (empty: any), newest first, or closest to the deadline."""
        kept = [i for i in self.items if agent in ("", i.agent) and tool in ("", i.record.tool)]
        if order == "deadline":
            return sorted(kept, key=lambda i: (i.record.deadline is None, i.record.deadline or datetime.max))
        return sorted(kept, key=lambda i: i.record.requested_at, reverse=True)


async def inbox(client: Client, tenant: str | None = None) -> Inbox:
    """Every tool call waiting for a person (of ``tenant``'s conversations, when given). A sub-agent's
    calls show once, under the conversation that delegated to it (which forwards decisions), as
    ``starter.py pending`` shows them."""
    scope = "" if tenant is None else f" AND AgentTenant = {quoted(tenant)}"
    query = f'AgentStatus = "awaiting_approval" AND ExecutionStatus = "Running"{scope}'
    waiting = shown_once([wf async for wf in client.list_workflows(query)])
    asking_query = f'AgentStatus = "waiting_for_client" AND ExecutionStatus = "Running"{scope}'
    asking = [wf async for wf in client.list_workflows(asking_query)]
    answers, asked = await asyncio.gather(
        asyncio.gather(*(_waiting_in(client, wf) for wf in waiting)),
        asyncio.gather(*(_asking_in(client, wf) for wf in asking)),
    )
    found = Inbox()
    for wf, answer in zip(waiting, answers, strict=True):
        if isinstance(answer, str):
            found.warnings.append(f"{wf.id}: no answer: {answer}")
        else:
            found.items.extend(answer)
    for wf, calls in zip(asking, asked, strict=True):
        if isinstance(calls, str):
            found.warnings.append(f"{wf.id}: no answer: {calls}")
        else:
            found.asking.extend(calls)
    found.asking.sort(key=lambda a: a.call.requested_at)
    return found


async def _asking_in(client: Client, wf: WorkflowExecution) -> list[Asking] | str:
    calls = await ask_or_why(client, wf, AgentWorkflow.pending_client_calls, INBOX_QUERY_TIMEOUT)
    if isinstance(calls, str):
        return calls
    agent = wf.typed_search_attributes.get(AGENT_NAME) or ""
    return [Asking(wf.id, agent, call) for call in calls]


async def _waiting_in(client: Client, wf: WorkflowExecution) -> list[Waiting] | str:
    records, history = await asyncio.gather(
        ask_or_why(client, wf, AgentWorkflow.pending_approvals, INBOX_QUERY_TIMEOUT),
        ask_or_why(client, wf, AgentWorkflow.history, INBOX_QUERY_TIMEOUT),
    )
    for why in (records, history):
        if isinstance(why, str):
            return why
    agent = wf.typed_search_attributes.get(AGENT_NAME) or ""
    context = [m for m in history.messages if m.kind != "system"][-CONTEXT_MESSAGES:]
    return [Waiting(wf.id, agent, record, context) for record in records]


@dataclass
class Row:
    """A conversation in the list."""

    workflow_id: str
    status: str
    agent: str
    tenant: str
    user: str
    started: datetime
    cost: str
    prompt: str = ""
    """The start of its first prompt, as its Web UI summary has it."""


STATUSES = (
    "running",
    "idle",
    "awaiting_approval",
    "waiting_for_client",
    "completed",
    "cancelled",
    "failed",
    "terminated",
    "timed_out",
)
"""What the list filters by: AgentStatus, or Temporal's status for those the workflow may not have
recorded (``agent_state``)."""
_CLOSED = {"cancelled": "Canceled", "failed": "Failed", "terminated": "Terminated", "timed_out": "TimedOut"}


@dataclass(frozen=True)
class ListFilter:
    """Which conversations the list shows (empty: any)."""

    status: str = ""
    agent: str = ""
    tenant: str = ""
    user: str = ""
    search: str = ""
    """The start of the conversation's id, or words of its prompt (AgentPromptWords)."""
    prompts: bool = True
    """Whether ``search`` looks at prompts too (the namespace has AgentPromptWords: ``prompt_searchable``)."""

    def __post_init__(self) -> None:
        if self.status and self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {self.status!r}")

    def where(self) -> str:
        """The visibility query's conditions."""
        found = [f"ExecutionStatus = '{_CLOSED[self.status]}'"] if self.status in _CLOSED else []
        if self.status and self.status not in _CLOSED:
            found.append(f"AgentStatus = {quoted(self.status)}")
        for key, value in (("AgentName", self.agent), ("AgentTenant", self.tenant), ("AgentUser", self.user)):
            if value:
                found.append(f"{key} = {quoted(value)}")
        if self.search:
            by_id = f"WorkflowId STARTS_WITH {quoted(self.search)}"
            by_prompt = prompt_condition(self.search) if self.prompts else ""
            found.append(f"({by_id} OR ({by_prompt}))" if by_prompt else by_id)
        return " AND ".join(found)


async def conversations(
    client: Client,
    limit: int,
    before: datetime | None,
    tenant: str | None = None,
    *,
    after: datetime | None = None,
    shown: ListFilter = ListFilter(),
) -> list[Row]:
    """A page of conversations, newest first (``before``: the start time the last page ended at,
    ``after`` the one the page before began at; of ``tenant``'s only, when given; those ``shown``
    lets through), each with the start of its prompt."""
    found = await newest_conversations(client, limit, before, tenant, after=after, where=shown.where())
    prompts = await asyncio.gather(*(_prompt(client, wf) for wf in found))
    return [
        Row(
            wf.id,
            agent_state(wf),
            wf.typed_search_attributes.get(AGENT_NAME) or "",
            wf.typed_search_attributes.get(AGENT_TENANT) or "",
            wf.typed_search_attributes.get(AGENT_USER) or "",
            wf.start_time,
            _dollars(wf.typed_search_attributes.get(AGENT_COST)),
            prompt,
        )
        for wf, prompt in zip(found, prompts, strict=True)
    ]


async def _prompt(client: Client, wf: WorkflowExecution) -> str:
    """The prompt's start from the conversation's Web UI summary (``agent: prompt``), or nothing."""
    try:
        described = await client.get_workflow_handle(wf.id, run_id=wf.run_id).describe()
        summary = await described.static_summary() or ""
    except RPCError:
        return ""
    return summary.partition(": ")[2]


def _dollars(cost: float | None) -> str:
    """AgentCost as the list shows it; blank for a conversation without one (no price, or started
    before the workflow wrote it)."""
    return "" if cost is None else dollars(cost)


def dollars(cost: float) -> str:
    """US dollars, to the cent's hundredth, and finer below a cent (a few calls of a cheap model)."""
    return f"${cost:.4f}" if cost >= 0.01 else f"${cost:.6f}"


@dataclass
class Node:
    """A conversation in a sub-agent tree."""

    workflow_id: str
    status: str
    agent: str
    children: list[Node] = field(default_factory=list)


@dataclass
class Conversation:
    """One conversation, whole: what its page shows."""

    workflow_id: str
    run_id: str
    task_queue: str
    status: str
    agent: str
    tenant: str
    started: datetime
    running: bool
    parent: str | None
    history: ConversationHistory | None
    facts: ConversationStatus | ConversationResult | None
    problem: str = ""
    """Why the history or status could not be read (no worker answered...)."""
    subagents: list[Node] = field(default_factory=list)
    pending: list[ApprovalRecord] = field(default_factory=list)
    asking: list[ClientCall] = field(default_factory=list)
    """Its client tools' calls waiting for a result."""

    @property
    def approvals(self) -> dict[str, ApprovalRecord]:
        return {r.call_id: r for r in self.history.approvals} if self.history else {}

    @property
    def tool_calls(self) -> dict[str, Any]:
        return {t.call_id: t for t in self.history.tool_calls} if self.history else {}


async def conversation(client: Client, workflow_id: str) -> Conversation:
    """The conversation's history, status, pending calls and sub-agents. ``RPCError`` NOT_FOUND for
    an id Temporal does not know."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
    described = await handle.describe()
    running = described.status == WorkflowExecutionStatus.RUNNING
    found = Conversation(
        workflow_id=workflow_id,
        run_id=described.run_id,
        task_queue=described.task_queue,
        status=agent_state(described),
        agent=described.typed_search_attributes.get(AGENT_NAME) or "",
        tenant=described.typed_search_attributes.get(AGENT_TENANT) or "",
        started=described.start_time,
        running=running,
        parent=described.typed_search_attributes.get(AGENT_PARENT),
        history=None,
        facts=None,
    )
    try:
        found.history = await conversation_history(client, handle)
        if running or described.status == WorkflowExecutionStatus.CANCELED:  # Canceled keeps no result
            found.facts = await ask(client, handle, AgentWorkflow.status, described.task_queue)
        if running:
            found.pending = await ask(client, handle, AgentWorkflow.pending_approvals, described.task_queue)
            found.asking = await ask(client, handle, AgentWorkflow.pending_client_calls, described.task_queue)
        elif described.status == WorkflowExecutionStatus.COMPLETED:
            found.facts = await handle.result()
    except (NoWorkerError, RPCError, WorkflowQueryFailedError) as e:
        found.problem = str(getattr(e, "message", e))
    found.subagents = await _children(client, workflow_id, MAX_TREE_DEPTH)
    return found


async def _children(client: Client, workflow_id: str, depth: int) -> list[Node]:
    """The sub-agents a conversation delegated to, and theirs, ``depth`` levels down."""
    if depth == 0:
        return []
    query = f"AgentParent = {quoted(workflow_id)} AND ExecutionStatus != 'ContinuedAsNew'"
    nodes = [
        Node(wf.id, agent_state(wf), wf.typed_search_attributes.get(AGENT_NAME) or "")
        async for wf in client.list_workflows(query)
    ]
    for node in nodes:
        node.children = await _children(client, node.workflow_id, depth - 1)
    return sorted(nodes, key=lambda n: n.workflow_id)
