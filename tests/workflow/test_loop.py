"""The agent loop on a real embedded Temporal server with the scripted model."""

from __future__ import annotations

import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from durable_agents.activities.tools import ToolContext, ToolRegistry, default_registry, tool
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import ApprovalPolicy
from durable_agents.workflows.messages import AssistantMessage, ScriptedToolCall, ToolResultMessage, Usage
from durable_agents.workflows.records import ApprovalSignal, ToolCallRecord
from tests.support.conversations import wait_for_pending, workspace_of
from tests.support.history import activity_types, event_types
from tests.support.workers import Env


async def test_tool_call_then_text_answer(env: Env) -> None:
    agent = scripted_agent(step("", ("add", {"a": 2, "b": 3})), step("The sum is {last_result}."))
    handle = await env.start(conversation(agent, "what is 2 + 3?"))
    result = await handle.result()

    assert result.final_text == "The sum is 5."
    assert result.stop_reason == "completed"
    assert result.max_iterations_reached is False
    assert (result.iterations, result.model_calls) == (2, 2)
    assert result.tool_calls == [
        ToolCallRecord(
            call_id="call_1_0",
            name="add",
            arguments={"a": 2, "b": 3},
            iteration=1,
            content="5",
            is_error=False,
        )
    ]
    assert result.usage == Usage(input_tokens=20, output_tokens=10)
    assert await activity_types(handle) == [
        "durable_agents.resolve_agent",
        "durable_agents.call_model",
        "durable_agents.run_tool",
        "durable_agents.call_model",
    ]


async def test_parallel_tool_calls_run_concurrently_and_return_in_model_order(env: Env) -> None:
    agent = scripted_agent(
        step("", ("multiply", {"a": 3, "b": 4}), ("add", {"a": 1, "b": 1}), ("subtract", {"a": 10, "b": 1})),
        step("done: {last_result}"),
    )
    handle = await env.start(conversation(agent))
    result = await handle.result()

    results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [(m.call_id, m.name, m.content) for m in results] == [
        ("call_1_0", "multiply", "12"),
        ("call_1_1", "add", "2"),
        ("call_1_2", "subtract", "9"),
    ]
    assert result.final_text == "done: 12, 2, 9"
    # All three were scheduled in one workflow task, before any of them completed.
    events = await event_types(handle)
    scheduled = [i for i, e in enumerate(events) if e == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    first_tool_completed = [  # after the model call's
        i for i, e in enumerate(events) if e == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    ][1]
    assert scheduled[1:4] == [scheduled[1], scheduled[1] + 1, scheduled[1] + 2]
    assert scheduled[3] < first_tool_completed


def _looping_agent(**kwargs):
    """A model that always asks for another tool call."""
    return scripted_agent(*[step(f"step {i}", ("add", {"a": i, "b": 1})) for i in range(1, 10)], **kwargs)


async def test_iteration_limit_final_answer_calls_model_once_more_with_tools_off(env: Env) -> None:
    handle = await env.start(conversation(_looping_agent(max_iterations=2)))
    result = await handle.result()

    assert result.stop_reason == "max_iterations_reached"
    assert result.max_iterations_reached is True
    assert (result.iterations, result.model_calls, len(result.tool_calls)) == (2, 3, 2)
    assert result.final_text == "Stopping here after 2 tool results. Latest: 3"
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage) and last.tool_calls == []
    assert await activity_types(handle) == [
        "durable_agents.resolve_agent",
        "durable_agents.call_model",
        "durable_agents.run_tool",
        "durable_agents.call_model",
        "durable_agents.run_tool",
        "durable_agents.call_model",
    ]


async def test_iteration_limit_stop_ends_with_last_text_and_flag(env: Env) -> None:
    result = await env.run(conversation(_looping_agent(), max_iterations=3, on_limit="stop"))

    assert result.stop_reason == "max_iterations_reached"
    assert result.max_iterations_reached is True
    assert (result.iterations, result.model_calls, len(result.tool_calls)) == (3, 3, 3)
    assert result.final_text == "step 3"


async def test_iteration_limit_fail_is_a_non_retryable_failure_naming_the_limit(env: Env) -> None:
    handle = await env.start(conversation(_looping_agent(on_limit="fail"), max_iterations=2))
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()

    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.message, cause.non_retryable) == (
        "MaxIterationsReached",
        "iteration limit of 2 reached",
        True,
    )


async def test_default_iteration_limit_is_five(env: Env) -> None:
    result = await env.run(conversation(_looping_agent()))
    assert (result.iterations, result.model_calls) == (5, 6)


