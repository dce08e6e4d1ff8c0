"""The work the benchmarks give: the prompt, the agents (on the fake model, ``bench/fake_model.py``),
a conversation's input, and the right result of the ``bench`` agent's conversation (3 model
calls, ``add`` twice, then "done")."""

from __future__ import annotations

from durable_agents.workflows.api import ConversationInput, ConversationResult
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.messages import ModelSettings

PROMPT = "What is 1 + 2?"


def bench_agent(delay_ms: int = 0) -> AgentSpec:
    model = "bench" if not delay_ms else f"bench@{delay_ms}ms"
    return AgentSpec(name="bench", model=ModelSettings(provider="openai", model=model), tools=["add"])


def approval_agent() -> AgentSpec:
    """Its model calls write_file, which waits for a person (the tool's own default)."""
    return AgentSpec(
        name="bench-approval",
        model=ModelSettings(provider="openai", model="bench-approval"),
        tools=["write_file"],
    )


def text_agent() -> AgentSpec:
    """One model call answering text: the trivial conversation."""
    return AgentSpec(name="bench-text", model=ModelSettings(provider="openai", model="bench-text"))


def conversation(agent: AgentSpec) -> ConversationInput:
    return ConversationInput(prompt=PROMPT, agent_spec=agent)


def check_result(result: ConversationResult) -> bool:
    return (
        result.final_text == "done"
        and result.model_calls == 3
        and [c.content for c in result.tool_calls] == ["3", "3"]
    )
