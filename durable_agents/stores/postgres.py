"""State beside Temporal on PostgreSQL (``AGENT_DATABASE_URL``), shared by every worker host and the starter.

Temporal lets any worker on any host run any step of a conversation; what the steps keep
beside Temporal must then be one truth for all of them: the conversation store, the
idempotency store, large payloads and the file tools' workspaces. Each lives in one table.

Every statement is idempotent (a retry writes the same rows again), so a statement the server
did not answer is tried again until it does (``durable_agents/stores/errors.py``): an outage never fails a
call or the conversation.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import asyncpg
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from durable_agents.stores.conversations import (
    CONVERSATIONS_AFTER,
    FORGET_MESSAGES,
    FORGET_PAYLOADS,
    MESSAGE,
    OWNERS_AFTER,
    masked,
    payload_owner,
    stored_payloads,
)
from durable_agents.stores.errors import DEFAULT_OUTAGE_SECONDS, StoreDown, first_line, outage, patiently
from durable_agents.stores.idempotency import FORGET_STEPS, StaleEpoch, steps_of
from durable_agents.stores.layouts import folder_name
from durable_agents.stores.ledger import CACHED_TABLE as LEDGER_CACHED
from durable_agents.stores.ledger import TABLES as LEDGER_TABLES
from durable_agents.stores.ledger import Ledger, Tx, numbered
from durable_agents.stores.workspaces import WorkspaceError, relative
from durable_agents.workflows.messages import Message

T = TypeVar("T")

SCHEMA_VERSION = 7
"""The newest entry of ``_MIGRATIONS``; a database at a newer version stops an older worker."""

_MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE agent_messages (conversation text NOT NULL, position integer NOT NULL,"
        " body text NOT NULL, PRIMARY KEY (conversation, position))",
        "CREATE TABLE agent_results (key text PRIMARY KEY, value text NOT NULL)",
        "CREATE TABLE agent_payloads (key text PRIMARY KEY, data bytea NOT NULL)",
        "CREATE TABLE agent_files (workspace text NOT NULL, path text NOT NULL, data bytea NOT NULL,"
        " PRIMARY KEY (workspace, path))",
    ],
    2: [  # PostgresLeases
        "CREATE TABLE agent_workers (worker text PRIMARY KEY, server text NOT NULL,"
        " refreshed_at timestamptz NOT NULL, record text NOT NULL)",
    ],
    3: LEDGER_TABLES,  # PostgresLedger
    4: [  # fencing: lease epochs, takeovers (leases.py) and ctx.once claims (PostgresIdempotencyStore)
        "CREATE SEQUENCE agent_lease_epochs",
        "ALTER TABLE agent_workers ADD COLUMN epoch bigint NOT NULL DEFAULT 0",
        "CREATE TABLE agent_takeovers (worker text PRIMARY KEY, server text NOT NULL, epoch bigint NOT NULL,"
        " taken_at timestamptz NOT NULL, record text)",
        "CREATE TABLE agent_claims (key text PRIMARY KEY, claimant text NOT NULL, epoch bigint,"
        " expires_at timestamptz NOT NULL)",
    ],
    5: [  # which workflow each large payload is kept for (forget, retention)
        "CREATE TABLE agent_payload_owners (owner text NOT NULL, key text NOT NULL,"
        " PRIMARY KEY (owner, key))",
        "CREATE INDEX agent_payload_owners_key ON agent_payload_owners (key)",
    ],
    6: [LEDGER_CACHED],  # the ledger's cached input tokens
    7: [  # when each owner last stored each payload (retention: a start stores its input first)
        "ALTER TABLE agent_payload_owners ADD COLUMN stored_at double precision NOT NULL"
        " DEFAULT extract(epoch FROM now())",
    ],
}
_SCHEMA_LOCK = 7_233_001
_LEDGER_LOCK = 7_233_002
"""Advisory lock id: one ledger decision at a time, across every worker."""
"""Advisory lock id: workers starting together create the tables one at a time."""

UNREACHABLE = (OSError, asyncio.TimeoutError, asyncpg.PostgresConnectionError)
"""No server answered at all (what start-up calls "cannot reach")."""
_BROKEN = (
    *UNREACHABLE,
    asyncpg.InterfaceError,  # "connection is closed"
    asyncpg.exceptions.InternalClientError,  # a connection whose protocol broke mid-operation
)
"""The connection failed, so the server said nothing (no SQLSTATE)."""


def down(error: BaseException) -> str | None:
    """Why the database is out (``stores.errors.outage``, or a connection that failed), or None: the
    one test the stores, the leases and the worker apply to PostgreSQL's errors."""
    if (reason := outage(error)) is not None:
        return reason
    return f"cannot be reached: {first_line(error)}" if isinstance(error, _BROKEN) else None


