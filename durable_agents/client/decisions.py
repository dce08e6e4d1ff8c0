"""One way in for every decision on a waiting call, whatever door a person or a program uses.

The starter (``approve``, ``reject``, ``chat``), serve's decisions endpoint, AG-UI's ``resume``, the
console: each door only translates what it was sent into a mapping and hands it here. ``decision_from``
reads it as the worker's own validator does (a field the ``decide`` update does not know is
refused, naming the closest one: a misspelt ``arguments_digest`` must not approve arguments nobody
saw); ``decide`` signs it when the door holds the approver's key (over the digest and the
conversation the pending call names), sends the update, and turns a refusal into ``Refused`` with
the worker's reason on one line. The checks themselves (digest, allowed decisions, approvers,
bounds, signatures) are the workflow's and its worker's, so every door meets the same ones; the
``temporal`` CLI reaches them with no door at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import WorkflowHandle, WorkflowQueryFailedError, WorkflowUpdateFailedError

from durable_agents.activities.approver_keys import secret_of, sign
from durable_agents.client.conversations import one_line, refusal
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.inputs import one_input
from durable_agents.workflows.records import ApprovalRecord, Decision
from durable_agents.workflows.signatures import SignedDecision

EXAMPLE = '{"call_id": "call_1_0", "approve": true, "by": "alice", "arguments_digest": "5d41402abc4b"}'


class Refused(Exception):
    """The decision did not take (or was not sent): why, on one line."""


def decision_from(payload: Any, **door: Any) -> Decision:
    """The decision ``payload`` describes, read strictly; ``door``: what the door itself knows
    (who its caller is, how long to wait), over the payload's. ``Refused`` with the reason."""
    if not isinstance(payload, Mapping):
        raise Refused(f"a decision is one JSON object such as {EXAMPLE}")
    given = dict(payload) | {name: value for name, value in door.items() if value is not None}
    try:
        return one_input(Decision, (given,), "decide", EXAMPLE)  # worded as the update refuses it
    except ValueError as e:
        raise Refused(str(e)) from None


@dataclass(frozen=True)
class Signer:
    """Who decides (``by``) and, when they hold one, their approver key to sign with."""

    by: str
    secret: bytes | None = field(default=None, repr=False)

    @classmethod
    def of(cls, by: str, secret: str | None, where: str = "AGENT_APPROVER_KEY") -> Signer:
        """``by``, signing with the base64 ``secret`` when given. ``ValueError`` (one line, naming
        ``where``) for a secret that is no key."""
        return cls(by, secret_of(secret, where) if secret else None)

    def signature(self, workflow_id: str, conversation: str, digest: str, decision: Decision) -> str:
        """The signature of ``decision`` on a call of ``workflow_id`` (whose chain began with run
        ``conversation``) waiting with arguments of ``digest``."""
        if self.secret is None:
            raise ValueError("set AGENT_APPROVER_KEY to the approver's key (base64) to sign")
        return sign(self.secret, SignedDecision.of(workflow_id, conversation, digest, decision))


async def decide(
    handle: WorkflowHandle,
    decision: Decision,
    *,
    signer: Signer | None = None,
    waiting: list[ApprovalRecord] | None = None,
) -> ApprovalRecord:
    """Send ``decision`` to the conversation of ``handle`` (a sub-agent's too, or its call's id at the
    parent: ``call_2_0/call_1_0``); the record once it took. An unsigned decision is signed by
    ``signer`` when it holds a key, bound to the digest it signs. ``waiting``: the calls the
    conversation was seen waiting with, if the door asked already. ``Refused`` with the reason; an
    ``RPCError`` when the conversation cannot be reached (gone, closed, the server down)."""
    if signer is not None and signer.secret is not None and decision.signature is None:
        decision = await _signed(handle, decision, signer, waiting)
    try:
        return await handle.execute_update(AgentWorkflow.decide, decision)
    except WorkflowUpdateFailedError as e:
        raise Refused(refusal(e)) from e


async def _signed(
    handle: WorkflowHandle, decision: Decision, signer: Signer, waiting: list[ApprovalRecord] | None
) -> Decision:
    """``decision`` signed over the call as it waits (its digest, its conversation); as it is when
    the call does not wait, for the update to say why."""
    if waiting is None:
        try:
            waiting = await handle.query(AgentWorkflow.pending_approvals)
        except WorkflowQueryFailedError as e:
            raise Refused(one_line(e.message)) from e
    record = next((r for r in waiting or [] if r.call_id == decision.call_id), None)
    if record is None or record.conversation is None:
        return decision
    digest = decision.arguments_digest or record.arguments_digest
    signature = signer.signature(handle.id, record.conversation, digest, decision)
    return decision.model_copy(update={"arguments_digest": digest, "signature": signature})
