"""Sub-agents: an agent's sub-agents are tools whose calls run child conversations (workflows/subagents.py).

The example pair in agents/ (delegator, whose scribe's write_file waits for a person) runs on a real
worker; the parent lists the child's approval, forwards decisions to it, and answers with its result.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError

from durable_agents.activities.agent_files import AgentFileError, load_agents
from durable_agents.activities.tools import default_registry
from durable_agents.client.conversations import conversation_result
from durable_agents.client.live import follow
from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.events import (
    ApprovalDecided,
    ApprovalRequested,
    ToolCallFinished,
    ToolCallStarted,
)
from durable_agents.workflows.messages import ModelSettings, ScriptedToolCall, ScriptStep, Usage
from durable_agents.workflows.records import Decision
from tests.support.cli import starter, temporal
from tests.support.conversations import child_workspace, delegating, find_workflows, wait_for_pending
from tests.support.paths import ROOT
from tests.support.workers import Env, running_worker

NOTE = {"path": "note.txt", "content": "buy milk\n"}


async def _approval_events(client: Client, workflow_id: str) -> list[tuple]:
    """The approval events of a conversation's stream: (type, call id, tool, state, by, via)."""
    return [
        (e.type, e.record.call_id, e.record.tool, e.record.state, e.record.by, e.record.via)
        async for _, e in follow(client, workflow_id)
        if isinstance(e, ApprovalRequested | ApprovalDecided)
    ]


@pytest.mark.parametrize("how", ["signal", "update"])
async def test_a_sub_agents_approval_is_listed_and_decided_at_its_parent(
    env: Env, server: EmbeddedServer, how: str
) -> None:
    parent, child = await delegating(env)

    [pending] = await parent.query(AgentWorkflow.pending_approvals)
    assert (pending.call_id, pending.tool, pending.arguments) == ("call_1_0/call_1_0", "write_file", NOTE)
    [own] = await child.query(AgentWorkflow.pending_approvals)
    assert (own.call_id, own.arguments_digest) == ("call_1_0", pending.arguments_digest)
    status = await parent.query(AgentWorkflow.status)
    assert (status.state, status.pending_approvals, status.detail) == (
        "awaiting_approval",
        1,
        "awaiting approval: write_file (call_1_0/call_1_0)",
    )
    waiting = f'AgentStatus = "awaiting_approval" AND WorkflowId STARTS_WITH "{parent.id}"'
    assert await find_workflows(env.client, waiting, 2) == [parent.id, child.id]
    assert await find_workflows(env.client, f'AgentParent = "{parent.id}"', 1) == [child.id]

    decision = {"call_id": "call_1_0/call_1_0", "by": "alice", "reason": "ok"}
    if how == "signal":
        args = ("workflow", "signal", "--workflow-id", parent.id, "--name", "approve")
        done = await temporal(server, *args, "--input", json.dumps(decision))
        assert done.returncode == 0, done.stderr
    else:
        args = ("workflow", "update", "execute", "--workflow-id", parent.id, "--name", "decide")
        done = await temporal(
            server, *args, "--input", json.dumps({**decision, "approve": True}), "--output", "json"
        )
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)["result"]
        assert (answer["call_id"], answer["state"], answer["by"]) == (
            "call_1_0/call_1_0",
            "approved",
            "alice",
        )

    result = await parent.result()
    assert result.final_text == "The scribe says: Wrote 9 bytes to note.txt."
    [call] = result.tool_calls
    assert (call.name, call.arguments, call.content, call.is_error, call.subagent_workflow_id) == (
        "ask_scribe",
        {"task": "Save the note 'buy milk' to note.txt."},
        "Wrote 9 bytes to note.txt.",
        False,
        child.id,
    )
    assert result.approvals == []  # the approval is the scribe's: in its own history
    done_child = await child.result()
    [approval] = done_child.approvals
    assert (approval.call_id, approval.state, approval.by, approval.reason, approval.via) == (
        "call_1_0",
        "approved",
        "alice",
        "ok",
        "signal",  # forwarded by the parent
    )
    assert (await child_workspace(env, child) / "note.txt").read_text() == "buy milk\n"
    # Two model calls each, 10 + 5 tokens a call; scripted-demo costs $1/M input, $2/M output.
    assert result.usage == Usage(input_tokens=40, output_tokens=20)
    assert done_child.usage == Usage(input_tokens=20, output_tokens=10)
    assert (done_child.cost, result.cost) == (40 / 1_000_000, 40 / 1_000_000 + 40 / 1_000_000)
    assert await parent.query(AgentWorkflow.pending_approvals) == []
    tool_events = [
        (e.type, e.call_id, e.tool)
        async for _, e in follow(env.client, parent.id)
        if isinstance(e, ToolCallStarted | ToolCallFinished)
    ]
    assert tool_events == [
        ("tool_call_started", "call_1_0", "ask_scribe"),
        ("tool_call_finished", "call_1_0", "ask_scribe"),
    ]
    started = [
        e.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id
        async for e in parent.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED
    ]
    assert started == [child.id]
    assert (await parent.query(AgentWorkflow.history)).tool_calls == result.tool_calls
    assert await _approval_events(env.client, parent.id) == [
        ("approval_requested", "call_1_0/call_1_0", "write_file", "pending", None, None),
        ("approval_decided", "call_1_0/call_1_0", "write_file", "approved", "alice", "signal"),
    ]
    for handle in (parent, child):
        assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in [
            e.event_type async for e in handle.fetch_history_events()
        ]


