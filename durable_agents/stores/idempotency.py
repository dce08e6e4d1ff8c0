"""Effectively-once tool effects: a small persistent store of results by idempotency key.

Activities run at least once: a worker can die after a tool's side effect and before Temporal hears
the result, and the retry runs the tool again. A tool that must not repeat an effect wraps it in
``ctx.once("step", fn)``: the first run stores fn's result under ``<idempotency key>/step``; any
later attempt returns the stored result without calling fn.

Fencing: an attempt claims the step before fn runs, with the epoch of its worker's lease
(``leases.py``), and its result is recorded only while its claim holds. A claim holds until
it expires (the call's own timeout) or its claimant gives it up (fn raised): a retry that finds
another attempt's claim waits for the result or the expiry, even when that attempt's worker was
taken for dead, so a paused worker that comes back finishes the step and the retry returns its
result. A claim is refused to an epoch whose lease was taken (``StaleEpoch``). Past the fence (the
claimant crashed mid-effect and its claim expired) fn runs again: an outside service that takes an
idempotency key makes that safe too (fn may take the step's key, the same on every attempt).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from pydantic_core import to_jsonable_python

from durable_agents.stores.conversations import SQLiteStore
from durable_agents.stores.errors import UNSTORED

T = TypeVar("T")

EPOCH: contextvars.ContextVar[int | None] = contextvars.ContextVar("lease_epoch", default=None)
"""The epoch of the lease of the worker running this attempt, checked as the attempt started
(``durable_agents/worker/lost_calls.py``): the fencing token its claims carry (None: no lease in a store)."""
CLAIM_POLL_SECONDS = 0.2
"""How often an attempt waiting for another's claim looks for its result or its expiry."""

logger = logging.getLogger(__name__)


class StaleEpoch(RuntimeError):
    """This worker's lease was taken by another (it was paused or cut off past the dead interval):
    it starts nothing more, its calls run elsewhere."""


class StepTakenOver(RuntimeError):
    """The step's claim expired while fn ran and another attempt took it: this result is refused."""


class IdempotencyStore(Protocol):
    """Results as JSON text by key, and the claims of the steps running."""

    async def get(self, key: str) -> str | None:
        """The stored JSON text, or None when nothing is stored under ``key``."""

    async def put(self, key: str, value: str) -> None:
        """Store ``value`` unless ``key`` already holds one (a result an earlier try kept)."""

    async def claim(self, key: str, claimant: str, epoch: int | None, seconds: float) -> bool:
        """Claim the step for ``seconds``; False while another unexpired claim holds it or its
        result is stored. Raises ``StaleEpoch`` for an epoch whose lease was taken."""

    async def record(self, key: str, claimant: str, value: str) -> str | None:
        """Store ``value`` if ``claimant``'s claim still holds; the stored value, None when refused."""

    async def release(self, key: str, claimant: str) -> None:
        """Give the claim up (fn raised): a retry may run the step at once."""

    async def forget(self, conversation_key: str) -> int:
        """Remove the results and claims of every step of the conversation; how many results."""


FORGET_STEPS = (
    "DELETE FROM {results} WHERE substr(key, 1, ?) = ?",
    "DELETE FROM {claims} WHERE substr(key, 1, ?) = ?",
)
"""A conversation's steps (keys ``<conversation key>/<call id>/<step>``), on SQLite and PostgreSQL."""


def steps_of(conversation_key: str) -> tuple[int, str]:
    """The arguments of ``FORGET_STEPS``: the prefix of the conversation's step keys, and its length."""
    prefix = f"{conversation_key}/"
    return len(prefix), prefix


