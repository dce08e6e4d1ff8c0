"""The agent loop without Temporal: a plain async loop over the same adapter and tool registry.

The baseline for the latency benchmark: ``OpenAIChatModel`` (the adapter the worker uses)
against the same fake server, and ``activities.tools.default_registry()`` to run the
tools. No durability: no history, no conversation store, no retries.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from durable_agents.activities.providers.openai_chat import OpenAIChatModel
from durable_agents.activities.tools import ToolRegistry
from durable_agents.workflows.activity_io import ToolInvocation
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.messages import (
    AssistantMessage,
    Message,
    ModelRequest,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)


async def run_loop(
    model: OpenAIChatModel,
    registry: ToolRegistry,
    agent: AgentSpec,
    prompt: str,
    *,
    conversation_id: str,
    workspace: Path,
) -> tuple[str, int, int]:
    """Run one conversation to its text answer; returns (text, model calls, tool calls)."""
    messages: list[Message] = []
    if agent.system_prompt:
        messages.append(SystemMessage(text=agent.system_prompt))
    messages.append(UserMessage(text=prompt))
    tools = [registry[name].definition for name in agent.tools]
    tool_calls = 0
    for model_calls in range(1, agent.max_iterations + 1):
        response = await model.complete(
            ModelRequest(settings=agent.model, messages=list(messages), tools=tools),
            timeout=agent.model_call.timeout_seconds,
        )
        message: AssistantMessage = response.message
        messages.append(message)
        if not message.tool_calls:
            return message.text, model_calls, tool_calls
        outcomes = await asyncio.gather(
            *(
                registry.run(ToolInvocation.of(call, conversation_id, conversation_id), workspace)
                for call in message.tool_calls
            )
        )
        for call, outcome in zip(message.tool_calls, outcomes, strict=True):
            messages.append(
                ToolResultMessage(
                    call_id=call.id, name=call.name, content=outcome.content, is_error=outcome.is_error
                )
            )
            tool_calls += 1
    raise RuntimeError(f"no text answer after {agent.max_iterations} model calls")
