"""Storage beside Temporal: the conversation store, and a payload store for what is too big for history.

The conversation store writes each message once, so history carries references, not transcripts.

The model activity appends the messages the workflow recorded since its last
call and reads the whole transcript back. Writes are idempotent (by index), so
a worker dying between writing and recording loses nothing: the retry writes
the same messages again.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

from pydantic import TypeAdapter
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from durable_agents.stores.errors import DEFAULT_OUTAGE_SECONDS, StoreDown, outage, patiently
from durable_agents.workflows.messages import Message

T = TypeVar("T")
MESSAGE = TypeAdapter(Message)
PAYLOAD_THRESHOLD = 128 * 1024
"""Payloads from this size on go to the payload store; history keeps a reference."""


def masked(url: str) -> str:
    """A database URL with its password replaced by ``***``, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


class SQLiteFile:
    """One SQLite file shared by the threads of a worker (and, through WAL, by its sibling processes).
    A file locked past the wait below, a full disk or an I/O error is a ``StoreDown`` (``outage``),
    waited out."""

    def __init__(self, path: Path, schema: str, outage_seconds: float = DEFAULT_OUTAGE_SECONDS) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._outage_seconds = outage_seconds
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=5)
        self._lock = threading.Lock()
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            # Commits survive a killed process; only a power cut may lose the last ones.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(schema)  # one statement or several

    def __str__(self) -> str:
        return f"SQLite {self._path}"

    async def write(self, sql: str, rows: list[tuple]) -> None:
        await patiently(lambda: self._in_thread(self._write, sql, rows), self._outage_seconds)

    async def read(self, sql: str, params: tuple | list) -> list[tuple]:
        return await patiently(lambda: self._in_thread(self._read, sql, params), self._outage_seconds)

    async def delete(self, sql: str, params: tuple | list) -> int:
        """One statement that removes rows, committed: how many it removed."""
        return await patiently(lambda: self._in_thread(self._delete, sql, params), self._outage_seconds)

    async def _in_thread(self, fn: Callable[..., T], *args: object) -> T:
        try:
            return await asyncio.to_thread(fn, *args)
        except Exception as e:
            if (reason := outage(e)) is None:
                raise
            raise StoreDown(str(self), reason) from e

    async def identity(self) -> str:
        """The file's identity: made with it (a random id), kept in it."""
        return await patiently(lambda: self._in_thread(self._identity), self._outage_seconds)

    def _identity(self) -> str:
        with self._lock, self._db:
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS store_identity"
                " (one INTEGER PRIMARY KEY CHECK (one = 1), identity TEXT NOT NULL)"
            )
            self._db.execute(
                "INSERT OR IGNORE INTO store_identity VALUES (1, ?)", (f"sqlite-{uuid.uuid4()}",)
            )
            return self._db.execute("SELECT identity FROM store_identity").fetchone()[0]

    def add_column(self, table: str, column: str) -> None:
        """``column`` (its name and type) added to ``table`` unless it has it: a file made before."""
        with self._lock, self._db:
            if column.split()[0] not in [row[1] for row in self._db.execute(f"PRAGMA table_info({table})")]:
                try:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
                except sqlite3.OperationalError as e:
                    if "duplicate column" not in str(e):  # another process added it meanwhile
                        raise

    def _write(self, sql: str, rows: list[tuple]) -> None:
        with self._lock, self._db:
            self._db.executemany(sql, rows)

    def _delete(self, sql: str, params: tuple | list) -> int:
        with self._lock, self._db:
            return self._db.execute(sql, params).rowcount

    def _read(self, sql: str, params: tuple | list) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()


class SQLiteStore:
    """A store in one ``SQLiteFile``, whose tables ``SCHEMA`` makes (one statement or several)."""

    SCHEMA: ClassVar[str]

    def __init__(self, path: Path, outage_seconds: float = DEFAULT_OUTAGE_SECONDS) -> None:
        self._file = SQLiteFile(path, self.SCHEMA, outage_seconds)


class ConversationStore(Protocol):
    async def save(self, key: str, start: int, messages: list[Message]) -> None:
        """Store ``messages`` at positions ``start``, ``start + 1``, ... of conversation ``key``."""

    async def load(self, key: str, count: int) -> list[Message] | None:
        """The first ``count`` messages of ``key``, or None when the store holds fewer."""

    async def forget(self, key: str) -> int:
        """Remove every message of conversation ``key``; how many there were."""

    async def conversations_after(self, key: str, limit: int) -> list[str]:
        """Up to ``limit`` conversation keys after ``key`` in order: the retention's batches."""

    async def identity(self) -> str:
        """Made with the store and kept in it: a conversation runs only on workers whose stores
        have the identity it started with (``durable_agents/stores/errors.py``, ``stores_differ``)."""


class SQLiteConversationStore(SQLiteStore):
    """A SQLite file: the default for one machine (several worker processes may share it)."""

    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS messages ("
        " conversation TEXT NOT NULL, position INTEGER NOT NULL, body TEXT NOT NULL,"
        " PRIMARY KEY (conversation, position))"
    )

    async def save(self, key: str, start: int, messages: list[Message]) -> None:
        rows = [(key, start + i, MESSAGE.dump_json(m).decode()) for i, m in enumerate(messages)]
        await self._file.write("INSERT OR REPLACE INTO messages VALUES (?, ?, ?)", rows)

    async def load(self, key: str, count: int) -> list[Message] | None:
        rows = await self._file.read(
            "SELECT body FROM messages WHERE conversation = ? AND position < ? ORDER BY position",
            (key, count),
        )
        if len(rows) < count:
            return None
        return [MESSAGE.validate_json(body) for (body,) in rows]

    async def forget(self, key: str) -> int:
        return await self._file.delete(FORGET_MESSAGES.format(messages="messages"), (key,))

    async def conversations_after(self, key: str, limit: int) -> list[str]:
        rows = await self._file.read(CONVERSATIONS_AFTER.format(table="messages"), (key, limit))
        return [row[0] for row in rows]

    async def identity(self) -> str:
        return await self._file.identity()


