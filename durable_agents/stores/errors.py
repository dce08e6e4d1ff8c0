"""Waiting for a store that does not answer, so that an outage costs a call time, never an attempt.

Every store (the conversation store, ``ctx.once`` results, workspaces, large payloads, the ledger;
SQLite files or PostgreSQL) raises ``StoreDown`` for a fault a later try may not meet, and
``outage`` is the one place that says which faults those are: connection refused or lost, the
server restarting, read-only, out of disk, memory or connections, its tables gone, a SQLite file
locked or its disk full, a disk full, over quota, failing or read-only under a folder or file.
``patiently`` is the one place that decides how long to try again:

- In an activity, until the outage budget (``AGENT_STORE_OUTAGE_SECONDS``) or shortly before the
  attempt's own timeout, whichever comes first (model and tool calls heartbeat meanwhile). Then the attempt
  fails with a non-retryable ``StoreUnavailable`` error: the workflow waits and runs the call again
  (``workflows/outages.py``), so the call's own retries stay for the provider's and the tool's faults.
- Anywhere else (the starter, a worker starting, a workflow task decoding a payload), for a few
  seconds; then ``StoreDown`` goes to the caller, who says so in one line.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_agents.workflows.activity_io import brief
from durable_agents.workflows.outages import STORE_UNAVAILABLE, STORES_DIFFER, StoreOutage

T = TypeVar("T")
logger = logging.getLogger(__name__)

DEFAULT_OUTAGE_SECONDS = 900.0
"""``AGENT_STORE_OUTAGE_SECONDS``'s default: 15 minutes."""
OUTSIDE_ACTIVITIES = 5.0
"""Seconds a store is tried outside activities before ``StoreDown`` reaches the caller."""
MARGIN = 0.2
"""The share of an attempt's timeout (at most 5 s) kept for failing it in words rather than by timeout."""


UNSTORED: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("unstored", default=None)
"""Results an attempt holds that its store has not taken yet (``ctx.once`` results whose effect
happened): an attempt that gives up on its store hands them to the workflow in its error, and the
call run again gets them in its input, whichever worker runs it (``ToolInvocation.kept``)."""


DISK_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})
"""A disk under a store that is full, over quota, failing or read-only: not the fault of a path."""

_SQLSTATES = {
    "08": "cannot be reached",  # connection_exception
    "57": "cannot be reached",  # operator_intervention: shutting down, restarting, starting up
    "53100": "is out of disk space",  # disk_full
    "53200": "is out of memory",  # out_of_memory
    "53300": "refuses connections",  # too_many_connections
    "53400": "is at a configured limit",  # configuration_limit_exceeded
    "53": "is out of resources",  # insufficient_resources, and any code the class gains
    "58030": "cannot use its disk",  # io_error
    "3D000": "does not exist",  # invalid_catalog_name: the database dropped, not yet made again
}
"""PostgreSQL's SQLSTATEs (a code, else its class) of faults of the server, not of the statement."""
NO_ROOM_TO_CONNECT = "could not write init file"
"""What a new PostgreSQL connection answers when its database's disk is full: the backend cannot
write its relation cache's file and ends as an internal error (XX000, relcache.c), not as 53100."""


def outage(error: BaseException) -> str | None:
    """Why ``error`` is a store's outage, in one line; None when it is not one (the caller's fault,
    or a bug), and goes up as it is. Read-only and tables gone are said apart: a store makes its
    tables again when they are found gone (``durable_agents/stores/postgres.py``)."""
    if isinstance(error, OSError) and error.errno in DISK_FAULTS:
        return error.strerror or str(error)
    if isinstance(error, sqlite3.OperationalError):  # locked, disk full, I/O error, read-only
        return str(error)
    sqlstate = getattr(error, "sqlstate", None)
    if not isinstance(sqlstate, str):
        return None
    if sqlstate == "25006":  # read_only_sql_transaction: a standby, or a failover under way
        return f"is read-only ({first_line(error)})"
    if sqlstate == "42P01":  # undefined_table
        return "its tables are gone (the database emptied or made anew)"
    if sqlstate == "XX000" and str(error) == NO_ROOM_TO_CONNECT:
        return f"is out of disk space: {first_line(error)}"
    said = _SQLSTATES.get(sqlstate) or _SQLSTATES.get(sqlstate[:2])
    return f"{said}: {first_line(error)}" if said else None


