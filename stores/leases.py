"""Worker leases in PostgreSQL (``agent_workers``), one row per worker, so every host sees every
other (``durable_agents/lost_calls.py`` fails a dead worker's calls at once)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from stores.conversations import masked
from stores.errors import StoreDown
from stores.postgres import database, down

LEASE_DEAD_SECONDS = 1.5
"""A worker lease not refreshed for this long, by the database's clock, is a dead worker's: three
refreshes missed (``durable_agents.lost_calls.REFRESH_SECONDS``), and with a sweep every 0.5 s a
dead host is noticed within 2 s."""
LEASE_QUERY_TIMEOUT = 2.0
"""Seconds a lease statement (or connecting for one) may take before the database counts as unreachable."""

_leases_logger = logging.getLogger(__name__)


class PostgresLeases:
    """Worker leases as rows of ``agent_workers``, one per worker (``durable_agents/lost_calls.py``):
    every host sees every other. A worker refreshes its row; a row the database's clock says was not
    refreshed for ``LEASE_DEAD_SECONDS`` is a dead worker's (no host's clock counts). While the
    database is unreachable nobody refreshes, so afterwards every row looks old: a worker judges
    nobody until its own refreshes have succeeded for ``LEASE_DEAD_SECONDS`` without a break, by
    which time every live worker has refreshed too.

    The leases have a connection of their own: a refresh never waits behind the stores' queries.
    """

    def __init__(self, url: str, server: str, worker: str, dead_seconds: float = LEASE_DEAD_SECONDS) -> None:
        self._url = url
        self._server = server
        self._worker = worker
        self._dead_seconds = dead_seconds
        self._record = ""
        self._record_kept = False
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

    async def sweep(self, reclaim: Callable[[str], Awaitable[None]]) -> None:
        loop = asyncio.get_running_loop()
        if self._trusted_since is None or loop.time() - self._trusted_since < self._dead_seconds:
            return
        dead = await self._query(
            "fetch",
            "SELECT worker, refreshed_at, record FROM agent_workers WHERE server = $1 AND worker <> $2"
            " AND refreshed_at < now() - make_interval(secs => $3)",
            self._server,
            self._worker,
            self._dead_seconds,
        )
        for worker, refreshed_at, record in dead or []:
            await reclaim(record)
            await self._query(  # unless it came back meanwhile
                "execute",
                "DELETE FROM agent_workers WHERE worker = $1 AND refreshed_at = $2",
                worker,
                refreshed_at,
            )

    async def release(self) -> None:
        await self._query("execute", "DELETE FROM agent_workers WHERE worker = $1", self._worker)
        async with self._lock:
            if self._connection is not None:
                await self._connection.close(timeout=LEASE_QUERY_TIMEOUT)
                self._connection = None

    async def _refresh(self) -> bool:
        inserted = await self._query(
            "fetchval",
            "INSERT INTO agent_workers (worker, server, refreshed_at, record) VALUES ($1, $2, now(), $3)"
            " ON CONFLICT (worker) DO UPDATE SET refreshed_at = now(), record = EXCLUDED.record"
            " RETURNING xmax = 0",
            self._worker,
            self._server,
            self._record,
        )
        if inserted is None:
            return False
        if inserted and self._record_kept:  # another worker took this one for dead: its calls were retried
            _leases_logger.warning("worker lease %s had expired; it is held again", self._worker)
        self._record_kept = True
        if self._trusted_since is None:
            self._trusted_since = asyncio.get_running_loop().time()
        return True

    async def _query(self, method: str, query: str, *args: object) -> Any:
        """``connection.<method>(query, *args)``; None when the database is out (``down``): then
        nobody is judged until the refreshes have succeeded again for ``LEASE_DEAD_SECONDS``."""
        async with self._lock:
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
