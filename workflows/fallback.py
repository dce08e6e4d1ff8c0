"""Model fallback: the models a call may go to, in order, and what their answers cost."""

from __future__ import annotations

from workflows.activity_io import ResolvedAgent
from workflows.messages import ModelSettings, Usage
from workflows.records import ModelAttempt


def candidates(settings: ModelSettings) -> list[ModelSettings]:
    """The agent's model, then each fallback model with the same other settings."""
    return [settings] + [
        settings.model_copy(update={"provider": provider, "model": model, "fallback": []})
        for provider, _, model in (entry.partition(":") for entry in settings.fallback)
    ]


def cost(agent: ResolvedAgent, usage_by_model: dict[str, Usage]) -> float | None:
    """Each model's tokens at its own price; a model the price table lacks adds nothing.
    None when neither the agent's model nor any model that answered has a price."""
    prices = {agent.spec.model.label: agent.price, **agent.fallback_prices}
    if not any(prices.get(model) for model in [agent.spec.model.label, *usage_by_model]):
        return None
    return sum(
        (price.cost(usage) for model, usage in usage_by_model.items() if (price := prices.get(model))), 0.0
    )


def models_used(attempts: list[ModelAttempt]) -> list[str]:
    """The models that answered, in order of their first answer."""
    return list(dict.fromkeys(a.model for a in attempts if a.error is None))
