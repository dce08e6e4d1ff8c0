"""Human approval of tool calls: signals, the decide update, deadlines, queries and search attributes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from durable_agents.dev_server import EmbeddedServer, temporal_cli
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import ApprovalPolicy
from durable_agents.workflows.records import ApprovalSignal, Decision
from tests.support.conversations import find_workflows, wait_for_pending, workspace_of
from tests.support.history import activity_types, event_types
from tests.support.workers import Env, running_worker

WRITE = ("write_file", {"path": "out.txt", "content": "hi"})
TOOLS = ["write_file", "add"]


def _writer(*first_turn: tuple[str, dict], **kwargs):
    return scripted_agent(
        step("Writing.", *(first_turn or (WRITE,))), step("{last_result}"), tools=TOOLS, **kwargs
    )


def _written(env: Env, handle: WorkflowHandle) -> Path:
    return workspace_of(env.workspace, handle) / "out.txt"


async def test_approved_call_runs_and_the_decision_is_audited(env: Env) -> None:
    handle = await env.start(conversation(_writer()))
    [pending] = await wait_for_pending(handle)
    assert (pending.call_id, pending.tool, pending.arguments) == ("call_1_0", "write_file", WRITE[1])
    assert pending.deadline == pending.requested_at + timedelta(hours=24)
    status = await handle.query(AgentWorkflow.status)
    assert (status.state, status.pending_approvals) == ("awaiting_approval", 1)
    assert not _written(env, handle).exists()

    record = await handle.execute_update(
        AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="alice", reason="looks fine")
    )
    assert (record.state, record.by, record.via) == ("approved", "alice", "update")

    result = await handle.result()
    assert result.final_text == "Wrote 2 bytes to out.txt."
    assert _written(env, handle).read_text() == "hi"
    [audit] = result.approvals
    assert (audit.state, audit.by, audit.reason, audit.via) == ("approved", "alice", "looks fine", "update")
    assert audit.deadline == audit.requested_at + timedelta(hours=24)
    history = await handle.query(AgentWorkflow.history)
    assert history.approvals == result.approvals


async def test_rejected_call_never_runs_and_the_model_is_told_who_and_why(env: Env) -> None:
    handle = await env.start(conversation(_writer()))
    await wait_for_pending(handle)
    await handle.signal(
        AgentWorkflow.reject, ApprovalSignal(call_id="call_1_0", by="bob", reason="not today")
    )
    result = await handle.result()

    assert result.final_text == "Tool call 'write_file' was rejected by bob: not today"
    assert result.tool_calls[0].is_error is True
    assert not _written(env, handle).exists()
    assert "durable_agents.run_tool" not in await activity_types(handle)
    assert (result.approvals[0].state, result.approvals[0].via) == ("rejected", "signal")


async def test_unknown_and_duplicate_decisions_change_nothing(env: Env) -> None:
    handle = await env.start(conversation(_writer(WRITE, ("write_file", {"path": "b.txt", "content": "b"}))))
    await wait_for_pending(handle, 2)

    with pytest.raises(WorkflowUpdateFailedError) as unknown:
        await handle.execute_update(AgentWorkflow.decide, Decision(call_id="nope", approve=True))
    assert (
        unknown.value.cause.message == "no approval is pending for call 'nope' (pending: call_1_0, call_1_1)"
    )

    await handle.execute_update(AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="alice"))
    with pytest.raises(WorkflowUpdateFailedError) as duplicate:
        await handle.execute_update(
            AgentWorkflow.decide, Decision(call_id="call_1_0", approve=False, by="eve")
        )
    assert duplicate.value.cause.message == "call 'call_1_0' was already approved by alice"
    await handle.signal(AgentWorkflow.reject, ApprovalSignal(call_id="call_1_0", by="eve"))
    await handle.signal(AgentWorkflow.reject, ApprovalSignal(call_id="never-asked", by="eve"))

    await handle.execute_update(AgentWorkflow.decide, Decision(call_id="call_1_1", approve=False, by="alice"))
    result = await handle.result()
    assert [(a.call_id, a.state, a.by) for a in result.approvals] == [
        ("call_1_0", "approved", "alice"),
        ("call_1_1", "rejected", "alice"),
    ]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in await event_types(handle)


@pytest.mark.parametrize(
    "payload",
    [
        "garbage",
        42,
        [],
        {},
        {"call": "call_1_0"},
        {"call_id": 5},
        {"call_id": ""},
        {"call_id": "x", "by": ["a"]},
    ],
    ids=["string", "number", "list", "empty", "misnamed", "int-id", "empty-id", "by-list"],
)
async def test_malformed_signal_is_dropped_and_the_conversation_goes_on(env: Env, payload: object) -> None:
    handle = await env.start(conversation(_writer()))
    await wait_for_pending(handle)
    await handle.signal("approve", payload)
    await handle.signal("reject", payload)
    await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_1_0", by="alice"))

    result = await handle.result()
    assert result.approvals[0].state == "approved"
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in await event_types(handle)


async def test_malformed_update_is_rejected_and_nothing_changes(env: Env) -> None:
    handle = await env.start(conversation(_writer()))
    await wait_for_pending(handle)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("decide", {"call_id": "call_1_0"})  # no "approve"
    assert refused.value.cause.message == "decide: approve: Field required"
    assert len(await handle.query(AgentWorkflow.pending_approvals)) == 1
    await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_1_0"))
    assert (await handle.result()).approvals[0].by == "unknown"


async def test_auto_calls_of_the_same_turn_run_while_another_waits(env: Env) -> None:
    handle = await env.start(conversation(_writer(("add", {"a": 1, "b": 2}), WRITE)))
    await wait_for_pending(handle)
    for _ in range(100):
        events = await event_types(handle)
        if (
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            in events[events.index(EventType.EVENT_TYPE_MARKER_RECORDED) :]
        ):
            break
        await asyncio.sleep(0.05)
    assert await activity_types(handle) == [
        "durable_agents.resolve_agent",
        "durable_agents.call_model",
        "durable_agents.run_tool",
    ]  # add ran; write waits

    await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_1_1"))
    result = await handle.result()
    assert result.final_text == "3, Wrote 2 bytes to out.txt."
    assert await activity_types(handle) == [
        "durable_agents.resolve_agent",
        "durable_agents.call_model",
        "durable_agents.run_tool",
        # who approved, as the worker finds it (self-declared: no approver keys)
        "durable_agents.verify_decision",
        "durable_agents.run_tool",
        "durable_agents.call_model",
    ]


async def test_policy_lists_and_conversation_override(env: Env) -> None:
    policy = ApprovalPolicy(require=["add"], auto=["write_file"], deadline="none")
    handle = await env.start(conversation(_writer(("add", {"a": 1, "b": 2}), WRITE), approval=policy))
    [pending] = await wait_for_pending(handle)
    assert (pending.tool, pending.deadline) == ("add", None)
    await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id=pending.call_id))
    assert (await handle.result()).final_text == "3, Wrote 2 bytes to out.txt."


async def test_decision_after_a_worker_restart_still_works(client: Client, tmp_path: Path) -> None:
    task_queue = f"restart-{uuid.uuid4().hex}"
    async with running_worker(client, tmp_path, task_queue=task_queue) as worker:
        handle = await worker.start(conversation(_writer()))
        await wait_for_pending(handle)
    # The first worker is gone; a new one picks the conversation up from history.
    async with running_worker(client, tmp_path, task_queue=task_queue):
        await handle.execute_update(
            AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="alice")
        )
        result = await handle.result()
    assert result.final_text == "Wrote 2 bytes to out.txt."
    assert (workspace_of(tmp_path, handle) / "out.txt").read_text() == "hi"


async def test_search_attributes_show_who_waits_for_a_person(env: Env) -> None:
    handle = await env.start(conversation(_writer()))
    await wait_for_pending(handle)
    waiting = f'WorkflowId = "{handle.id}" AND AgentStatus = "awaiting_approval" AND AgentName = "test-agent"'
    assert await find_workflows(env.client, waiting) == [handle.id]

    await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_1_0"))
    await handle.result()
    assert await find_workflows(env.client, f'WorkflowId = "{handle.id}" AND AgentStatus = "completed"') == [
        handle.id
    ]


async def test_approval_sent_with_the_temporal_cli(env: Env, server: EmbeddedServer) -> None:
    handle = await env.start(conversation(_writer()))
    await wait_for_pending(handle)
    command = [
        temporal_cli(), "workflow", "signal", "--address", server.address,
        "--workflow-id", handle.id, "--name", "approve",
        "--input", json.dumps({"call_id": "call_1_0", "by": "alice", "reason": "ok from the CLI"}),
    ]  # fmt: skip
    completed = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=30)
    assert completed.returncode == 0, completed.stderr

    result = await handle.result()
    assert (result.approvals[0].state, result.approvals[0].by, result.approvals[0].reason) == (
        "approved",
        "alice",
        "ok from the CLI",
    )


async def test_deadline_rejects_the_call_when_nobody_answers(
    time_skipping: WorkflowEnvironment, tmp_path: Path
) -> None:
    client, queue = time_skipping.client, f"deadline-{uuid.uuid4().hex}"
    async with running_worker(client, tmp_path, task_queue=queue) as worker:
        handle = await worker.start(conversation(_writer()))
        result = await handle.result()
    rejected = "Tool call 'write_file' was rejected by system: approval timed out"
    assert result.final_text == rejected
    assert [(c.call_id, c.content, c.is_error) for c in result.tool_calls] == [("call_1_0", rejected, True)]
    [audit] = result.approvals
    assert (audit.call_id, audit.state, audit.by, audit.via) == (
        "call_1_0",
        "timed_out",
        "system",
        "deadline",
    )
    assert audit.deadline - audit.requested_at == timedelta(hours=24)
    assert audit.deadline <= audit.decided_at
    assert await _timers(handle) == [(timedelta(hours=24), True)]  # the deadline's timer, and it fired
    assert "durable_agents.run_tool" not in await activity_types(handle)
    assert list(tmp_path.rglob("out.txt")) == []  # in no conversation's workspace


async def test_per_tool_deadline_applies(time_skipping: WorkflowEnvironment, tmp_path: Path) -> None:
    client, queue = time_skipping.client, f"deadline-{uuid.uuid4().hex}"
    policy = ApprovalPolicy(tool_deadlines={"write_file": 90.0})
    async with running_worker(client, tmp_path, task_queue=queue) as worker:
        handle = await worker.start(conversation(_writer(), approval=policy))
        result = await handle.result()
    [audit] = result.approvals
    assert (audit.state, audit.deadline - audit.requested_at) == ("timed_out", timedelta(seconds=90))
    assert audit.deadline <= audit.decided_at
    assert await _timers(handle) == [(timedelta(seconds=90), True)]
    assert "durable_agents.run_tool" not in await activity_types(handle)


async def _timers(handle: WorkflowHandle) -> list[tuple[timedelta, bool]]:
    """Each timer the conversation started: its duration, and whether it fired."""
    started: dict[int, timedelta] = {}
    fired: set[int] = set()
    async for e in handle.fetch_history_events():
        if e.HasField("timer_started_event_attributes"):
            started[e.event_id] = e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
        elif e.HasField("timer_fired_event_attributes"):
            fired.add(e.timer_fired_event_attributes.started_event_id)
    return [(duration, event_id in fired) for event_id, duration in started.items()]


def test_a_decision_at_or_after_the_deadline_times_the_call_out() -> None:
    from datetime import UTC, datetime

    from durable_agents.workflows.approvals import Approvals
    from durable_agents.workflows.messages import ToolCall

    now = datetime(2026, 1, 1, tzinfo=UTC)
    approvals = Approvals()
    record = approvals.request(ToolCall(id="c1", name="write_file"), timedelta(seconds=60), now)
    outcome = approvals.on_signal(
        ApprovalSignal(call_id="c1", by="late"), approve=True, now=now + timedelta(seconds=60)
    )
    assert outcome == "ignored: call 'c1' is past its approval deadline"
    assert (record.state, record.by, record.reason) == ("timed_out", "system", "approval timed out")
    # The timer firing afterwards changes nothing.
    approvals.time_out(record, now + timedelta(seconds=61))
    assert record.decided_at == now + timedelta(seconds=60)
