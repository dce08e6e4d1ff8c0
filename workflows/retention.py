"""Retention: the stores keep a closed conversation's data for the retention period, then a pass of
``RetentionWorkflow`` (a Temporal Schedule starts one, ``starter.py retention``) removes it.

A pass walks in order the conversations the conversation store's messages name, those the
ledger's rows name and the workflows that own payloads (a conversation closed before its first
model call may have only its input guardrails' checks in the ledger, or its start input in the
payload store), a bounded batch of each per activity (``RETENTION_BATCH``), the cursors in its
history: a worker killed mid-batch has the batch run again (every removal is idempotent, and
a conversation's messages, by which the batch finds it, go last), and the pass continues as new
after ``BATCHES_PER_RUN`` batches.
A conversation's data goes once its last run closed longer ago than the retention, or once Temporal
no longer knows it (deleted there: its orphans); a running conversation's never. Removal is
``DELETE`` statements on the stores: passes on several hosts at once remove each row once, and each
counts only the rows it removed.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from temporalio import workflow

from durable_agents.workflows import wire
from durable_agents.workflows.activity_refs import ActivityRef
from durable_agents.workflows.erasure import added, call_step

BATCHES_PER_RUN = 200
"""Batches one run of a pass takes before it continues as new (its history stays small)."""


class RetentionRequest(BaseModel):
    """One pass, and how far it came (carried across continue-as-new)."""

    retention_seconds: float | None = None
    """How long a closed conversation's data is kept; None: the namespace's own retention."""
    batch: int = Field(default=100, gt=0)
    """Conversations looked at per activity."""
    cursor: str = ""
    """The last conversation key of the messages looked at."""
    ledger_cursor: str = ""
    """The last conversation key of the ledger looked at."""
    owner_cursor: str = ""
    """The last workflow id of the payloads' owners looked at."""
    conversations: int = 0
    """Conversations whose data the pass removed so far."""
    removed: dict[str, int] = Field(default_factory=dict)
    """Items removed so far, by store."""


class RetentionBatch(BaseModel):
    """What the pass's next batch ends with."""

    cursor: str
    done: bool
    ledger_cursor: str = ""
    owner_cursor: str = ""
    conversations: int = 0
    removed: dict[str, int] = Field(default_factory=dict)


RETENTION_BATCH = ActivityRef(wire.namespaced("retention_batch"), RetentionRequest, RetentionBatch)


@workflow.defn(name="durable_agents.Retention", sandboxed=False)  # as AgentWorkflow (see there)
class RetentionWorkflow:
    @workflow.run
    async def run(self, request: RetentionRequest) -> RetentionRequest:
        for _ in range(BATCHES_PER_RUN):
            batch: RetentionBatch = await call_step(RETENTION_BATCH, request)  # type: ignore[assignment]
            request = request.model_copy(
                update={
                    "cursor": batch.cursor,
                    "ledger_cursor": batch.ledger_cursor,
                    "owner_cursor": batch.owner_cursor,
                    "conversations": request.conversations + batch.conversations,
                    "removed": added(request.removed, batch.removed),
                }
            )
            if batch.done:
                return request
        workflow.continue_as_new(request)
