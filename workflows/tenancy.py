"""Who a conversation belongs to (its ``tenant`` and ``user``), in workflow code: what scopes its
stored data, what its sub-agents and forks inherit, what its model calls are counted against in
the shared ledger (durable_agents/stores/ledger.py), and the priority of its activities.

A model call the ledger refuses (a tenant's or user's budget for the day or month would pass its
limit) fails with a non-retryable ``BudgetExhausted`` error naming the limit and when it resets:
the turn ends with stop reason ``budget_exhausted``, the conversation stays open."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow
from temporalio.common import Priority
from temporalio.exceptions import ActivityError, ApplicationError

BUDGET_EXHAUSTED = "BudgetExhausted"
"""The error type of a model call the shared ledger refused (activities/model_activity.py)."""


@dataclass(frozen=True)
class Tenancy:
    tenant: str | None = None
    user: str | None = None

    @property
    def owned(self) -> bool:
        return self.tenant is not None or self.user is not None


def current() -> Tenancy:
    """In workflow code: the running conversation's tenant and user (none outside a conversation,
    and for conversations started without them)."""
    try:
        instance = workflow.instance()
    except RuntimeError:
        return Tenancy()
    return getattr(instance, "tenancy", None) or Tenancy()


def scoped_key(key: str, tenant: str | None) -> str:
    """A conversation key (``<workflow id>/<first run id>``) scoped by the tenant: its transcript,
    workspace and ``ctx.once`` keys (``<key>/<call id>/<step>``) then never meet another tenant's.
    Conversations without a tenant keep the key as it was."""
    return key if tenant is None else f"tenants/{tenant}/{key}"


class BudgetRefused(Exception):
    """A model call the ledger refused; ``text`` names the limit and when it resets."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def refusal(err: ActivityError) -> BudgetRefused | None:
    """The ledger's refusal behind a failed model call, or None when it failed otherwise."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.type == BUDGET_EXHAUSTED:
        return BudgetRefused(cause.message)
    return None


def activity_priority(agent_priority: int | None) -> dict[str, Priority]:
    """``priority=`` for the conversation's activities: the agent's ``priority`` when the start gave
    none (the start's, and its fairness key, the tenant, are inherited from the workflow)."""
    if agent_priority is None or workflow.info().priority.priority_key:
        return {}
    return {"priority": Priority(priority_key=agent_priority)}
