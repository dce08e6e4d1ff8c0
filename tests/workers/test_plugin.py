"""``AgentPlugin`` in a worker of the user's own: the README's few lines, beside an unrelated workflow."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from durable_agents.dev_server import EmbeddedServer
from durable_agents.plugin import AgentPlugin
from durable_agents.testing import conversation, scripted_agent, step
from tests.support.greeting import Greeting, greet
from tests.support.history import activity_types
from workflows.activity_refs import (
    CALL_MODEL,
    LIST_MCP_TOOLS,
    RESOLVE_AGENT,
    RUN_HOOK,
    RUN_TOOL,
    VERIFY_DECISION,
)
from workflows.agent import AgentWorkflow


async def test_a_plain_worker_runs_a_conversation_beside_an_unrelated_workflow(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    # As the README shows: the plugin on the client, then a Worker like any other.
    plugin = AgentPlugin(workspace_root=tmp_path)
    client = await Client.connect(server.address, plugins=[plugin])
    task_queue = f"tq-plugin-{uuid.uuid4().hex[:8]}"
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[Greeting],
        activities=[greet],
        max_cached_workflows=1000,
    )
    agent = scripted_agent(step("", ("add", {"a": 2, "b": 3})), step("5"), tools=["add"])
    async with worker:
        conversation_handle = await client.start_workflow(
            AgentWorkflow.run, conversation(agent), id=f"plugin-{uuid.uuid4().hex}", task_queue=task_queue
        )
        greeting = await client.execute_workflow(
            Greeting.run, "Ada", id=f"greeting-{uuid.uuid4().hex}", task_queue=task_queue
        )
        result = await conversation_handle.result()

    assert greeting == "hello, Ada"
    assert (result.final_text, [c.content for c in result.tool_calls]) == ("5", ["5"])
    assert await activity_types(conversation_handle) == [
        "resolve_agent",
        "call_model",
        "run_tool",
        "call_model",
    ]
    # The plugin tuned what the worker left at the SDK's defaults, and kept the user's own: the
    # cache size asked for (it once took a 1,000, the SDK's default too, for "not set": 200).
    active = worker.config(active_config=True)
    assert (active["max_cached_workflows"], active["sticky_queue_schedule_to_start_timeout"]) == (
        1000,
        timedelta(seconds=5),
    )
    assert [w.__name__ for w in active["workflows"]] == ["Greeting", "AgentWorkflow"]


async def test_a_worker_whose_client_lacks_the_plugin_is_refused_in_one_line(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    client = await Client.connect(server.address)  # the SDK's default converter
    with pytest.raises(ValueError) as refused:
        Worker(
            client,
            task_queue="tq-refused",
            workflows=[Greeting],
            plugins=[AgentPlugin(workspace_root=tmp_path)],
        )
    assert str(refused.value) == (
        "AgentPlugin: the worker's client does not use our data converter; connect it with"
        " Client.connect(..., plugins=[AgentPlugin(...)]) (a worker cannot change its client's)"
    )


def test_activity_names_are_the_recorded_ones_and_the_worker_registers_each_once(tmp_path: Path) -> None:
    # The names are in every history ever recorded: a rename would strand running conversations.
    refs = [RESOLVE_AGENT, LIST_MCP_TOOLS, CALL_MODEL, RUN_TOOL, RUN_HOOK, VERIFY_DECISION]
    assert [r.name for r in refs] == [
        "resolve_agent", "list_mcp_tools", "call_model", "run_tool", "run_hook", "verify_decision",
    ]  # fmt: skip
    registered = AgentPlugin(workspace_root=tmp_path).activities  # what SimplePlugin hands to workers
    names = [activity._Definition.must_from_callable(fn).name for fn in registered]  # type: ignore[union-attr]
    assert sorted(names) == sorted(r.name for r in refs)