def first_line(error: BaseException) -> str:
    """An error in one line: its first, or its type when it says nothing."""
    return str(error).splitlines()[0] if str(error) else type(error).__name__


class StoreDown(Exception):
    """A store cannot answer now; a later try may work."""

    def __init__(self, store: str, reason: str) -> None:
        super().__init__(f"{store} unavailable: {reason}")
        self.store = store
        self.reason = reason


async def patiently(op: Callable[[], Awaitable[T]], budget: float) -> T:
    """``op()``, tried again with backoff while it raises ``StoreDown`` (see the module's rule)."""
    loop = asyncio.get_running_loop()
    since = time.time()
    deadline = loop.time() + _patience(budget)
    delay = 0.05
    first: StoreDown | None = None
    while True:
        try:
            result = await op()
        except StoreDown as e:
            first = first or e
            _say(e)
            if loop.time() >= deadline:
                if activity.in_activity():
                    outage = StoreOutage(
                        store=e.store, reason=e.reason, since=since, budget=budget, kept=UNSTORED.get() or {}
                    )
                    raise ApplicationError(
                        str(e), *outage.details(), type=STORE_UNAVAILABLE, non_retryable=True
                    ) from e
                raise
            await asyncio.sleep(max(0.0, min(delay, deadline - loop.time())))
            delay = min(delay * 2, 1.0)
            continue
        if first is not None and _SAID.pop(first.store, None) is not None:
            logger.warning("%s answers again after %.1f s", first.store, time.time() - since)
        return result


_SAID: dict[str, str] = {}
"""What the log last said of each store that is out: one line per store and cause, not per call."""


def _say(e: StoreDown) -> None:
    if _SAID.get(e.store) != e.reason:
        _SAID[e.store] = e.reason
        logger.warning("%s; waiting for it", e)


def stores_differ(mine: str, theirs: str) -> ApplicationError:
    """The refusal of a call whose conversation keeps its data in other stores than this worker's."""
    outage = StoreOutage(
        store=theirs,
        reason=f"this worker's stores are {mine}",
        since=time.time(),
        budget=0,
        wrong_worker=True,
    )
    return ApplicationError(
        f"this worker's stores are {mine}, the conversation's are {theirs}",
        *outage.details(),
        type=STORES_DIFFER,
        non_retryable=True,
    )


class StoreIdentity:
    """The identity of a worker's stores (its conversation store's), asked once and kept; and the
    check that a call's conversation keeps its data in the same stores."""

    def __init__(self, ask: Callable[[], Awaitable[str]]) -> None:
        self._ask = ask
        self._known: str | None = None
        self._refused: set[str] = set()

    async def __call__(self) -> str:
        if self._known is None:
            self._known = await self._ask()
        return self._known

    async def check(self, theirs: str, conversation: str) -> None:
        """Refuse (``StoresDiffer``) a call of a conversation whose stores are not this worker's: it
        goes to another worker. Said in the log once per conversation. ``theirs``: whole, or in
        brief (``brief``, as a lean call carries it), this worker's then said both ways."""
        known = await self()
        short = brief(known)
        if not theirs or theirs in (known, short):
            return
        mine = f"{known} (in brief {short})" if len(theirs) == len(short) else known
        if conversation not in self._refused:
            self._refused.add(conversation)
            logger.warning(
                "refusing the calls of %s: its stores are %s, this worker's are %s",
                conversation,
                theirs,
                mine,
            )
        raise stores_differ(mine, theirs)


def _patience(budget: float) -> float:
    if not activity.in_activity():
        return min(budget, OUTSIDE_ACTIVITIES)
    info = activity.info()
    if info.start_to_close_timeout is None:
        return budget
    timeout = info.start_to_close_timeout.total_seconds()
    left = timeout - (time.time() - info.started_time.timestamp()) - min(timeout * MARGIN, 5.0)
    return max(0.0, min(budget, left))
