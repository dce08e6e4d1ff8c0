"""Tools from MCP servers: listed once per conversation (recorded in history), called as tool activities.

A worker keeps one connection per server configuration and reuses it for every
conversation: a stdio server is started on first use, started again after it
dies, and stopped with the worker (``MCPPool.lifetime`` wraps the worker's run).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import sysconfig
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CallToolResult
from mcp_types import Tool as MCPTool
from mcp_types.jsonrpc import CONNECTION_CLOSED
from temporalio import activity
from temporalio.exceptions import ApplicationError

from workflows.messages import ToolDefinition
from workflows.models import MCPServerConfig, ToolOutcome, ToolSpec

UNAVAILABLE = "MCPServerUnavailable"
_NAME = re.compile(r"[^A-Za-z0-9_-]")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class MCPPool:
    """The worker's connections to MCP servers, one per distinct configuration."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ if environ is not None else os.environ
        self._connections: dict[str, _Connection] = {}
        self._lock = asyncio.Lock()

    @asynccontextmanager
    async def lifetime(self) -> AsyncIterator[None]:
        """Wraps the worker's run: every server still running is stopped when the worker stops."""
        try:
            yield
        finally:
            await self.close()

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections))

    async def list_tools(self, server: MCPServerConfig) -> list[ToolSpec]:
        """The server's tools that the configuration lets through, as the workflow will record them."""
        connection, client = await self._open(server)
        listed: list[MCPTool] = []
        cursor: str | None = None
        try:
            while True:
                page = await client.list_tools(cursor=cursor)
                listed += page.tools
                if not (cursor := page.next_cursor):
                    break
        except Exception as e:
            raise await self._failed(connection, "listing its tools", e) from e
        return [_spec(server, t) for t in listed if server.offers(t.name)]

    async def call(
        self, server: MCPServerConfig, tool: str, arguments: dict[str, Any], idempotency_key: str
    ) -> ToolOutcome:
        """One tool call; what the server says went wrong becomes an error outcome for the model."""
        connection, client = await self._open(server)
        try:
            result = await client.call_tool(
                tool,
                arguments,
                read_timeout_seconds=server.call.timeout_seconds,
                # Servers that dedupe retried calls can key on this; others ignore it.
                meta={"io.temporal/idempotency-key": idempotency_key},
            )
        except MCPError as e:
            if e.code == CONNECTION_CLOSED:
                raise await self._failed(connection, f"calling {tool}", e) from e
            return ToolOutcome(
                content=f"MCP server {server.name!r} refused the call: {e.error.message}", is_error=True
            )
        except Exception as e:
            raise await self._failed(connection, f"calling {tool}", e) from e
        return ToolOutcome(content=_text(result), is_error=bool(result.is_error))

    async def _open(self, server: MCPServerConfig) -> tuple[_Connection, Client]:
        key = _key(server)
        async with self._lock:
            connection = self._connections.get(key)
            if connection is None or not connection.alive:
                if connection is not None:
                    activity.logger.warning("MCP server %r is gone; starting it again", server.name)
                transport = _transport(server, self._environ)
                connection = self._connections[key] = _Connection(server, transport)
        try:
            return connection, await connection.ready(timeout=min(server.call.timeout_seconds, 30.0))
        except ApplicationError:
            self._drop(key, connection)
            raise

    async def _failed(self, connection: _Connection, doing: str, error: BaseException) -> ApplicationError:
        """Drop the connection (the retry gets a fresh one) and describe the failure."""
        self._drop(_key(connection.server), connection)
        await connection.close()
        return ApplicationError(
            f"MCP server {connection.server.name!r} failed while {doing}: {_describe(error)}",
            type=UNAVAILABLE,
        )

    def _drop(self, key: str, connection: _Connection) -> None:
        if self._connections.get(key) is connection:  # not a fresh one another call opened meanwhile
            del self._connections[key]


