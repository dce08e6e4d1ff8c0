"""The tool activity: one call to a registry tool or an MCP server's, then the post_tool_use hooks.

A tool's body that has returned is never reported as failed for a store's sake: a large outcome
(kept in the payload store as the activity completes) waits, heartbeating, until that store answers
and has room for it, and the worker keeps it meanwhile, so an attempt run again after the outage
(``workflows/outages.py``) returns it instead of running the body again. With ``ctx.once`` an
effect's result is also in the idempotency store, for a retry on any host.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_agents.activities.heartbeat import heartbeating
from durable_agents.activities.hooks import HookRegistry
from durable_agents.activities.mcp_activity import LazyMCPPool
from durable_agents.activities.tools import ToolRegistry
from durable_agents.stores.conversations import PAYLOAD_THRESHOLD
from durable_agents.stores.errors import StoreIdentity
from durable_agents.stores.idempotency import IdempotencyStore
from durable_agents.stores.workspaces import Workspaces
from durable_agents.workflows.activity_io import HookContext, HookInvocation, ToolInvocation, ToolOutcome
from durable_agents.workflows.activity_refs import RUN_TOOL
from durable_agents.workflows.at_most_once import NOT_STARTED


@dataclass(frozen=True, eq=False)  # a bound method hashes its instance: by identity, not by fields
class ToolActivities:
    """``run_tool``, over the worker's tools, workspaces and MCP servers."""

    registry: ToolRegistry
    workspaces: Workspaces
    idempotency: IdempotencyStore
    hooks: HookRegistry
    """For the post_tool_use hooks, which run inside the tool's activity."""
    mcp: LazyMCPPool
    stores: StoreIdentity
    """Checked before the tool runs: a conversation's effects happen against its own stores only."""
    payload_store_answers: Callable[[int], Awaitable[None]]
    """Returns once the payload store answers and has room for that many bytes (``patiently``): a
    large outcome is stored as the activity completes, when it can no longer heartbeat."""
    _finished: OrderedDict[str, ToolOutcome] = field(default_factory=OrderedDict)
    """Large outcomes by idempotency key, kept for an attempt run again after a store outage."""

    @RUN_TOOL.defn
    async def run_tool(self, invocation: ToolInvocation) -> ToolOutcome:
        invocation = invocation.completed()
        try:
            await self.stores.check(invocation.stores, invocation.stored_under)
        except Exception as e:
            if not invocation.at_most_once:
                raise
            # Refused before the tool's function ran: the workflow may try again (workflows/at_most_once.py).
            raise ApplicationError(f"{e}", type=NOT_STARTED) from e
        if (kept := self._finished.get(invocation.idempotency_key)) is not None:
            activity.logger.info("tool %s ran before this attempt: its outcome as kept", invocation.name)
            return kept
        async with heartbeating():
            outcome = await self._run(invocation)
            if len(outcome.content) >= LARGE:
                self._keep(invocation.idempotency_key, outcome)
                await self.payload_store_answers(len(outcome.content.encode()))
        return outcome

    def _keep(self, key: str, outcome: ToolOutcome) -> None:
        self._finished[key] = outcome
        while len(self._finished) > KEPT:
            self._finished.popitem(last=False)

    async def _run(self, invocation: ToolInvocation) -> ToolOutcome:
        workspace = self.workspaces.open(invocation.stored_under)
        log = {"iteration": invocation.iteration, "call_id": invocation.call_id, "tool": invocation.name}
        activity.logger.info("running tool %s", invocation.name, extra=log)
        if invocation.mcp is not None:
            outcome = await self.mcp.pool.call(
                invocation.mcp,
                invocation.mcp_tool or invocation.name,
                invocation.arguments,
                invocation.idempotency_key,
            )
        else:
            outcome = await self.registry.run(invocation, workspace, self.idempotency)
        if invocation.post_hooks:
            context = HookContext(conversation_id=invocation.conversation_id, call_id=invocation.call_id)
            about = HookInvocation(
                hook="", context=context, tool=invocation.name, arguments=invocation.arguments
            )
            outcome = await self.hooks.redact(invocation.post_hooks, about, outcome)
        return outcome.truncated(invocation.max_output_chars)


LARGE = PAYLOAD_THRESHOLD // 2
"""Outcomes from this many characters on may reach the payload store (JSON escapes and encryption
add bytes: half the threshold is on the safe side)."""
KEPT = 64
"""Large outcomes a worker keeps for attempts run again (the oldest go first)."""
