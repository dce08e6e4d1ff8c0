"""The shared ledger: what every tenant and user spent on model calls, and how fast every worker
together calls each provider's model. One truth for all workers: a SQLite file on one machine
(``<data dir>/ledger.db``, beside the conversation store), or the PostgreSQL database of
``AGENT_DATABASE_URL``; each decision is one transaction, so workers never both take the last of
a budget or a rate. Outages are waited out like every store's (``durable_agents/stores/errors.py``).

- **Budgets**: a model call reserves its worst case (its input estimate plus ``max_tokens``, at the
  model's price) before it runs, against every limit of its tenant and user for the day and the
  month (activities/budgets.py); a call that would pass one is refused. After the call the
  reservation is settled to the actual usage. A reservation carries an expiry: a worker killed
  mid-call leaves one that the call's next attempt replaces, or that lapses by itself.
- **Provider limits**: requests and tokens per window (a minute) per ``provider/model``, as a
  sliding log of the calls sent: a call is taken only if the calls of the last window plus it stay
  within both limits, else it waits. A call holds its place in the log from before it is sent until
  a window after it answered, so no window of the provider's own clock ever sees more than the
  limit (a token bucket would let twice the limit through around a refill).
- **Slowdown**: a provider's 429 halves the model's limits for a while, for every worker.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from durable_agents.stores.conversations import CONVERSATIONS_AFTER, SQLiteFile
from durable_agents.stores.errors import DEFAULT_OUTAGE_SECONDS, StoreDown, outage, patiently
from durable_agents.workflows.messages import Usage

T = TypeVar("T")
Period = Literal["day", "month"]

TABLES = [
    "CREATE TABLE IF NOT EXISTS agent_ledger (id TEXT PRIMARY KEY, tenant TEXT NOT NULL,"
    " user_name TEXT NOT NULL, conversation TEXT NOT NULL, model TEXT NOT NULL, day TEXT NOT NULL,"
    " month TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, input_tokens BIGINT NOT NULL,"
    " output_tokens BIGINT NOT NULL, tokens BIGINT NOT NULL, cost DOUBLE PRECISION NOT NULL,"
    " expires_at DOUBLE PRECISION)",
    "CREATE INDEX IF NOT EXISTS agent_ledger_tenant ON agent_ledger (tenant, month)",
    "CREATE INDEX IF NOT EXISTS agent_ledger_user ON agent_ledger (user_name, month)",
    "CREATE TABLE IF NOT EXISTS agent_rate (id TEXT PRIMARY KEY, model TEXT NOT NULL,"
    " tokens BIGINT NOT NULL, live_until DOUBLE PRECISION NOT NULL)",
    "CREATE INDEX IF NOT EXISTS agent_rate_model ON agent_rate (model, live_until)",
    "CREATE TABLE IF NOT EXISTS agent_slowdown (model TEXT PRIMARY KEY,"
    " until DOUBLE PRECISION NOT NULL, factor DOUBLE PRECISION NOT NULL)",
]
"""The ledger's tables, the same on SQLite and PostgreSQL (migration 3 of postgres.py)."""
CACHED_TABLE = (
    "CREATE TABLE IF NOT EXISTS agent_ledger_cached (id TEXT PRIMARY KEY,"
    " cached_input_tokens BIGINT NOT NULL)"
)
"""Of a settled row's input tokens, those read from the provider's prompt cache (migration 6 of
postgres.py); a row without one had none. A table beside ``agent_ledger``, not a column of it: the
previous release inserts its rows by position, which a column added to a shared ``ledger.db`` would
break during a rolling deploy or a rollback."""
_WITH_CACHED = "agent_ledger LEFT JOIN agent_ledger_cached USING (id)"
"""The ledger's rows with their cached input tokens (``coalesce(cached_input_tokens, 0)``)."""
_SLOWDOWN = "SELECT factor FROM agent_slowdown WHERE model = ? AND until > ?"