async def test_unknown_tool_is_reported_to_model_without_running_anything(env: Env) -> None:
    agent = scripted_agent(
        step("", ("rm_rf", {"path": "/"})), step("model saw: {last_result}"), tools=["add"]
    )
    handle = await env.start(conversation(agent))
    result = await handle.result()

    assert result.final_text == "model saw: Unknown tool 'rm_rf'. Available tools: add."
    assert result.tool_calls[0].is_error is True
    assert await activity_types(handle) == [
        "durable_agents.resolve_agent",
        "durable_agents.call_model",
        "durable_agents.call_model",
    ]


async def test_tool_outside_allowlist_is_unknown_even_if_worker_has_it(env: Env) -> None:
    agent = scripted_agent(
        step("", ("write_file", {"path": "x", "content": "y"})), step("{last_result}"), tools=["add"]
    )
    # No approval asked for write_file: were the allowlist ignored, the file would be written at once.
    handle = await env.start(conversation(agent, approval=ApprovalPolicy(auto=["write_file"])))
    result = await handle.result()
    unknown = "Unknown tool 'write_file'. Available tools: add."
    assert result.final_text == unknown
    assert [(c.name, c.content, c.is_error) for c in result.tool_calls] == [("write_file", unknown, True)]
    assert await activity_types(handle) == [
        "durable_agents.resolve_agent",
        "durable_agents.call_model",
        "durable_agents.call_model",
    ]
    assert list(env.workspace.rglob("x")) == []  # in no conversation's workspace


async def test_invalid_arguments_are_reported_to_model(env: Env) -> None:
    agent = scripted_agent(step("", ("add", {"a": "twelve", "b": 1})), step("{last_result}"))
    result = await env.run(conversation(agent))

    assert result.final_text == (
        "Invalid arguments for 'add': a: Input should be a valid number, unable to parse string as a number"
    )
    assert result.tool_calls[0].is_error is True


async def test_arguments_that_are_not_json_are_reported_to_model(env: Env) -> None:
    bad = ScriptedToolCall(name="add", raw_arguments='{"a": 1,')
    handle = await env.start(conversation(scripted_agent(step("", bad), step("{last_result}"))))
    result = await handle.result()

    assert result.final_text == (
        "Invalid arguments for 'add': arguments are not valid JSON "
        "(Expecting property name enclosed in double quotes at position 8)"
    )
    assert await activity_types(handle) == [
        "durable_agents.resolve_agent",
        "durable_agents.call_model",
        "durable_agents.call_model",
    ]


async def test_tool_error_is_reported_to_model_and_loop_continues(env: Env) -> None:
    agent = scripted_agent(
        step("", ("divide", {"a": 1, "b": 0})),
        step("retrying", ("divide", {"a": 1, "b": 4})),
        step("{last_result}"),
    )
    result = await env.run(conversation(agent))

    assert [(c.content, c.is_error) for c in result.tool_calls] == [
        ("Cannot divide by zero.", True),
        ("0.25", False),
    ]
    assert result.final_text == "0.25"


@tool
def explode(message: str) -> str:
    """Raise an unexpected exception.

    Args:
        message: What the exception says.
    """
    raise RuntimeError(message)


@tool
def idempotency_key(ctx: ToolContext) -> str:
    """Return the call's idempotency key."""
    return ctx.idempotency_key


@tool
def not_serialisable() -> object:
    """Return something JSON cannot hold."""
    return object()


class TestCustomTools:
    @pytest.fixture
    def registry(self) -> ToolRegistry:
        return default_registry(explode, idempotency_key, not_serialisable)

    async def test_unexpected_tool_exception_is_reported_to_model(self, env: Env) -> None:
        agent = scripted_agent(
            step("", ("explode", {"message": "boom"})), step("{last_result}"), tools=["explode"]
        )
        handle = await env.start(conversation(agent))
        result = await handle.result()

        assert result.final_text == "RuntimeError: boom"
        assert EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED not in await event_types(handle)

    async def test_each_tool_call_gets_a_stable_idempotency_key(self, env: Env) -> None:
        agent = scripted_agent(
            step("", ("idempotency_key", {})), step("{last_result}"), tools=["idempotency_key"]
        )
        handle = await env.start(conversation(agent))
        result = await handle.result()
        # The first run's id keeps the key apart from an earlier conversation that used the same id.
        assert result.final_text == f"{handle.id}/{handle.first_execution_run_id}/call_1_0"

    async def test_reused_or_missing_call_ids_are_made_unique(self, env: Env) -> None:
        def add(call_id: str) -> ScriptedToolCall:
            return ScriptedToolCall(name="add", arguments={"a": 1, "b": 1}, id=call_id)

        agent = scripted_agent(
            step("", add("x"), add("x"), add("")), step("", add("call_1_1"), add("x")), step("done")
        )
        result = await env.run(conversation(agent))
        assert [c.call_id for c in result.tool_calls] == [
            "x", "call_0_1", "call_0_2", "call_1_1", "call_1_1_"
        ]  # fmt: skip

    async def test_non_serialisable_tool_result_is_reported_to_model(self, env: Env) -> None:
        agent = scripted_agent(
            step("", ("not_serialisable", {})), step("{last_result}"), tools=["not_serialisable"]
        )
        result = await env.run(conversation(agent))
        assert result.final_text.startswith(
            "Tool 'not_serialisable' returned a value that cannot be serialised: "
        )
        assert result.tool_calls[0].is_error is True


