"""Client-side helpers for one conversation: start it as the starter does, send to it (starting it
if need be), ask it a query, read its history, fork it, and link to its page."""

from __future__ import annotations

import asyncio
import functools
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import quote

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateStage,
)
from temporalio.common import (
    Priority,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, CancelledError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from durable_agents.activities.budgets import BudgetsFile
from durable_agents.client.search import prompt_attribute
from durable_agents.settings import DEFAULT_TASK_QUEUE, DEFAULT_UI_URL, Settings
from durable_agents.workflows.agent import ROLLING_OVER, AgentWorkflow
from durable_agents.workflows.api import (
    AGENT_PARENT,
    AGENT_STATUS,
    AgentOverrides,
    ConversationHistory,
    ConversationInput,
    ConversationResult,
    MessageInput,
    start_search_attributes,
)
from durable_agents.workflows.config import AgentSpec, Versioning
from durable_agents.workflows.fallback import models_used
from durable_agents.workflows.messages import UserMessage
from durable_agents.workflows.records import Reply
from durable_agents.workflows.transcript import cut_error
from durable_agents.workflows.versioning import WORKFLOW_TYPES, workflow_type

T = TypeVar("T")

_ACCEPTED, _COMPLETED = WorkflowUpdateStage.ACCEPTED, WorkflowUpdateStage.COMPLETED

LIST_WINDOW = timedelta(hours=1)
"""The first span ``newest_conversations`` looks back over (doubled until it holds enough)."""

QUERY_TIMEOUT = timedelta(seconds=10)
"""How long a query waits for the conversation's worker to answer."""


class NoWorkerError(RuntimeError):
    """No worker answered a query about the conversation (one line, naming its task queue)."""


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
    fork_of: str | None = None,
    priority: int | None = None,
    versioning: Versioning | None = None,
    **options: Any,
) -> WorkflowHandle[AgentWorkflow, ConversationResult]:
    """Start a conversation with its Web UI summary, and AgentName and AgentStatus (and for a fork
    AgentForkOf, with a tenant AgentTenant and AgentUser) set at the start (the workflow then writes
    no search attribute until its status changes), at ``priority`` (1 first, 5 last) with its tenant
    as fairness key, as the workflow type of its versioning behavior (``conversation_type``).
    ``options`` go to ``Client.start_workflow``."""
    handle = await client.start_workflow(
        conversation_type(conversation, versioning),
        conversation,
        id=id,
        task_queue=task_queue,
        result_type=ConversationResult,
        **await _start_options(
            client, conversation, conversation.prompt or "", fork_of=fork_of, priority=priority
        ),
        **options,
    )
    return cast(WorkflowHandle[AgentWorkflow, ConversationResult], handle)


def conversation_type(conversation: ConversationInput, versioning: Versioning | None = None) -> str:
    """The workflow type a conversation starts as, which fixes its versioning behavior on versioned
    workers (workflows/behaviors.py): ``versioning`` if given, else an inline agent's own; an agent
    named by a caller that does not say is pinned (``AgentWorkflow``)."""
    if versioning is None:
        versioning = conversation.agent_spec.versioning if conversation.agent_spec else "pinned"
    return workflow_type(versioning)


async def send_or_start(
    client: Client,
    workflow_id: str,
    text: str | MessageInput,
    *,
    agent: str | AgentSpec,
    overrides: AgentOverrides | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
    attempts: int = 50,
    tenant: str | None = None,
    user: str | None = None,
    versioning: Versioning | None = None,
    **options: Any,
) -> Reply:
    """Send ``text`` (or a ``MessageInput``, with images) to conversation ``workflow_id`` and return
    the reply, starting the conversation
    with ``agent`` (a name or inline settings) if it is not running: one update-with-start, so a
    stateless frontend needs no "does it exist?" round trip. The new conversation starts without a
    prompt and takes ``text`` as its first message; it is a chat unless ``overrides`` say otherwise,
    and belongs to ``tenant`` and ``user`` (docs/tenants.md), as the workflow type of ``versioning``
    (``conversation_type``).
    An id whose conversation has closed is refused (``WorkflowAlreadyStartedError``) unless
    ``options`` give another ``id_reuse_policy``; ``options`` go to ``WithStartWorkflowOperation``.

    A message refused while the conversation continues as new is sent again, up to ``attempts``
    times; any other refusal raises ``WorkflowUpdateFailedError``."""
    send = _sender(
        client, workflow_id, text, agent, overrides, task_queue, _COMPLETED, options, tenant, user, versioning
    )
    return await (await resent_while_rolling_over(send, attempts)).result()