class _Connection:
    """One open MCP session, held by its own task (anyio scopes must close where they opened)."""

    def __init__(self, server: MCPServerConfig, transport: Any) -> None:
        self.server = server
        self._transport = transport
        self._client: Client | None = None
        self._error: BaseException | None = None
        self._opened = asyncio.Event()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._hold(), name=f"mcp-{server.name}")

    @property
    def alive(self) -> bool:
        return not self._task.done()

    async def ready(self, timeout: float) -> Client:
        try:
            await asyncio.wait_for(asyncio.shield(self._opened.wait()), timeout)
        except TimeoutError:
            await self.close()
            raise ApplicationError(
                f"MCP server {self.server.name!r} did not answer within {timeout:g} s of starting",
                type=UNAVAILABLE,
            ) from None
        if self._client is None:
            # A command that does not exist or cannot run will not start on a retry either.
            permanent = isinstance(self._error, FileNotFoundError | PermissionError | NotADirectoryError)
            raise ApplicationError(
                f"MCP server {self.server.name!r} could not start: {_describe(self._error)}",
                type=UNAVAILABLE,
                non_retryable=permanent,
            )
        return self._client

    async def close(self) -> None:
        self._stop.set()
        try:
            await asyncio.wait_for(self._task, 10)
        except (TimeoutError, asyncio.CancelledError):
            self._task.cancel()

    async def _hold(self) -> None:
        try:
            async with Client(self._transport, cache=None) as client:
                self._client = client
                self._opened.set()
                await self._stop.wait()
        except Exception as e:
            self._error = e
        finally:
            self._client = None
            self._opened.set()


def _transport(server: MCPServerConfig, environ: Mapping[str, str]) -> Any:
    if server.url is not None:
        headers = {k: _fill(v, environ, server) for k, v in server.headers.items()}
        return streamable_http_client(server.url, http_client=create_mcp_http_client(headers=headers))
    assert server.command is not None
    return StdioServerParameters(
        command=_executable(server.command),
        args=server.args,
        env={k: _fill(v, environ, server) for k, v in server.env.items()} or None,
        cwd=server.cwd,
    )


def _fill(value: str, environ: Mapping[str, str], server: MCPServerConfig) -> str:
    """``${NAME}`` from the worker's environment; a missing variable is an error, not an empty string."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ApplicationError(
                f"MCP server {server.name!r} needs ${{{name}}}, which is not set on this worker",
                type="ConfigError",
                non_retryable=True,
            )
        return environ[name]

    return _VARIABLE.sub(one, value)


def _executable(command: str) -> str:
    """The command as given, found on PATH, or beside this Python (a venv's own bin/)."""
    return shutil.which(command) or shutil.which(command, path=sysconfig.get_path("scripts")) or command


def _spec(server: MCPServerConfig, tool: MCPTool) -> ToolSpec:
    read_only = bool(tool.annotations and tool.annotations.read_only_hint)
    return ToolSpec(
        definition=ToolDefinition(
            name=_NAME.sub("_", server.exposed_name(tool.name))[:64],
            description=tool.description or tool.title or tool.name,
            parameters=tool.input_schema,
        ),
        call=server.call,
        requires_approval=server.approval == "require"
        or (server.approval == "unless_read_only" and not read_only),
        mcp_server=server.name,
        mcp_tool=tool.name,
    )


def _text(result: CallToolResult) -> str:
    """What the model reads: the text parts, a note for other content, or the structured result."""
    parts = []
    for block in result.content:
        text = getattr(block, "text", None)
        if text is not None:
            parts.append(text)
        elif (resource := getattr(block, "resource", None)) is not None:
            parts.append(getattr(resource, "text", None) or f"[resource {resource.uri}]")
        else:
            parts.append(f"[{block.type} content: {getattr(block, 'mime_type', 'unknown type')}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content)
    return "\n".join(parts)


def _key(server: MCPServerConfig) -> str:
    """Connections are shared by configurations that start the same server the same way."""
    how = server.model_dump(include={"command", "args", "env", "cwd", "url", "headers"})
    return hashlib.sha256(json.dumps(how, sort_keys=True).encode()).hexdigest()


def _describe(error: BaseException | None) -> str:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if isinstance(error, MCPError):
        return error.error.message
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
