"""What a conversation has spent: its own tokens at its models' prices, and its sub-agents' spend."""

from __future__ import annotations

from durable_agents.workflows.activity_io import ResolvedAgent
from durable_agents.workflows.messages import Usage
from durable_agents.workflows.state import ConversationState


def conversation_cost(agent: ResolvedAgent, state: ConversationState) -> float | None:
    """US dollars: the conversation's own tokens at its model's price (with fallback models, each
    model's tokens at its own; a model the price table lacks adds nothing), plus what its sub-agents
    spent at theirs. None when no price applies to any of it."""
    by_model = agent.spec.model.fallback or state.handoffs  # several models: each at its own price
    own = _fallback_cost(agent, state.usage_by_model) if by_model else _own_cost(agent, state)
    if state.subagent_cost is None:
        return own
    return (own or 0.0) + state.subagent_cost


def cost_by_model(agent: ResolvedAgent, usage_by_model: dict[str, Usage]) -> dict[str, float]:
    """US dollars of each model's own tokens, for each model with a price."""
    prices = {agent.spec.model.label: agent.price, **agent.fallback_prices}
    return {
        model: price.cost(usage) for model, usage in usage_by_model.items() if (price := prices.get(model))
    }


def _own_cost(agent: ResolvedAgent, state: ConversationState) -> float | None:
    if agent.price is None:
        return None
    return agent.price.cost(state.usage - state.subagent_usage)


def _fallback_cost(agent: ResolvedAgent, usage_by_model: dict[str, Usage]) -> float | None:
    prices = {agent.spec.model.label: agent.price, **agent.fallback_prices}
    if not any(prices.get(model) for model in [agent.spec.model.label, *usage_by_model]):
        return None
    return sum(
        (price.cost(usage) for model, usage in usage_by_model.items() if (price := prices.get(model))), 0.0
    )