async def start_message(
    client: Client,
    workflow_id: str,
    text: str | MessageInput,
    *,
    agent: str | AgentSpec,
    overrides: AgentOverrides | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
    attempts: int = 50,
    tenant: str | None = None,
    user: str | None = None,
    versioning: Versioning | None = None,
    **options: Any,
) -> WorkflowUpdateHandle[Reply]:
    """``send_or_start``, returning once the conversation accepted the message (the handle's
    ``result()`` is the reply): for a frontend that follows the turn on the event stream. A message
    the conversation refuses because it continues as new comes back as a handle too (the SDK returns
    a refused update answered): its ``result()`` raises, ``rolling_over`` says so, and
    ``send_or_start`` sends it again and waits for the reply (as serve does)."""
    send = _sender(
        client, workflow_id, text, agent, overrides, task_queue, _ACCEPTED, options, tenant, user, versioning
    )
    return await resent_while_rolling_over(send, attempts)


def _sender(
    client: Client,
    workflow_id: str,
    text: str | MessageInput,
    agent: str | AgentSpec,
    overrides: AgentOverrides | None,
    task_queue: str,
    stage: WorkflowUpdateStage,
    options: dict[str, Any],
    tenant: str | None = None,
    user: str | None = None,
    versioning: Versioning | None = None,
) -> Callable[[], Awaitable[WorkflowUpdateHandle[Reply]]]:
    """One update-with-start of ``send_message``, waiting for ``stage``; a new conversation belongs to
    ``tenant`` and ``user``, and starts as the workflow type of ``versioning``."""
    overrides = overrides or AgentOverrides()
    conversation = ConversationInput(
        await_first_message=True,
        agent=agent if isinstance(agent, str) else None,
        agent_spec=None if isinstance(agent, str) else agent,
        overrides=overrides.model_copy(update={"chat": True if overrides.chat is None else overrides.chat}),
        tenant=tenant,
        user=user,
    )
    message = text if isinstance(text, MessageInput) else MessageInput(text=text)
    options = {"id_reuse_policy": WorkflowIDReusePolicy.REJECT_DUPLICATE} | options

    async def send() -> WorkflowUpdateHandle[Reply]:
        start = WithStartWorkflowOperation(
            conversation_type(conversation, versioning),
            conversation,
            id=workflow_id,
            task_queue=task_queue,
            result_type=ConversationResult,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            **await _start_options(client, conversation, message.text),
            **options,
        )
        try:
            handle = await client.start_update_with_start_workflow(
                AgentWorkflow.send_message,
                message,
                start_workflow_operation=start,
                wait_for_stage=stage,
                result_type=Reply,
            )
            if stage == _COMPLETED:
                await handle.result()  # a refusal raises here, where it is sent again
            return handle
        except (WorkflowAlreadyStartedError, RPCError):
            # The operation's own future holds the start's error too: retrieved, asyncio keeps quiet.
            await asyncio.gather(start.workflow_handle(), return_exceptions=True)
            raise

    return send


async def resent_while_rolling_over(send: Callable[[], Awaitable[T]], attempts: int = 50) -> T:
    """``send()``'s answer; sent again, up to ``attempts`` times, while the conversation refuses
    messages because it continues as new. Any other refusal raises ``WorkflowUpdateFailedError``."""
    for attempt in range(attempts):
        try:
            return await send()
        except WorkflowUpdateFailedError as e:
            if not rolling_over(e) or attempt + 1 == attempts:
                raise
            await asyncio.sleep(0.2)
    raise AssertionError("unreachable")


def rolling_over(error: WorkflowUpdateFailedError) -> bool:
    """Was the message refused because the conversation continues as new (send it again)?"""
    return isinstance(error.cause, ApplicationError) and error.cause.type == ROLLING_OVER


async def _start_options(
    client: Client,
    conversation: ConversationInput,
    first_message: str,
    fork_of: str | None = None,
    priority: int | None = None,
) -> dict[str, Any]:
    """The Web UI summary and the search attributes a conversation starts with (AgentPromptWords where
    ``prompt_attribute`` allows it)."""
    agent = conversation.agent or (conversation.agent_spec.name if conversation.agent_spec else "")
    attributes = start_search_attributes(
        agent, fork_of=fork_of, tenant=conversation.tenant, user=conversation.user
    )
    if (prompt := await prompt_attribute(client, first_message)) is not None:
        attributes = TypedSearchAttributes([*attributes, prompt])
    options: dict[str, Any] = {
        "static_summary": conversation_summary(agent, first_message),
        "search_attributes": attributes,
    }
    if (given := start_priority(conversation, priority)) is not None:
        options["priority"] = given
    return options


