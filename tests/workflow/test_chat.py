"""Conversations that live long: follow-ups, queues, idle timeout, continue-as-new, cancellation."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from durable_agents.activities.tools import ToolContext, ToolRegistry, default_registry, tool
from durable_agents.client.conversations import conversation_result
from durable_agents.converter import data_converter
from durable_agents.stores.conversations import SQLiteConversationStore
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.activity_io import ModelCallInput
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput, MessageInput
from durable_agents.workflows.messages import ToolResultMessage, UserMessage
from durable_agents.workflows.records import ApprovalSignal, Decision
from durable_agents.workflows.state import ConversationState
from tests.support.conversations import until_queued, until_state, wait_for_pending
from tests.support.history import activity_types, event_types
from tests.support.servers import HISTORY_LENGTH, start_dev_server
from tests.support.workers import Env, running_worker


async def test_three_follow_up_messages_with_tool_calls_between(env: Env) -> None:
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})),
        step("first: {last_result}"),
        step("", ("multiply", {"a": 3, "b": 4})),
        step("second: {last_result}"),
        step("", ("subtract", {"a": 10, "b": 4})),
        step("third: {last_result}"),
        step("you said {user}"),
        chat=True,
    )
    handle = await env.start(conversation(agent, "1 + 2?"))
    await until_state(handle, "idle")

    second = await handle.execute_update(AgentWorkflow.send_message, MessageInput(text="3 * 4?"))
    third = await handle.execute_update(AgentWorkflow.send_message, MessageInput(text="10 - 4?"))
    fourth = await handle.execute_update(AgentWorkflow.send_message, MessageInput(text="bye"))
    assert [(r.message_id, r.text, r.stop_reason) for r in (second, third, fourth)] == [
        ("m2", "second: 12", "completed"),
        ("m3", "third: 6", "completed"),
        ("m4", "you said bye", "completed"),
    ]
    await handle.signal(AgentWorkflow.end)
    result = await handle.result()

    assert result.closed_by == "end_signal"
    assert [r.text for r in result.replies] == ["first: 3", "second: 12", "third: 6", "you said bye"]
    assert [m.text for m in result.messages if isinstance(m, UserMessage)] == [
        "1 + 2?",
        "3 * 4?",
        "10 - 4?",
        "bye",
    ]
    assert result.model_calls == 7


async def test_messages_sent_while_busy_are_answered_in_order(env: Env) -> None:
    agent = scripted_agent(
        step("", ("write_file", {"path": "a.txt", "content": "a"})),
        *[step("reply to {user}") for _ in range(4)],
        tools=["write_file"],
        chat=True,
    )
    handle = await env.start(conversation(agent, "first"))
    await wait_for_pending(handle)  # busy: the first turn waits for a person
    for text in ("second", "third", "fourth"):
        await handle.signal(AgentWorkflow.post_message, MessageInput(text=text))
    assert (await handle.query(AgentWorkflow.status)).queued_messages == 3
    await handle.signal(AgentWorkflow.end)
    await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_1_0"))
    result = await handle.result()

    assert [r.text for r in result.replies] == [
        "reply to first",
        "reply to second",
        "reply to third",
        "reply to fourth",
    ]
    assert result.closed_by == "end_signal"


async def test_messages_after_end_are_refused(env: Env) -> None:
    agent = scripted_agent(
        step("", ("write_file", {"path": "a.txt", "content": "a"})),
        step("one"),
        tools=["write_file"],
        chat=True,
    )
    handle = await env.start(conversation(agent, "hi"))
    await wait_for_pending(handle)
    await handle.signal(AgentWorkflow.end)
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await handle.execute_update(AgentWorkflow.send_message, MessageInput(text="still there?"))
    assert info.value.cause.message == "the conversation has been ended; start a new one"
    await handle.signal(AgentWorkflow.post_message, MessageInput(text="ignored"))
    await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_1_0"))
    result = await handle.result()
    assert (result.closed_by, [r.text for r in result.replies]) == ("end_signal", ["one"])


async def test_iteration_limit_applies_per_message_and_model_calls_per_conversation(env: Env) -> None:
    loop = [step(f"step {i}", ("add", {"a": i, "b": 0})) for i in range(1, 20)]
    agent = scripted_agent(*loop, chat=True, max_iterations=2, on_limit="stop", max_model_calls=5)
    handle = await env.start(conversation(agent, "go"))
    await until_state(handle, "idle")
    second = await handle.execute_update(AgentWorkflow.send_message, MessageInput(text="again"))
    third = await handle.execute_update(AgentWorkflow.send_message, MessageInput(text="and again"))
    await handle.signal(AgentWorkflow.end)
    result = await handle.result()

    assert [(r.stop_reason, r.iterations) for r in result.replies] == [
        ("max_iterations_reached", 2),
        ("max_iterations_reached", 2),
        ("model_call_limit_reached", 1),
    ]
    assert (second.text, third.text) == ("step 4", "step 5")
    assert result.model_calls == 5


SUGGEST_AT = 40
"""History events from which the server below suggests continue-as-new (Temporal's default: 4096).
A run waiting for its approval has some 25; each message posted meanwhile adds 4."""


@pytest.fixture
async def suggesting_server() -> AsyncIterator[Client]:
    """A dev server of its own that suggests continue-as-new early, so a run waiting for a person
    rolls over on Temporal's own suggestion within the test."""
    env = await start_dev_server((HISTORY_LENGTH, SUGGEST_AT))
    yield env.client
    await env.shutdown()


async def _carried_state(client: Client, workflow_id: str, run_id: str) -> ConversationState:
    """The state a run handed to the next one: its continue-as-new event's input, decoded."""
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    [event] = [
        e for e in history.events if e.HasField("workflow_execution_continued_as_new_event_attributes")
    ]
    payloads = event.workflow_execution_continued_as_new_event_attributes.input.payloads
    [carried] = await client.data_converter.decode(payloads, [ConversationInput])
    assert carried.state is not None
    return carried.state


async def test_continue_as_new_carries_pending_approval_and_queued_message(
    suggesting_server: Client, tmp_path: Path
) -> None:
    client, queue = suggesting_server, f"rollover-{uuid.uuid4().hex[:8]}"
    agent = scripted_agent(
        step("", ("write_file", {"path": "x.txt", "content": "x"})),
        step("done: {last_result}"),
        *[step("and {user}") for _ in range(8)],
        tools=["write_file"],
    )
    async with running_worker(client, tmp_path, task_queue=queue) as worker:
        handle = await worker.start(conversation(agent, "first"))
        first_run = handle.first_execution_run_id
        [requested] = await wait_for_pending(handle)
        # Messages posted while the first run waits for a person grow its history until
        # Temporal suggests a new run; it hands over the pending approval and the queue.
        latest = client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
        sent: list[str] = []
        while (await latest.describe()).run_id == first_run:
            assert len(sent) < 8, "Temporal never suggested continuing as new"
            sent.append(f"message {len(sent) + 2}")
            await latest.signal(AgentWorkflow.post_message, MessageInput(text=sent[-1]))
            await until_queued(latest, len(sent))
        second_run = (await latest.describe()).run_id

        carried = await _carried_state(client, handle.id, first_run)
        assert carried.approvals == [requested]
        assert (requested.call_id, requested.tool, requested.state) == ("call_1_0", "write_file", "pending")
        assert [m.text for m in carried.queue] == sent
        assert "durable_agents.run_tool" not in await activity_types(handle)  # nothing ran in the first run
        assert list(tmp_path.rglob("x.txt")) == []

        # The second run answers the decision on the call the first run asked about.
        assert await wait_for_pending(latest) == [requested]
        decided = await latest.execute_update(
            AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="alice")
        )
        result = await latest.result()
        history = await latest.query(AgentWorkflow.history)

    assert (decided.state, decided.by, decided.via) == ("approved", "alice", "update")
    assert result.runs >= 2
    second = client.get_workflow_handle(handle.id, run_id=second_run)
    # the decision was verified and the approved call ran there
    assert (await activity_types(second))[:3] == [
        "durable_agents.verify_decision",
        "durable_agents.run_tool",
        "durable_agents.call_model",
    ]
    assert [(c.call_id, c.content) for c in result.tool_calls] == [("call_1_0", "Wrote 1 bytes to x.txt.")]
    assert [path.read_text() for path in tmp_path.rglob("x.txt")] == ["x"]
    assert [r.text for r in result.replies] == ["done: Wrote 1 bytes to x.txt.", *[f"and {m}" for m in sent]]
    assert [(a.call_id, a.state, a.by) for a in result.approvals] == [("call_1_0", "approved", "alice")]
    assert history.messages == result.messages


