"""The tool activity: one call to a registry tool or an MCP server's, then the post_tool_use hooks."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import activity

from activities.heartbeat import heartbeating
from activities.hooks import HookRegistry
from activities.idempotency import IdempotencyStore
from activities.mcp_activity import LazyMCPPool
from activities.tools import ToolRegistry
from activities.tools.workspace import Workspaces
from workflows.activity_io import HookContext, HookInvocation, ToolInvocation, ToolOutcome
from workflows.activity_refs import RUN_TOOL


@dataclass(frozen=True, eq=False)  # a bound method hashes its instance: by identity, not by fields
class ToolActivities:
    """``run_tool``, over the worker's tools, workspaces and MCP servers."""

    registry: ToolRegistry
    workspaces: Workspaces
    idempotency: IdempotencyStore
    hooks: HookRegistry
    """For the post_tool_use hooks, which run inside the tool's activity."""
    mcp: LazyMCPPool

    @RUN_TOOL.defn
    async def run_tool(self, invocation: ToolInvocation) -> ToolOutcome:
        workspace = self.workspaces.open(_conversation_key(invocation))
        log = {"iteration": invocation.iteration, "call_id": invocation.call_id, "tool": invocation.name}
        activity.logger.info("running tool %s", invocation.name, extra=log)
        async with heartbeating():
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


def _conversation_key(invocation: ToolInvocation) -> str:
    """``<workflow id>/<first run id>``, the key the workflow gives the conversation store: a new
    conversation reusing a finished id gets a key (and workspace) of its own. The idempotency key
    is ``<conversation key>/<call id>``, and a run id holds no '/'."""
    prefix = invocation.conversation_id + "/"
    if not invocation.idempotency_key.startswith(prefix):
        return invocation.idempotency_key.rpartition("/")[0] or invocation.idempotency_key
    run_id = invocation.idempotency_key.removeprefix(prefix).partition("/")[0]
    return prefix + run_id
