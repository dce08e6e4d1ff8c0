"""The model activity: the conversation's transcript from the store, then one call to its provider."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_agents.activities.delta_channel import DeltaSender
from durable_agents.activities.heartbeat import heartbeating
from durable_agents.activities.metering import Meter
from durable_agents.activities.providers import PROVIDERS, ModelProvider, provider_class
from durable_agents.activities.text_deltas import StreamedParts, text_deltas
from durable_agents.activities.tools import ToolRegistry
from durable_agents.stores.conversations import ConversationStore
from durable_agents.stores.errors import StoreIdentity
from durable_agents.workflows.activity_io import ModelCallInput, definitions_digest
from durable_agents.workflows.activity_refs import CALL_MODEL
from durable_agents.workflows.messages import ModelProgress, ModelRequest, ModelResponse
from durable_agents.workflows.transcript import model_view, summary_request


class ModelActivities:
    """``call_model``, with the provider clients the worker keeps (made on first use, closed by
    ``lifetime``)."""

    def __init__(
        self,
        store: ConversationStore,
        providers: Mapping[str, ModelProvider] | None = None,
        registry: ToolRegistry | None = None,
        identity: StoreIdentity | None = None,
        deltas: DeltaSender | None = None,
        meter: Meter | None = None,
    ) -> None:
        """``providers`` replace the adapters by name; they belong to the caller, who closes them.
        ``registry`` defines the tools a call names (``ModelCallInput.registry_tools``); ``identity``
        is the store identity calls are checked against (default: the store's); ``deltas`` is the
        fast channel to readers (None: streamed text goes to the event stream in batches), closed by
        ``lifetime``; ``meter`` counts calls in the shared ledger (activities/metering.py)."""
        self._deltas = deltas
        self._meter = meter or Meter(None, None)
        self._store = store
        self._identity = identity or StoreIdentity(store.identity)
        self._registry = registry
        self._providers: dict[str, ModelProvider] = dict(providers or {})
        self._created: list[ModelProvider] = []
        """Providers this object made (and so closes)."""

    @asynccontextmanager
    async def lifetime(self) -> AsyncIterator[None]:
        """Wraps the worker's run: the provider clients made here close when it stops."""
        try:
            yield
        finally:
            await asyncio.gather(*(p.aclose() for p in self._created))
            self._created.clear()
            if self._deltas is not None:
                await self._deltas.aclose()

    @CALL_MODEL.defn
    async def call_model(self, input: ModelCallInput) -> ModelResponse:
        input = input.completed()
        await self._identity.check(input.stores, input.conversation_key)
        # Heartbeating covers the adapter's first import and the store too: on a busy worker either
        # may take longer than the heartbeat timeout.
        async with heartbeating() as publish, text_deltas(input.model_call, self._deltas) as parts:
            provider = await self._provider(input.request.settings.provider)
            request = self._with_registry_tools(input, await self._with_transcript(input))
            model = f"{provider.name}:{request.settings.model}"
            activity.logger.info(
                "calling %s with %d messages", model, len(request.messages),
                extra={"iteration": input.iteration, "model": model},
            )  # fmt: skip

            def complete() -> Awaitable[ModelResponse]:
                return provider.complete(
                    request,
                    timeout=input.timeout_seconds,
                    on_text=_Reported(publish, parts) if request.settings.stream else None,
                )

            try:
                return await self._meter.call(input, request, complete)
            except ValueError as e:  # a response we cannot map: retrying would give the same
                raise ApplicationError(
                    f"{provider.name}: unusable response: {e}",
                    type="ProviderResponseError",
                    non_retryable=True,
                ) from e

    async def _with_transcript(self, input: ModelCallInput) -> ModelRequest:
        """Store the new messages after the ``stored`` ones; return the request with what the model
        sees of the whole transcript (after a summary: the system prompt, the summary and what follows)."""
        earlier: list = []
        if input.stored:
            found = await self._store.load(input.conversation_key, input.stored)
            if found is None:
                raise ApplicationError(
                    f"the conversation store holds fewer than {input.stored} messages "
                    f"for {input.conversation_key}",
                    type="ConversationStoreGap",
                    non_retryable=True,
                )
            earlier = found
        await self._store.save(input.conversation_key, input.stored, input.request.messages)
        transcript = earlier + input.request.messages
        messages = summary_request(transcript) if input.summarise else model_view(transcript)
        return input.request.model_copy(update={"messages": messages})

    def _with_registry_tools(self, input: ModelCallInput, request: ModelRequest) -> ModelRequest:
        """The tools the call names, defined by this worker's registry, ahead of the others."""
        if not input.registry_tools:
            return request
        known = self._registry or {}
        definitions = [known[name].definition for name in input.registry_tools if name in known]
        if definitions_digest(definitions) != input.registry_digest:
            raise ApplicationError(
                f"this worker's tool registry defines {', '.join(input.registry_tools)} otherwise"
                " than the conversation's worker (or lacks one)",
                type="ToolDefinitionsDiffer",
                non_retryable=True,
            )
        return request.model_copy(update={"tools": definitions + request.tools})

    async def provider(self, name: str) -> ModelProvider:
        """The adapter of provider ``name``, made on first use (the judge activity's too)."""
        return await self._provider(name)

    async def _provider(self, name: str) -> ModelProvider:
        if name not in self._providers:
            if name not in PROVIDERS:
                raise ApplicationError(
                    f"unknown model provider {name!r}", type="ConfigError", non_retryable=True
                )
            # A provider SDK's first import takes a second or more: not on the event loop, where
            # it would hold up every other activity's heartbeats.
            adapter = await asyncio.to_thread(provider_class, name)
            if name not in self._providers:  # a concurrent first call may have made it meanwhile
                self._providers[name] = adapter()
                self._created.append(self._providers[name])
        return self._providers[name]


class _Reported:
    """What a streamed call reports as it comes: its text so far to the heartbeat (``describe``, the
    Web UI) and, with tool calls' arguments, to the readers (``text_deltas``)."""

    def __init__(self, publish: Callable[[Any], None], parts: StreamedParts | None) -> None:
        self._publish, self._parts = publish, parts

    def __call__(self, text: str) -> None:
        self._publish(ModelProgress(partial_text=text))
        if self._parts is not None:
            self._parts(text)

    def tool_call(self, index: int, id: str, name: str, arguments: str) -> None:
        if self._parts is not None:
            self._parts.tool_call(index, id, name, arguments)