async def test_truncates_an_oversized_tool_output(env: Env) -> None:
    class Big:
        @staticmethod
        @tool
        def big() -> str:
            """Return a lot of text."""
            return "x" * 50_000

    agent = scripted_agent(step("", ("big", {})), step("ok"), tools=["big"])
    async with running_worker(
        env.client, env.workspace, task_queue="big-" + env.task_queue, registry=default_registry(Big.big)
    ) as worker:
        handle = await worker.start(conversation(agent))
        result = await handle.result()
    content = next(m for m in result.messages if isinstance(m, ToolResultMessage)).content
    assert content == "x" * 20_000 + "\n[output truncated: 50000 characters, the first 20000 shown]"


started = asyncio.Event()
cancelled: list[str] = []


@tool
async def slow(ctx: ToolContext) -> str:
    """Take a long time."""
    started.set()
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        cancelled.append(ctx.call_id)
        raise
    return "finally"


class TestSlowTools:
    @pytest.fixture
    def registry(self) -> ToolRegistry:
        return default_registry(slow)

    @pytest.fixture(autouse=True)
    def _fresh_slow_tool(self) -> Iterator[None]:
        started.clear()
        cancelled.clear()
        yield
        started.clear()
        cancelled.clear()

    async def test_cancelling_during_a_slow_tool_stops_it_and_keeps_the_conversation(self, env: Env) -> None:
        handle = await env.start(conversation(scripted_agent(step("working", ("slow", {})), tools=["slow"])))
        await asyncio.wait_for(started.wait(), 10)
        await handle.cancel(reason="operator changed their mind")
        result = await conversation_result(env.client, handle)

        assert (result.closed_by, result.detail) == ("cancelled", "cancelled: operator changed their mind")
        assert [m.kind for m in result.messages] == ["user", "assistant", "tool_result"]
        assert result.messages[-1].content == "Tool call 'slow' was cancelled with the conversation."
        # The conversation waited for the tool to hear of it (at its next heartbeat) and stop.
        assert cancelled == ["call_1_0"]
        assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED in await event_types(handle)
        assert (await handle.query(AgentWorkflow.status)).state == "cancelled"


