"""The fast channel for streamed model calls' deltas (text, tool-call arguments, an attempt that
broke off): from the model activity to every process that reads conversations (``serve``,
``watch``, ``chat``), outside Temporal, so they add no history event and arrive within
milliseconds. Ephemeral: a reader gets what is sent while it listens; the durable stream's
``model_call_finished`` brings the whole answer to everyone, late or not.

Two transports, one contract (``DeltaSender``, ``DeltaListener``):

- **On one host** (no ``AGENT_DATABASE_URL``): each reading process binds a Unix datagram socket
  in a folder named after its Temporal server and namespace; the activity sends each delta as one
  datagram to every socket there. Chosen over a SQLite table polled by readers (the poll interval
  is the latency floor, and every poll of every reader costs even when nothing streams) and over
  stream sockets (a connection per reader, framing, a slow reader holding the sender): a datagram
  is one message, in order between one sender and one reader, sent without ever blocking the
  activity; a reader that does not keep up loses deltas (it gets the final text), and a dead
  reader's socket refuses and is removed. No socket in the folder: nobody on this host reads, and
  the activity batches its text into the durable stream instead (a reader on another host
  without the database still sees it, as before).
- **Across hosts** (``AGENT_DATABASE_URL``): PostgreSQL ``NOTIFY`` from the activity, ``LISTEN``
  in every reading process. When the database cannot be reached, the activity batches instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import secrets
import socket
import tempfile
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Protocol

from pydantic import TypeAdapter
from temporalio.client import Client

from durable_agents.workflows.events import Event, TextDelta, ToolCallDelta

log = logging.getLogger(__name__)

OnDelta = Callable[[Event], None]
OnAnyDelta = Callable[[str, Event], None]
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)
PG_CHANNEL = "agent_deltas"
PG_PIECE = 2000
"""Characters of text per notification (PostgreSQL takes up to 8000 bytes of payload)."""


def channel_scope(client: Client, namespace: str) -> str:
    """Who shares deltas: the conversations of one Temporal server's namespace."""
    host = client.service_client.config.target_host.replace("localhost", "127.0.0.1")
    return hashlib.sha256(f"{host}|{namespace}".encode()).hexdigest()[:16]


def default_folder(runtime_dir: str | None = None) -> Path:
    """Where this host's readers put their sockets, private to the user: under ``runtime_dir``
    (``$XDG_RUNTIME_DIR``, as the entry point read it), else under the temp folder."""
    if runtime_dir:
        return Path(runtime_dir) / "durable-agents" / "deltas"
    return Path(tempfile.gettempdir()) / f"durable-agents-{os.getuid()}" / "deltas"


class DeltaSender(Protocol):
    def readers(self, scope: str) -> Hashable | None:
        """None when the channel reaches no reader now; else a token that changes with the readers."""
        ...

    def send(self, scope: str, key: str, event: Event) -> None:
        """Send without waiting; what cannot be sent is lost (the final event brings it)."""
        ...

    async def aclose(self) -> None: ...


class DeltaListener(Protocol):
    async def start(self, scope: str) -> None: ...

    def subscribe(self, key: str, on_delta: OnDelta) -> Callable[[], None]:
        """``on_delta`` for each delta of conversation ``key``, until the returned function is called."""
        ...

    def subscribe_all(self, on_delta: OnAnyDelta) -> None:
        """``on_delta(key, delta)`` for every conversation's deltas, for as long as the listener runs."""
        ...

    async def aclose(self) -> None: ...


class _Dispatch:
    """Deltas by conversation, to the subscribers of each (and to those of all); decoded once per
    delta."""

    def __init__(self) -> None:
        self._subscribers: dict[str, list[OnDelta]] = {}
        self._everyone: list[OnAnyDelta] = []

    def subscribe_all(self, on_delta: OnAnyDelta) -> None:
        self._everyone.append(on_delta)

    def subscribe(self, key: str, on_delta: OnDelta) -> Callable[[], None]:
        self._subscribers.setdefault(key, []).append(on_delta)

        def unsubscribe() -> None:
            found = self._subscribers.get(key, [])
            if on_delta in found:
                found.remove(on_delta)
            if not found:
                self._subscribers.pop(key, None)

        return unsubscribe

    def deliver(self, key: str, data: bytes | str) -> None:
        subscribers = self._subscribers.get(key, [])
        if not subscribers and not self._everyone:
            return
        try:
            event = _EVENT.validate_json(data)
        except ValueError as e:
            log.warning("a delta that cannot be read: %s", e)
            return
        for on_any in self._everyone:
            on_any(key, event)
        for on_delta in list(subscribers):
            on_delta(event)


# -- on one host: Unix datagram sockets -------------------------------------------------------------


