"""The worker's MCP side without the MCP SDK: the pool, made on first use, and ``list_mcp_tools``.

The SDK (~27 MiB) loads only in a worker whose conversations use MCP; ``activities.mcp`` holds the
pool and its connections.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from durable_agents.activities.heartbeat import heartbeating
from durable_agents.workflows.activity_io import ToolSpec
from durable_agents.workflows.activity_refs import LIST_MCP_TOOLS
from durable_agents.workflows.config import MCPServerConfig

if TYPE_CHECKING:
    from durable_agents.activities.mcp import MCPPool


class LazyMCPPool:
    """The one ``MCPPool`` that agent resolution, tool calls and tool listings share, made on first use."""

    def __init__(self, allowed: Callable[[], Iterable[MCPServerConfig]], *, allow_any: bool = False) -> None:
        """``allowed``: the servers the worker's agent files name now; ``allow_any`` lets inline
        agents name others (their commands run on this host)."""
        self._allowed = allowed
        self._allow_any = allow_any

    @functools.cached_property
    def pool(self) -> MCPPool:
        from durable_agents.activities.mcp import MCPPool

        return MCPPool(self._allowed, allow_any=self._allow_any)

    @asynccontextmanager
    async def lifetime(self) -> AsyncIterator[None]:
        """Wraps the worker's run: the servers stop when it stops, if some conversation used MCP."""
        try:
            yield
        finally:
            if (pool := self.__dict__.get("pool")) is not None:
                await pool.close()


class MCPActivities:
    """``list_mcp_tools``: an MCP server's tools, once per conversation (the workflow records them)."""

    def __init__(self, mcp: LazyMCPPool) -> None:
        self._mcp = mcp

    @LIST_MCP_TOOLS.defn
    async def list_mcp_tools(self, server: MCPServerConfig) -> list[ToolSpec]:
        async with heartbeating():  # a server may take a while to start
            return await self._mcp.pool.list_tools(server)
