"""Cancelling a conversation ends it as cancelled with everything it completed, whatever it was doing:
Canceled in Temporal, its result read from its queries (``conversation_result``)."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError

from durable_agents.client.conversations import conversation_result
from durable_agents.client.live import follow
from durable_agents.serve.console import reading
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import ApprovalPolicy
from durable_agents.workflows.events import Ended
from durable_agents.workflows.messages import ScriptStep, ToolResultMessage
from tests.support.conversations import find_workflows, wait_for_pending
from tests.support.history import event_types
from tests.support.workers import Env


async def _wait_for_event(handle: WorkflowHandle, event: int, count: int = 1) -> None:
    while (await event_types(handle)).count(event) < count:
        await asyncio.sleep(0.05)


async def _wait_until_running(handle: WorkflowHandle, activity: str, completed_before: int) -> None:
    """Until ``activity`` runs on a worker, after ``completed_before`` other activities completed."""
    await _wait_for_event(handle, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, completed_before)
    while True:
        pending = (await handle.describe()).raw_description.pending_activities
        if any(
            p.activity_type.name == activity
            and p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            for p in pending
        ):
            return
        await asyncio.sleep(0.05)


async def test_cancelling_during_a_model_call_aborts_the_call_and_keeps_the_transcript(env: Env) -> None:
    agent = scripted_agent(
        step("Adding.", ("add", {"a": 2, "b": 3})), ScriptStep(text="late", delay_seconds=60)
    )
    handle = await env.start(conversation(agent, prompt="add 2 and 3"))
    await _wait_until_running(handle, "durable_agents.call_model", completed_before=2)  # call_model, add
    await handle.cancel(reason="changed my mind")
    result = await conversation_result(env.client, handle)

    assert (result.closed_by, result.stop_reason) == ("cancelled", "cancelled")
    assert result.detail == "cancelled: changed my mind"
    assert result.final_text == "Adding."
    assert [(c.name, c.content) for c in result.tool_calls] == [("add", "5")]
    assert result.model_calls == 1
    events = await event_types(handle)
    # The model call heard the cancellation and stopped: cancelled, not completed nor timed out.
    assert events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED) == 1
    assert events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED) == 2
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events
    assert events[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED
    status = await handle.query(AgentWorkflow.status)
    assert (status.state, status.detail) == ("cancelled", "cancelled: changed my mind")


async def test_cancelling_while_an_approval_waits_keeps_completed_calls_and_marks_the_rest(env: Env) -> None:
    agent = scripted_agent(
        step("Computing.", ("multiply", {"a": 6, "b": 7}), ("add", {"a": 1, "b": 2})),
        step("never"),
        approval=ApprovalPolicy(require=["multiply"]),
    )
    handle = await env.start(conversation(agent))
    await wait_for_pending(handle)
    await _wait_for_event(handle, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, 2)  # call_model and add
    await handle.cancel()
    result = await conversation_result(env.client, handle)

    assert (result.closed_by, result.stop_reason) == ("cancelled", "cancelled")
    assert [(c.call_id, c.name, c.content, c.is_error) for c in result.tool_calls] == [
        ("call_1_0", "multiply", "Tool call 'multiply' was cancelled with the conversation.", True),
        ("call_1_1", "add", "3", False),
    ]
    [approval] = result.approvals
    assert (approval.state, approval.by, approval.via) == ("cancelled", "system", "cancellation")
    assert approval.reason == "conversation cancelled: no reason given"
    # The transcript stays well formed: every call the model asked for has its result.
    assert [m.call_id for m in result.messages if isinstance(m, ToolResultMessage)] == [
        "call_1_0",
        "call_1_1",
    ]
    assert await handle.query(AgentWorkflow.pending_approvals) == []


async def test_cancelling_a_chat_answers_every_queued_message(env: Env) -> None:
    agent = scripted_agent(ScriptStep(text="slow", delay_seconds=60), chat=True)
    handle = await env.start(conversation(agent))
    await _wait_until_running(handle, "durable_agents.call_model", completed_before=0)
    await handle.signal(AgentWorkflow.post_message, {"text": "and another thing"})
    await handle.cancel()
    result = await conversation_result(env.client, handle)

    assert [(r.message_id, r.stop_reason, r.text) for r in result.replies] == [
        ("m1", "cancelled", "[no answer: the conversation was cancelled]"),
        ("m2", "cancelled", "The conversation was cancelled before this message was answered."),
    ]


async def test_a_conversation_cancelled_while_an_approval_waits_ends_canceled_in_temporal(env: Env) -> None:
    agent = scripted_agent(
        step("Computing.", ("multiply", {"a": 6, "b": 7})),
        step("never"),
        approval=ApprovalPolicy(require=["multiply"]),
    )
    handle = await env.start(conversation(agent))
    await wait_for_pending(handle)
    await handle.cancel(reason="not needed")
    with pytest.raises(WorkflowFailureError) as ended:
        await handle.result()

    assert isinstance(ended.value.cause, CancelledError)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    canceled = f'ExecutionStatus = "Canceled" AND AgentStatus = "cancelled" AND WorkflowId = "{handle.id}"'
    assert await find_workflows(env.client, canceled) == [handle.id]
    events = await event_types(handle)
    assert events[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events
    # It closed as before first: its approval cancelled, its stream ended, its transcript readable.
    result = await conversation_result(env.client, handle)
    status = await handle.query(AgentWorkflow.status)
    assert (status.state, status.detail, status.usage) == ("cancelled", "cancelled: not needed", result.usage)
    assert (result.closed_by, result.stop_reason, result.final_text, result.detail) == (
        "cancelled",
        "cancelled",
        "Computing.",
        "cancelled: not needed",
    )
    assert [(a.call_id, a.state, a.via) for a in result.approvals] == [
        ("call_1_0", "cancelled", "cancellation")
    ]
    assert [(c.call_id, c.content) for c in result.tool_calls] == [
        ("call_1_0", "Tool call 'multiply' was cancelled with the conversation.")
    ]
    assert (result.model_calls, result.usage.total_tokens) == (1, 15)
    assert [(r.message_id, r.stop_reason) for r in result.replies] == [("m1", "cancelled")]
    [*_, (_, last)] = [item async for item in follow(env.client, handle.id)]
    assert isinstance(last, Ended)
    assert (last.outcome, last.detail) == ("cancelled", "cancelled: not needed")
    page = await reading.conversation(env.client, handle.id)  # the console's conversation page
    assert page.history is not None
    assert (page.status, page.problem, page.history.messages, page.facts) == (
        "cancelled",
        "",
        result.messages,
        status,
    )