FORGET_MESSAGES = "DELETE FROM {messages} WHERE conversation = ?"
"""A conversation's transcript gone (``forget``), on SQLite and (``numbered``) PostgreSQL alike."""
CONVERSATIONS_AFTER = (
    "SELECT DISTINCT conversation FROM {table} WHERE conversation > ? ORDER BY conversation LIMIT ?"
)
"""The conversations a table's rows name, in the table's order (the messages', the ledger's)."""


def payload_owner(context: StorageDriverStoreContext) -> str | None:
    """The workflow a payload is stored for (a conversation's, a sub-agent's, a start's): its id
    owns the payload, so ``forget`` of that workflow removes it unless another owns it too
    (payloads are content-addressed). None for a standalone activity's: owned by nobody."""
    target = context.target
    return target.id if isinstance(target, StorageDriverWorkflowInfo) else None


FORGET_PAYLOADS = (
    "DELETE FROM {payloads} WHERE key IN (SELECT key FROM {owners} WHERE owner = ?) AND NOT EXISTS"
    " (SELECT 1 FROM {owners} o WHERE o.key = {payloads}.key AND o.owner <> ?)",
    "DELETE FROM {owners} WHERE owner = ?",
)
"""A workflow's payloads that no other workflow owns, then its ownerships, in that order: a payload
store that stops between the two forgets the rest when asked again. A store writes the owner before
the payload (``store``), so a payload stored meanwhile by another owner is kept or written anew."""
OWNERS_AFTER = (
    "SELECT owner, max(coalesce(stored_at, 0)) FROM {owners} WHERE owner > ?"
    " GROUP BY owner ORDER BY owner LIMIT ?"
)
"""The workflows that own payloads after one, in order, each with when it last stored one (epoch
seconds; 0: before that was kept)."""


class PayloadMissingError(RuntimeError):
    """History refers to a payload this payload store does not hold (another machine's store?)."""


def stored_payloads(store: str, keys: Sequence[str], found: dict[str, bytes]) -> list[Payload]:
    """The payloads for ``keys`` in order, from what a store found; every one must be there."""
    if missing := [key for key in keys if key not in found]:
        raise PayloadMissingError(f"payload store {store} lacks {len(missing)} payload(s), e.g. {missing[0]}")
    return [Payload.FromString(found[key]) for key in keys]


class SQLitePayloadDriver(SQLiteStore, StorageDriver):
    """Keeps payloads too large for history (a long transcript carried to the next run, a big
    result) in a SQLite file; history holds a content-addressed reference.

    Workers on several hosts use ``PostgresPayloadDriver`` instead (``AGENT_DATABASE_URL``).
    """

    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS payloads (key TEXT PRIMARY KEY, data BLOB NOT NULL);"
        " CREATE TABLE IF NOT EXISTS payload_owners (owner TEXT NOT NULL, key TEXT NOT NULL,"
        " stored_at REAL, PRIMARY KEY (owner, key));"
        " CREATE INDEX IF NOT EXISTS payload_owners_key ON payload_owners (key)"
    )

    def __init__(self, path: Path, outage_seconds: float = DEFAULT_OUTAGE_SECONDS) -> None:
        super().__init__(path, outage_seconds)
        self._file.add_column("payload_owners", "stored_at REAL")

    def name(self) -> str:
        return "agent-sqlite"

    async def ping(self, size: int) -> None:
        """Wait (``patiently``) until the store answers and has room for ``size`` bytes: a row that
        large written and removed (on a full disk a read still answers, a write does not)."""
        await self._file.write("INSERT OR REPLACE INTO payloads VALUES ('probe', randomblob(?))", [(size,)])
        await self._file.write("DELETE FROM payloads WHERE key = 'probe'", [()])

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        rows = [
            (hashlib.sha256(data).hexdigest(), data) for data in (p.SerializeToString() for p in payloads)
        ]
        if (owner := payload_owner(context)) is not None:
            owned = [(owner, key, time.time()) for key, _ in rows]
            await self._file.write(
                "INSERT INTO payload_owners (owner, key, stored_at) VALUES (?, ?, ?)"
                " ON CONFLICT (owner, key) DO UPDATE SET stored_at = excluded.stored_at",
                owned,
            )
        await self._file.write("INSERT OR IGNORE INTO payloads VALUES (?, ?)", rows)
        return [StorageDriverClaim(claim_data={"key": key}) for key, _ in rows]

    async def forget(self, owner: str) -> int:
        """Remove the payloads of workflow ``owner`` that no other workflow owns; how many."""
        tables = {"payloads": "payloads", "owners": "payload_owners"}
        removing, unowning = (sql.format(**tables) for sql in FORGET_PAYLOADS)
        removed = await self._file.delete(removing, (owner, owner))
        await self._file.delete(unowning, (owner,))
        return removed

    async def owners_after(self, owner: str, limit: int) -> list[tuple[str, float]]:
        """Up to ``limit`` workflows after ``owner`` that own payloads, and when each last stored one."""
        rows = await self._file.read(OWNERS_AFTER.format(owners="payload_owners"), (owner, limit))
        return [(name, float(stored_at)) for name, stored_at in rows]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        keys = [claim.claim_data["key"] for claim in claims]
        marks = ",".join("?" * len(keys))
        found = dict(await self._file.read(f"SELECT key, data FROM payloads WHERE key IN ({marks})", keys))
        return stored_payloads(self.name(), keys, found)