async def test_the_operator_cli_lists_a_sub_agents_approval_once_under_its_parent(
    env: Env, server: EmbeddedServer
) -> None:
    parent, child = await delegating(env)
    await wait_for_pending(child)
    await find_workflows(
        env.client, f'AgentStatus = "awaiting_approval" AND WorkflowId STARTS_WITH "{parent.id}"', 2
    )

    code, out, _ = await starter(server, "pending")
    assert code == 0
    mine = [line.split()[:3] for line in out.splitlines() if line.startswith(parent.id)]
    assert mine == [[parent.id, "call_1_0/call_1_0", "write_file"]]

    assert await starter(server, "approve", parent.id, "call_1_0/call_1_0", "--by", "bob") == (
        0,
        f"write_file call call_1_0/call_1_0 of {parent.id}: approved by bob\n",
        "",
    )
    assert (await parent.result()).final_text == "The scribe says: Wrote 9 bytes to note.txt."


async def test_a_decision_for_a_sub_agent_call_that_does_not_wait_is_refused(env: Env) -> None:
    parent, _ = await delegating(env)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await parent.execute_update(AgentWorkflow.decide, Decision(call_id="call_1_0/call_9_9", approve=True))
    assert refused.value.cause.message == (
        "no approval is pending for call 'call_1_0/call_9_9' (pending: call_1_0/call_1_0)"
    )
    await parent.execute_update(
        AgentWorkflow.decide, Decision(call_id="call_1_0/call_1_0", approve=False, by="eve", reason="no")
    )
    result = await parent.result()
    assert result.final_text == "The scribe says: Tool call 'write_file' was rejected by eve: no"


async def test_cancelling_the_parent_cancels_the_sub_agent(env: Env) -> None:
    parent, child = await delegating(env)
    await parent.cancel(reason="not needed")

    result = await conversation_result(env.client, parent)
    assert (result.closed_by, result.stop_reason) == ("cancelled", "cancelled")
    [call] = result.tool_calls
    assert (call.content, call.is_error) == (
        "Tool call 'ask_scribe' was cancelled with the conversation.",
        True,
    )
    # The child's spend counts at the parent (one model call each, 10 + 5 tokens): its last report.
    assert result.usage == Usage(input_tokens=20, output_tokens=10)
    closed = await conversation_result(env.client, child)
    assert closed.closed_by == "cancelled"
    assert [(await h.describe()).status for h in (parent, child)] == [WorkflowExecutionStatus.CANCELED] * 2
    [approval] = closed.approvals
    assert (approval.state, approval.via) == ("cancelled", "cancellation")
    assert not (await child_workspace(env, child) / "note.txt").exists()
    assert await _approval_events(env.client, parent.id) == [
        ("approval_requested", "call_1_0/call_1_0", "write_file", "pending", None, None),
        ("approval_decided", "call_1_0/call_1_0", "write_file", "cancelled", "system", "cancellation"),
    ]


