"""docs/agents-and-tools.md "Tools" promises: a tool's own CallPolicy reaches its activity, a tool raising
``ApplicationError`` is retried by Temporal and then reported to the model, and ``sqrt``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio import activity
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError

from durable_agents.activities.tools import ToolRegistry, default_registry, tool
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.activity_io import ToolInvocation
from durable_agents.workflows.config import CallPolicy
from durable_agents.workflows.messages import ToolResultMessage
from tests.support.workers import Env

OWN_POLICY = CallPolicy(
    timeout_seconds=7, max_attempts=2, initial_retry_seconds=0.25, max_retry_seconds=3, heartbeat_seconds=4
)


@tool(call=OWN_POLICY)
async def busy_upstream(order: str) -> str:
    """Look an order up in a system that is always busy.

    Args:
        order: The order id.
    """
    raise ApplicationError(f"upstream busy for {order} (attempt {activity.info().attempt})")


@tool
async def flaky_lookup(order: str) -> str:
    """Look an order up; the first attempt fails and asks Temporal to retry.

    Args:
        order: The order id.
    """
    attempt = activity.info().attempt
    if attempt == 1:
        raise ApplicationError("try again")
    return f"{order} found on attempt {attempt}"


@tool
async def closed_account(account: str) -> str:
    """Charge an account that is closed: retrying cannot help.

    Args:
        account: The account id.
    """
    raise ApplicationError(f"account {account} is closed", non_retryable=True)


@pytest.fixture
def registry() -> ToolRegistry:
    return default_registry(busy_upstream, flaky_lookup, closed_account)


async def _scheduled_tools(client: Client, handle: WorkflowHandle) -> dict[str, HistoryEvent]:
    """The ``run_tool`` ActivityTaskScheduled event of each tool call, by tool name."""
    converter = client.data_converter
    found: dict[str, HistoryEvent] = {}
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name == "durable_agents.run_tool":
                [invocation] = await converter.decode(attributes.input.payloads, [ToolInvocation])
                found[invocation.name] = event
    return found


async def _last_attempts(handle: WorkflowHandle) -> dict[int, int]:
    """The attempt number of the last started attempt, by scheduled event id."""
    attempts: dict[int, int] = {}
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            attempts[started.scheduled_event_id] = started.attempt
    return attempts


async def test_a_tools_own_call_policy_reaches_its_activity(env: Env) -> None:
    agent = scripted_agent(
        step("", ("busy_upstream", {"order": "A-1"}), ("add", {"a": 1, "b": 2})),
        step("{last_result}"),
        tools=["busy_upstream", "add"],
    )
    handle = await env.start(conversation(agent))
    result = await handle.result()

    scheduled = await _scheduled_tools(env.client, handle)
    own = scheduled["busy_upstream"].activity_task_scheduled_event_attributes
    assert own.start_to_close_timeout.ToTimedelta() == timedelta(seconds=7)
    assert own.heartbeat_timeout.ToTimedelta() == timedelta(seconds=4)
    assert own.retry_policy.maximum_attempts == 2
    assert own.retry_policy.initial_interval.ToTimedelta() == timedelta(seconds=0.25)
    assert own.retry_policy.maximum_interval.ToTimedelta() == timedelta(seconds=3)
    # A tool without its own policy gets @tool's default: 30 s, 3 attempts, 3 s heartbeat.
    default = scheduled["add"].activity_task_scheduled_event_attributes
    assert default.start_to_close_timeout.ToTimedelta() == timedelta(seconds=30)
    assert default.heartbeat_timeout.ToTimedelta() == timedelta(seconds=3)
    assert default.retry_policy.maximum_attempts == 3
    # The policy is what Temporal applied: exactly two attempts, then the model is told.
    attempts = await _last_attempts(handle)
    assert attempts[scheduled["busy_upstream"].event_id] == 2
    assert attempts[scheduled["add"].event_id] == 1
    assert result.final_text == "Tool 'busy_upstream' failed: upstream busy for A-1 (attempt 2), 3"


async def test_a_tool_raising_application_error_is_retried_then_reported_to_the_model(env: Env) -> None:
    agent = scripted_agent(
        step("", ("flaky_lookup", {"order": "B-2"}), ("closed_account", {"account": "acct-9"})),
        step("{last_result}"),
        tools=["flaky_lookup", "closed_account"],
    )
    handle = await env.start(conversation(agent))
    result = await handle.result()

    # Retryable: Temporal ran a second attempt, and the model sees its result.
    # Non-retryable: one attempt, and the model gets the tool's message as an error result.
    assert [
        (m.call_id, m.content, m.is_error) for m in result.messages if isinstance(m, ToolResultMessage)
    ] == [
        ("call_1_0", "B-2 found on attempt 2", False),
        ("call_1_1", "Tool 'closed_account' failed: account acct-9 is closed", True),
    ]
    scheduled = await _scheduled_tools(env.client, handle)
    attempts = await _last_attempts(handle)
    assert attempts[scheduled["flaky_lookup"].event_id] == 2
    assert attempts[scheduled["closed_account"].event_id] == 1
    assert (
        result.final_text == "B-2 found on attempt 2, Tool 'closed_account' failed: account acct-9 is closed"
    )
    assert result.stop_reason == "completed"


async def test_sqrt_answers_and_refuses_a_negative_number(env: Env) -> None:
    agent = scripted_agent(
        step("", ("sqrt", {"x": 16}), ("sqrt", {"x": 2}), ("sqrt", {"x": -4})),
        step("{last_result}"),
        tools=["sqrt"],
    )
    result = await env.run(conversation(agent, "square roots of 16, 2 and -4?"))

    assert [(c.arguments, c.content, c.is_error) for c in result.tool_calls] == [
        ({"x": 16}, "4", False),
        ({"x": 2}, "1.4142135623730951", False),
        ({"x": -4}, "Cannot take the square root of a negative number.", True),
    ]