def start_priority(conversation: ConversationInput, priority: int | None = None) -> Priority | None:
    """Temporal's priority of a conversation's tasks (its activities and sub-agents inherit it): the
    tenant as fairness key, at its weight in the budgets file (``AGENT_BUDGETS``), and ``priority``
    (1 first, 5 last); None when there is neither."""
    if conversation.tenant is None and priority is None:
        return None
    weight = None
    if conversation.tenant is not None:
        weight = (
            _budgets_file(Settings.from_env().budgets_file).current().fairness_weight(conversation.tenant)
        )
    return Priority(priority_key=priority, fairness_key=conversation.tenant, fairness_weight=weight)


@functools.lru_cache(maxsize=8)
def _budgets_file(path: Path | None) -> BudgetsFile:
    """One per file for the client's starts: read once, and again only when the file changes."""
    return BudgetsFile(path)


async def ask(
    client: Client, handle: WorkflowHandle, query: Any, task_queue: str, timeout: timedelta = QUERY_TIMEOUT
) -> Any:
    """The answer of the conversation's worker to ``query``. ``NoWorkerError`` at once when no worker
    polls ``task_queue`` (Temporal would wait ~30 s, then say only "Timeout expired"), or when none
    answers within ``timeout`` (a worker that polled it minutes ago may be gone)."""
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    if not described.pollers:
        raise NoWorkerError(f"no worker is polling task queue {task_queue}")
    try:
        return await handle.query(query, rpc_timeout=timeout)
    except RPCError as e:
        if e.status not in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
            raise
        seconds = int(timeout.total_seconds())
        raise NoWorkerError(f"no worker polling task queue {task_queue} answered within {seconds} s") from e


async def interrupt_turn(client: Client, handle: WorkflowHandle, task_queue: str) -> str:
    """The ``interrupt`` signal to the conversation's running turn, and what it does to that turn, in
    one line. ``ValueError`` when the conversation runs no turn: its worker would drop the signal."""
    state = (await ask(client, handle, AgentWorkflow.status, task_queue)).state
    if state == "idle":
        raise ValueError("runs no turn (it waits for the next message); nothing to interrupt")
    await handle.signal(AgentWorkflow.interrupt)
    if state == "calling_model":
        return "its model call is cancelled and the turn answered 'interrupted' (a chat stays open)."
    return (
        f"its turn ({state.replace('_', ' ')}) makes no next model call; it is answered 'interrupted'"
        " once its tool calls end (a chat stays open)."
    )


async def ask_or_why(
    client: Client, wf: WorkflowExecution, query: Any, timeout: timedelta = QUERY_TIMEOUT
) -> Any:
    """``ask`` of a listed conversation, or, as a string, why it did not answer (no worker polls or
    answers, or the query failed): one silent conversation costs a warning, not a whole list."""
    try:
        return await ask(client, client.get_workflow_handle(wf.id), query, wf.task_queue, timeout)
    except NoWorkerError as e:
        return str(e)
    except (RPCError, WorkflowQueryFailedError) as e:
        return e.message


def shown_once(listed: list[WorkflowExecution]) -> list[WorkflowExecution]:
    """The listed conversations but the sub-agents whose parent is listed too: a sub-agent's
    approvals show once, under the conversation that delegated to it (which forwards decisions)."""
    parents = {wf.id for wf in listed}
    return [wf for wf in listed if wf.typed_search_attributes.get(AGENT_PARENT) not in parents]


async def conversation_history(client: Client, handle: WorkflowHandle) -> ConversationHistory:
    """Messages and audit trail; from the result once completed (a result is a whole history), so no
    worker is needed. Otherwise its worker's answer (``ask``)."""
    described = await handle.describe()
    if described.status == WorkflowExecutionStatus.COMPLETED:
        return ConversationHistory.model_validate(await handle.result(), from_attributes=True)
    return await ask(client, handle, AgentWorkflow.history, described.task_queue)