class Database:
    """One connection pool per process (and event loop), shared by every store; the tables are created
    on first use, idempotently, and again when they are found gone (the database dropped and made
    anew). Every fault of the server is a ``StoreDown``, waited out by ``patiently``."""

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = 10,
        connect_timeout: float = 10.0,
        outage_seconds: float = DEFAULT_OUTAGE_SECONDS,
    ) -> None:
        self.url = url
        self.outage_seconds = outage_seconds
        self._max = max_connections
        self._connect_timeout = connect_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Future[asyncpg.Pool] | None = None
        self.identity: str | None = None
        """The store's identity, known once the tables were checked (see ``_migrate``)."""
        self._schema: asyncio.Future[None] | None = None
        """Done once the tables are there (for this loop's pool); None: to be checked again."""

    def __str__(self) -> str:
        return f"PostgreSQL {masked(self.url)}"

    async def open(self) -> None:
        """Connect and create or upgrade the tables; raises ``RuntimeError`` in one line naming the
        (masked) URL and what is wrong: unreachable, read-only, missing, or full of connections."""
        try:
            await self._once(lambda c: c.fetchval("SELECT 1"))
        except StoreDown as e:
            if isinstance(e.__cause__, UNREACHABLE):
                raise RuntimeError(
                    f"cannot reach the database at {masked(self.url)}: {first_line(e.__cause__)}"
                ) from e
            raise RuntimeError(f"the database at {masked(self.url)} {e.reason}") from e

    async def close(self) -> None:
        opening, self._opening = self._opening, None
        self._schema = None
        if opening is not None and opening.done() and not _failed(opening):
            await opening.result().close()

    async def tables_again(self) -> None:
        """Make the tables again (they were found gone); ``StoreDown`` when the database cannot."""
        self._schema = None
        await self._once(lambda c: c.fetchval("SELECT 1"))

    async def run(self, op: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """``op`` on a pooled connection, tried again while the database is out (``patiently``)."""
        return await patiently(lambda: self._once(op), self.outage_seconds)

    async def delete(self, sql: str, *args: object) -> int:
        """One statement that removes rows (``?`` placeholders, as the SQLite stores'): how many."""
        status = await self.run(lambda c: c.execute(numbered(sql), *args))
        return int(status.rpartition(" ")[2])

    async def _once(self, op: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        try:
            pool = await self._pool()
            await self._tables(pool)
            async with pool.acquire() as connection:
                return await op(connection)
        except Exception as e:
            if (reason := down(e)) is None:
                raise
            if isinstance(
                e, asyncpg.exceptions.UndefinedTableError | asyncpg.exceptions.ReadOnlySQLTransactionError
            ):
                self._schema = None  # the next try makes them (again): a read-only database could not
            raise StoreDown(str(self), reason) from e

    async def _pool(self) -> asyncpg.Pool:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a pool belongs to the loop that made it
            self._loop, self._opening, self._schema = loop, None, None
        if self._opening is None or (self._opening.done() and _failed(self._opening)):
            self._opening = asyncio.ensure_future(
                asyncpg.create_pool(
                    self.url,
                    min_size=1,
                    max_size=self._max,
                    timeout=self._connect_timeout,
                    command_timeout=30,
                )
            )
        return await asyncio.shield(self._opening)

    async def _tables(self, pool: asyncpg.Pool) -> None:
        """Create or upgrade the tables once per pool, and again after they were found gone."""
        if self._schema is None or (self._schema.done() and _failed(self._schema)):
            self._schema = asyncio.ensure_future(self._migrate(pool))
        await asyncio.shield(self._schema)

    async def _migrate(self, pool: asyncpg.Pool) -> None:
        async with pool.acquire() as connection:
            self.identity = await _migrate(connection, self.url, self.identity)


class SchemaError(RuntimeError):
    """The database was set up by a newer version of this project."""


async def _migrate(connection: asyncpg.Connection, url: str, identity: str | None) -> str:
    """Create or upgrade the tables; returns the store's identity (made now, or with ``identity``,
    the one a running worker knew before the tables were found gone: the same store, emptied)."""
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
        await connection.execute("CREATE TABLE IF NOT EXISTS agent_schema (version integer PRIMARY KEY)")
        current = await connection.fetchval("SELECT coalesce(max(version), 0) FROM agent_schema")
        if current > SCHEMA_VERSION:
            raise SchemaError(
                f"the database at {masked(url)} has schema version {current}; this worker knows up to "
                f"{SCHEMA_VERSION}: upgrade the worker"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[version]:
                await connection.execute(statement)
            await connection.execute("INSERT INTO agent_schema (version) VALUES ($1)", version)
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS agent_store"
            " (one integer PRIMARY KEY CHECK (one = 1), identity text NOT NULL)"
        )
        await connection.execute(
            "INSERT INTO agent_store VALUES (1, $1) ON CONFLICT DO NOTHING",
            identity or f"postgresql-{uuid.uuid4()}",
        )
        return await connection.fetchval("SELECT identity FROM agent_store")


_DATABASES: dict[str, Database] = {}


def database(url: str, outage_seconds: float | None = None) -> Database:
    """The process's ``Database`` for ``url``: stores, payload driver and leases share its pool.
    ``outage_seconds``, where given, is how long its calls wait for it (the worker's setting)."""
    if url not in _DATABASES:
        _DATABASES[url] = Database(url)
    if outage_seconds is not None:
        _DATABASES[url].outage_seconds = outage_seconds
    return _DATABASES[url]


class PostgresConversationStore:
    """Every conversation's messages by position; any host reads what another wrote."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def __str__(self) -> str:
        return str(self._db)

    async def save(self, key: str, start: int, messages: list[Message]) -> None:
        if not messages:
            return
        bodies = [MESSAGE.dump_json(m).decode() for m in messages]
        await self._db.run(
            lambda c: c.execute(
                "INSERT INTO agent_messages (conversation, position, body)"
                " SELECT $1, $2 + n - 1, body FROM unnest($3::text[]) WITH ORDINALITY AS t(body, n)"
                " ON CONFLICT (conversation, position) DO UPDATE SET body = EXCLUDED.body",
                key,
                start,
                bodies,
            ),
        )

    async def load(self, key: str, count: int) -> list[Message] | None:
        rows = await self._db.run(
            lambda c: c.fetch(
                "SELECT body FROM agent_messages WHERE conversation = $1 AND position < $2 ORDER BY position",
                key,
                count,
            ),
        )
        if len(rows) < count:
            return None
        return [MESSAGE.validate_json(row[0]) for row in rows]

    async def forget(self, key: str) -> int:
        return await self._db.delete(FORGET_MESSAGES.format(messages="agent_messages"), key)

    async def conversations_after(self, key: str, limit: int) -> list[str]:
        sql = numbered(CONVERSATIONS_AFTER.format(table="agent_messages"))
        return [row[0] for row in await self._db.run(lambda c: c.fetch(sql, key, limit))]

    async def identity(self) -> str:
        await self._db.run(lambda c: c.fetchval("SELECT 1"))
        assert self._db.identity is not None
        return self._db.identity


class PostgresIdempotencyStore:
    """``ctx.once`` results by key, and the claims of the steps running (``idempotency.py``):
    a retry on another host finds the first host's result, or waits for its claim."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def __str__(self) -> str:
        return str(self._db)

    async def get(self, key: str) -> str | None:
        return await self._db.run(lambda c: c.fetchval("SELECT value FROM agent_results WHERE key = $1", key))

    async def put(self, key: str, value: str) -> None:
        await self._db.run(
            lambda c: c.execute(
                "INSERT INTO agent_results (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                key,
                value,
            ),
        )

    async def claim(self, key: str, claimant: str, epoch: int | None, seconds: float) -> bool:
        """One statement: refused for an epoch whose lease was taken, else the claim is made unless
        another one holds the step and has not expired, or its result is stored."""
        taken, claimed = await self._db.run(
            lambda c: c.fetchrow(
                "WITH fence AS (SELECT EXISTS (SELECT 1 FROM agent_takeovers WHERE epoch = $3) AS taken),"
                " claimed AS (INSERT INTO agent_claims (key, claimant, epoch, expires_at)"
                " SELECT $1, $2, $3, now() + make_interval(secs => $4) FROM fence WHERE NOT taken"
                " AND NOT EXISTS (SELECT 1 FROM agent_results WHERE key = $1)"
                " ON CONFLICT (key) DO UPDATE SET claimant = EXCLUDED.claimant, epoch = EXCLUDED.epoch,"
                " expires_at = EXCLUDED.expires_at WHERE agent_claims.expires_at < now()"
                " OR agent_claims.claimant = EXCLUDED.claimant RETURNING claimant)"
                " SELECT (SELECT taken FROM fence), EXISTS (SELECT 1 FROM claimed)",
                key,
                claimant,
                epoch,
                seconds,
            ),
        )
        if taken:
            raise StaleEpoch(
                f"the lease of epoch {epoch} was taken by another worker: step {key!r} not claimed"
            )
        return claimed

    async def record(self, key: str, claimant: str, value: str) -> str | None:
        await self._db.run(
            lambda c: c.execute(
                "INSERT INTO agent_results (key, value) SELECT $1, $2 WHERE EXISTS"
                " (SELECT 1 FROM agent_claims WHERE key = $1 AND claimant = $3) ON CONFLICT (key) DO NOTHING",
                key,
                value,
                claimant,
            ),
        )
        row = await self._db.run(
            lambda c: c.fetchrow(
                "SELECT r.value, c.claimant FROM agent_results r"
                " LEFT JOIN agent_claims c ON c.key = r.key WHERE r.key = $1",
                key,
            ),
        )
        return row[0] if row is not None and row[1] == claimant else None

    async def release(self, key: str, claimant: str) -> None:
        await self._db.run(
            lambda c: c.execute("DELETE FROM agent_claims WHERE key = $1 AND claimant = $2", key, claimant),
        )

    async def forget(self, conversation_key: str) -> int:
        results, claims = (sql.format(results="agent_results", claims="agent_claims") for sql in FORGET_STEPS)
        removed = await self._db.delete(results, *steps_of(conversation_key))
        await self._db.delete(claims, *steps_of(conversation_key))
        return removed


class PostgresPayloadDriver(StorageDriver):
    """Payloads too large for history, content-addressed, readable by every worker and the starter."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def name(self) -> str:
        return "agent-postgres"

    async def ping(self, size: int) -> None:
        """Wait (``patiently``) until the store answers and has room for ``size`` bytes: a write of
        that many, rolled back (on a full disk ``SELECT 1`` still answers, a write does not)."""

        async def probe(connection: asyncpg.Connection) -> None:
            transaction = connection.transaction()
            await transaction.start()
            try:
                await connection.execute(
                    "INSERT INTO agent_payloads (key, data) VALUES ($1, $2)",
                    f"probe-{uuid.uuid4()}",
                    os.urandom(size),  # random bytes: compressed, they would take no room
                )
            finally:
                await transaction.rollback()

        await self._db.run(probe)

    def __str__(self) -> str:
        return str(self._db)

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        blobs = [p.SerializeToString() for p in payloads]
        keys = [hashlib.sha256(data).hexdigest() for data in blobs]
        if (owner := payload_owner(context)) is not None:
            await self._db.run(
                lambda c: c.execute(
                    "INSERT INTO agent_payload_owners (owner, key) SELECT $1, unnest($2::text[])"
                    " ON CONFLICT (owner, key) DO UPDATE SET stored_at = EXCLUDED.stored_at",
                    owner,
                    keys,
                ),
            )
        await self._db.run(
            lambda c: c.execute(
                "INSERT INTO agent_payloads (key, data) SELECT * FROM unnest($1::text[], $2::bytea[])"
                " ON CONFLICT (key) DO NOTHING",
                keys,
                blobs,
            ),
        )
        return [StorageDriverClaim(claim_data={"key": key}) for key in keys]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        keys = [claim.claim_data["key"] for claim in claims]
        rows = await self._db.run(
            lambda c: c.fetch("SELECT key, data FROM agent_payloads WHERE key = ANY($1::text[])", keys),
        )
        return stored_payloads(self.name(), keys, {row[0]: row[1] for row in rows})

    async def forget(self, owner: str) -> int:
        """Remove the payloads of workflow ``owner`` that no other workflow owns; how many."""
        removing, unowning = (
            sql.format(payloads="agent_payloads", owners="agent_payload_owners") for sql in FORGET_PAYLOADS
        )
        removed = await self._db.delete(removing, owner, owner)
        await self._db.delete(unowning, owner)
        return removed

    async def owners_after(self, owner: str, limit: int) -> list[tuple[str, float]]:
        """Up to ``limit`` workflows after ``owner`` that own payloads, and when each last stored one."""
        sql = numbered(OWNERS_AFTER.format(owners="agent_payload_owners"))
        return [(row[0], float(row[1])) for row in await self._db.run(lambda c: c.fetch(sql, owner, limit))]


class PostgresWorkspace:
    """A conversation's files as rows (path, bytes); folders are the paths' prefixes."""

    def __init__(self, db: Database, key: str) -> None:
        self._db = db
        self._key = key
        self.name = folder_name(key)

    async def read(self, path: str) -> bytes:
        rel = relative(path)
        data = None
        if rel:
            data = await self._db.run(
                lambda c: c.fetchval(
                    "SELECT data FROM agent_files WHERE workspace = $1 AND path = $2", self._key, rel
                ),
            )
        if data is None:
            raise WorkspaceError(f"No file {path!r} in the workspace.")
        return data

    async def list(self, path: str) -> list[str]:
        rel = relative(path)
        prefix = f"{rel}/" if rel else ""
        paths = await self._paths(rel, [], prefix)
        if rel in paths:
            raise WorkspaceError(f"{path!r} is not a folder.")
        names = set()
        for found in paths:
            head, sep, _ = found.removeprefix(prefix).partition("/")
            names.add(head + sep)
        return sorted(names)

    async def write(self, path: str, data: bytes) -> None:
        rel = relative(path)
        if not rel:
            raise WorkspaceError(f"{path!r} is a folder.")
        parts = rel.split("/")
        parents = ["/".join(parts[:i]) for i in range(1, len(parts))]
        clash = await self._paths(None, parents, f"{rel}/", limit=1)
        if clash and clash[0] in parents:
            raise WorkspaceError(f"Cannot write {path!r}: a folder on its path is a file.")
        if clash:
            raise WorkspaceError(f"{path!r} is a folder.")
        await self._db.run(
            lambda c: c.execute(
                "INSERT INTO agent_files (workspace, path, data) VALUES ($1, $2, $3)"
                " ON CONFLICT (workspace, path) DO UPDATE SET data = EXCLUDED.data",
                self._key,
                rel,
                data,
            ),
        )

    async def _paths(
        self, exact: str | None, among: list[str], prefix: str, limit: int | None = None
    ) -> list[str]:
        """Paths equal to ``exact``, in ``among``, or under ``prefix`` ("" for all)."""
        rows = await self._db.run(
            lambda c: c.fetch(
                "SELECT path FROM agent_files WHERE workspace = $1"
                " AND (path = $2 OR path = ANY($3::text[]) OR starts_with(path, $4))"
                " ORDER BY path LIMIT $5",
                self._key,
                exact,
                among,
                prefix,
                limit,
            ),
        )
        return [row[0] for row in rows]


class PostgresWorkspaces:
    """Every conversation's files in one table, so a turn on any host sees the files of the last."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def __str__(self) -> str:
        return str(self._db)

    def open(self, conversation_key: str) -> PostgresWorkspace:
        return PostgresWorkspace(self._db, conversation_key)

    async def forget(self, conversation_key: str) -> int:
        return await self._db.delete("DELETE FROM agent_files WHERE workspace = ?", conversation_key)


class PostgresLedger(Ledger):
    """The ledger on the shared database: each decision one transaction under an advisory lock."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def __str__(self) -> str:
        return str(self._db)

    async def _transact(self, op: Callable[[Tx], Awaitable[T]]) -> T:
        async def in_transaction(connection: asyncpg.Connection) -> T:
            async with connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock($1)", _LEDGER_LOCK)
                return await op(_PostgresTx(connection))

        return await self._db.run(in_transaction)


class _PostgresTx:
    def __init__(self, connection: asyncpg.Connection) -> None:
        self._c = connection

    async def fetch(self, sql: str, *args: object) -> list[tuple]:
        return [tuple(row) for row in await self._c.fetch(numbered(sql), *args)]

    async def execute(self, sql: str, *args: object) -> None:
        await self._c.execute(numbered(sql), *args)


def _failed(future: asyncio.Future) -> bool:
    return future.cancelled() or future.exception() is not None
