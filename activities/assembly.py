"""``AgentActivities``: the seven activities of conversations, and the erasure's, over one worker's
tools, agents, stores and providers.

Each activity lives with its concern (``agent_resolution``, ``model_call``, ``tool_calls``,
``mcp_activity``, ``hooks``, ``approver_keys``); this class builds them from the worker's
collaborators and says which a worker of each role runs.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from durable_agents.activities.agent_files import AgentFiles
from durable_agents.activities.agent_resolution import AgentResolver
from durable_agents.activities.approver_keys import ApproverKeys
from durable_agents.activities.budgets import BudgetsFile
from durable_agents.activities.delta_channel import DeltaSender
from durable_agents.activities.hooks import HookActivities, HookRegistry, default_hooks
from durable_agents.activities.judge_activity import JudgeActivities
from durable_agents.activities.lifecycle import Lifecycle
from durable_agents.activities.mcp_activity import LazyMCPPool, MCPActivities
from durable_agents.activities.metering import Meter
from durable_agents.activities.model_activity import ModelActivities
from durable_agents.activities.models import ModelTable, load_models
from durable_agents.activities.notify import DEFAULT_CONSOLE_URL, Notifier
from durable_agents.activities.providers import ModelProvider
from durable_agents.activities.tool_activity import ToolActivities
from durable_agents.activities.tools import ToolRegistry
from durable_agents.stores.conversations import ConversationStore
from durable_agents.stores.errors import StoreIdentity
from durable_agents.stores.idempotency import IdempotencyStore
from durable_agents.stores.settings import StoreSettings
from durable_agents.stores.workspaces import LocalWorkspaces, Workspaces
from durable_agents.workflows import wire
from durable_agents.workflows.activity_refs import (
    CALL_MODEL,
    JUDGE,
    LIST_MCP_TOOLS,
    NOTIFY,
    RESOLVE_AGENT,
    RUN_HOOK,
    RUN_TOOL,
    VERIFY_DECISION,
)
from durable_agents.workflows.config import AgentSpec

if TYPE_CHECKING:
    from durable_agents.activities.mcp import MCPPool

WorkerRole = Literal["all", "workflows", "models", "tools"]


class AgentActivities:
    """Holds what the worker built once at start: tools, agents (their files read again as they
    change), provider clients."""

    def __init__(
        self,
        registry: ToolRegistry,
        agents: Mapping[str, AgentSpec] | AgentFiles,
        *,
        workspace_root: Path | None = None,
        workspaces: Workspaces | None = None,
        providers: dict[str, ModelProvider] | None = None,
        store: ConversationStore | None = None,
        hooks: HookRegistry | None = None,
        idempotency: IdempotencyStore | None = None,
        models: ModelTable | None = None,
        allow_inline_mcp: bool = False,
        stores: StoreSettings,
        approver_keys: Mapping[str, bytes] | None = None,
        deltas: DeltaSender | None = None,
        budgets: BudgetsFile | None = None,
        notifier: Notifier | None = None,
        notify_url: str | None = None,
    ) -> None:
        """Stores not given are built from ``stores``; a ``workspace_root`` means local folders there.
        ``approver_keys``: by name, the keys decisions must be signed with (none: self-declared).
        ``deltas``: the fast channel streamed model calls send their deltas on (None: batches).
        ``models``: the models table, prices and context windows (default: config/models.toml).
        ``budgets``: the budgets file model calls are metered by, in the stores' ledger (None: none).
        ``notifier``: what tells webhooks that calls wait (default: unsigned bodies, the console on
        this machine); ``notify_url``: the webhook of agents that name none (None: nobody is told)."""
        hooks = hooks or default_hooks()
        workspaces = workspaces or (
            LocalWorkspaces(workspace_root) if workspace_root else stores.workspaces()
        )

        def current() -> Mapping[str, AgentSpec]:
            return agents.current() if isinstance(agents, AgentFiles) else agents

        self._mcp = LazyMCPPool(
            lambda: (server for spec in current().values() for server in spec.mcp_servers),
            allow_any=allow_inline_mcp,
        )
        store = store or stores.conversation_store()
        identity = StoreIdentity(store.identity)
        idempotency = idempotency or stores.idempotency_store()
        payloads = stores.payload_driver()
        ledger = functools.cache(stores.ledger)  # one connection (pool), made on first use
        models = models if models is not None else load_models()
        meter = Meter(ledger, budgets, models.price)
        self._models = ModelActivities(store, providers, registry, identity, deltas, meter)
        resolver = AgentResolver(
            agents,
            models,
            registry,
            hooks,
            self._mcp,
            identity,
            notify_url,
        )
        tools = ToolActivities(
            registry,
            workspaces,
            idempotency,
            hooks,
            self._mcp,
            identity,
            payloads.ping,
        )
        self.resolve_agent = resolver.resolve_agent
        self.call_model = self._models.call_model
        self.run_tool = tools.run_tool
        self.run_hook = HookActivities(hooks).run_hook
        self.list_mcp_tools = MCPActivities(self._mcp).list_mcp_tools
        self.verify_decision = ApproverKeys(approver_keys or {}).verify_decision
        self.judge = JudgeActivities(self._models.provider, meter).judge
        self.notify = (notifier or Notifier(None, DEFAULT_CONSOLE_URL)).notify
        self.lifecycle = Lifecycle(store, idempotency, workspaces, payloads, ledger)  # type: ignore[arg-type]

    @property
    def mcp(self) -> MCPPool:
        """Connections to MCP servers, made on first use (see ``LazyMCPPool``)."""
        return self._mcp.pool

    @asynccontextmanager
    async def lifetime(self) -> AsyncIterator[None]:
        """Wraps the worker's run: MCP servers stop and provider clients close when it stops."""
        async with self._models.lifetime(), self._mcp.lifetime():
            yield

    def for_role(self, role: WorkerRole) -> list:
        """The activities a worker of ``role`` runs (see worker.py --role), each under its name and
        again under its old one, for conversations started before the namespace (workflows/wire.py)."""
        activities = {
            RESOLVE_AGENT: self.resolve_agent,
            CALL_MODEL: self.call_model,
            RUN_TOOL: self.run_tool,
            RUN_HOOK: self.run_hook,
            LIST_MCP_TOOLS: self.list_mcp_tools,
            VERIFY_DECISION: self.verify_decision,
            JUDGE: self.judge,
            NOTIFY: self.notify,
        }
        match role:
            case "all":
                refs = list(activities)
            case "workflows":  # run_tool for local tools, verify_decision, notify: beside their workflow
                refs = [RESOLVE_AGENT, RUN_HOOK, RUN_TOOL, VERIFY_DECISION, NOTIFY]
            case "models":  # a model judge is a model call too
                refs = [CALL_MODEL, JUDGE]
            case "tools":  # MCP servers run beside the other tools
                refs = [RUN_TOOL, LIST_MCP_TOOLS]
        old = [ref for ref in refs if ref.name in wire.OLD_NAMES]  # JUDGE came with the namespace
        erasure = self.lifecycle.activities() if role in ("all", "workflows") else []
        return [
            *(activities[ref] for ref in refs),
            *(ref.under_old_name(activities[ref]) for ref in old),
            *erasure,
        ]
