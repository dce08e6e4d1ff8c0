"""A store outage is the infrastructure's fault, not the call's: what the workflow does about one.

An activity whose store (conversations, ``ctx.once`` results, workspaces, large payloads) does not
answer waits for it inside the attempt, heartbeating (``durable_agents/stores/errors.py``). When it has waited
as long as it may, it fails with a non-retryable ``StoreUnavailable`` error: not to fail the call,
but so that the outage uses up none of the call's attempts. The conversation then waits too
(``wait_out_outages``): it tries the activity again after a pause, as often as it takes, and past the
outage budget says ``waiting_for_storage``. Nothing of it reaches the model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

T = TypeVar("T")

STORE_UNAVAILABLE = "StoreUnavailable"
"""The error type of an activity that waited for its store as long as it may."""
STORES_DIFFER = "StoresDiffer"
"""The error type of an activity refused by a worker whose stores are not the conversation's."""
PAUSES = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Seconds between tries of an activity while its store is out (the last one repeats)."""
NOT_EAGER: ContextVar[bool] = ContextVar("durable_agents_not_eager", default=False)
"""Set while an activity that a worker refused for its stores (``wrong_worker``) is tried again: the
plugin's interceptor (durable_agents/worker/runners.py, ``EagerUnlessRefused``) then has the server queue
it rather than hand it eagerly back to this worker, whose stores may be the refusing ones. Not a
decision of the workflow: a replay schedules the same commands either way."""


@dataclass(frozen=True)
class StoreOutage:
    """What an activity said of the store it waited for."""

    store: str
    """The store, as the worker names it (a masked URL or a file)."""
    reason: str
    since: float
    """When the activity first found it unavailable (seconds since the epoch)."""
    budget: float
    """``AGENT_STORE_OUTAGE_SECONDS`` of that worker: how long an outage lasts before it shows."""
    wrong_worker: bool = False
    """The worker's stores are not the conversation's (another worker should take the call)."""
    kept: dict[str, str] = field(default_factory=dict)
    """Results the attempt had that the store never took (``ctx.once`` results by key, JSON): the
    call run again gets them, so an effect that happened is not repeated on another worker."""

    def details(self) -> list[Any]:
        return [self.store, self.reason, self.since, self.budget, self.kept]

    @classmethod
    def of(cls, err: BaseException) -> StoreOutage | None:
        """The outage behind a failed activity, or None when it failed for another reason."""
        cause: BaseException | None = err
        while cause is not None:
            if isinstance(cause, ApplicationError) and cause.type in (STORE_UNAVAILABLE, STORES_DIFFER):
                store, reason, since, budget, kept = [*cause.details, None, None, None, None, None][:5]
                return cls(
                    store=str(store or "a store"),
                    reason=str(reason or cause.message),
                    since=float(since or 0),
                    budget=float(budget or 0),
                    wrong_worker=cause.type == STORES_DIFFER,
                    kept={str(k): str(v) for k, v in (kept or {}).items()} if isinstance(kept, dict) else {},
                )
            cause = cause.__cause__
        return None


OutageWatcher = Callable[[StoreOutage | None], None]
"""Told of each outage an activity met (to show it), and None once the activity went through."""


async def wait_out_outages(
    call: Callable[[dict[str, str]], Awaitable[T]], watcher: OutageWatcher | None
) -> T:
    """``call(kept)`` (one activity), tried again after a pause for as long as its store is out;
    ``kept`` holds the results earlier tries had that the store never took."""
    tries = 0
    kept: dict[str, str] = {}
    refused = False
    while True:
        queued = NOT_EAGER.set(True) if refused else None
        try:
            result = await call(kept)
        except ActivityError as err:
            outage = StoreOutage.of(err)
            if outage is None:
                raise
            refused = refused or outage.wrong_worker
            kept = {**kept, **outage.kept}
            if watcher is not None:
                watcher(outage)
            pause = PAUSES[min(tries, len(PAUSES) - 1)]
            tries += 1
            await workflow.sleep(timedelta(seconds=pause), summary=f"waiting for {outage.store}")
            continue
        finally:
            if queued is not None:
                NOT_EAGER.reset(queued)
        if tries and watcher is not None:
            watcher(None)
        return result
