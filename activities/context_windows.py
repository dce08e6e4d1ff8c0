"""The context window table: how many tokens each model takes in, for context compaction."""

from __future__ import annotations

CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-4o-mini": 128_000,
    "gpt-4o": 128_000,
    "claude-haiku-4-5": 200_000,
    "claude-sonnet-4-5": 200_000,
}
"""By the model name agents use. An agent file's ``model.context_window`` overrides it."""

DEFAULT_CONTEXT_WINDOW = 32_000
"""For a model not in the table: small enough for most local models; set ``context_window`` for yours."""


def context_window(provider: str, model: str) -> int | None:
    """The window of ``model``; None for the offline scripted model, which takes in anything (its
    conversations compact only when the agent sets ``context_window``)."""
    if provider == "scripted":
        return None
    return CONTEXT_WINDOWS.get(model, DEFAULT_CONTEXT_WINDOW)
