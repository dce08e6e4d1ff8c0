"""docs/guarantees.md promises with real worker processes: follow-ups are answered in order and
none is duplicated across continue-as-new and a worker kill; a rejected (or timed-out) tool call
never runs, whatever crashes and replays happen."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory

from durable_agents.activities.tools import default_registry
from durable_agents.cli.chat import send_message
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.activity_io import ToolInvocation
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import MessageInput
from durable_agents.workflows.config import ApprovalPolicy
from durable_agents.workflows.records import Decision
from tests.support.conversations import wait_for_pending
from tests.support.fault_worker import charge, slow_step
from tests.support.history import run_histories
from tests.support.processes import WorkerProcess

pytestmark = pytest.mark.timeout(240)


async def _scheduled(client: Client, histories: list[WorkflowHistory]) -> tuple[int, Counter[str]]:
    """Across all runs: how many model calls were scheduled, and how many tool activities per call id."""
    model_calls, tool_calls = 0, Counter[str]()
    for history in histories:
        for event in history.events:
            if not event.HasField("activity_task_scheduled_event_attributes"):
                continue
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name == "durable_agents.call_model":
                model_calls += 1
            elif scheduled.activity_type.name == "durable_agents.run_tool":
                [invocation] = await client.data_converter.decode(scheduled.input.payloads, [ToolInvocation])
                tool_calls[invocation.call_id] += 1
    return model_calls, tool_calls


def _task_failures(histories: list[WorkflowHistory]) -> list[int]:
    return [
        e.event_id
        for h in histories
        for e in h.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


async def _until_replies(handle: WorkflowHandle, count: int) -> None:
    for _ in range(1200):
        if len(await handle.query(AgentWorkflow.replies)) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never {count} replies")


async def test_follow_ups_are_answered_in_order_and_none_is_duplicated_across_runs_and_a_crash(
    client: Client, worker_process: WorkerProcess
) -> None:
    # Every message: charge (an effect, recorded by the worker), then a reply naming the message.
    agent = scripted_agent(
        *[
            s
            for i in range(1, 7)
            for s in (step("", ("charge", {"amount": i})), step("reply to {user}: {last_result}"))
        ],
        tools=["charge"],
        chat=True,
        continue_as_new_after=1,  # a new run after every model call
        max_model_calls=30,
    )
    worker_process.start()
    handle = await client.start_workflow(
        AgentWorkflow.run,
        conversation(agent, "message 1"),
        id=f"promise-order-{uuid.uuid4().hex[:8]}",
        task_queue=worker_process.task_queue,
    )
    latest = client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
    for n in range(2, 6):  # queued while the first is answered
        await latest.signal(AgentWorkflow.post_message, MessageInput(text=f"message {n}"))
    await _until_replies(latest, 2)
    worker_process.kill()  # mid-conversation, between or during steps
    worker_process.start()
    sixth = await send_message(latest, "message 6")  # the update, retried while a run rolls over
    await latest.signal(AgentWorkflow.end)
    result = await latest.result()

    expected = [(f"m{n}", f"reply to message {n}: charged {n} EUR") for n in range(1, 7)]
    assert [(r.message_id, r.text) for r in result.replies] == expected
    assert (sixth.message_id, sixth.text) == expected[-1]
    histories = await run_histories(client, handle.id, handle.first_execution_run_id)
    # Runs roll over after each model call, except while a send_message update waits for its reply.
    assert len(histories) == result.runs > 2
    model_calls, tool_calls = await _scheduled(client, histories)
    assert model_calls == result.model_calls == 12
    assert tool_calls == {f"call_{2 * n - 1}_0": 1 for n in range(1, 7)}
    key = f"{handle.id}/{handle.first_execution_run_id}"
    assert sorted(worker_process.effects.read_text().splitlines()) == sorted(
        f"{key}/call_{2 * n - 1}_0 {n}" for n in range(1, 7)
    )
    assert _task_failures(histories) == []


async def test_a_rejected_or_timed_out_call_never_runs_whatever_crashes_and_replays_happen(
    client: Client, worker_process: WorkerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = scripted_agent(
        step("", ("charge", {"amount": 50}), ("add", {"a": 1, "b": 2})),
        step("first: {last_result}"),
        step("", ("slow_step", {"seconds": 0})),
        step("second: {last_result}"),
        step("third: {user}"),
        tools=["charge", "add", "slow_step"],
        chat=True,
        continue_as_new_after=2,
        approval=ApprovalPolicy(require=["charge", "slow_step"], tool_deadlines={"slow_step": 2.0}),
    )
    worker_process.start()
    handle = await client.start_workflow(
        AgentWorkflow.run,
        conversation(agent, "charge me"),
        id=f"promise-reject-{uuid.uuid4().hex[:8]}",
        task_queue=worker_process.task_queue,
    )
    await wait_for_pending(handle)
    await handle.execute_update(
        AgentWorkflow.decide, Decision(call_id="call_1_0", approve=False, by="bob", reason="too much")
    )
    worker_process.kill()  # a crash right after the rejection
    worker_process.start()  # a fresh process replays the conversation from history
    latest = client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
    await _until_replies(latest, 1)
    worker_process.kill()

    # From here on a worker that caches nothing: every workflow task replays the whole run.
    monkeypatch.setenv("FAULT_EFFECTS", str(worker_process.effects))
    registry = default_registry(charge, slow_step)
    async with build_worker(
        client,
        task_queue=worker_process.task_queue,
        registry=registry,
        workspace_root=tmp_path,
        max_cached_workflows=0,
    ):
        second = await send_message(latest, "now wait for nobody")  # its call times out unanswered
        third = await send_message(latest, "and again")
        await latest.signal(AgentWorkflow.end)
        result = await latest.result()

    assert [r.text for r in result.replies] == [
        "first: Tool call 'charge' was rejected by bob: too much, 3",
        second.text,
        third.text,
    ]
    assert second.text == "second: Tool call 'slow_step' was rejected by system: approval timed out"
    assert third.text == "third: and again"
    assert [(a.call_id, a.tool, a.state, a.by) for a in result.approvals] == [
        ("call_1_0", "charge", "rejected", "bob"),
        ("call_3_0", "slow_step", "timed_out", "system"),
    ]
    histories = await run_histories(client, handle.id, handle.first_execution_run_id)
    assert len(histories) >= 2
    _, tool_calls = await _scheduled(client, histories)
    assert tool_calls == {"call_1_1": 1}  # add ran; charge and slow_step were never scheduled
    assert not worker_process.effects.exists()  # nothing was ever charged
    assert _task_failures(histories) == []  # every replay reached the same decisions
