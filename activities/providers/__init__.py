"""One adapter per wire protocol, each: neutral request in, neutral response out.

A new provider is one adapter module here and one line in ``workflows/providers.py``'s ``ADAPTERS``
(its docstring says how); ``PROVIDERS`` below is made from that line.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Protocol

from durable_agents.workflows.messages import ModelRequest, ModelResponse, OnText
from durable_agents.workflows.providers import ADAPTERS


class ModelProvider(Protocol):
    name: str

    async def complete(
        self, request: ModelRequest, timeout: float, on_text: OnText | None = None
    ) -> ModelResponse: ...

    async def aclose(self) -> None: ...


PROVIDERS: dict[str, str] = {name: f"{__name__}.{adapter}" for name, adapter in ADAPTERS.items()}
"""Adapters by provider name, as ``module:Class``, imported on first use: the provider SDKs take
seconds to import, and a worker replacing a dead one should be polling by then (``import_providers``)."""


def provider_class(name: str) -> type[ModelProvider]:
    module, _, cls = PROVIDERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def import_providers(names: Iterable[str]) -> None:
    """Import these adapters (the worker runs this in a thread once it polls, for the providers its
    agent files name; another provider imports on its first call, off the event loop)."""
    for name in names:
        if name in PROVIDERS:
            provider_class(name)
