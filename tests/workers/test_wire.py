"""Our names on the wire (workflows/wire.py): namespaced for new conversations, the old ones still
served to conversations and clients from before, and this release's clients (durable_agents/wire.py)
sending a conversation of the previous release the names it knows."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHandle, WorkflowQueryFailedError, WorkflowUpdateFailedError

from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows import wire
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.records import ApprovalSignal, Decision
from tests.support.conversations import wait_for_pending
from tests.support.history import activity_types
from tests.support.workers import Env

_ACTIVITIES = ("resolve_agent", "list_mcp_tools", "call_model", "run_tool", "run_hook", "verify_decision")


def test_every_name_follows_the_rule_and_has_its_old_one() -> None:
    assert {f"durable_agents.{old}": old for old in wire.OLD_NAMES.values()} == wire.OLD_NAMES
    assert len(wire.OLD_NAMES) == 19  # 6 activities, 5 signals, 4 updates, 4 queries
    assert wire.old_name("durable_agents.approve") == "approve"
    assert wire.old_name("approve") is None


def test_the_workflow_offers_each_signal_update_and_query_under_one_name() -> None:
    """The Web UI lists what a conversation offers: each name once, and one unnamed handler of each
    kind that serves the old names (and says so)."""
    defn = workflow._Definition.must_from_class(AgentWorkflow)
    handlers = {**defn.signals, **defn.updates, **defn.queries}
    ours = {name for name in handlers if name and not name.startswith("__")}
    handled = {name for name in wire.OLD_NAMES if not name.endswith(_ACTIVITIES)}
    # came after the rule: no old name
    new_only = {wire.DELIVER_CLIENT_RESULT, wire.PENDING_CLIENT_CALLS, wire.INTERRUPT}
    assert ours == handled | new_only
    assert all(handlers[name].description for name in ours)
    old = [defn.signals[None], defn.queries[None], defn.updates[None]]
    assert [each.description for each in old] == [
        "Names from before durable_agents.*, for clients and commands written for them (signals: approve,"
        " end, post_message, reject, subagent_approvals; queries: history, pending_approvals, replies,"
        " status; updates: decide, refresh_tools, revoke, send_message)"
    ] * 3
    assert all(defn.updates[name].validator is not None for name in defn.updates)


async def test_a_name_the_conversation_never_served_is_refused(env: Env) -> None:
    handle = await env.start(_two_writes())
    await wait_for_pending(handle, 2)
    with pytest.raises(WorkflowQueryFailedError, match="no query named 'pending'"):
        await handle.query("pending")
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("approve", Decision(call_id="call_1_0", approve=True, by="old"))
    await handle.signal("aprove", ApprovalSignal(call_id="call_1_0", by="typo"))  # dropped
    assert len(await handle.query(AgentWorkflow.pending_approvals)) == 2
    await handle.terminate()


def _two_writes() -> Any:
    writes = [("write_file", {"path": f"{n}.txt", "content": n}) for n in "ab"]
    return conversation(scripted_agent(step("", *writes), step("{last_result}"), tools=["write_file"]))


async def test_a_conversation_takes_signals_updates_and_queries_under_their_old_names_too(env: Env) -> None:
    """As an operator's command or a client written for the previous release sends them."""
    handle = await env.start(_two_writes())
    await wait_for_pending(handle, 2)
    assert [p["call_id"] for p in await handle.query("pending_approvals")] == [
        "call_1_0",
        "call_1_1",
    ]
    await handle.signal("approve", ApprovalSignal(call_id="call_1_0", by="old"))
    decided = await handle.execute_update("decide", Decision(call_id="call_1_1", approve=False, by="old"))
    assert decided["state"] == "rejected"
    with pytest.raises(WorkflowUpdateFailedError):  # the old name's validator refuses as the new one's
        await handle.execute_update("decide", Decision(call_id="call_9_9", approve=True, by="old"))
    result = await handle.result()
    assert [(a.call_id, a.state, a.by) for a in result.approvals] == [
        ("call_1_0", "approved", "old"),
        ("call_1_1", "rejected", "old"),
    ]
    assert (await handle.query("status"))["state"] == "completed"


async def test_a_client_sends_a_new_conversation_the_namespaced_names(env: Env) -> None:
    started = await env.start(_two_writes())
    await wait_for_pending(started, 2)
    handle = env.client.get_workflow_handle_for(AgentWorkflow.run, started.id)
    assert len(await handle.query(AgentWorkflow.pending_approvals)) == 2
    await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_1_0", by="new"))
    await handle.execute_update(AgentWorkflow.decide, Decision(call_id="call_1_1", approve=True, by="new"))
    assert (await handle.result()).final_text == "Wrote 1 bytes to a.txt., Wrote 1 bytes to b.txt."
    assert await _signals(handle) == ["durable_agents.approve"]
    assert sorted(await activity_types(handle)) == [
        "durable_agents.call_model",
        "durable_agents.call_model",
        "durable_agents.resolve_agent",
        "durable_agents.run_tool",
        "durable_agents.run_tool",
        "durable_agents.verify_decision",
        "durable_agents.verify_decision",
    ]


async def _signals(handle: WorkflowHandle) -> list[str]:
    return [
        e.workflow_execution_signaled_event_attributes.signal_name
        async for e in handle.fetch_history_events()
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
