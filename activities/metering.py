"""A model call as the shared ledger sees it (durable_agents/stores/ledger.py, docs/tenants.md): the
tenant's and
user's budgets reserved before it runs and settled after, the provider's limits waited for, and a
provider's 429 slowing every worker. The model activity's calls and the model judges' go through
``Meter.call`` alike. Calls of conversations without a tenant or user, to models without provider
limits, reserve nothing: they are recorded once they answered, for ``starter.py usage``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_agents.activities.budgets import Budgets, BudgetsFile, ProviderLimit
from durable_agents.stores.ledger import Ledger
from durable_agents.workflows.config import Price
from durable_agents.workflows.messages import ModelRequest, ModelResponse, Usage
from durable_agents.workflows.outages import STORE_UNAVAILABLE, StoreOutage
from durable_agents.workflows.tenancy import BUDGET_EXHAUSTED
from durable_agents.workflows.transcript import estimate_tokens

logger = logging.getLogger(__name__)

RATE_LIMITED = "ProviderHTTP429"
"""The error type of a provider's 429 (activities/errors.py)."""
WAIT_STEP = 1.0
"""Seconds between asks for a place while a provider limit is full."""
NO_OUTAGE_BUDGET = 10 * 365 * 86_400.0
"""A wait for a provider's limit is never shown as a store outage (``waiting_for_storage``)."""


class Account(Protocol):
    """Whom a call is counted against, and at what price: ``ModelCallInput`` and ``JudgeInput``."""

    @property
    def conversation_key(self) -> str: ...
    @property
    def tenant(self) -> str | None: ...
    @property
    def user(self) -> str | None: ...
    @property
    def price(self) -> Price | None: ...


class Meter:
    """The worker's view of the ledger and the budgets file; ``ledger`` is made on first use. Without
    a budgets file (or a ledger) every call passes straight through."""

    def __init__(
        self,
        ledger: Callable[[], Ledger] | None,
        budgets: BudgetsFile | None,
        prices: Callable[[str], Price | None] = lambda model: None,
    ) -> None:
        self._make_ledger = ledger
        self._ledger: Ledger | None = None
        self._budgets = budgets
        self._prices = prices
        """The worker's models table: the price of a call whose conversation sent none (only a
        tenant's or user's conversation sends its own)."""

    def _the_ledger(self) -> Ledger:
        if self._ledger is None:
            assert self._make_ledger is not None
            self._ledger = self._make_ledger()
        return self._ledger

    async def call(
        self, input: Account, request: ModelRequest, complete: Callable[[], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        if self._budgets is None or self._make_ledger is None:
            return await complete()
        budgets = self._budgets.current()
        model = f"{request.settings.provider}/{request.settings.model}"
        limit = budgets.limits.get(model)
        owned = input.tenant is not None or input.user is not None
        price = input.price or self._prices(request.settings.model)
        ledger = self._the_ledger()
        info = activity.info()
        call = f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}/"
        id = f"{call}{info.attempt}"
        if not owned and limit is None:
            response = await complete()
            used = response.usage
            await ledger.record(
                id,
                conversation=input.conversation_key,
                model=model,
                used=used,
                cost=price.cost(used) if price else 0.0,
                now=time.time(),
            )
            return response
        timeout = (info.start_to_close_timeout or timedelta(seconds=120)).total_seconds()
        prompt = estimate_tokens(request.messages)
        worst = prompt + request.settings.max_tokens
        if owned:
            now = time.time()
            refused = await ledger.reserve(
                id,
                tenant=input.tenant or "",
                user=input.user or "",
                conversation=input.conversation_key,
                model=model,
                tokens=worst,
                cost=price.cost(Usage(input_tokens=prompt, output_tokens=request.settings.max_tokens))
                if price
                else 0.0,
                limits=budgets.limits_of(input.tenant, input.user),
                expires_at=now + timeout + 5.0,
                now=now,
                replaces=call,
            )
            if refused is not None:
                logger.info("model call of %s refused: %s", input.conversation_key, refused)
                raise ApplicationError(refused, type=BUDGET_EXHAUSTED, non_retryable=True)
        sent = False
        try:
            if limit is not None:
                await self._wait_for_place(ledger, id, model, worst, limit, budgets, timeout)
            sent = True
            try:
                response = await complete()
            except ApplicationError as e:
                if limit is not None and e.type == RATE_LIMITED:
                    factor = await ledger.slow_down(
                        model, time.time() + budgets.slowdown_seconds, budgets.slowdown_factor, time.time()
                    )
                    logger.warning("%s answered 429: every worker at %g of its limits for now", model, factor)
                raise
        except BaseException:
            await asyncio.shield(self._undo(ledger, id, owned, limit is not None and sent, worst, budgets))
            raise
        used = response.usage
        if owned:
            cost = price.cost(used) if price else 0.0
            await ledger.settle(id, used, cost)
        if limit is not None:
            await ledger.settle_rate(id, used.total_tokens, time.time() + budgets.window_seconds)
        return response

    async def _undo(
        self, ledger: Ledger, id: str, owned: bool, sent: bool, worst: int, budgets: Budgets
    ) -> None:
        """A call that got no answer: its reservation goes; if it was sent, its place in the provider's
        log stays for a window (the provider may have counted it)."""
        try:
            if owned:
                await ledger.release(id)
            if sent:
                await ledger.settle_rate(id, worst, time.time() + budgets.window_seconds)
        except Exception as e:  # the reservation lapses by itself
            logger.warning("could not release reservation %s: %s", id, e)

    async def _wait_for_place(
        self,
        ledger: Ledger,
        id: str,
        model: str,
        tokens: int,
        limit: ProviderLimit,
        budgets: Budgets,
        timeout: float,
    ) -> None:
        """Wait (heartbeating: the caller does) until the model's limits take the call. A wait longer
        than the attempt has left ends it as a store outage would: the conversation tries the call
        again after a pause, and no attempt is used up (workflows/outages.py)."""
        since = time.time()
        started = activity.info().started_time.timestamp()
        while True:
            now = time.time()
            wait = await ledger.take_rate(
                id,
                model,
                tokens,
                requests_limit=limit.requests_per_minute,
                tokens_limit=limit.tokens_per_minute,
                holds_until=started + timeout + budgets.window_seconds,
                now=now,
            )
            if wait <= 0:
                return
            # A place held by a call still running frees when it answers: ask again within a window.
            wait = min(wait, budgets.window_seconds)
            left = started + timeout - min(timeout * 0.2, 5.0) - now
            if wait > left:
                outage = StoreOutage(
                    store=f"the provider limit of {model}",
                    reason="its requests or tokens per minute are taken",
                    since=since,
                    budget=NO_OUTAGE_BUDGET,
                )
                raise ApplicationError(
                    f"waiting for a place under {model}'s limits",
                    *outage.details(),
                    type=STORE_UNAVAILABLE,
                    non_retryable=True,
                )
            activity.heartbeat()
            await asyncio.sleep(min(wait, WAIT_STEP))