async def conversation_result(client: Client, handle: WorkflowHandle) -> ConversationResult:
    """The conversation's result once it closes (waiting for it). A cancelled one ends Canceled,
    which keeps no result: its worker answers the ``history``, ``replies`` and ``status`` queries of
    the closed run instead (``NoWorkerError`` without one). Any other end raises as ``result()``.
    Either way a cancelled conversation's stop reason is ``cancelled``: one cancelled the older way
    (it completed, before ``CANCELED_PATCH``) had its last reply's, ``completed`` when it was idle."""
    try:
        done = ConversationResult.model_validate(await handle.result(), from_attributes=True)
    except WorkflowFailureError as e:
        if not isinstance(e.cause, CancelledError):
            raise
    else:
        return done.model_copy(update={"stop_reason": "cancelled"}) if done.closed_by == "cancelled" else done
    queue = (await handle.describe()).task_queue
    history, replies, status = await asyncio.gather(
        ask(client, handle, AgentWorkflow.history, queue),
        ask(client, handle, AgentWorkflow.replies, queue),
        ask(client, handle, AgentWorkflow.status, queue),
    )
    last = replies[-1] if replies else None
    return ConversationResult(
        **dict(history),
        final_text=last.text if last else "",
        stop_reason="cancelled",
        iterations=last.iterations if last else status.iteration,
        model_calls=status.model_calls,
        truncated=last is not None and last.truncated,
        usage=status.usage,
        cost=status.cost,
        replies=replies,
        closed_by="cancelled",
        detail=status.detail,
        runs=status.run,
        output=last.output if last else None,
        models_used=models_used(history.model_attempts),
    )


async def fork_conversation(
    client: Client,
    origin_id: str,
    at: int,
    *,
    id: str | None = None,
    prompt: str | None = None,
    task_queue: str | None = None,
    **options: Any,
) -> WorkflowHandle[AgentWorkflow, ConversationResult]:
    """Start a new conversation from the first ``at`` messages of ``origin_id``: same agent and
    overrides (and task queue, unless given) and workflow type (its versioning behavior), a fresh
    budget, AgentForkOf naming the origin. Without ``prompt`` message ``at`` must be a user message,
    which the fork asks again; with one, the fork asks it after message ``at``.

    Raises ``ValueError`` (one line) for a cut the fork cannot start from.
    """
    origin = client.get_workflow_handle(origin_id)
    messages = (await conversation_history(client, origin)).messages
    where = f"cannot fork {origin_id} at {at}"
    if not 1 <= at <= len(messages):
        raise ValueError(f"{where}: it has {len(messages)} messages; give 1 to {len(messages)}")
    if error := cut_error(messages, at):
        raise ValueError(f"{where}: {error}")
    history, last = messages[:at], messages[at - 1]
    if prompt is None:
        if not isinstance(last, UserMessage):
            raise ValueError(
                f"{where}: message {at} is not a user message ({last.kind}); fork at a user message to ask"
                " it again, or give a new prompt"
            )
        history, prompt = history[:-1], last.text
    elif isinstance(last, UserMessage):
        raise ValueError(
            f"{where}: message {at} is a user message; fork there without a prompt to ask it again,"
            f" or at {at - 1} to ask yours instead"
        )
    started = await _start_input(client, origin)
    conversation = ConversationInput(
        prompt=prompt,
        agent=started.agent,
        agent_spec=started.agent_spec,
        overrides=started.overrides,
        history=history,
        tenant=started.tenant,
        user=started.user,
    )
    described = await origin.describe()
    return await start_conversation(
        client,
        conversation,
        id=id or f"{origin_id}-fork-{uuid.uuid4().hex[:6]}",
        task_queue=task_queue or described.task_queue,
        fork_of=origin_id,
        versioning=next((v for v, t in WORKFLOW_TYPES.items() if t == described.workflow_type), None),
        **options,
    )


async def _start_input(client: Client, handle: WorkflowHandle) -> ConversationInput:
    """The start input of the conversation's latest run (its agent and overrides are the first run's)."""
    async for event in handle.fetch_history_events():
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        [started] = await client.data_converter.decode(payloads, [ConversationInput])
        return started
    raise ValueError(f"{handle.id} has no history")


def ui_link(workflow_id: str, namespace: str = "default", ui_url: str = DEFAULT_UI_URL) -> str:
    """The Web UI page of a workflow (``ui_url``: ``Settings.ui_url``); the id is quoted, as the UI's
    own links do (``a/b`` is ``a%2Fb``)."""
    return f"{ui_url}/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"


