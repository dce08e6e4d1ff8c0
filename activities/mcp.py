"""Tools from MCP servers: listed once per conversation (recorded in history), called as tool activities.

A worker keeps one connection per server configuration and reuses it for every
conversation: a stdio server is started on first use, started again after it
dies, and stopped with the worker (``MCPPool.lifetime`` wraps the worker's run).

Which servers a worker will start or connect to is the worker's decision: those
its own agent files name, and others only when it allows inline MCP servers.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import sysconfig
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CallToolResult
from mcp_types import Tool as MCPTool
from mcp_types.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, REQUEST_TIMEOUT
from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_agents.workflows.activity_io import ToolOutcome, ToolSpec
from durable_agents.workflows.config import ENV_REFERENCE, MCPServerConfig
from durable_agents.workflows.messages import ToolDefinition

UNAVAILABLE = "MCPServerUnavailable"
NOT_ALLOWED = "MCPServerNotAllowed"
_NAME = re.compile(r"[^A-Za-z0-9_-]")
_CALL_ERRORS = (INVALID_PARAMS, METHOD_NOT_FOUND)
"""Errors about the call itself (unknown tool, bad arguments): the model hears them, the connection stays."""
_TRANSPORT_ERRORS = (
    OSError,
    EOFError,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    httpx2.TransportError,
)
_T = TypeVar("_T")


class MCPPool:
    """The worker's connections to MCP servers, one per distinct configuration."""

    def __init__(
        self,
        allowed: Callable[[], Iterable[MCPServerConfig]] = tuple,
        *,
        allow_any: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """``allowed``: the servers the agent files name, asked at each check (they may change)."""
        self._allowed = allowed
        self._allow_any = allow_any
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

    def check_allowed(self, server: MCPServerConfig) -> None:
        """Refuse a server this worker was not told about: an MCP command runs on the worker's host,
        and its headers and environment may carry the worker's secrets."""
        if self._allow_any or _key(server) in {_key(s) for s in self._allowed()}:
            return
        raise ApplicationError(
            f"MCP server {server.name!r} is not one this worker runs: define it in an agent file"
            " of the worker, or start the worker with AGENT_ALLOW_INLINE_MCP=1",
            type=NOT_ALLOWED,
            non_retryable=True,
        )

    async def list_tools(self, server: MCPServerConfig) -> list[ToolSpec]:
        """The server's tools that the configuration lets through, as the workflow will record them."""

        async def page_by_page(client: Client) -> list[MCPTool]:
            listed: list[MCPTool] = []
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                listed += page.tools
                if not (cursor := page.next_cursor):
                    return listed

        try:
            listed = await self._with_client(server, "listing its tools", page_by_page)
        except MCPError as e:  # e.g. a server without tools
            raise ApplicationError(
                f"MCP server {server.name!r} cannot list tools: {e.error.message}",
                type=UNAVAILABLE,
                non_retryable=True,
            ) from e
        return [_spec(server, t) for t in listed if server.offers(t.name)]

    async def call(
        self, server: MCPServerConfig, tool: str, arguments: dict[str, Any], idempotency_key: str
    ) -> ToolOutcome:
        """One tool call; what the server says about the call itself is an error outcome for the model."""
        # A little less than the activity's own timeout, so a slow server is reported as such.
        timeout = server.call.timeout_seconds * 0.9

        async def call_tool(client: Client) -> CallToolResult:
            return await client.call_tool(
                tool,
                arguments,
                read_timeout_seconds=timeout,
                # Servers that dedupe retried calls can key on this; others ignore it.
                meta={"io.temporal/idempotency-key": idempotency_key},
            )

        try:
            result = await self._with_client(server, f"calling {tool}", call_tool)
        except MCPError as e:
            return ToolOutcome(
                content=f"MCP server {server.name!r} refused the call: {e.error.message}", is_error=True
            )
        except ApplicationError:
            raise
        except Exception as e:  # a malformed result: this call's problem, not the connection's
            return ToolOutcome(
                content=f"MCP server {server.name!r} gave an unusable answer: {_describe(e)}", is_error=True
            )
        return ToolOutcome(content=_text(result), is_error=bool(result.is_error))

    async def _with_client(
        self, server: MCPServerConfig, doing: str, use: Callable[[Client], Awaitable[_T]]
    ) -> _T:
        """``use(client)``, sent at most once per attempt: a call that failed on its way may have run
        (it may even have killed its server), and sending it again here would run it more often than
        its ``max_attempts``. Only a session that provably never saw the call is replaced at once: a
        stdio server that exited since the last call (see ``_open``), or an HTTP server that answers
        404 to a session it no longer knows. Other failures drop the connection and are left to
        Temporal's retry policy; its next attempt connects afresh."""
        self.check_allowed(server)
        for attempt in (1, 2):
            connection = await self._open(server)
            try:
                return await use(await connection.ready(_startup_timeout(server)))
            except MCPError as e:
                if e.code in _CALL_ERRORS:
                    raise
                if e.code == REQUEST_TIMEOUT:  # the server is slow, not gone: keep it for the retry
                    raise ApplicationError(
                        f"MCP server {server.name!r} timed out while {doing}", type=UNAVAILABLE
                    ) from e
                failure: BaseException = e
            except _TRANSPORT_ERRORS as e:
                failure = e
            await self._drop(connection)
            if attempt == 2 or not connection.forgot_session:
                raise connection.failure(doing, failure)
            activity.logger.warning(
                "MCP server %r no longer knows the session; connecting again", server.name
            )
        raise AssertionError("unreachable")

    async def _open(self, server: MCPServerConfig) -> _Connection:
        """The open connection, or a new one; one found ended (its server exited) is closed."""
        key = _key(server)
        async with self._lock:
            connection = self._connections.get(key)
            if connection is not None and connection.alive:
                return connection
            self._connections[key] = fresh = _Connection(server, self._environ)
        if connection is not None:
            activity.logger.warning(
                "MCP server %r exited since its last call; starting it again", server.name
            )
            await connection.close()
        return fresh

    async def _drop(self, connection: _Connection) -> None:
        """Forget a broken connection (not a fresh one another call opened meanwhile) and close it."""
        key = _key(connection.server)
        async with self._lock:
            if self._connections.get(key) is connection:
                del self._connections[key]
        await connection.close()


class _Connection:
    """One MCP session, held open by its own task (anyio scopes must close in the task that opened them)."""

    def __init__(self, server: MCPServerConfig, environ: Mapping[str, str]) -> None:
        self.server = server
        self._http: httpx2.AsyncClient | None = None
        """The HTTP client of a streamable-HTTP server: the SDK leaves a client it was given open."""
        self._http_status: int | None = None
        self._client: Client | None = None
        self._ended = False
        """The server's side of the session closed (a stdio server exited): nothing sent now arrives."""
        self._error: BaseException | None = None
        self._opened = asyncio.Event()
        self._stop = asyncio.Event()
        transport = self._transport(environ)  # a missing ${VAR} fails here, before anything starts
        self._task = asyncio.create_task(self._hold(transport), name=f"mcp-{server.name}")

    @property
    def alive(self) -> bool:
        return not self._task.done() and not self._ended

    @property
    def forgot_session(self) -> bool:
        """After a call on the open session failed: the HTTP server answered 404, MCP's word for a
        session it no longer knows (say, it restarted), so it ran nothing."""
        return self._http_status == 404

    async def ready(self, timeout: float) -> Client:
        """The open client; a server still starting keeps starting for the next attempt."""
        try:
            await asyncio.wait_for(asyncio.shield(self._opened.wait()), timeout)
        except TimeoutError:
            raise ApplicationError(
                f"MCP server {self.server.name!r} is still starting after {timeout:g} s"
                " (raise its startup_timeout_seconds if it is slow to start)",
                type=UNAVAILABLE,
            ) from None
        if self._client is None:
            raise self.failure("starting", self._error)
        return self._client

    def failure(self, doing: str, error: BaseException | None) -> ApplicationError:
        """What went wrong, in words; retryable unless a retry cannot help (no such command, 401/403/404)."""
        status = self._http_status
        if status is not None:
            what = f"HTTP {status} from {self.server.url}" + (
                ": check its headers and the variables they name" if status in (401, 403) else ""
            )
            return ApplicationError(
                f"MCP server {self.server.name!r} failed while {doing}: {what}",
                type=UNAVAILABLE,
                non_retryable=status in (401, 403, 404),
            )
        verb = "could not start" if doing == "starting" and self.server.command else f"failed while {doing}"
        permanent = isinstance(_innermost(error), FileNotFoundError | PermissionError | NotADirectoryError)
        return ApplicationError(
            f"MCP server {self.server.name!r} {verb}: {_describe(error)}",
            type=UNAVAILABLE,
            non_retryable=permanent,
        )

    async def close(self) -> None:
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 10)
        except TimeoutError:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _hold(self, transport: Any) -> None:
        try:
            async with Client(_noting_the_end(transport, self._note_end), cache=None) as client:
                self._client = client
                self._opened.set()
                await self._stop.wait()
        except Exception as e:
            self._error = e
        finally:
            self._client = None
            if self._error is None and not self._opened.is_set():
                self._error = RuntimeError("the connection closed before it was ready")
            self._opened.set()
            if self._http is not None:
                await self._http.aclose()

    def _note_end(self) -> None:
        self._ended = True

    def _transport(self, environ: Mapping[str, str]) -> Any:
        server = self.server

        def fill(value: str) -> str:
            return _fill(value, environ, server)

        if server.url is not None:
            http = self._http = create_mcp_http_client(
                headers={k: fill(v) for k, v in server.headers.items()}
            )

            async def remember_status(response: httpx2.Response) -> None:
                if response.status_code >= 400:
                    self._http_status = response.status_code

            http.event_hooks["response"].append(remember_status)
            return streamable_http_client(server.url, http_client=http)
        assert server.command is not None
        return stdio_client(
            StdioServerParameters(
                command=_executable(server.command),
                args=[fill(a) for a in server.args],
                env={k: fill(v) for k, v in server.env.items()} or None,
                cwd=server.cwd,
            )
        )


@asynccontextmanager
async def _noting_the_end(transport: Any, on_end: Callable[[], None]) -> AsyncIterator[tuple[Any, Any]]:
    """The transport, with ``on_end()`` called when its read side ends (a stdio server exited)."""
    async with transport as (read, write):
        yield _EndNoted(read, on_end), write


class _EndNoted:
    """A transport's read stream that reports its end, so a dead session is known before a call."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _EndNoted:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _EndNoted:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:  # e.g. ``last_context``, which the SDK reads if present
        return getattr(self._inner, name)


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

    return ENV_REFERENCE.sub(one, value)


def _executable(command: str) -> str:
    """The command as given, found on PATH, or beside this Python (a venv's own bin/)."""
    return shutil.which(command) or shutil.which(command, path=sysconfig.get_path("scripts")) or command


def _startup_timeout(server: MCPServerConfig) -> float:
    return min(server.startup_timeout_seconds, server.call.timeout_seconds)


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


def _innermost(error: BaseException | None) -> BaseException | None:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _describe(error: BaseException | None) -> str:
    error = _innermost(error)
    if error is None:
        return "no error reported"
    if isinstance(error, MCPError):
        return error.error.message
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