async def test_file_tools_work_in_the_conversation_workspace(env: Env) -> None:
    agent = scripted_agent(
        step("", ("write_file", {"path": "notes/a.txt", "content": "hello"})),
        step("", ("read_file", {"path": "notes/a.txt"}), ("list_files", {"path": "notes"})),
        step("", ("read_file", {"path": "../../etc/passwd"})),
        step("{last_result}"),
        tools=["write_file", "read_file", "list_files"],
    )
    handle = await env.start(
        conversation(agent, approval=ApprovalPolicy(auto=["write_file"])),
        workflow_id=f"files-{uuid.uuid4().hex}",
    )
    result = await handle.result()

    assert [c.content for c in result.tool_calls] == [
        "Wrote 5 bytes to notes/a.txt.",
        "hello",
        '["a.txt"]',
        "Path '../../etc/passwd' is outside the workspace; use a path relative to it.",
    ]
    assert (workspace_of(env.workspace, handle) / "notes" / "a.txt").read_text() == "hello"


async def test_unknown_agent_fails_the_workflow_not_the_task(env: Env) -> None:
    handle = await env.start(ConversationInput(prompt="hi", agent="nope"))
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()

    assert (info.value.cause.type, info.value.cause.message) == (
        "ConfigError",
        "unknown agent 'nope'; this worker knows: asker, calculator-anthropic, calculator-openai,"
        " clock, delegator, demo, judged, ledger, long-chat, scribe, triage",
    )
    events = await event_types(handle)
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events
    assert await activity_types(handle) == ["durable_agents.resolve_agent"]  # once: not retried


async def test_inline_agent_with_unknown_tool_fails_clearly(env: Env) -> None:
    handle = await env.start(conversation(scripted_agent(step("hi"), tools=["add", "teleport"])))
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    assert info.value.cause.message.startswith(
        "inline agent 'test-agent': field 'tools': unknown tool(s) teleport; the worker has: add, divide"
    )


async def test_named_demo_agent_runs_offline_and_asks_before_writing(env: Env) -> None:
    handle = await env.start(ConversationInput(prompt="What is (12 + 30) * 2?", agent="demo"))
    [pending] = await wait_for_pending(handle)
    assert (pending.call_id, pending.tool) == ("call_3_0", "write_file")
    await handle.signal("approve", ApprovalSignal(call_id="call_3_0", by="test"))
    result = await handle.result()
    assert result.final_text == (
        "(12 + 30) * 2 = 84. I saved it to answer.txt in this conversation's workspace."
    )
    assert [c.name for c in result.tool_calls] == ["add", "list_files", "multiply", "write_file"]


async def test_queries_expose_history_and_status(env: Env) -> None:
    agent = scripted_agent(step("", ("add", {"a": 2, "b": 3})), step("The sum is {last_result}."))
    handle = await env.start(conversation(agent, "what is 2 + 3?"))
    await handle.result()

    history = await handle.query("history")
    assert [m["kind"] for m in history["messages"]] == ["user", "assistant", "tool_result", "assistant"]
    assert [c["content"] for c in history["tool_calls"]] == ["5"]
    status = await handle.query("status")
    assert (status["state"], status["iteration"], status["model_calls"], status["detail"]) == (
        "completed",
        2,
        2,
        "finished: answered",
    )


async def test_invalid_start_input_fails_the_workflow_with_the_reason(env: Env) -> None:
    handle = await env.client.start_workflow(
        "AgentWorkflow",
        {"prompt": "", "agent": "demo"},
        id=f"bad-input-{uuid.uuid4().hex}",
        task_queue=env.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()

    assert "String should have at least 1 character" in info.value.cause.message
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in await event_types(handle)