class LocalSender:
    def __init__(self, folder: Path | None = None) -> None:
        self._folder = folder or default_folder()
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.setblocking(False)
        self._known: dict[str, tuple[int, tuple[str, ...]]] = {}
        """By scope: the folder's modification time and the sockets in it then."""

    def readers(self, scope: str) -> tuple[str, ...] | None:
        folder = self._folder / scope
        try:
            changed = os.stat(folder).st_mtime_ns
        except OSError:
            return None
        known = self._known.get(scope)
        if known is None or known[0] != changed:
            with contextlib.suppress(OSError):
                paths = tuple(sorted(e.path for e in os.scandir(folder) if e.name.endswith(".sock")))
                known = self._known[scope] = (changed, paths)
        return known[1] if known and known[1] else None

    def send(self, scope: str, key: str, event: Event) -> None:
        data = f"{key}\n".encode() + event.model_dump_json(exclude_none=True).encode()
        for path in self.readers(scope) or ():
            try:
                self._socket.sendto(data, path)
            except (ConnectionRefusedError, FileNotFoundError):  # its reader is gone
                with contextlib.suppress(OSError):
                    os.unlink(path)
            except OSError:  # its queue is full (a reader that does not keep up): lost for it
                pass

    async def aclose(self) -> None:
        self._socket.close()


class LocalListener:
    def __init__(self, folder: Path | None = None) -> None:
        self._folder = folder or default_folder()
        self._dispatch = _Dispatch()
        self._socket: socket.socket | None = None
        self._path: Path | None = None

    async def start(self, scope: str) -> None:
        folder = self._folder / scope
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._path = folder / f"{os.getpid()}-{secrets.token_hex(4)}.sock"
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self._socket.setblocking(False)
        self._socket.bind(str(self._path))
        asyncio.get_running_loop().add_reader(self._socket.fileno(), self._readable)

    def subscribe(self, key: str, on_delta: OnDelta) -> Callable[[], None]:
        return self._dispatch.subscribe(key, on_delta)

    def subscribe_all(self, on_delta: OnAnyDelta) -> None:
        self._dispatch.subscribe_all(on_delta)

    def _readable(self) -> None:
        assert self._socket is not None
        while True:
            try:
                data = self._socket.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                return
            key, _, body = data.partition(b"\n")
            self._dispatch.deliver(key.decode(), body)

    async def aclose(self) -> None:
        if self._socket is not None:
            asyncio.get_running_loop().remove_reader(self._socket.fileno())
            self._socket.close()
            self._socket = None
        if self._path is not None:
            self._path.unlink(missing_ok=True)


# -- across hosts: PostgreSQL NOTIFY / LISTEN --------------------------------------------------------


class PostgresSender:
    """One connection of its own, one task sending in order; while the database cannot be reached
    (``readers`` None), the activities batch instead."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._queue: asyncio.Queue[str] | None = None
        self._task: asyncio.Task[None] | None = None
        self._up = True

    def readers(self, scope: str) -> str | None:
        return "postgres" if self._up else None

    def send(self, scope: str, key: str, event: Event) -> None:
        if self._task is None:
            self._queue = asyncio.Queue()
            self._task = asyncio.create_task(self._run())
        assert self._queue is not None
        for piece in _pieces(event):
            payload = json.dumps([scope, key]) + "\n" + piece.model_dump_json(exclude_none=True)
            self._queue.put_nowait(payload)

    async def _run(self) -> None:
        import asyncpg

        assert self._queue is not None
        connection = None
        while True:
            payload = await self._queue.get()
            try:
                if connection is None or connection.is_closed():
                    connection = await asyncpg.connect(self._url, timeout=5)
                await connection.execute("SELECT pg_notify($1, $2)", PG_CHANNEL, payload)
                self._up = True
            except (TimeoutError, OSError, asyncpg.PostgresError) as e:
                if self._up:
                    log.warning("deltas not sent (batched instead until the database answers): %s", e)
                self._up, connection = False, None
                await asyncio.sleep(1)
                self._up = True  # try the channel again with the next delta

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class PostgresListener:
    def __init__(self, url: str) -> None:
        self._url = url
        self._dispatch = _Dispatch()
        self._connection: Any = None
        self._scope = ""

    async def start(self, scope: str) -> None:
        import asyncpg

        self._scope = scope
        self._connection = await asyncpg.connect(self._url, timeout=5)
        await self._connection.add_listener(PG_CHANNEL, self._notified)

    def subscribe(self, key: str, on_delta: OnDelta) -> Callable[[], None]:
        return self._dispatch.subscribe(key, on_delta)

    def subscribe_all(self, on_delta: OnAnyDelta) -> None:
        self._dispatch.subscribe_all(on_delta)

    def _notified(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        head, _, body = payload.partition("\n")
        scope, key = json.loads(head)
        if scope == self._scope:
            self._dispatch.deliver(key, body)

    async def aclose(self) -> None:
        if self._connection is not None:
            await self._connection.close()
            self._connection = None


def _pieces(event: Event) -> list[Event]:
    """A delta whose text would not fit in one notification, as several."""
    if not isinstance(event, TextDelta | ToolCallDelta) or len(event.text) <= PG_PIECE:
        return [event]
    return [
        event.model_copy(update={"start": event.start + at, "text": event.text[at : at + PG_PIECE]})
        for at in range(0, len(event.text), PG_PIECE)
    ]


def delta_sender(database_url: str | None, folder: Path | None = None) -> DeltaSender:
    return PostgresSender(database_url) if database_url else LocalSender(folder)


def delta_listener(database_url: str | None, folder: Path | None = None) -> DeltaListener:
    return PostgresListener(database_url) if database_url else LocalListener(folder)
