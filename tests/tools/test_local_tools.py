"""Tools that opt in run as local activities: in the workflow task, with no server round trip."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from durable_agents.activities.agent_files import AgentFileError, check_agent, load_agent_file
from durable_agents.activities.tools import ToolError, ToolRegistry, default_registry, tool
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.messages import ToolResultMessage
from tests.support.history import activity_calls, activity_types
from tests.support.workers import Env

TABLE = {"pi": "3.14159"}


@tool(local=True)
def lookup(key: str) -> str:
    """Look a constant up by name.

    Args:
        key: The constant's name.
    """
    if key not in TABLE:
        raise ToolError(f"No constant named {key!r}.")
    return TABLE[key]


@pytest.fixture
def registry() -> ToolRegistry:
    return default_registry(lookup)


async def _scheduled_and_local(handle: WorkflowHandle) -> tuple[list[str], list[str]]:
    """Activity names from history: those scheduled on the server, and those recorded by a marker."""
    calls = await activity_calls(handle)
    return [name for name, local in calls if not local], [name for name, local in calls if local]


def _results(messages: list) -> list[tuple[str, str, str, bool]]:
    return [(m.call_id, m.name, m.content, m.is_error) for m in messages if isinstance(m, ToolResultMessage)]


async def test_local_tools_run_in_the_workflow_task_and_their_results_reach_the_model(env: Env) -> None:
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})),
        step("", ("add", {"a": 3, "b": 4})),
        step("done: {last_result}"),
        local_tools=["add"],
    )
    handle = await env.start(conversation(agent))
    result = await handle.result()

    assert result.final_text == "done: 7"
    assert (result.stop_reason, result.model_calls) == ("completed", 3)
    assert _results(result.messages) == [
        ("call_1_0", "add", "3", False),
        ("call_2_0", "add", "7", False),
    ]
    assert [(c.name, c.content) for c in result.tool_calls] == [("add", "3"), ("add", "7")]
    scheduled, local = await _scheduled_and_local(handle)
    assert scheduled == [
        "durable_agents.call_model",
        "durable_agents.call_model",
        "durable_agents.call_model",
    ]
    assert local == ["durable_agents.resolve_agent", "durable_agents.run_tool", "durable_agents.run_tool"]
    assert await activity_types(handle) == [
        "durable_agents.resolve_agent",
        "durable_agents.call_model",
        "durable_agents.run_tool",
        "durable_agents.call_model",
        "durable_agents.run_tool",
        "durable_agents.call_model",
    ]


async def test_a_workflows_only_worker_runs_local_tools_itself(client: Client, tmp_path: Path) -> None:
    workflows, models = f"wf-{uuid.uuid4().hex[:8]}", f"models-{uuid.uuid4().hex[:8]}"
    agent = scripted_agent(
        step("", ("add", {"a": 20, "b": 22})),
        step("{last_result}"),
        local_tools=["add"],
        model_task_queue=models,
    )
    async with (
        build_worker(client, task_queue=workflows, role="workflows", workspace_root=tmp_path),
        build_worker(client, task_queue=models, role="models", workspace_root=tmp_path),
    ):
        handle = await client.start_workflow(
            AgentWorkflow.run, conversation(agent), id=f"local-{uuid.uuid4().hex[:8]}", task_queue=workflows
        )
        assert (await handle.result()).final_text == "42"
    scheduled, local = await _scheduled_and_local(handle)
    assert scheduled == ["durable_agents.call_model", "durable_agents.call_model"]
    assert local == ["durable_agents.resolve_agent", "durable_agents.run_tool"]


async def test_local_tool_errors_go_back_to_the_model_like_any_tool_error(env: Env) -> None:
    # lookup is local by its own default; divide because the agent says so.
    agent = scripted_agent(
        step("", ("lookup", {"key": "tau"}), ("divide", {"a": 1, "b": 0}), ("lookup", {"key": "pi"})),
        step("{last_result}"),
        tools=["lookup", "divide"],
        local_tools=["divide"],
    )
    handle = await env.start(conversation(agent))
    result = await handle.result()

    assert _results(result.messages) == [
        ("call_1_0", "lookup", "No constant named 'tau'.", True),
        ("call_1_1", "divide", "Cannot divide by zero.", True),
        ("call_1_2", "lookup", "3.14159", False),
    ]
    assert result.final_text == "No constant named 'tau'., Cannot divide by zero., 3.14159"
    scheduled, local = await _scheduled_and_local(handle)
    assert scheduled == ["durable_agents.call_model", "durable_agents.call_model"]
    assert local == [
        "durable_agents.resolve_agent",
        "durable_agents.run_tool",
        "durable_agents.run_tool",
        "durable_agents.run_tool",
    ]


async def test_a_tool_local_by_default_runs_on_the_agents_tool_queue_when_it_names_one(env: Env) -> None:
    agent = scripted_agent(
        step("", ("lookup", {"key": "pi"})),
        step("{last_result}"),
        tools=["lookup"],
        tool_task_queue=env.task_queue,
    )
    handle = await env.start(conversation(agent))

    assert (await handle.result()).final_text == "3.14159"
    scheduled, local = await _scheduled_and_local(handle)
    assert scheduled == ["durable_agents.call_model", "durable_agents.run_tool", "durable_agents.call_model"]
    assert local == ["durable_agents.resolve_agent"]


async def test_inline_agent_naming_a_local_tool_it_does_not_use_fails_clearly(env: Env) -> None:
    agent = scripted_agent(step("hi"), tools=["add"], local_tools=["add", "sqrt"])
    handle = await env.start(conversation(agent))
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()

    assert (info.value.cause.type, info.value.cause.message) == (
        "ConfigError",
        "inline agent 'test-agent': field 'local_tools': sqrt not in the agent's 'tools'"
        " (MCP tools never run locally)",
    )


def test_a_local_tool_cannot_have_a_tool_task_queue(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text(
        'tools = ["add", "divide"]\nlocal_tools = ["add", "divide"]\n'
        '[model]\nprovider = "scripted"\nmodel = "x"\n[tool_task_queues]\ndivide = "tools"\n'
    )
    with pytest.raises(AgentFileError) as info:
        load_agent_file(path, default_registry())
    assert str(info.value) == (
        f"{path}: field 'local_tools': divide cannot run locally and on a tool task queue too;"
        " a local tool runs on the workflow's own worker"
    )

    agent = scripted_agent(step("hi"), tools=["add"], local_tools=["add"], tool_task_queue="tools")
    with pytest.raises(AgentFileError) as info:
        check_agent(agent, default_registry(), None, where="agent 'test-agent'")
    assert str(info.value) == (
        "agent 'test-agent': field 'local_tools': add cannot run locally and on a tool task queue too;"
        " a local tool runs on the workflow's own worker"
    )
