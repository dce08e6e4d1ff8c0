"""Conversations that live long: follow-ups, queues, idle timeout, continue-as-new, cancellation."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from activities.store import SQLiteConversationStore
from activities.tools import ToolContext, ToolRegistry, default_registry, tool
from tests.conftest import (
    Env,
    activity_types,
    conversation,
    event_types,
    scripted_agent,
    step,
    wait_for_pending,
)
from worker import build_worker
from workflows.agent import AgentWorkflow
from workflows.messages import ToolResultMessage, UserMessage
from workflows.models import ApprovalSignal, MessageInput


async def _wait_for_state(handle, state: str, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if (await handle.query(AgentWorkflow.status)).state == state:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached state {state}")


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
    await _wait_for_state(handle, "idle")

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
    await _wait_for_state(handle, "idle")
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


async def test_continue_as_new_carries_pending_approval_and_queued_message(env: Env) -> None:
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})),
        step("", ("write_file", {"path": "x.txt", "content": "x"})),
        step("done: {last_result}"),
        step("and {user}"),
        tools=["add", "write_file"],
        continue_as_new_after=2,
    )
    handle = await env.start(conversation(agent, "first"))
    first_run = handle.result_run_id
    # After two model calls the run waits for a person and is due to continue as new.
    for _ in range(200):
        described = await env.client.get_workflow_handle(handle.id).describe()
        if described.run_id != first_run:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the conversation never continued as new")
    latest = env.client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
    [pending] = await wait_for_pending(latest)
    assert (pending.call_id, pending.tool) == ("call_2_0", "write_file")

    await latest.signal(AgentWorkflow.post_message, MessageInput(text="second"))
    await latest.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_2_0", by="alice"))
    result = await latest.result()

    assert result.runs >= 2
    assert [r.text for r in result.replies] == ["done: Wrote 1 bytes to x.txt.", "and second"]
    assert [m.kind for m in result.messages] == [
        "user", "assistant", "tool_result", "assistant", "tool_result", "assistant", "user", "assistant",
    ]  # fmt: skip
    assert (result.approvals[0].state, result.approvals[0].by) == ("approved", "alice")
    history = await latest.query(AgentWorkflow.history)
    assert history.messages == result.messages


async def test_truncates_an_oversized_tool_output(env: Env) -> None:
    class Big:
        @staticmethod
        @tool
        def big() -> str:
            """Return a lot of text."""
            return "x" * 50_000

    agent = scripted_agent(step("", ("big", {})), step("ok"), tools=["big"])
    async with build_worker(
        env.client,
        task_queue="big-" + env.task_queue,
        registry=default_registry(Big.big),
        workspace_root=env.workspace,
    ):
        handle = await env.client.start_workflow(
            AgentWorkflow.run,
            conversation(agent),
            id=f"big-{uuid.uuid4().hex[:6]}",
            task_queue="big-" + env.task_queue,
        )
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

    async def test_cancelling_during_a_slow_tool_stops_it_and_keeps_the_conversation(self, env: Env) -> None:
        started.clear()
        handle = await env.start(conversation(scripted_agent(step("working", ("slow", {})), tools=["slow"])))
        await asyncio.wait_for(started.wait(), 10)
        await handle.cancel(reason="operator changed their mind")
        result = await handle.result()

        assert (result.closed_by, result.detail) == ("cancelled", "cancelled: operator changed their mind")
        assert [m.kind for m in result.messages] == ["user", "assistant"]
        for _ in range(100):  # the tool hears of it at its next heartbeat
            if cancelled:
                break
            await asyncio.sleep(0.1)
        assert cancelled == ["call_1_0"]
        assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED in await event_types(handle)
        assert (await handle.query(AgentWorkflow.status)).state == "cancelled"


async def test_a_lost_conversation_store_is_refilled_from_the_workflow(env: Env, tmp_path: Path) -> None:
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})), step("", ("add", {"a": 3, "b": 4})), step("{last_result}")
    )
    queue = "gap-" + env.task_queue
    async with build_worker(env.client, task_queue=queue, store=SQLiteConversationStore(tmp_path / "a.db")):
        handle = await env.client.start_workflow(
            AgentWorkflow.run,
            conversation(agent, approval=None),
            id=f"gap-{uuid.uuid4().hex[:6]}",
            task_queue=queue,
        )
        for _ in range(200):
            if "run_tool" in await activity_types(handle):
                break
            await asyncio.sleep(0.02)
    # A worker with an empty store (say, on another machine) takes over.
    async with build_worker(env.client, task_queue=queue, store=SQLiteConversationStore(tmp_path / "b.db")):
        result = await handle.result()
    assert result.final_text == "7"


async def test_idle_chat_completes_after_the_idle_timeout(
    time_skipping: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = time_skipping.client
    agent = scripted_agent(step("hello"), chat=True, idle_timeout_seconds=3600)
    async with build_worker(client, task_queue="idle", workspace_root=tmp_path):
        result = await client.execute_workflow(
            AgentWorkflow.run, conversation(agent), id=f"idle-{uuid.uuid4().hex[:6]}", task_queue="idle"
        )
    assert (result.closed_by, result.final_text) == ("idle_timeout", "hello")
