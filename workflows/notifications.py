"""Telling a person that a call waits: the agent's webhook (``[notify]``, or the worker's
``AGENT_NOTIFY_URL`` that ``resolve_agent`` fills in) is sent a ``Notification`` when a call starts
waiting for a person, again as its deadline nears, and when a client tool's call waits
(docs/console.md, "Notifications").

Each is the ``notify`` activity (activities/notify.py), started without being awaited: the wait for
the person goes on meanwhile. Its retries have no attempt limit, so a receiver that is down delays
a notification and loses none; the conversation does not continue as new while one is being sent
(the next run would not carry it on). A notification still being sent when its conversation closes
is dropped: nothing waits any more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from durable_agents.workflows import versioning
from durable_agents.workflows.activity_io import Notification
from durable_agents.workflows.activity_refs import NOTIFY, failure_text
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.records import ApprovalRecord, ClientCall
from durable_agents.workflows.waiting import cut_arguments

NOTIFY_PATCH = versioning.patch("notify-when-a-call-waits", added=3)
"""Runs of release 3 on tell the agent's webhook what waits (a ``notify`` activity, a timer before a
deadline); runs written the older way (a release-2 worker may replay them) tell nobody."""
RETRIES = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(minutes=5))
"""No attempt limit: a receiver that is down delays the notification, within ``GIVE_UP``."""
GIVE_UP = timedelta(days=2)
"""A notification not delivered within this is dropped (with a warning in the worker's log)."""


class Notifications:
    def __init__(self) -> None:
        self.in_flight = 0
        """Notifications being sent: the conversation does not continue as new meanwhile."""
        self._tasks: set[asyncio.Task[None]] = set()

    def waiting(
        self, spec: AgentSpec, call: ApprovalRecord | ClientCall, *, tenant: str | None, user: str | None
    ) -> None:
        """``call`` waits for a person (with a deadline, told again as it nears) or a client. Told once,
        in the workflow task that asked it (``requested_at`` is now); a call carried over from the
        previous run keeps only its deadline's notification, unless its time passed (then that run
        sent it). Asked of agents with a webhook only: the others' runs record nothing new."""
        notify = spec.notify
        if notify is None or notify.url is None or not versioning.since(NOTIFY_PATCH):
            return
        told = Notification(
            event="client_tool_waiting" if isinstance(call, ClientCall) else "approval_requested",
            conversation=workflow.info().workflow_id,
            agent=spec.name,
            tenant=tenant,
            user=user,
            tool=call.tool,
            call_id=call.call_id,
            arguments=cut_arguments(call.arguments),
            deadline=call.deadline,
            url=notify.url,
            format=notify.format,
        )
        if call.requested_at == workflow.now():
            self._send(told)
        if isinstance(call, ApprovalRecord) and call.deadline is not None:
            lead = min(
                notify.before_deadline_seconds, (call.deadline - call.requested_at).total_seconds() / 4
            )
            left = (call.deadline - workflow.now()).total_seconds() - lead
            if left > 0:
                self._start(
                    self._before_deadline(call, left, told.model_copy(update={"event": "deadline_near"}))
                )

    async def _before_deadline(self, record: ApprovalRecord, left: float, told: Notification) -> None:
        try:
            await workflow.wait_condition(
                lambda: record.state != "pending",
                timeout=left,
                timeout_summary=f"notify before the deadline of {record.tool} ({record.call_id})",
            )
        except TimeoutError:
            self._send(told)

    def _send(self, told: Notification) -> None:
        self.in_flight += 1  # at once: a continue-as-new is held from here on
        self._start(self._deliver(told))

    async def _deliver(self, told: Notification) -> None:
        try:
            await NOTIFY.execute(
                told,
                start_to_close_timeout=timedelta(seconds=30),
                schedule_to_close_timeout=GIVE_UP,
                retry_policy=RETRIES,
                summary=f"notify: {told.event} {told.tool} ({told.call_id})",
            )
        except ActivityError as err:
            workflow.logger.warning("notification of %s dropped: %s", told.call_id, failure_text(err))
        finally:
            self.in_flight -= 1

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        """``work`` as a task of its own, kept until it ends (the loop holds tasks weakly)."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