def quoted(value: str) -> str:
    """``value`` as a string in a visibility query: quoted, its quotes and backslashes escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


async def newest_conversations(
    client: Client,
    limit: int,
    before: datetime | None = None,
    tenant: str | None = None,
    *,
    after: datetime | None = None,
    where: str = "",
) -> list[WorkflowExecution]:
    """The ``limit`` conversations started last (before ``before``, for the next page; ``tenant``'s
    only, when given), newest first; a conversation that continued as new shows once, as its
    current run. ``after``: the ``limit`` started first after it instead (the page before, still
    newest first); ``where``: more conditions of a visibility query.

    Temporal's SQL visibility has no ORDER BY and lists the open ones first, then the others by
    close time: so count over a doubling span of start times (back from ``before`` or now, forward
    from ``after``) until it holds ``limit`` of them (or all there are), and sort what it holds.
    """
    types = " OR ".join(f"WorkflowType = {quoted(name)}" for name in WORKFLOW_TYPES.values())
    query = f"({types}) AND ExecutionStatus != 'ContinuedAsNew'"
    if before is not None:
        query += f" AND StartTime < '{before.isoformat()}'"
    if after is not None:
        query += f" AND StartTime > '{after.isoformat()}'"
    if tenant is not None:
        query += f" AND AgentTenant = {quoted(tenant)}"
    if where:
        query += f" AND {where}"
    total = (await client.count_workflows(query)).count
    window = LIST_WINDOW
    scoped = query
    while total > limit:
        if after is not None:
            scoped = f"{query} AND StartTime <= '{(after + window).isoformat()}'"
        else:
            scoped = f"{query} AND StartTime >= '{((before or datetime.now(UTC)) - window).isoformat()}'"
        if (await client.count_workflows(scoped)).count >= limit:
            break
        window *= 2
    found = sorted([wf async for wf in client.list_workflows(scoped)], key=lambda wf: wf.start_time)
    return (found[:limit] if after is not None else found[-limit:])[::-1]


def agent_state(wf: WorkflowExecution) -> str:
    """What a conversation is doing, or how it ended.

    The AgentStatus search attribute while it runs or once it completed (awaiting_approval, idle,
    cancelled...); otherwise Temporal's status (failed, terminated, timed_out), which the
    workflow may not have had the chance to record.
    """
    recorded = wf.typed_search_attributes.get(AGENT_STATUS)
    if recorded and wf.status in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.COMPLETED):
        return recorded
    if wf.status is None:
        return "unknown"
    return "cancelled" if wf.status == WorkflowExecutionStatus.CANCELED else wf.status.name.lower()


def edited_arguments(text: str | None) -> dict[str, Any] | None:
    """The JSON object a person edited a tool call's arguments into (the starter's ``--arguments``,
    the console's editor); None for none given. A ValueError says, in one line, what is wrong."""
    if text is None or not text.strip():
        return None
    try:
        arguments = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e.msg} at line {e.lineno}, column {e.colno})") from e
    if not isinstance(arguments, dict):
        raise ValueError('give a JSON object, such as \'{"path": "notes.txt"}\'')
    return arguments


_PYDANTIC_REPORT = re.compile(r"(?P<lead>.*?)(?P<count>\d+) validation errors? for \S+")


def one_line(message: str) -> str:
    """A reason on one line. Pydantic's report of several lines (an older worker sends it for a
    refused update) becomes its first error, ``field: reason``; other text keeps its first line."""
    lines = [line.rstrip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return message
    report = _PYDANTIC_REPORT.fullmatch(lines[0])
    if report is None or len(lines) < 2:
        return lines[0]
    if lines[1].startswith(" "):  # no field: the model's own check
        where, reason = "input", lines[1]
    else:
        where, reason = lines[1], lines[2] if len(lines) > 2 else ""
    reason = reason.strip().split(" [type=")[0]
    count = int(report["count"])
    more = f" (and {count - 1} more)" if count > 1 else ""
    return f"{report['lead']}{where}: {reason}{more}"


def refusal(error: BaseException) -> str:
    """The worker's reason for refusing an update (or failing it), on one line: the innermost cause
    (the SDK's "Failed decoding arguments" wraps what pydantic found wrong)."""
    while error.__cause__ is not None:
        error = error.__cause__
    return one_line(str(getattr(error, "message", error)))
