"""The budgets file (config/budgets.toml, or ``AGENT_BUDGETS``): limits per tenant and per user on
tokens and cost per day and month, the provider limits every worker shares, and the tenants'
fairness weights. Workers read it again when it changes (its mtime, checked at each model call):
no restart. A file that turns bad is refused with a warning, and the last good one stays.

    [tenants.acme]
    tokens_per_day = 2_000_000
    cost_per_month = 300.0
    fairness_weight = 2.0          # twice the task share of a tenant at the default 1.0

    [users.bob]
    tokens_per_day = 100_000

    [limits."openai/gpt-4o-mini"]
    requests_per_minute = 500
    tokens_per_minute = 200_000
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from pydantic import BaseModel, Field

from durable_agents.activities.agent_files import AgentFileError, read_toml
from durable_agents.stores.ledger import Limit

logger = logging.getLogger(__name__)

DEFAULT_BUDGETS = Path(__file__).resolve().parent.parent / "config" / "budgets.toml"
"""The project's own file: the default where ``AGENT_BUDGETS`` names no other."""


class Limits(BaseModel):
    """A tenant's or a user's limits; each may be left out."""

    model_config = {"extra": "forbid"}

    tokens_per_day: int | None = Field(default=None, ge=0)
    tokens_per_month: int | None = Field(default=None, ge=0)
    cost_per_day: float | None = Field(default=None, ge=0)
    """US dollars, at the prices of the models table (config/models.toml)."""
    cost_per_month: float | None = Field(default=None, ge=0)
    fairness_weight: float | None = Field(default=None, gt=0, le=1000)
    """The tenant's share of task dispatch against the others' (Temporal's fairness weight, 1.0 by
    default); for tenants only."""

    def limits(self, scope: str, name: str) -> list[Limit]:
        found = []
        for period in ("day", "month"):
            for kind in ("tokens", "cost"):
                amount = getattr(self, f"{kind}_per_{period}")
                if amount is not None:
                    found.append(Limit(scope, name, period, kind, float(amount)))  # type: ignore[arg-type]
        return found


class ProviderLimit(BaseModel):
    """Requests and tokens per window (a minute) of one ``provider/model``, for every worker together."""

    model_config = {"extra": "forbid"}

    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)


class Budgets(BaseModel):
    model_config = {"extra": "forbid"}

    tenants: dict[str, Limits] = Field(default_factory=dict)
    users: dict[str, Limits] = Field(default_factory=dict)
    limits: dict[str, ProviderLimit] = Field(default_factory=dict)
    """By ``provider/model`` (``openai/gpt-4o-mini``)."""
    window_seconds: float = Field(default=60.0, gt=0, le=3600)
    """The provider limits' window: a minute (tests shorten it)."""
    slowdown_seconds: float = Field(default=60.0, ge=0)
    """After a provider's 429, the model's limits are lowered this long, for every worker."""
    slowdown_factor: float = Field(default=0.5, gt=0, le=1)
    """What a 429 multiplies the model's limits by (again at each 429 meanwhile, to an eighth at most)."""

    def limits_of(self, tenant: str | None, user: str | None) -> list[Limit]:
        found: list[Limit] = []
        if tenant is not None and tenant in self.tenants:
            found += self.tenants[tenant].limits("tenant", tenant)
        if user is not None and user in self.users:
            found += self.users[user].limits("user", user)
        return found

    def fairness_weight(self, tenant: str | None) -> float | None:
        entry = self.tenants.get(tenant) if tenant is not None else None
        return entry.fairness_weight if entry else None


def read_budgets(path: Path) -> Budgets:
    """The budgets in ``path``; ``AgentFileError`` in one line naming the file and the field."""
    return read_toml(path, "the budgets", Budgets.model_validate)


class BudgetsFile:
    """The budgets file as it is now: read again when its mtime changes."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or DEFAULT_BUDGETS
        self._lock = threading.Lock()
        self._seen: float | None = None
        self._budgets = Budgets()
        self.current()  # a bad file at start is the operator's to fix: said in one line
        if self._seen is None and path is not None and not path.exists():
            raise AgentFileError(f"{path}: no such budgets file (AGENT_BUDGETS)")

    def current(self) -> Budgets:
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError:
            return self._budgets if self._seen is not None else Budgets()
        with self._lock:
            if mtime != self._seen:
                try:
                    self._budgets = read_budgets(self.path)
                    if self._seen is not None:
                        logger.info("budgets read again from %s", self.path)
                except AgentFileError as e:
                    if self._seen is None:
                        raise
                    logger.warning("%s; keeping the budgets read before", e)
                self._seen = mtime
            return self._budgets
