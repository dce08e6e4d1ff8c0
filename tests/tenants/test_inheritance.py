"""What a conversation's tenant and user reach, on real workers: its sub-agents and forks (search
attributes, fairness key, the ledger's charges), its activities' priority, and the ledger after a
worker killed mid-call (docs/tenants.md). Counts and values only, never times."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durable_agents.client.conversations import fork_conversation, start_conversation
from durable_agents.settings import Settings
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import AGENT_TENANT, AGENT_USER, ConversationInput
from durable_agents.workflows.messages import ScriptStep
from durable_agents.workflows.records import Decision
from tests.support.conversations import running_activity, wait_for_pending
from tests.support.processes import WorkerProcess
from tests.support.workers import Env

POLLS = 1200
"""Polls, 50 ms apart, before a wait gives up."""


def _tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


async def _owner(handle: WorkflowHandle) -> tuple[str | None, str | None, str]:
    """The conversation's AgentTenant, AgentUser and fairness key, as the server holds them."""
    described = await handle.describe()
    attributes = described.typed_search_attributes
    fairness = described.raw_description.workflow_execution_info.priority.fairness_key
    return attributes.get(AGENT_TENANT), attributes.get(AGENT_USER), fairness


async def _charges(tenant: str) -> list[tuple[str, str, int, int, bool]]:
    """The ledger's rows of ``tenant``: (workflow id, user, input tokens, output tokens, settled)."""
    ledger = Settings.from_env().stores.ledger()
    rows = await ledger._transact(
        lambda tx: tx.fetch(
            "SELECT conversation, user_name, input_tokens, output_tokens, expires_at FROM agent_ledger"
            " WHERE tenant = ? ORDER BY at, id",
            tenant,
        )
    )
    prefix = f"tenants/{tenant}/"
    return [
        (conv.removeprefix(prefix).rpartition("/")[0], user, int(i), int(o), expires is None)
        for conv, user, i, o, expires in rows
    ]


async def test_a_sub_agent_carries_its_parents_tenant_and_user_and_is_charged_to_them(env: Env) -> None:
    tenant = _tenant()
    parent = await start_conversation(
        env.client,
        ConversationInput(prompt="Save my note.", agent="delegator", tenant=tenant, user="ann"),
        id=f"owned-{uuid.uuid4().hex[:8]}",
        task_queue=env.task_queue,
    )
    await wait_for_pending(parent)  # the scribe's write_file waits for a person: both made a call
    child = env.client.get_workflow_handle(f"{parent.id}/call_1_0")
    assert await _owner(parent) == (tenant, "ann", tenant)
    assert await _owner(child) == (tenant, "ann", tenant)
    assert await _charges(tenant) == [(parent.id, "ann", 10, 5, True), (child.id, "ann", 10, 5, True)]
    await parent.execute_update(AgentWorkflow.decide, Decision(call_id="call_1_0/call_1_0", approve=True))
    result = await parent.result()
    charged = await _charges(tenant)
    assert [c[0] for c in charged] == [parent.id, child.id, child.id, parent.id]
    assert (sum(c[2] for c in charged), sum(c[3] for c in charged)) == (
        result.usage.input_tokens,  # the parent's usage counts its sub-agent's
        result.usage.output_tokens,
    )


async def test_a_fork_carries_its_origins_tenant_and_user_and_is_charged_to_them(env: Env) -> None:
    tenant = _tenant()
    origin = await start_conversation(
        env.client,
        conversation(
            scripted_agent(step("first answer"), step("second answer")), "q", tenant=tenant, user="bo"
        ),
        id=f"origin-{uuid.uuid4().hex[:8]}",
        task_queue=env.task_queue,
    )
    asked = [m.kind for m in (await origin.result()).messages].index("user") + 1
    fork = await fork_conversation(env.client, origin.id, asked)  # asks "q" again
    assert (await fork.result()).final_text == "first answer"  # a fresh run of the agent's script
    assert await _owner(fork) == (tenant, "bo", tenant)
    assert await _charges(tenant) == [(origin.id, "bo", 10, 5, True), (fork.id, "bo", 10, 5, True)]


async def _scheduled_priorities(handle: WorkflowHandle) -> list[tuple[str, int]]:
    return [
        (a.activity_type.name, a.priority.priority_key)
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        for a in [e.activity_task_scheduled_event_attributes]
    ]


async def test_an_agents_priority_reaches_its_activities_unless_the_start_gave_one(env: Env) -> None:
    agent = scripted_agent(step("", ("add", {"a": 1, "b": 2})), step("{last_result}"), priority=2)
    own = await env.start(conversation(agent))
    assert (await own.result()).final_text == "3"
    assert await _scheduled_priorities(own) == [
        ("durable_agents.call_model", 2),
        ("durable_agents.run_tool", 2),
        ("durable_agents.call_model", 2),
    ]
    # A start's priority wins: the activities carry none of their own and inherit the workflow's.
    started = await start_conversation(
        env.client, conversation(agent), id=f"prio-{uuid.uuid4().hex[:8]}", task_queue=env.task_queue,
        priority=4,
    )  # fmt: skip
    await started.result()
    assert (await started.describe()).raw_description.workflow_execution_info.priority.priority_key == 4
    assert [p for _, p in await _scheduled_priorities(started)] == [0, 0, 0]


async def _in_a_lease(worker: WorkerProcess) -> None:
    """Wait until the worker's lease lists a running attempt (its replacement then fails it at once)."""
    leases = Path(os.environ["AGENT_DATA_DIR"], "workers")
    for _ in range(POLLS):
        for calls in leases.glob(f"*/{worker.proc.pid}@*.calls"):  # type: ignore[union-attr]
            if json.loads(calls.read_text())["running"]:
                return
        await asyncio.sleep(0.05)
    raise AssertionError("the worker's lease never listed its running call")


async def test_a_worker_killed_mid_call_leaves_the_ledger_at_the_conversations_usage(
    client: Client, worker_process: WorkerProcess
) -> None:
    """A real worker process SIGKILLed while its model call runs, its reservation taken: the call's
    next attempt, on a new worker, replaces the reservation and settles it."""
    tenant = _tenant()
    worker_process.start()
    agent = scripted_agent(ScriptStep(text="done", delay_seconds=4, input_tokens=70, output_tokens=9))
    handle = await start_conversation(
        client,
        conversation(agent, tenant=tenant, user="cy"),
        id=f"killed-{uuid.uuid4().hex[:8]}",
        task_queue=worker_process.task_queue,
    )
    await running_activity(handle, "durable_agents.call_model")
    await _in_a_lease(worker_process)
    for _ in range(POLLS):  # reserved, not settled
        if await _charges(tenant) == [(handle.id, "cy", 0, 0, False)]:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"no reservation: {await _charges(tenant)}")
    worker_process.kill()
    worker_process.start()

    result = await handle.result()
    assert (result.final_text, result.usage.input_tokens, result.usage.output_tokens) == ("done", 70, 9)
    attempts = [
        e.activity_task_started_event_attributes.attempt
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert attempts == [2]  # the killed attempt, then the one that answered
    assert await _charges(tenant) == [(handle.id, "cy", 70, 9, True)]
    ledger = Settings.from_env().stores.ledger()
    [spend] = await ledger.usage(period="day", now=time.time(), tenant=tenant)
    assert (spend.calls, spend.input_tokens, spend.output_tokens) == (1, 70, 9)
    assert await ledger.pending(time.time()) == 0