class SQLiteIdempotencyStore(SQLiteStore):
    """A SQLite file, persistent across worker restarts; shared by the worker processes of one
    machine (claims expire by this machine's clock)."""

    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        " CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, claimant TEXT NOT NULL,"
        " expires_at REAL NOT NULL)"
    )

    async def get(self, key: str) -> str | None:
        rows = await self._file.read("SELECT value FROM results WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    async def put(self, key: str, value: str) -> None:
        # INSERT OR IGNORE: a concurrent duplicate attempt cannot overwrite the first result.
        await self._file.write("INSERT OR IGNORE INTO results VALUES (?, ?)", [(key, value)])

    async def claim(self, key: str, claimant: str, epoch: int | None, seconds: float) -> bool:
        now = time.time()
        await self._file.write(
            "INSERT INTO claims SELECT ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM results WHERE key = ?)"
            " ON CONFLICT (key) DO UPDATE SET claimant = excluded.claimant, expires_at = excluded.expires_at"
            " WHERE claims.expires_at < ? OR claims.claimant = excluded.claimant",
            [(key, claimant, now + seconds, key, now)],
        )
        rows = await self._file.read(
            "SELECT 1 FROM claims WHERE key = ? AND claimant = ? AND NOT EXISTS"
            " (SELECT 1 FROM results WHERE key = ?)",
            (key, claimant, key),
        )
        return bool(rows)

    async def record(self, key: str, claimant: str, value: str) -> str | None:
        await self._file.write(
            "INSERT OR IGNORE INTO results SELECT ?, ? WHERE EXISTS"
            " (SELECT 1 FROM claims WHERE key = ? AND claimant = ?)",
            [(key, value, key, claimant)],
        )
        rows = await self._file.read(
            "SELECT r.value, c.claimant FROM results r LEFT JOIN claims c ON c.key = r.key WHERE r.key = ?",
            (key,),
        )
        return rows[0][0] if rows and rows[0][1] == claimant else None

    async def release(self, key: str, claimant: str) -> None:
        await self._file.write("DELETE FROM claims WHERE key = ? AND claimant = ?", [(key, claimant)])

    async def forget(self, conversation_key: str) -> int:
        results, claims = (sql.format(results="results", claims="claims") for sql in FORGET_STEPS)
        removed = await self._file.delete(results, steps_of(conversation_key))
        await self._file.delete(claims, steps_of(conversation_key))
        return removed


async def run_once(
    store: IdempotencyStore,
    key: str,
    fn: Callable[[], Any] | Callable[[str], Any],
    kept: Mapping[str, str] | None = None,
    claim_seconds: float = 30.0,
) -> Any:
    """fn's result (as JSON data), computed at most once per key while claims hold (see the module).

    The value is serialised before it is stored, so a result that cannot be stored fails before
    anything is recorded. ``kept`` holds results an earlier try of the call had when its store went
    out: such a result is stored now instead of running fn again. While a result waits for its
    store, the attempt holds it (``UNSTORED``), so an attempt that gives up hands it on. A claimed
    step runs to its end even if the attempt is cancelled meanwhile (a function blocked in a thread
    cannot be stopped): its result is recorded, then the cancellation raised.
    """
    found = kept.get(key) if kept else None
    if found is None:
        claimant = uuid.uuid4().hex
        if (stored := await _claimed(store, key, claimant, claim_seconds)) is not None:
            return json.loads(stored)
        return json.loads(await _despite_cancellation(_step(store, key, claimant, fn)))
    await _unstored(key, found, store.put(key, found))
    stored = await store.get(key)
    assert stored is not None, f"idempotency store lost {key!r} right after storing it"
    return json.loads(stored)


def _takes_key(fn: Callable[..., Any]) -> bool:
    try:
        inspect.signature(fn).bind(None)
    except TypeError:
        return False
    return True


async def _claimed(store: IdempotencyStore, key: str, claimant: str, seconds: float) -> str | None:
    """None once ``claimant`` holds the step; the stored result when another attempt recorded one."""
    waited = False
    while (stored := await store.get(key)) is None:
        if await store.claim(key, claimant, EPOCH.get(), seconds):
            return None
        if not waited:
            logger.info("step %s is claimed by another attempt: waiting for its result or its expiry", key)
            waited = True
        await asyncio.sleep(CLAIM_POLL_SECONDS)
    return stored


async def _step(
    store: IdempotencyStore, key: str, claimant: str, fn: Callable[[], Any] | Callable[[str], Any]
) -> str:
    """fn under ``claimant``'s claim, then its result recorded; the claim given up if fn raises."""
    try:
        value = fn(key) if _takes_key(fn) else fn()  # type: ignore[call-arg]
        if inspect.isawaitable(value):
            value = await value
        found = json.dumps(to_jsonable_python(value))
    except Exception:
        await store.release(key, claimant)
        raise
    return await _record(store, key, claimant, found)


async def _record(store: IdempotencyStore, key: str, claimant: str, found: str) -> str:
    stored = await _unstored(key, found, store.record(key, claimant, found))
    if stored is None:
        raise StepTakenOver(
            f"step {key!r}: its claim expired while it ran and another attempt took it; this result"
            " is refused (an outside service given the idempotency key keeps the effect once)"
        )
    return stored


async def _unstored(key: str, found: str, storing: Awaitable[T]) -> T:
    """``storing``, with ``found`` held in ``UNSTORED`` meanwhile (see ``run_once``)."""
    unstored = UNSTORED.get()
    if unstored is None:
        unstored = {}
        UNSTORED.set(unstored)
    unstored[key] = found
    result = await storing
    del unstored[key]
    return result


async def _despite_cancellation(step: Awaitable[T]) -> T:
    """``step`` run to its end even when the caller is cancelled meanwhile; the cancellation is
    raised after it: an effect that happened must leave its record."""
    task = asyncio.ensure_future(step)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done() and task.cancelled():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return task.result()
