"""The agent's activities: resolve the agent, call the model, run a tool."""

from __future__ import annotations

import asyncio
import functools
import importlib
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.agents import AgentFileError, check_agent
from activities.hooks import HookRegistry, default_hooks
from activities.idempotency import IdempotencyStore
from activities.state import StoreSettings
from activities.store import ConversationStore
from activities.tools import ToolRegistry
from activities.tools.workspace import LocalWorkspaces, Workspaces
from workflows.messages import ModelProgress, ModelRequest, ModelResponse, OnText
from workflows.models import (
    AgentRef,
    AgentSpec,
    HookContext,
    HookDecision,
    HookInvocation,
    MCPServerConfig,
    ModelCallInput,
    Price,
    ResolvedAgent,
    ToolInvocation,
    ToolOutcome,
    ToolSpec,
)

if TYPE_CHECKING:
    from activities.mcp import MCPPool

WorkerRole = Literal["all", "workflows", "models", "tools"]


class ModelProvider(Protocol):
    name: str

    async def complete(
        self, request: ModelRequest, timeout: float, on_text: OnText | None = None
    ) -> ModelResponse: ...

    async def aclose(self) -> None: ...


PROVIDERS: dict[str, str] = {
    "openai": "activities.providers.openai_chat:OpenAIChatModel",
    "anthropic": "activities.providers.anthropic_messages:AnthropicMessagesModel",
    "scripted": "activities.providers.scripted:ScriptedModel",
}
"""Adapters by provider name, imported on first use: the provider SDKs take seconds to import,
and a worker replacing a dead one should be polling by then (see ``import_providers``)."""


def provider_class(name: str) -> type[ModelProvider]:
    module, _, cls = PROVIDERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def import_providers(names: Iterable[str]) -> None:
    """Import these adapters (the worker runs this in a thread once it polls, for the providers its
    agent files name; another provider imports on its first call, off the event loop)."""
    for name in names:
        if name in PROVIDERS:
            provider_class(name)


