"""The model providers an agent may name: the one list, ``ADAPTERS``.

To add a provider:

1. Write its adapter: a module in ``activities/providers/`` with a class that implements
   ``activities.providers.ModelProvider`` (a ``name`` attribute, ``complete`` and ``aclose``):
   the neutral request in, the neutral response out (``openai_chat.py`` shows how).
2. Add one line to ``ADAPTERS`` below: the provider's name, as agent files write it
   (``provider = "..."``, ``fallback = ["name:model"]``) and as the adapter's ``name`` says it, and
   the adapter class as ``"module:Class"`` of ``activities/providers/``.

Everything else follows from this line: the ``Provider`` type that agent files and inline agents
are checked against, the check of ``fallback`` entries, and the worker's adapters
(``activities.providers.provider_class`` imports one by name, on its first call);
tests/providers/test_provider_names.py checks that they all agree. If the adapter reads a key or a base URL
from the environment, docker-compose.yml's worker service should pass those variables through.

A provider's name is recorded in the histories of the conversations that use it: never rename or
remove one that may still run. Workflow code never imports an adapter (tests/project/test_layers.py): it
names them here, as strings.
"""

from __future__ import annotations

from typing import Literal

ADAPTERS: dict[str, str] = {
    "openai": "openai_chat:OpenAIChatModel",
    "anthropic": "anthropic_messages:AnthropicMessagesModel",
    "openai_responses": "openai_responses:OpenAIResponsesModel",
    "scripted": "scripted:ScriptedModel",
}
"""By provider name: its adapter in ``activities/providers/``, as ``"module:Class"``."""

PROVIDER_NAMES: tuple[str, ...] = tuple(ADAPTERS)

Provider = Literal[PROVIDER_NAMES]  # type: ignore[valid-type]
"""A provider's name: the agent file's ``model.provider``, one of ``PROVIDER_NAMES``."""
