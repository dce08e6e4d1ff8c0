"""Erasure: conversations removed from Temporal and from every store beside it, as a workflow of
its own (``ErasureWorkflow``), so that a deletion or a user's erasure resumes where it stopped
after any crash, and runs where the stores are: on a worker (the starter may not reach them).

What one erasure covers: the conversations it names (``delete``), or every conversation whose
``AgentUser`` (and ``AgentTenant``, when given) is the user's (``forget``); with each, its
sub-agents (``AgentParent``), theirs in turn. A fork is a conversation of its own, and stays. A
running conversation is refused unless the request says ``cancel``: then it is cancelled and waited
for until it closed. Each conversation is then removed store by store, then run by run from
Temporal (``ERASE_CONVERSATION``); for a user, the ledger keeps only anonymous totals of its spend.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from durable_agents.workflows import wire
from durable_agents.workflows.activity_refs import ActivityRef

STILL_RUNNING = "ConversationRunning"
"""The error type of an erasure refused for a running conversation (no ``cancel``)."""
NOT_A_CONVERSATION = "NotAConversation"
"""The error type of an erasure that names a workflow that is not a conversation, or none."""


class ErasureRequest(BaseModel):
    """Which conversations to erase: by workflow id, or every one of a user."""

    workflow_ids: list[str] = Field(default_factory=list)
    user: str | None = None
    """Every conversation of this user (``AgentUser``), and the user's rows in the ledger."""
    tenant: str | None = None
    """With ``user``: only in this tenant (``AgentTenant``)."""
    cancel: bool = False
    """Cancel running conversations first (and wait until they closed) instead of refusing."""


class ErasureTarget(BaseModel):
    """One conversation to erase, as Temporal knows it."""

    workflow_id: str
    key: str
    """What the stores key it by (``workflows.activity_refs.conversation_key``)."""
    runs: list[str] = Field(default_factory=list)
    """Every run of its chain (continue-as-new), the newest last."""
    running: bool = False


class ErasureReport(BaseModel):
    """What an erasure removed: the conversations, and how many items of each store."""

    conversations: list[str] = Field(default_factory=list)
    removed: dict[str, int] = Field(default_factory=dict)

    def add(self, removed: dict[str, int]) -> None:
        self.removed = added(self.removed, removed)


def added(counts: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    """Counts by store, ``more`` added (the stores of both, in the order they first came)."""
    return {store: counts.get(store, 0) + more.get(store, 0) for store in {**counts, **more}}


FIND_CONVERSATIONS = ActivityRef(wire.namespaced("find_conversations"), ErasureRequest, list[ErasureTarget])
CANCEL_CONVERSATION = ActivityRef(wire.namespaced("cancel_conversation"), ErasureTarget, type(None))
ERASE_CONVERSATION = ActivityRef(wire.namespaced("erase_conversation"), ErasureTarget, dict[str, int])
FORGET_SPENDER = ActivityRef(wire.namespaced("forget_spender"), ErasureRequest, dict[str, int])


async def call_step(ref: ActivityRef, arg: BaseModel) -> object:
    """Each step may take long on a big conversation (a heartbeat says it is alive) and is safe to
    repeat; an error that says what is wrong is not retried."""
    return await workflow.execute_activity(
        ref.name,
        arg,
        result_type=ref.output,
        start_to_close_timeout=timedelta(minutes=10),
        heartbeat_timeout=timedelta(seconds=60),
        retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
    )


@workflow.defn(name="durable_agents.Erasure", sandboxed=False)  # as AgentWorkflow (see there)
class ErasureWorkflow:
    @workflow.run
    async def run(self, request: ErasureRequest) -> ErasureReport:
        targets: list[ErasureTarget] = await call_step(FIND_CONVERSATIONS, request)  # type: ignore[assignment]
        running = [target for target in targets if target.running]
        if running and not request.cancel:
            names = ", ".join(target.workflow_id for target in running)
            raise ApplicationError(
                f"{names} still running: cancel it first, or ask with cancel (starter.py delete --cancel)",
                type=STILL_RUNNING,
                non_retryable=True,
            )
        if running:
            for target in running:
                await call_step(CANCEL_CONVERSATION, target)
            # their sub-agents closed with them, and the runs they closed in are known now
            targets = await call_step(FIND_CONVERSATIONS, request)  # type: ignore[assignment]
        report = ErasureReport(conversations=[target.workflow_id for target in targets])
        for target in targets:
            report.add(await call_step(ERASE_CONVERSATION, target))  # type: ignore[arg-type]
        if request.user is not None:
            report.add(await call_step(FORGET_SPENDER, request))  # type: ignore[arg-type]
        return report
