"""Scripted agents, for tests of your own tools and hooks without a model or a key:

agent = scripted_agent(step("", ("add", {"a": 1, "b": 2})), step("3"), tools=["add"])
handle = await client.start_workflow(AgentWorkflow.run, conversation(agent), id=..., task_queue=...)
"""

from __future__ import annotations

from typing import Any

from workflows.api import ConversationInput
from workflows.config import AgentSpec
from workflows.messages import ModelSettings, ScriptedToolCall, ScriptStep


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
