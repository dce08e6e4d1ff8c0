"""Worker leases in PostgreSQL (``agent_workers``), one row per worker, so every host sees every
other (``durable_agents/worker/lost_calls.py`` fails a dead worker's calls at once).

A lease carries an epoch, drawn from a sequence each time a lease is held, so it grows at every
takeover. A takeover moves the dead worker's row to ``agent_takeovers`` in one statement, before its
calls are retried: the epoch is fenced from then on. A worker that was only paused (SIGSTOP, a long
GC, a VM migration, a partition) finds its lease taken at its next refresh, or before it starts any
attempt (``check``, a fresh read), and stops; a ``ctx.once`` claim with a fenced epoch is refused
(``durable_agents/stores/idempotency.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from durable_agents.stores.conversations import masked
from durable_agents.stores.errors import StoreDown
from durable_agents.stores.idempotency import StaleEpoch
from durable_agents.stores.postgres import database, down

LEASE_QUERY_TIMEOUT = 2.0
"""Seconds a lease statement (or connecting for one) may take before the database counts as unreachable."""

_leases_logger = logging.getLogger(__name__)


class PostgresLeases:
    """Worker leases as rows of ``agent_workers``, one per worker (``durable_agents/worker/lost_calls.py``):
    every host sees every other. A worker refreshes its row; a row the database's clock says was not
    refreshed for ``dead_seconds`` (``AGENT_LEASE_DEAD_SECONDS``) is a dead worker's (no host's
    clock counts). While the database is unreachable nobody refreshes, so afterwards every row looks
    old: a worker judges nobody until its own refreshes have succeeded for ``dead_seconds`` without
    a break, by which time every live worker has refreshed too.

    The leases have a connection of their own: a refresh never waits behind the stores' queries.
    """

    def __init__(self, url: str, server: str, worker: str, dead_seconds: float) -> None:
        self._url = url
        self._server = server
        self._worker = worker
        self._dead_seconds = dead_seconds
        self._record = ""
        self.epoch: int | None = None
        """This worker's epoch: its ``ctx.once`` claims carry it (None until the lease is held)."""
        self._check: asyncio.Future[bool | None] | None = None
        """The next ``check``'s read, not sent yet: the attempts that arrive meanwhile share it."""
        self._connection: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._trusted_since: float | None = None
        """When the refreshes that have all succeeded since began (event loop time)."""

    def __str__(self) -> str:
        return f"PostgreSQL {masked(self._url)}"

    async def hold(self, record: str) -> bool:
        """Raises ``RuntimeError`` naming the (masked) URL when the database cannot be reached."""
        await database(self._url).open()  # the table
        self._record = record
        if not await self._refresh():
            raise RuntimeError(f"cannot write the lease to the database at {masked(self._url)}")
        return True

    async def write(self, record: str | None) -> None:
        self._record = record or self._record
        await self._refresh()

    async def check(self) -> int | None:
        """The epoch, after a fresh read says the lease was not taken (``StaleEpoch`` if it was);
        unread while the database is unreachable (then nobody takes leases either). The attempts
        that arrive while a read waits for the connection share it: it is sent after they arrived."""
        if self._check is None:
            self._check = asyncio.ensure_future(self._taken())
        if await asyncio.shield(self._check):
            raise StaleEpoch(
                f"the lease of worker {self._worker} (epoch {self.epoch}) was taken by another worker"
            )
        return self.epoch

    async def _taken(self) -> bool | None:
        async with self._lock:
            self._check = None  # whoever arrives from now on waits for the next read
            return await self._unlocked_query(
                "fetchval", "SELECT EXISTS (SELECT 1 FROM agent_takeovers WHERE worker = $1)", self._worker
            )

    async def sweep(self, reclaim: Callable[[str], Awaitable[None]]) -> None:
        """Fence the dead workers' leases first (one statement), then reclaim each taken lease
        whose calls were not retried yet; a day later its takeover is forgotten."""
        loop = asyncio.get_running_loop()
        if self._trusted_since is None or loop.time() - self._trusted_since < self._dead_seconds:
            return
        await self._query(
            "execute",
            "WITH dead AS (DELETE FROM agent_workers WHERE server = $1 AND worker <> $2"
            " AND refreshed_at < now() - make_interval(secs => $3) RETURNING worker, epoch, record)"
            " INSERT INTO agent_takeovers (worker, server, epoch, taken_at, record)"
            " SELECT worker, $1, epoch, now(), record FROM dead ON CONFLICT (worker) DO NOTHING",
            self._server,
            self._worker,
            self._dead_seconds,
        )
        taken = await self._query(
            "fetch",
            "SELECT worker, record FROM agent_takeovers WHERE server = $1 AND record IS NOT NULL",
            self._server,
        )
        for worker, record in taken or []:
            await reclaim(record)
            await self._query("execute", "UPDATE agent_takeovers SET record = NULL WHERE worker = $1", worker)
        await self._query(
            "execute",
            "DELETE FROM agent_takeovers WHERE server = $1 AND record IS NULL"
            " AND taken_at < now() - interval '1 day'",
            self._server,
        )

    async def release(self) -> None:
        await self._query("execute", "DELETE FROM agent_workers WHERE worker = $1", self._worker)
        await self._query(
            "execute", "DELETE FROM agent_takeovers WHERE worker = $1 AND record IS NULL", self._worker
        )
        async with self._lock:
            if self._connection is not None:
                await self._connection.close(timeout=LEASE_QUERY_TIMEOUT)
                self._connection = None

    async def _refresh(self) -> bool:
        """Raises ``StaleEpoch`` when the lease was taken: this worker was taken for dead."""
        updated = await self._query(
            "fetch",
            "UPDATE agent_workers SET refreshed_at = now(), record = $2 WHERE worker = $1 RETURNING epoch",
            self._worker,
            self._record,
        )
        epoch = updated[0][0] if updated else None
        if updated == []:
            epoch = await self._hold_anew()
        if epoch is None:
            return False
        self.epoch = epoch
        if self._trusted_since is None:
            self._trusted_since = asyncio.get_running_loop().time()
        return True

    async def _hold_anew(self) -> int | None:
        """A new lease and epoch where there is none: at start, or when the database was emptied
        (not taken: a takeover leaves its row in ``agent_takeovers``)."""
        taken = await self._query(
            "fetchval", "SELECT EXISTS (SELECT 1 FROM agent_takeovers WHERE worker = $1)", self._worker
        )
        if taken:
            raise StaleEpoch(
                f"worker lease {self._worker} (epoch {self.epoch}) was taken by another worker: it did not"
                f" refresh it for {self._dead_seconds:g} s (paused, or cut off from the database), and its"
                " calls run elsewhere; this worker stops"
            )
        if taken is None:
            return None
        epoch = await self._query(
            "fetchval",
            "INSERT INTO agent_workers (worker, server, refreshed_at, record, epoch)"
            " VALUES ($1, $2, now(), $3, nextval('agent_lease_epochs'))"
            " ON CONFLICT (worker) DO UPDATE SET refreshed_at = now() RETURNING epoch",
            self._worker,
            self._server,
            self._record,
        )
        if epoch is not None and self.epoch is not None:
            _leases_logger.warning(
                "worker lease %s was gone (the database emptied); it is held again", self._worker
            )
        return epoch

    async def _query(self, method: str, query: str, *args: object) -> Any:
        """``connection.<method>(query, *args)``; None when the database is out (``down``): then
        nobody is judged until the refreshes have succeeded again for ``dead_seconds``."""
        async with self._lock:
            return await self._unlocked_query(method, query, *args)

    async def _unlocked_query(self, method: str, query: str, *args: object) -> Any:
        """``_query`` under the lock its caller holds."""
        try:
            if self._connection is None or self._connection.is_closed():
                self._connection = await asyncpg.connect(self._url, timeout=LEASE_QUERY_TIMEOUT)
            return await getattr(self._connection, method)(query, *args, timeout=LEASE_QUERY_TIMEOUT)
        except asyncpg.exceptions.UndefinedTableError:  # the database emptied or made anew
            with contextlib.suppress(StoreDown):
                await database(self._url).tables_again()
            self._trusted_since = None
            return None
        except Exception as e:
            if (reason := down(e)) is None:
                raise
            if self._trusted_since is not None:
                _leases_logger.warning("worker leases: database %s %s", masked(self._url), reason)
            self._trusted_since = None
            if self._connection is not None:
                self._connection.terminate()
                self._connection = None
            return None
