"""Tools that must run at most once (workflows/at_most_once.py): a worker killed during the call
leaves its outcome unknown; a person decides, and the tool never runs twice."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import Client

from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from tests.support.cli import starter
from tests.support.conversations import running_activity, wait_for_pending, workspace_of
from tests.support.history import no_task_failures
from tests.support.processes import WorkerProcess
from tests.support.workers import Env


async def test_a_worker_killed_mid_call_leaves_the_outcome_unknown_and_a_person_records_the_result(
    client: Client, server: EmbeddedServer, worker_process: WorkerProcess
) -> None:
    worker = worker_process
    worker.start(FAULT_AFTER_EFFECT="30")  # pays, then takes its time: the kill lands after the effect
    agent = scripted_agent(step("", ("pay", {"amount": 12.5})), step("Done: {last_result}"), tools=["pay"])
    handle = await client.start_workflow(
        AgentWorkflow.run,
        conversation(agent),
        id=f"once-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    await running_activity(handle, "durable_agents.run_tool")
    for _ in range(200):
        if worker.effects.exists() and worker.effects.read_text():
            break
        await asyncio.sleep(0.05)
    worker.kill()
    worker.start(FAULT_AFTER_EFFECT="0")  # the replacement fails the dead worker's attempt (WorkerLost)

    [record] = await wait_for_pending(handle, timeout=60)
    assert (record.call_id, record.asked, record.for_call, record.allowed_decisions) == (
        "call_1_0.unknown",
        "outcome_unknown",
        "call_1_0",
        ["approve", "reject"],
    )
    assert "outcome unknown" in (await handle.query(AgentWorkflow.status)).detail
    code, out, err = await starter(
        server, "approve", handle.id, "call_1_0.unknown", "--by", "alice", "--result", "paid: receipt 7"
    )
    assert code == 0, err
    assert out.strip() == f"pay call call_1_0.unknown of {handle.id}: approved by alice"

    result = await handle.result()
    assert result.final_text == (
        "Done: [the outcome of this call was unknown; alice recorded its result] paid: receipt 7"
    )
    assert [(c.call_id, c.is_error) for c in result.tool_calls] == [("call_1_0", False)]
    assert len(worker.effects.read_text().splitlines()) == 1  # never a second run
    [unknown] = result.approvals
    assert (unknown.state, unknown.by, unknown.result) == ("approved", "alice", "paid: receipt 7")
    await no_task_failures(handle)


async def test_the_ledger_agent_books_its_entry_in_one_attempt(env: Env) -> None:
    """agents/ledger.toml: write_file at most once; its call runs as a single attempt."""
    handle = await env.start(ConversationInput(prompt="coffee 3.20", agent="ledger"))
    result = await handle.result()
    assert result.final_text == "Wrote 27 bytes to ledger.txt."
    assert (workspace_of(env.workspace, handle) / "ledger.txt").read_text() == "2026-11-26 coffee 3.20 EUR\n"
    assert result.approvals == []


@pytest.fixture
def registry():  # type: ignore[no-untyped-def]
    """The default tools and ``stall``, at most once, that outlives its 1 s timeout the first time."""
    from durable_agents.activities.tools import default_registry, tool
    from durable_agents.workflows.config import CallPolicy

    calls: list[int] = []

    @tool(at_most_once=True, call=CallPolicy(timeout_seconds=1, max_attempts=3))
    async def stall(n: int) -> str:
        """Stall the first time.

        Args:
            n: A number.
        """
        calls.append(n)
        if len(calls) == 1:
            await asyncio.sleep(3)
        return f"ran {len(calls)} time(s)"

    return default_registry(stall)


async def test_a_timed_out_call_runs_again_only_when_a_person_says_so(env: Env) -> None:
    agent = scripted_agent(
        step("", ("stall", {"n": 1})), step("", ("stall", {"n": 2})), step("{last_result}"), tools=["stall"]
    )
    handle = await env.start(conversation(agent))
    [first] = await wait_for_pending(handle, timeout=30)
    assert first.call_id == "call_1_0.unknown" and "timeout" in (first.reason or "").lower()
    await handle.execute_update(
        AgentWorkflow.decide, {"call_id": "call_1_0.unknown", "approve": True, "by": "alice"}
    )
    result = await handle.result()
    assert [c.content for c in result.tool_calls] == ["ran 2 time(s)", "ran 3 time(s)"]
    assert [(r.call_id, r.state) for r in result.approvals] == [("call_1_0.unknown", "approved")]
