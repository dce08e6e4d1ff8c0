"""What people see of a running conversation: the ``status`` query, the Web UI's current details and
the AgentStatus search attribute, and the ``state`` events of its stream. ``StatusBoard`` is their one
writer, so they never disagree."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate, TypedSearchAttributes

from durable_agents.workflows import versioning
from durable_agents.workflows.api import (
    AGENT_COST,
    AGENT_NAME,
    AGENT_STATUS,
    AGENT_TENANT,
    AGENT_USER,
    ConversationStatus,
)
from durable_agents.workflows.events import ConversationEvents, StateChanged
from durable_agents.workflows.outages import StoreOutage
from durable_agents.workflows.records import ApprovalRecord, ClientCall
from durable_agents.workflows.state import ConversationState
from durable_agents.workflows.waiting import details

COST_PATCH = versioning.patch("agent-cost-search-attribute", added=2)
"""Runs that started after it write AgentCost with each AgentStatus upsert; older ones replay the
upserts as they made them, without it."""

_RUNNING = ("starting", "calling_model", "running_tools")


class StatusBoard:
    def __init__(
        self,
        carried: ConversationState,
        *,
        pending_approvals: int,
        events: ConversationEvents,
        waiting: Callable[[], Sequence[ApprovalRecord | ClientCall]] = tuple,
    ) -> None:
        """``waiting``: the calls that wait for a person or a client, which the Web UI's details name."""
        # what a continued run carries shows at once
        self.view = ConversationStatus(
            state="starting",
            run=carried.runs,
            iteration=carried.turn.iterations if carried.turn else 0,
            queued_messages=len(carried.queue),
            pending_approvals=pending_approvals,
        )
        self._searchable = ""
        self._searchable_cost: float | None = None
        self._known = TypedSearchAttributes.empty
        self._events = events
        self._waiting = waiting
        self._published = ("", "")
        self._outage_since: float | None = None
        self._before_outage: tuple[str, str] | None = None
        """State and detail to go back to when the store that kept a call waiting answers."""

    def begin(self) -> None:
        """Reads what the starter (or the previous run) already set: AgentStatus is upserted only
        when it changes from that."""
        self._known = workflow.info().typed_search_attributes
        # Asked here, at the start of the run, where runs of the patch-per-branch way asked it.
        versioning.retired(COST_PATCH)
        self.view.tenant, self.view.user = self._known.get(AGENT_TENANT), self._known.get(AGENT_USER)
        self._searchable_cost = self._known.get(AGENT_COST)  # a continued run's, as the last run left it
        self._searchable = self._known.get(AGENT_STATUS) or "running"

    def name_agent(self, name: str, max_iterations: int) -> None:
        """Shows the resolved agent, and names it in the search attributes when the start did not."""
        self.view.agent, self.view.max_iterations = name, max_iterations
        if self._known.get(AGENT_NAME) != name or self._known.get(AGENT_STATUS) is None:
            self._upsert([AGENT_NAME.value_set(name), AGENT_STATUS.value_set(self._searchable)])

    def show(self, **fields: Any) -> None:
        """Counters of the status query (iteration, usage, queued messages, ...)."""
        for name, value in fields.items():
            setattr(self.view, name, value)

    def say(self, detail: str) -> None:
        """The one line the status query and the Web UI show: always both, never one without the other."""
        self.view.detail = detail
        self.refresh()
        self._publish()

    def refresh(self) -> None:
        """The Web UI's current details (markdown, read through ``describe``): the line, then each call
        that waits, with the command that ends its wait (workflows/waiting.py). Not in history: a
        query answers them, so a change is no command and replays need not meet it."""
        workflow.set_current_details(details(self.view.detail, workflow.info().workflow_id, self._waiting()))

    def set(self, state: str, detail: str | None = None) -> None:
        """A new state for the status query and, as running / awaiting_approval / waiting_for_client /
        idle / completed / cancelled / failed, for the AgentStatus search attribute."""
        self.view.state = state  # type: ignore[assignment]
        if detail is not None:
            self.say(detail)
        else:
            self._publish()
        searchable = "running" if state in _RUNNING else state
        if searchable != self._searchable:
            self._upsert([AGENT_STATUS.value_set(searchable)])
            self._searchable = searchable

    def _upsert(self, updates: list[SearchAttributeUpdate[Any]]) -> None:
        """The upsert, with AgentCost when the cost changed since the last one wrote it: the cost
        rides on upserts made anyway."""
        cost = self.view.cost
        if cost is not None and cost != self._searchable_cost:
            updates = [*updates, AGENT_COST.value_set(cost)]
            self._searchable_cost = cost
        workflow.upsert_search_attributes(updates)

    def outage(self, outage: StoreOutage | None) -> None:
        """A call waits for its store: past the outage budget the conversation says so
        (``waiting_for_storage``, naming the store); None: the store answered, back to what it was."""
        if outage is None:
            self._outage_since = None
            if self._before_outage is not None:
                state, detail = self._before_outage
                self._before_outage = None
                self.set(state, detail)
            return
        if self._outage_since is None:  # the first call that gave up: the outage began when it met it
            self._outage_since = outage.since
            workflow.logger.warning("waiting for %s: %s", outage.store, outage.reason)
        if workflow.now().timestamp() - self._outage_since < outage.budget:
            return
        if self._before_outage is None:
            self._before_outage = (self.view.state, self.view.detail)
        why = "no worker with this conversation's stores" if outage.wrong_worker else outage.reason
        self.set("waiting_for_storage", f"waiting for {outage.store}: {why}")

    def _publish(self) -> None:
        """A ``state`` event on the conversation's stream when state or detail changed."""
        now = (self.view.state, self.view.detail)
        if now != self._published:
            self._published = now
            self._events.publish(StateChanged(state=now[0], detail=now[1]))
