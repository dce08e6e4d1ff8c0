"""Handoffs: an agent's ``handoffs`` hand the conversation to another agent, which answers from the
next model call on, with its own prompt, tools, model and approvals (sub-agents, by contrast, answer
one task and return).

Each target is a tool ``transfer_to_<name>`` that takes the reason; like any tool it may need
approval. Taking it resolves the target agent (the resolve activity), records the handoff with its
reason, names the new agent in the status and the ``AgentName`` search attribute, and puts the
target's prompt in the transcript, which the model sees first instead of the earlier prompts
(``SystemMessage.handoff``, workflows/transcript.py). Each model's tokens stay priced at its own price.
"""

from __future__ import annotations

from durable_agents.workflows.activity_io import ResolvedAgent, ToolSpec
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.messages import ToolDefinition

_PARAMETERS = {
    "type": "object",
    "properties": {"reason": {"type": "string", "description": "Why this agent should take over."}},
    "required": ["reason"],
}


def tool_name(agent: str) -> str:
    return f"transfer_to_{agent}"


def handoff_tool(spec: AgentSpec) -> ToolSpec:
    """What the model is told of a handoff target: a tool that hands it the conversation."""
    said = f"Hand the conversation to the {spec.name} agent: it answers from now on."
    return ToolSpec(
        definition=ToolDefinition(
            name=tool_name(spec.name),
            description=" ".join(filter(None, [said, spec.description])),
            parameters=_PARAMETERS,
        ),
        handoff=spec.name,
    )


def taking_over(target: ResolvedAgent, handing: ResolvedAgent) -> ResolvedAgent:
    """``target``, knowing the prices of the models before it, so each one's tokens keep their price."""
    before = {handing.spec.model.label: handing.price} if handing.price is not None else {}
    prices = {**handing.fallback_prices, **before, **target.fallback_prices}
    return target.model_copy(update={"fallback_prices": prices})
