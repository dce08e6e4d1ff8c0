"""Model fallback: the models a call may go to, in order, and which of them answered."""

from __future__ import annotations

from durable_agents.workflows.messages import ModelSettings
from durable_agents.workflows.records import ModelAttempt


def candidates(settings: ModelSettings) -> list[ModelSettings]:
    """The agent's model, then each fallback model with the same other settings."""
    return [settings] + [
        settings.model_copy(update={"provider": provider, "model": model, "fallback": []})
        for provider, _, model in (entry.partition(":") for entry in settings.fallback)
    ]


def models_used(attempts: list[ModelAttempt]) -> list[str]:
    """The models that answered, in order of their first answer."""
    return list(dict.fromkeys(a.model for a in attempts if a.error is None))