class AgentActivities:
    """Holds what the worker built once at start: tools, agents, provider clients."""

    def __init__(
        self,
        registry: ToolRegistry,
        agents: dict[str, AgentSpec],
        *,
        workspace_root: Path | None = None,
        workspaces: Workspaces | None = None,
        providers: dict[str, ModelProvider] | None = None,
        store: ConversationStore | None = None,
        hooks: HookRegistry | None = None,
        idempotency: IdempotencyStore | None = None,
        prices: dict[str, Price] | None = None,
        allow_inline_mcp: bool = False,
        stores: StoreSettings | None = None,
    ) -> None:
        """Stores not given are built from ``stores`` (default: the environment); a ``workspace_root``
        means local folders there."""
        self._allow_inline_mcp = allow_inline_mcp
        self._prices = prices or {}
        self._registry = registry
        stores = stores or StoreSettings.from_env()
        self._idempotency = idempotency or stores.idempotency_store()
        self._hooks = hooks or default_hooks()
        self._agents = agents
        self._workspaces = workspaces or (
            LocalWorkspaces(workspace_root) if workspace_root else stores.workspaces()
        )
        self._store = store or stores.conversation_store()
        self._providers: dict[str, ModelProvider] = dict(providers or {})
        self._created: list[ModelProvider] = []
        """Providers this object made (and so closes); those passed in belong to the caller."""

    @functools.cached_property
    def mcp(self) -> MCPPool:
        """Connections to MCP servers; the worker stops them when it stops (``lifetime``). Built on
        first use: the MCP SDK (~27 MiB) loads only in a worker whose conversations use MCP."""
        from activities.mcp import MCPPool

        servers = (server for spec in self._agents.values() for server in spec.mcp_servers)
        return MCPPool(servers, allow_any=self._allow_inline_mcp)

    @asynccontextmanager
    async def lifetime(self) -> AsyncIterator[None]:
        """Wraps the worker's run: MCP servers stop and provider clients close when it stops."""
        try:
            yield
        finally:
            if (pool := self.__dict__.get("mcp")) is not None:  # built: some conversation used MCP
                await pool.close()
            await asyncio.gather(*(p.aclose() for p in self._created))
            self._created.clear()

    @activity.defn(name="resolve_agent")
    async def resolve_agent(self, ref: AgentRef) -> ResolvedAgent:
        if ref.spec is not None:
            spec = ref.spec
            try:
                check_agent(spec, self._registry, self._hooks, where=f"inline agent {spec.name!r}")
            except AgentFileError as e:
                raise ApplicationError(str(e), type="ConfigError", non_retryable=True) from e
            for server in spec.mcp_servers:
                self.mcp.check_allowed(server)
        elif ref.name in self._agents:
            spec = self._agents[ref.name]
        else:
            known = ", ".join(sorted(self._agents)) or "none"
            raise ApplicationError(
                f"unknown agent {ref.name!r}; this worker knows: {known}",
                type="ConfigError",
                non_retryable=True,
            )

        def local(name: str) -> bool:
            """The agent's ``local_tools``, or the tool's own default unless the agent sends it to a queue."""
            routed = spec.tool_task_queue is not None or name in spec.tool_task_queues
            return name in spec.local_tools or (self._registry[name].local and not routed)

        return ResolvedAgent(
            spec=spec,
            tools=[
                self._registry[name].spec.model_copy(update={"local": local(name)}) for name in spec.tools
            ],
            price=self._prices.get(ref.model or spec.model.model),
        )

    @activity.defn(name="list_mcp_tools")
    async def list_mcp_tools(self, server: MCPServerConfig) -> list[ToolSpec]:
        """An MCP server's tools, once per conversation: the workflow records them in history."""
        async with _heartbeating():  # a server may take a while to start
            return await self.mcp.list_tools(server)

    @activity.defn(name="call_model")
    async def call_model(self, input: ModelCallInput) -> ModelResponse:
        provider = await self._provider(input.request.settings.provider)
        # Heartbeating covers the store too: on a busy worker the transcript may wait for a thread.
        async with _heartbeating() as publish:
            request = await self._with_transcript(input)
            model = f"{provider.name}:{request.settings.model}"
            activity.logger.info(
                "calling %s with %d messages", model, len(request.messages),
                extra={"iteration": input.iteration, "model": model},
            )  # fmt: skip
            on_text = (
                (lambda text: publish(ModelProgress(partial_text=text))) if request.settings.stream else None
            )
            try:
                return await provider.complete(request, timeout=input.timeout_seconds, on_text=on_text)
            except ValueError as e:  # a response we cannot map: retrying would give the same
                raise ApplicationError(
                    f"{provider.name}: unusable response: {e}",
                    type="ProviderResponseError",
                    non_retryable=True,
                ) from e

    async def _with_transcript(self, input: ModelCallInput) -> ModelRequest:
        """Store the new messages after the ``stored`` ones; return the request with the whole transcript."""
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
        return input.request.model_copy(update={"messages": earlier + input.request.messages})

    @activity.defn(name="run_tool")
    async def run_tool(self, invocation: ToolInvocation) -> ToolOutcome:
        workspace = self._workspaces.open(_conversation_key(invocation))
        log = {"iteration": invocation.iteration, "call_id": invocation.call_id, "tool": invocation.name}
        activity.logger.info("running tool %s", invocation.name, extra=log)
        async with _heartbeating():
            if invocation.mcp is not None:
                outcome = await self.mcp.call(
                    invocation.mcp,
                    invocation.mcp_tool or invocation.name,
                    invocation.arguments,
                    invocation.idempotency_key,
                )
            else:
                outcome = await self._registry.run(invocation, workspace, self._idempotency)
            if invocation.post_hooks:
                context = HookContext(conversation_id=invocation.conversation_id, call_id=invocation.call_id)
                about = HookInvocation(
                    hook="", context=context, tool=invocation.name, arguments=invocation.arguments
                )
                outcome = await self._hooks.redact(invocation.post_hooks, about, outcome)
        return _truncated(outcome, invocation.max_output_chars)

    @activity.defn(name="run_hook")
    async def run_hook(self, invocation: HookInvocation) -> HookDecision:
        return await self._hooks.run(invocation)

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

    def for_role(self, role: WorkerRole) -> list:
        """The activities a worker of ``role`` runs (see worker.py --role)."""
        match role:
            case "all":
                return [
                    self.resolve_agent,
                    self.call_model,
                    self.run_tool,
                    self.run_hook,
                    self.list_mcp_tools,
                ]
            case "workflows":  # run_tool for local tools, which run beside their workflow
                return [self.resolve_agent, self.run_hook, self.run_tool]
            case "models":
                return [self.call_model]
            case "tools":  # MCP servers run beside the other tools
                return [self.run_tool, self.list_mcp_tools]


def _truncated(outcome: ToolOutcome, limit: int) -> ToolOutcome:
    """Cut long outputs before they enter history (one tool must not hit the 2 MB payload limit)."""
    if len(outcome.content) <= limit:
        return outcome
    note = f"\n[output truncated: {len(outcome.content)} characters, the first {limit} shown]"
    return outcome.model_copy(update={"content": outcome.content[:limit] + note})


def _conversation_key(invocation: ToolInvocation) -> str:
    """``<workflow id>/<first run id>``, the key the workflow gives the conversation store: a new
    conversation reusing a finished id gets a key (and workspace) of its own. The idempotency key
    is ``<conversation key>/<call id>``, and a run id holds no '/'."""
    prefix = invocation.conversation_id + "/"
    if not invocation.idempotency_key.startswith(prefix):
        return invocation.idempotency_key.rpartition("/")[0] or invocation.idempotency_key
    run_id = invocation.idempotency_key.removeprefix(prefix).partition("/")[0]
    return prefix + run_id


@asynccontextmanager
async def _heartbeating() -> AsyncIterator[Callable[[Any], None]]:
    """Heartbeat while a call runs, so a dead worker is noticed (and a cancellation heard) within the
    heartbeat timeout. Yields ``publish(details)``: progress that ``describe`` shows to watchers."""
    latest: list[Any] = []

    def publish(details: Any) -> None:
        latest[:] = [details]
        activity.heartbeat(*latest)

    timeout = activity.info().heartbeat_timeout
    if not timeout:
        yield publish
        return

    async def beat() -> None:
        while True:  # the first beat after a third of the timeout: a quick call sends none
            await asyncio.sleep(timeout.total_seconds() / 3)
            activity.heartbeat(*latest)

    task = asyncio.create_task(beat())
    try:
        yield publish
    finally:
        task.cancel()