async def test_a_sub_agent_cancelled_on_its_own_ends_canceled_and_its_parent_hears_it_was_cancelled(
    env: Env,
) -> None:
    parent, child = await delegating(env)
    await child.cancel(reason="wrong file")

    result = await parent.result()
    [call] = result.tool_calls
    said = "Sub-agent 'scribe' stopped: cancelled: Saving the note."
    assert (call.content, call.is_error, call.subagent_workflow_id) == (said, True, child.id)
    assert result.final_text == f"The scribe says: {said}"
    # Its spend counts at the parent as a result's did: two calls of its own, one of the child's.
    assert result.usage == Usage(input_tokens=30, output_tokens=15)
    assert result.cost == 40 / 1_000_000 + 20 / 1_000_000
    assert (await child.describe()).status == WorkflowExecutionStatus.CANCELED
    closed = await conversation_result(env.client, child)
    assert (closed.closed_by, closed.stop_reason, closed.detail) == (
        "cancelled",
        "cancelled",
        "cancelled: wrong file",
    )
    assert await _approval_events(env.client, parent.id) == [
        ("approval_requested", "call_1_0/call_1_0", "write_file", "pending", None, None),
        ("approval_decided", "call_1_0/call_1_0", "write_file", "cancelled", "system", "cancellation"),
    ]


# ---------------------------------------------------------------------------------------------------
# Workers with agents of the test's own


def _scripted(name: str, *steps: ScriptStep, **kwargs) -> AgentSpec:
    return AgentSpec(
        name=name,
        model=ModelSettings(provider="scripted", model="scripted-demo", script=list(steps)),
        **kwargs,
    )


