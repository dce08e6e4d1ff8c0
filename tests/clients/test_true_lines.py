"""What the starter says is what happened: ``interrupt`` of an idle chat, ``result`` of a chat
cancelled while idle, ``usage`` of model calls without a tenant (issue 44, finding 8)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from durable_agents.testing import conversation, scripted_agent, step
from tests.support.cli import starter_cli
from tests.support.conversations import until_state
from tests.support.workers import Env, running_worker


def _chat(*texts: str) -> object:
    return conversation(scripted_agent(*(step(t) for t in texts), tools=[], chat=True))


async def test_interrupt_of_an_idle_chat_says_no_turn_runs_and_sends_nothing(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = await env.start(_chat("Hello."))
    await until_state(handle, "idle")

    assert await starter_cli(env, capsys, "interrupt", handle.id) == (
        1,
        "",
        f"error: {handle.id} runs no turn (it waits for the next message); nothing to interrupt\n",
    )
    signalled = [
        e
        async for e in handle.fetch_history_events()
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    assert signalled == []


async def test_result_of_a_chat_cancelled_while_idle_says_cancelled_as_status_does(
    client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_worker(client, tmp_path) as env:
        handle = await env.start(_chat("Hello."))
        await until_state(handle, "idle")
        assert (await starter_cli(env, capsys, "cancel", handle.id))[0] == 0
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED

        assert await starter_cli(env, capsys, "result", handle.id) == (
            0,
            "Hello.\n-- stop reason: cancelled; iterations: 1; model calls: 1; tool calls: 0;"
            " tokens: 10 in / 5 out\n",
            "",
        )
        code, out, _ = await starter_cli(env, capsys, "status", handle.id)
        assert (code, '"state": "cancelled"' in out) == (0, True)


async def test_usage_shows_model_calls_without_a_tenant_as_their_own_row(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENT_STORE", str(tmp_path / "conversations.db"))  # a ledger of this test's own
    agent = scripted_agent(step("One."), tools=[])
    async with running_worker(client, tmp_path) as env:
        await env.run(conversation(agent))
        await env.run(conversation(agent))
        await env.run(conversation(agent, tenant="acme", user="ann"))

        assert await starter_cli(env, capsys, "usage") == (
            0,
            "TENANT       USER  CALLS  INPUT  CACHED  OUTPUT  TOKENS  COST USD\n"
            "(no tenant)  -     2      20     0       10      30      0.000000\n"
            "acme         ann   1      10     0       5       15      0.000000\n"
            "TOTAL              3      30     0       15      45      0.000000\n",
            "",
        )
        assert await starter_cli(env, capsys, "usage", "--period", "month", "--tenant", "nobody") == (
            0,
            "No model calls recorded this month.\n",
            "",
        )
