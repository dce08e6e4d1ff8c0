"""The agent-resolution activity: the agent a conversation names (or brings inline), its tools, its
model's price and context window."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from temporalio.exceptions import ApplicationError

from durable_agents.activities.agent_files import AgentFileError, AgentFiles, check_agent, check_max_tokens
from durable_agents.activities.hooks import HookRegistry
from durable_agents.activities.mcp_activity import LazyMCPPool
from durable_agents.activities.models import ModelTable
from durable_agents.activities.tools import ToolRegistry
from durable_agents.stores.errors import StoreIdentity
from durable_agents.workflows.activity_io import AgentRef, ResolvedAgent, ToolSpec
from durable_agents.workflows.activity_refs import RESOLVE_AGENT
from durable_agents.workflows.config import AgentSpec, NotifyConfig
from durable_agents.workflows.handoffs import handoff_tool
from durable_agents.workflows.subagents import subagent_tool


@dataclass(frozen=True, eq=False)  # a bound method hashes its instance: by identity, not by fields
class AgentResolver:
    """``resolve_agent``, over the agents (the files as they are now, or agents given in code), and
    the models table, tools and hooks the worker loaded at start."""

    agents: Mapping[str, AgentSpec] | AgentFiles
    models: ModelTable
    """Prices (a conversation's cost budget needs its model's) and context windows, by model name."""
    registry: ToolRegistry
    hooks: HookRegistry
    mcp: LazyMCPPool
    """An inline agent may name only the MCP servers the worker allows."""
    stores: StoreIdentity
    """Recorded with the agent: the conversation's calls run only where the stores are the same."""
    notify_url: str | None = None
    """``AGENT_NOTIFY_URL``: the webhook of agents whose ``[notify]`` names none."""

    @RESOLVE_AGENT.defn
    async def resolve_agent(self, ref: AgentRef) -> ResolvedAgent:
        agents = self.agents.current() if isinstance(self.agents, AgentFiles) else self.agents
        if ref.spec is not None:
            spec = ref.spec
            try:
                check_agent(spec, self.registry, self.hooks, where=f"inline agent {spec.name!r}")
            except AgentFileError as e:
                raise ApplicationError(str(e), type="ConfigError", non_retryable=True) from e
            for server in spec.mcp_servers:
                self.mcp.pool.check_allowed(server)
            for field in ("subagents", "handoffs"):
                if unknown := [name for name in getattr(spec, field) if name not in agents]:
                    raise ApplicationError(
                        f"inline agent {spec.name!r}: field '{field}': unknown agent(s) {', '.join(unknown)};"
                        f" this worker knows: {', '.join(sorted(agents)) or 'none'}",
                        type="ConfigError",
                        non_retryable=True,
                    )
        elif ref.name in agents:
            spec = agents[ref.name]
        else:
            known = ", ".join(sorted(agents)) or "none"
            raise ApplicationError(
                f"unknown agent {ref.name!r}; this worker knows: {known}",
                type="ConfigError",
                non_retryable=True,
            )

        where = f"inline agent {spec.name!r}" if ref.spec is not None else f"agent {spec.name!r}"
        try:  # an agent in code, or the start's model instead of the agent's, unchecked until now
            check_max_tokens(spec, self.models.max_output_tokens, where=where, model=ref.model)
        except AgentFileError as e:
            raise ApplicationError(str(e), type="ConfigError", non_retryable=True) from e

        def local(name: str) -> bool:
            """The agent's ``local_tools``, or the tool's own default unless the agent sends it to a queue."""
            routed = spec.tool_task_queue is not None or name in spec.tool_task_queues
            return (name in spec.local_tools or (self.registry[name].local and not routed)) and not once(name)

        def once(name: str) -> bool:
            return name in spec.at_most_once or self.registry[name].at_most_once

        def tool(name: str) -> ToolSpec:
            update: dict = {"local": local(name)}
            if once(name):  # a field set only when true: resolutions recorded before it stay as they were
                update["at_most_once"] = True
            return self.registry[name].spec.model_copy(update=update)

        if self.notify_url is not None and (spec.notify is None or spec.notify.url is None):
            webhook = (spec.notify or NotifyConfig()).model_copy(update={"url": self.notify_url})
            spec = spec.model_copy(update={"notify": webhook})
        return ResolvedAgent(
            spec=spec,
            tools=[tool(name) for name in spec.tools]
            + [subagent_tool(agents[name]) for name in spec.subagents]
            + [handoff_tool(agents[name]) for name in spec.handoffs],
            price=self.models.price(ref.model or spec.model.model),
            fallback_prices={
                entry: price
                for entry in spec.model.fallback
                if (price := self.models.price(entry.partition(":")[2])) is not None
            },
            judge_prices={
                judge.model.label: price
                for judge in [*spec.approval.judges, *spec.guardrails.input, *spec.guardrails.output]
                if judge.model is not None and (price := self.models.price(judge.model.model)) is not None
            },
            context_window=spec.model.context_window
            or self.models.context_window(spec.model.provider, ref.model or spec.model.model),
            stores=await self.stores(),
        )