@pytest.fixture
async def agents_env(client: Client, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    async with running_worker(client, tmp_path, agents=request.param) as worker:
        yield worker


SPENDER = _scripted("spender", ScriptStep(text="spent", input_tokens=100_000, output_tokens=0))


@pytest.mark.parametrize("agents_env", [{"spender": SPENDER}], indirect=True)
async def test_a_sub_agents_cost_stops_its_parent_at_the_budget(agents_env: Env) -> None:
    parent = _scripted(
        "test-agent",
        step("Delegating.", ("ask_spender", {"task": "spend"})),
        step("never said"),
        subagents=["spender"],
    )
    result = await agents_env.run(conversation(parent, cost_budget=0.05))

    assert (result.stop_reason, result.model_calls, result.final_text) == (
        "cost_budget_exhausted",
        1,
        "Delegating.",
    )
    assert result.tool_calls[0].content == "spent"
    assert result.usage == Usage(input_tokens=100_010, output_tokens=5)
    assert result.cost == 20 / 1_000_000 + 100_000 / 1_000_000


BIG_SPENDER = _scripted(
    "big-spender",
    ScriptStep(
        text="more",
        tool_calls=[ScriptedToolCall(name="add", arguments={"a": 1, "b": 1})],
        input_tokens=100_000,
        output_tokens=0,
        repeat=5,
    ),
    ScriptStep(text="done"),
    tools=["add"],
)


@pytest.mark.parametrize("agents_env", [{"big-spender": BIG_SPENDER}], indirect=True)
async def test_a_sub_agent_stops_at_what_its_parents_budget_has_left(agents_env: Env) -> None:
    parent = _scripted(
        "test-agent",
        step("Delegating.", ("ask_big-spender", {"task": "spend"})),
        step("never said"),
        subagents=["big-spender"],
    )
    handle = await agents_env.start(conversation(parent, token_budget=150_000))
    result = await handle.result()
    child_id = f"{handle.id}/call_1_0"
    child = await agents_env.client.get_workflow_handle_for(AgentWorkflow.run, child_id).result()

    # 149,985 tokens were left: the child stops after its second call instead of making six.
    assert (child.stop_reason, child.model_calls) == ("token_budget_exhausted", 2)
    [call] = result.tool_calls
    assert (call.content, call.is_error) == (
        "Sub-agent 'big-spender' stopped: token_budget_exhausted: more",
        True,
    )
    assert (result.stop_reason, result.model_calls) == ("token_budget_exhausted", 1)
    assert result.usage == Usage(input_tokens=200_010, output_tokens=5)


LOOPER = _scripted(
    "looper", step("again", ("add", {"a": 1, "b": 1})), tools=["add"], max_iterations=1, on_limit="fail"
)


@pytest.mark.parametrize("agents_env", [{"looper": LOOPER}], indirect=True)
async def test_a_sub_agents_failure_reaches_the_parents_model_as_a_tool_error(agents_env: Env) -> None:
    parent = scripted_agent(
        step("", ("ask_looper", {"task": "loop"}), ("ask_looper", {"task": ""})),
        step("{last_result}"),
        tools=[],
        subagents=["looper"],
    )
    handle = await agents_env.start(conversation(parent))
    result = await handle.result()

    assert [(c.content, c.is_error, c.subagent_workflow_id) for c in result.tool_calls] == [
        ("Sub-agent 'looper' failed: iteration limit of 1 reached", True, f"{handle.id}/call_1_0"),
        ("Invalid arguments for 'ask_looper': 'task' must be a non-empty string", True, None),
    ]
    assert result.final_text == (
        "Sub-agent 'looper' failed: iteration limit of 1 reached,"
        " Invalid arguments for 'ask_looper': 'task' must be a non-empty string"
    )


STOPPER = _scripted(
    "stopper", step("again", ("add", {"a": 1, "b": 1})), tools=["add"], max_iterations=1, on_limit="stop"
)


@pytest.mark.parametrize("agents_env", [{"stopper": STOPPER}], indirect=True)
async def test_a_sub_agent_stopped_at_a_limit_is_a_tool_error_naming_the_stop_reason(agents_env: Env) -> None:
    parent = scripted_agent(
        step("", ("ask_stopper", {"task": "loop"})), step("{last_result}"), tools=[], subagents=["stopper"]
    )
    handle = await agents_env.start(conversation(parent))
    result = await handle.result()

    [call] = result.tool_calls
    assert (call.content, call.is_error) == (
        "Sub-agent 'stopper' stopped: max_iterations_reached: again",
        True,
    )
    assert result.final_text == "Sub-agent 'stopper' stopped: max_iterations_reached: again"
    child = agents_env.client.get_workflow_handle_for(AgentWorkflow.run, f"{handle.id}/call_1_0")
    assert (await child.result()).stop_reason == "max_iterations_reached"


CHATTY = _scripted("chatty", step("chatty answered"), chat=True)


@pytest.mark.parametrize("agents_env", [{"chatty": CHATTY}], indirect=True)
async def test_a_chat_agent_as_sub_agent_returns_its_answer_instead_of_waiting_for_more(
    agents_env: Env,
) -> None:
    parent = scripted_agent(
        step("", ("ask_chatty", {"task": "hi"})), step("{last_result}"), tools=[], subagents=["chatty"]
    )
    handle = await agents_env.start(conversation(parent))

    assert (await handle.result()).final_text == "chatty answered"
    child = await agents_env.client.get_workflow_handle_for(
        AgentWorkflow.run, f"{handle.id}/call_1_0"
    ).result()
    assert (child.closed_by, [(r.message_id, r.text) for r in child.replies]) == (
        "answered",
        [("m1", "chatty answered")],
    )


MIDDLE = _scripted(
    "middle", step("", ("ask_leaf", {"task": "deeper"})), step("{last_result}"), subagents=["leaf"]
)
LEAF = _scripted("leaf", step("leaf answered"))


@pytest.mark.parametrize("agents_env", [{"middle": MIDDLE, "leaf": LEAF}], indirect=True)
@pytest.mark.parametrize(
    ("max_depth", "answer"), [(2, "leaf answered"), (1, "Unknown tool 'ask_leaf'. Available tools: none.")]
)
async def test_a_sub_agent_at_the_depth_limit_gets_no_sub_agent_tools(
    agents_env: Env, max_depth: int, answer: str
) -> None:
    top = scripted_agent(
        step("", ("ask_middle", {"task": "go"})), step("{last_result}"), tools=[], subagents=["middle"]
    )
    handle = await agents_env.start(conversation(top, max_depth=max_depth))
    assert (await handle.result()).final_text == answer
    middle = await agents_env.client.get_workflow_handle_for(
        AgentWorkflow.run, f"{handle.id}/call_1_0"
    ).result()
    assert middle.final_text == answer


# ---------------------------------------------------------------------------------------------------
# Agent files


@pytest.mark.parametrize(
    ("files", "error"),
    [
        ({"a": ["a"]}, "a.toml: field 'subagents': agent 'a' delegates to itself (a -> a)"),
        (
            {"a": ["b"], "b": ["c"], "c": ["a"]},
            "a.toml: field 'subagents': agent 'a' delegates to itself (a -> b -> c -> a)",
        ),
        ({"a": ["nobody"]}, "a.toml: field 'subagents': unknown agent(s) nobody; the worker has: a"),
    ],
    ids=["itself", "cycle", "unknown"],
)
def test_an_agent_that_delegates_to_itself_is_refused_at_load(
    tmp_path: Path, files: dict[str, list[str]], error: str
) -> None:
    for name, subagents in files.items():
        (tmp_path / f"{name}.toml").write_text(
            f'subagents = {json.dumps(subagents)}\n[model]\nprovider = "scripted"\nmodel = "m"\n'
        )
    with pytest.raises(AgentFileError) as refused:
        load_agents(tmp_path, default_registry())
    assert str(refused.value) == f"{tmp_path}/{error}"


def test_the_worker_refuses_to_start_on_self_delegation(tmp_path: Path) -> None:
    (tmp_path / "echo.toml").write_text('subagents = ["echo"]\n[model]\nprovider = "scripted"\nmodel = "m"\n')
    done = subprocess.run(
        [sys.executable, "worker.py", "--agents-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr.strip()) == (
        2,
        f"worker: {tmp_path / 'echo.toml'}: field 'subagents':"
        " agent 'echo' delegates to itself (echo -> echo)",
    )


SCRIBE = _scripted("scribe", step("", ("write_file", NOTE)), step("{last_result}"), tools=["write_file"])
CLERK = _scripted(
    "clerk", step("", ("ask_scribe", {"task": "note"})), step("{last_result}"), subagents=["scribe"]
)


@pytest.mark.parametrize("agents_env", [{"clerk": CLERK, "scribe": SCRIBE}], indirect=True)
async def test_a_grandchilds_approval_surfaces_at_the_top_and_is_decided_there(agents_env: Env) -> None:
    top = scripted_agent(
        step("", ("ask_clerk", {"task": "go"})), step("top: {last_result}"), tools=[], subagents=["clerk"]
    )
    handle = await agents_env.start(conversation(top))
    [pending] = await wait_for_pending(handle)
    assert (pending.call_id, pending.tool) == ("call_1_0/call_1_0/call_1_0", "write_file")
    clerk = agents_env.client.get_workflow_handle_for(AgentWorkflow.run, f"{handle.id}/call_1_0")
    assert [r.call_id for r in await clerk.query(AgentWorkflow.pending_approvals)] == ["call_1_0/call_1_0"]

    record = await handle.execute_update(
        AgentWorkflow.decide, Decision(call_id=pending.call_id, approve=True, by="carol")
    )
    assert (record.call_id, record.state, record.by) == ("call_1_0/call_1_0/call_1_0", "approved", "carol")
    assert (await handle.result()).final_text == "top: Wrote 9 bytes to note.txt."
    assert (await handle.query(AgentWorkflow.status)).pending_approvals == 0


async def test_terminating_a_parent_whose_sub_agent_waits_leaves_no_error_behind(
    client: Client, tmp_path: Path
) -> None:
    """The worker evicts the terminated parent: what it would do as its delegation ends is left
    undone, without an error (it once called workflow.now() outside the workflow's event loop)."""
    seen: list[str] = []
    hook = sys.unraisablehook
    sys.unraisablehook = lambda raised: seen.append(repr(raised.exc_value))
    try:
        async with running_worker(client, tmp_path) as env:
            parent, child = await delegating(env)
            await parent.terminate(reason="gone")
            await child.terminate(reason="gone")
        gc.collect()  # the worker stopped: every conversation it cached is evicted, its coroutines closed
    finally:
        sys.unraisablehook = hook
    assert [error for error in seen if "Not in workflow event loop" in error] == []