@dataclass(frozen=True)
class Limit:
    """One limit a call is counted against: ``tokens`` or ``cost`` (US dollars) per ``period`` of a
    tenant's or a user's."""

    scope: Literal["tenant", "user"]
    name: str
    period: Period
    kind: Literal["tokens", "cost"]
    amount: float

    def text(self, resets: datetime) -> str:
        amount = f"{int(self.amount)} tokens" if self.kind == "tokens" else f"${self.amount:g}"
        return (
            f"{self.scope} {self.name}'s {'daily' if self.period == 'day' else 'monthly'} limit of"
            f" {amount} reached; it resets at {resets.strftime('%Y-%m-%dT%H:%M:%SZ')}"
        )


@dataclass(frozen=True)
class Spend:
    """What ``usage`` reports for one tenant and user in one period."""

    tenant: str
    user: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost: float
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those read from the provider's prompt cache."""

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def period_key(period: Period, at: float) -> str:
    moment = datetime.fromtimestamp(at, UTC)
    return moment.strftime("%Y-%m-%d" if period == "day" else "%Y-%m")


def resets_at(period: Period, at: float) -> datetime:
    """When the period of ``at`` ends (UTC midnight, or the first of the next month)."""
    moment = datetime.fromtimestamp(at, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return datetime.fromtimestamp(moment.timestamp() + 86_400, UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return moment.replace(year=year, month=month, day=1)


class Tx(Protocol):
    async def fetch(self, sql: str, *args: Any) -> list[tuple]: ...

    async def execute(self, sql: str, *args: Any) -> None: ...


class Ledger:
    """The ledger's decisions, each one transaction of its backend (``SQLiteLedger``, ``PostgresLedger``)."""

    async def _transact(self, op: Callable[[Tx], Awaitable[T]]) -> T:
        raise NotImplementedError

    # -- budgets --------------------------------------------------------------------

    async def reserve(
        self,
        id: str,
        *,
        tenant: str,
        user: str,
        conversation: str,
        model: str,
        tokens: int,
        cost: float,
        limits: list[Limit],
        expires_at: float,
        now: float,
        replaces: str | None = None,
    ) -> str | None:
        """Reserve ``tokens`` and ``cost`` under ``id`` unless that would pass one of ``limits``:
        then nothing is reserved, and the answer names the limit and when it resets. ``replaces``:
        a prefix of ids whose reservations still pending this one replaces (the same call's earlier
        attempts)."""
        day, month = period_key("day", now), period_key("month", now)

        async def op(tx: Tx) -> str | None:
            if replaces is not None:
                await tx.execute(
                    "DELETE FROM agent_ledger WHERE expires_at IS NOT NULL AND substr(id, 1, ?) = ?",
                    len(replaces),
                    replaces,
                )
            for limit in limits:
                column = "tenant" if limit.scope == "tenant" else "user_name"
                key = day if limit.period == "day" else month
                [(spent,)] = await tx.fetch(
                    f"SELECT coalesce(sum({limit.kind}), 0) FROM agent_ledger WHERE {column} = ?"
                    f" AND {limit.period} = ? AND (expires_at IS NULL OR expires_at > ?)",
                    limit.name,
                    key,
                    now,
                )
                wanted = tokens if limit.kind == "tokens" else cost
                if float(spent) + wanted > limit.amount:
                    return limit.text(resets_at(limit.period, now))
            await tx.execute(
                "INSERT INTO agent_ledger VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET tokens = excluded.tokens, cost = excluded.cost,"
                " expires_at = excluded.expires_at",
                id,
                tenant,
                user,
                conversation,
                model,
                day,
                month,
                now,
                tokens,
                cost,
                expires_at,
            )
            return None

        return await self._transact(op)

    async def settle(self, id: str, used: Usage, cost: float) -> None:
        """The reservation ``id`` becomes what the call used."""

        async def op(tx: Tx) -> None:
            await tx.execute(
                "UPDATE agent_ledger SET input_tokens = ?, output_tokens = ?, tokens = ?, cost = ?,"
                " expires_at = NULL WHERE id = ?",
                used.input_tokens,
                used.output_tokens,
                used.total_tokens,
                cost,
                id,
            )
            await _cached(tx, id, used.cached_input_tokens)

        await self._transact(op)

    async def record(
        self,
        id: str,
        *,
        conversation: str,
        model: str,
        used: Usage,
        cost: float,
        now: float,
    ) -> None:
        """A call of no tenant or user, settled at once (nothing to reserve against): ``usage`` shows
        these calls as a row of their own."""

        async def op(tx: Tx) -> None:
            await tx.execute(
                "INSERT INTO agent_ledger VALUES (?, '', '', ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)"
                " ON CONFLICT (id) DO NOTHING",
                id,
                conversation,
                model,
                period_key("day", now),
                period_key("month", now),
                now,
                used.input_tokens,
                used.output_tokens,
                used.total_tokens,
                cost,
            )
            await _cached(tx, id, used.cached_input_tokens)

        await self._transact(op)

    async def release(self, id: str) -> None:
        """The call did not reach the provider's answer: its reservation goes (a settled one stays)."""
        await self._transact(
            lambda tx: tx.execute("DELETE FROM agent_ledger WHERE id = ? AND expires_at IS NOT NULL", id)
        )

    async def pending(self, now: float) -> int:
        """Reservations still counted (not settled, not expired)."""
        rows = await self._transact(
            lambda tx: tx.fetch("SELECT count(*) FROM agent_ledger WHERE expires_at > ?", now)
        )
        return int(rows[0][0])

    async def usage(
        self, *, period: Period, now: float, tenant: str | None = None, user: str | None = None
    ) -> list[Spend]:
        """Settled spend of the period of ``now``, by tenant and user ("" for none)."""
        sql = (
            "SELECT tenant, user_name, count(*), sum(input_tokens), sum(output_tokens), sum(cost),"
            f" sum(coalesce(cached_input_tokens, 0)) FROM {_WITH_CACHED}"
            f" WHERE expires_at IS NULL AND {period} = ?"
        )
        args: list[Any] = [period_key(period, now)]
        for column, value in (("tenant", tenant), ("user_name", user)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        sql += " GROUP BY tenant, user_name ORDER BY tenant, user_name"
        rows = await self._transact(lambda tx: tx.fetch(sql, *args))
        return [Spend(r[0], r[1], int(r[2]), int(r[3]), int(r[4]), float(r[5]), int(r[6])) for r in rows]

    # -- forgetting -----------------------------------------------------------------

    async def forget_conversation(self, conversation: str) -> int:
        """The conversation's reservations go, and its settled rows become day totals of its
        tenant and user that name no conversation: budgets still count what it spent. How many
        rows it had."""
        return await self._fold("conversation = ?", [conversation], keep_user=True)

    async def conversations_after(self, key: str, limit: int) -> list[str]:
        """Up to ``limit`` conversations after ``key`` that rows name, in order (day totals name
        none): the retention's batches find by them a conversation whose only calls were checks
        (an input guardrail's model stopped its first message before any model call)."""
        sql = CONVERSATIONS_AFTER.format(table="agent_ledger")
        return [row[0] for row in await self._transact(lambda tx: tx.fetch(sql, key, limit))]

    async def forget_user(self, user: str, tenant: str | None = None) -> int:
        """The user's rows (in ``tenant``, or in every tenant) become anonymous day totals of their
        tenant: the tenant's budgets still count them. How many rows the user had."""
        where, args = "user_name = ?", [user]
        if tenant is not None:
            where, args = f"{where} AND tenant = ?", [user, tenant]
        return await self._fold(where, args, keep_user=False)

    async def fold_past(self, now: float) -> int:
        """Housekeeping of the retention: settled rows of months before ``now``'s become day totals
        (no conversation named: budgets count only this month's), lapsed reservations and rate-log
        places go. How many rows went."""
        folded = await self._fold(
            "month < ? AND conversation <> ''", [period_key("month", now)], keep_user=True
        )

        async def lapsed(tx: Tx) -> int:
            [(count,)] = await tx.fetch("SELECT count(*) FROM agent_ledger WHERE expires_at < ?", now)
            await tx.execute("DELETE FROM agent_ledger WHERE expires_at < ?", now)
            await tx.execute("DELETE FROM agent_rate WHERE live_until < ?", now)
            return int(count)

        return folded + await self._transact(lapsed)

    async def _fold(self, where: str, args: list[Any], *, keep_user: bool) -> int:
        """The rows ``where`` says: reservations removed, settled ones added to the one row per
        tenant (and user, if kept), model and day that names no conversation (``total/...``): the
        totals stay as many as the days, however many conversations go."""
        group = "tenant, user_name, model, day, month" if keep_user else "tenant, model, day, month"
        who = "user_name" if keep_user else "''"

        async def op(tx: Tx) -> int:
            [(count,)] = await tx.fetch(f"SELECT count(*) FROM agent_ledger WHERE {where}", *args)
            totals = await tx.fetch(
                f"SELECT tenant, {who}, model, day, month, min(at), sum(input_tokens), sum(output_tokens),"
                f" sum(cost), sum(coalesce(cached_input_tokens, 0)) FROM {_WITH_CACHED}"
                f" WHERE expires_at IS NULL AND {where} GROUP BY {group}",
                *args,
            )
            await tx.execute(
                f"DELETE FROM agent_ledger_cached WHERE id IN (SELECT id FROM agent_ledger WHERE {where})",
                *args,
            )
            await tx.execute(f"DELETE FROM agent_ledger WHERE {where}", *args)
            for tenant, user, model, day, month, at, input_tokens, output_tokens, cost, cached in totals:
                id = f"total/{tenant}/{user}/{model}/{day}"
                await tx.execute(
                    "INSERT INTO agent_ledger VALUES (?, ?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?, NULL)"
                    " ON CONFLICT (id) DO UPDATE SET input_tokens = agent_ledger.input_tokens"
                    " + excluded.input_tokens, output_tokens = agent_ledger.output_tokens"
                    " + excluded.output_tokens, tokens = agent_ledger.tokens + excluded.tokens,"
                    " cost = agent_ledger.cost + excluded.cost",
                    id, tenant, user, model, day, month, float(at),
                    int(input_tokens), int(output_tokens), int(input_tokens) + int(output_tokens),
                    float(cost),
                )  # fmt: skip
                await _cached(tx, id, int(cached), added=True)
            return int(count)

        return await self._transact(op)

    # -- provider limits ------------------------------------------------------------

    async def take_rate(
        self,
        id: str,
        model: str,
        tokens: int,
        *,
        requests_limit: int | None,
        tokens_limit: int | None,
        holds_until: float,
        now: float,
    ) -> float:
        """Take a place for call ``id`` (``tokens`` at most) in ``model``'s log: 0.0 when taken (it
        holds it until ``holds_until``, or until ``settle_rate``), else the seconds to wait before
        asking again. The limits are lowered while a 429 slowdown lasts. A call larger than the
        tokens limit goes alone, into an empty window."""

        async def op(tx: Tx) -> float:
            await tx.execute("DELETE FROM agent_rate WHERE live_until <= ?", now)
            await tx.execute("DELETE FROM agent_rate WHERE id = ?", id)  # an earlier attempt's place
            slow = await tx.fetch(
                "SELECT factor FROM agent_slowdown WHERE model = ? AND until > ?", model, now
            )
            factor = float(slow[0][0]) if slow else 1.0
            [(count, used, soonest)] = await tx.fetch(
                "SELECT count(*), coalesce(sum(tokens), 0), min(live_until) FROM agent_rate WHERE model = ?",
                model,
            )
            over_requests = requests_limit is not None and count + 1 > max(1, int(requests_limit * factor))
            over_tokens = tokens_limit is not None and count and used + tokens > tokens_limit * factor
            if over_requests or over_tokens:
                return max(0.02, float(soonest) - now)
            await tx.execute("INSERT INTO agent_rate VALUES (?, ?, ?, ?)", id, model, tokens, holds_until)
            return 0.0

        return await self._transact(op)

    async def settle_rate(self, id: str, tokens: int, holds_until: float) -> None:
        """The call answered: its place holds what it used, for a window more."""
        await self._transact(
            lambda tx: tx.execute(
                "UPDATE agent_rate SET tokens = ?, live_until = ? WHERE id = ?", tokens, holds_until, id
            )
        )

    async def slow_down(self, model: str, until: float, factor: float, now: float) -> float:
        """A 429 for ``model``: its limits are multiplied by ``factor`` (again, while a slowdown
        lasts: at most to an eighth) until ``until``. Returns the factor now in force."""

        async def op(tx: Tx) -> float:
            slow = await tx.fetch(
                "SELECT factor FROM agent_slowdown WHERE model = ? AND until > ?", model, now
            )
            lowered = max(0.125, (float(slow[0][0]) if slow else 1.0) * factor)
            await tx.execute(
                "INSERT INTO agent_slowdown VALUES (?, ?, ?) ON CONFLICT (model) DO UPDATE"
                " SET until = excluded.until, factor = excluded.factor",
                model,
                until,
                lowered,
            )
            return lowered

        return await self._transact(op)


async def _cached(tx: Tx, id: str, tokens: int, *, added: bool = False) -> None:
    """Row ``id``'s cached input tokens are ``tokens`` (``added``: that many more, for a fold's
    total); none is no row in ``agent_ledger_cached``."""
    if tokens:
        before = "agent_ledger_cached.cached_input_tokens + " if added else ""
        await tx.execute(
            "INSERT INTO agent_ledger_cached VALUES (?, ?) ON CONFLICT (id) DO UPDATE"
            f" SET cached_input_tokens = {before}excluded.cached_input_tokens",
            id,
            tokens,
        )


class SQLiteLedger(Ledger):
    """A SQLite file shared by the worker processes of one machine; each decision holds its write
    lock (``BEGIN IMMEDIATE``) from the first read to the commit."""

    def __init__(self, path: Path, outage_seconds: float = DEFAULT_OUTAGE_SECONDS) -> None:
        self._file = SQLiteFile(path, TABLES[0], outage_seconds)
        self._path = path
        self._outage_seconds = outage_seconds
        with self._file._lock, self._file._db:
            for statement in [*TABLES[1:], CACHED_TABLE]:
                self._file._db.execute(statement)

    def __str__(self) -> str:
        return f"SQLite {self._path}"

    async def _transact(self, op: Callable[[Tx], Awaitable[T]]) -> T:
        return await patiently(lambda: self._in_thread(op), self._outage_seconds)

    async def _in_thread(self, op: Callable[[Tx], Awaitable[T]]) -> T:
        try:
            return await asyncio.to_thread(self._run, op)
        except Exception as e:
            if (reason := outage(e)) is None:
                raise
            raise StoreDown(str(self), reason) from e

    def _run(self, op: Callable[[Tx], Awaitable[T]]) -> T:
        db = self._file._db
        with self._file._lock:
            db.execute("BEGIN IMMEDIATE")
            try:
                result = _drive(op(_SQLiteTx(db)))
            except BaseException:
                db.rollback()
                raise
            db.commit()
            return result


class _SQLiteTx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    async def fetch(self, sql: str, *args: Any) -> list[tuple]:
        return self._db.execute(sql, args).fetchall()

    async def execute(self, sql: str, *args: Any) -> None:
        self._db.execute(sql, args)


def _drive(coroutine: Any) -> Any:
    """Run a ledger operation on SQLite: its awaits are the connection's, which answer at once."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("a ledger operation awaited something besides its database")


def numbered(sql: str) -> str:
    """``?`` placeholders as PostgreSQL's ``$1, $2, ...``."""
    parts = sql.split("?")
    return "".join(part + (f"${i + 1}" if i < len(parts) - 1 else "") for i, part in enumerate(parts))