async def test_a_lost_conversation_store_is_refilled_from_the_workflow(env: Env, tmp_path: Path) -> None:
    agent = scripted_agent(
        step("", ("write_file", {"path": "x.txt", "content": "x"})),
        step("{last_result}"),
        tools=["write_file"],
    )
    queue = "gap-" + env.task_queue
    async with running_worker(
        env.client, tmp_path, task_queue=queue, store=SQLiteConversationStore(tmp_path / "a.db")
    ) as worker:
        handle = await worker.start(conversation(agent))
        await wait_for_pending(handle)  # nothing in flight: the first worker may go
    # The store loses the conversation (restored from an old backup, say) before the next step.
    refilled = SQLiteConversationStore(tmp_path / "a.db")
    sqlite3.connect(tmp_path / "a.db").execute("DELETE FROM messages").connection.commit()
    async with running_worker(env.client, tmp_path, task_queue=queue, store=refilled):
        await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_1_0"))
        result = await handle.result()

    assert result.final_text == "Wrote 1 bytes to x.txt."
    # The second model call found no earlier messages in the new store, failed once without a retry,
    # and was sent again with the whole transcript.
    assert await _model_calls(handle) == [(0, None), (1, "ConversationStoreGap"), (0, None)]
    key = f"{handle.id}/{handle.first_execution_run_id}"
    assert await refilled.load(key, 3) == result.messages[:3]


async def _model_calls(handle: WorkflowHandle) -> list[tuple[int, str | None]]:
    """Each ``call_model``: how many messages it took as stored, and its failure type if it failed."""
    converter = data_converter()
    calls: dict[int, list] = {}
    async for e in handle.fetch_history_events():
        if e.HasField("activity_task_scheduled_event_attributes"):
            scheduled = e.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name == "durable_agents.call_model":
                [sent] = await converter.decode(scheduled.input.payloads, [ModelCallInput])
                calls[e.event_id] = [sent.stored, None]
        elif e.HasField("activity_task_failed_event_attributes"):
            failed = e.activity_task_failed_event_attributes
            if failed.scheduled_event_id in calls:
                calls[failed.scheduled_event_id][1] = failed.failure.application_failure_info.type
    return [tuple(call) for call in calls.values()]


async def test_idle_chat_completes_after_the_idle_timeout(
    time_skipping: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = time_skipping.client
    agent = scripted_agent(step("hello"), chat=True, idle_timeout_seconds=3600)
    queue = f"idle-{uuid.uuid4().hex}"
    async with build_worker(client, task_queue=queue, workspace_root=tmp_path):
        result = await client.execute_workflow(
            AgentWorkflow.run, conversation(agent), id=f"idle-{uuid.uuid4().hex}", task_queue=queue
        )
    assert (result.closed_by, result.final_text) == ("idle_timeout", "hello")
