"""Pending approvals and decisions of one conversation: plain deterministic state, no I/O."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from durable_agents.workflows.config import DecisionKind
from durable_agents.workflows.decisions import (
    OUTCOME_DECISIONS,
    Allowed,
    Cancelled,
    Channel,
    Judged,
    PersonKind,
    RunTool,
    TimedOut,
    decided,
    parse,
    parse_outcome,
)
from durable_agents.workflows.messages import ToolCall
from durable_agents.workflows.records import (
    ApprovalRecord,
    ApprovalSignal,
    Decision,
    LateDecision,
    Revocation,
    ToolAllowance,
    Verdict,
)

_MILLISECOND = timedelta(milliseconds=1)


def time_left(deadline: datetime, now: datetime) -> timedelta:
    """The wait from ``now`` until ``deadline`` (an approval's, a client call's), rounded up to the
    millisecond: Temporal's SDK rounds a ``wait_condition`` timeout to the nearest millisecond on
    Python 3.12 and later (``asyncio.wait_for`` goes through ``loop.call_at``) and keeps its
    microseconds on 3.11, so a run continued as new would time out up to half a millisecond before
    a carried deadline on the one and not on the other. Whole, the timer is the same on every Python
    and does not fire early."""
    left = max(deadline - now, timedelta(0))
    return -(-left // _MILLISECOND) * _MILLISECOND


class Approvals:
    def __init__(
        self,
        records: list[ApprovalRecord] = (),  # type: ignore[assignment]
        allowances: list[ToolAllowance] = (),  # type: ignore[assignment]
        schema_of: Callable[[str], dict[str, Any] | None] = lambda tool: None,
        conversation: str | None = None,
    ) -> None:
        self.records: dict[str, ApprovalRecord] = {r.call_id: r for r in records}
        for record in self.records.values():  # asked before records named their conversation
            record.conversation = record.conversation or conversation
        self.allowances: list[ToolAllowance] = list(allowances)
        """Tools allowed for the rest of the conversation, revoked ones included (the audit)."""
        self._schema_of = schema_of
        """The JSON schema of a tool's arguments, to check edited ones."""
        self.conversation = conversation
        """The first run id of the conversation's chain: every record it asks names it."""

    @property
    def pending(self) -> list[ApprovalRecord]:
        return [r for r in self.records.values() if r.state == "pending"]

    def request(
        self,
        call: ToolCall,
        deadline: timedelta | None,
        now: datetime,
        decisions: list[DecisionKind] | None = None,
        approvers: list[str] | None = None,
    ) -> ApprovalRecord:
        """The call's approval record: pending, or approved at once when its tool is allowed.
        ``approvers``: who may decide (None: anyone)."""
        record = ApprovalRecord(
            call_id=call.id,
            tool=call.name,
            arguments=call.arguments,
            requested_at=now,
            deadline=now + deadline if deadline is not None else None,
            conversation=self.conversation,
        )
        if decisions is not None:
            record.allowed_decisions = decisions
        record.approvers = approvers
        self.records[call.id] = record
        if allowance := self.allowance(call.name):
            Allowed.by_allowance(allowance).close(record, now)
            return record
        return record

    def request_outcome(self, call: ToolCall, deadline: timedelta | None, now: datetime) -> ApprovalRecord:
        """A record asking a person about a call of an at-most-once tool whose attempt's outcome is
        unknown: ``<call id>.unknown`` (``.unknown2``... when it happens again)."""
        asked = sum(1 for r in self.records.values() if r.for_call == call.id)
        record = ApprovalRecord(
            call_id=f"{call.id}.unknown{asked + 1 if asked else ''}",
            tool=call.name,
            arguments=self.arguments_for(call),
            requested_at=now,
            deadline=now + deadline if deadline is not None else None,
            allowed_decisions=list(OUTCOME_DECISIONS),
            asked="outcome_unknown",
            for_call=call.id,
            conversation=self.conversation,
        )
        self.records[record.call_id] = record
        return record

    def judged(self, record: ApprovalRecord, kind: Judged, now: datetime) -> None:
        """A judge's decision, if the call still waits."""
        if record.state == "pending":
            kind.take(record, now)

    def too_late(self, decision: ApprovalSignal, approve: bool, now: datetime) -> ApprovalRecord | None:
        """The record of a call a judge decided before ``decision`` came, with the decision recorded
        there as too late; None for any other call (the decision is then checked as usual)."""
        record = self.records.get(decision.call_id)
        if record is None or record.via != "judge":
            return None
        record.late.append(LateDecision(by=decision.by, approve=approve, reason=decision.reason, at=now))
        return record

    def on_signal(
        self,
        signal: ApprovalSignal,
        approve: bool,
        now: datetime,
        *,
        verdict: Verdict | None = None,
    ) -> str:
        """Apply a decision from a signal; returns what happened, for the log. A decision binds to
        a call that waits now: one for a call nobody has seen yet is dropped. ``verdict``: who made
        it, as the worker verified it, for the record.
        """
        decision = Decision(approve=approve, **signal.model_dump())
        try:
            record, kind = self._checked(decision, now)
        except ValueError as e:
            if (late := self.records.get(signal.call_id)) and late.deadline and now >= late.deadline:
                self.time_out(late, now)  # too late, even if the timer has not fired yet
            return f"ignored: {e}"
        self._apply(record, kind, now, "signal", verdict)
        return f"call {signal.call_id!r} {record.state} by {record.by}"

    def check(self, decision: Decision, now: datetime) -> ApprovalRecord:
        """The pending record the decision is for; ``ValueError`` with the reason when it cannot be taken.

        Changes nothing: the ``decide`` update's validator calls it.
        """
        return self._checked(decision, now)[0]

    def _checked(self, decision: Decision, now: datetime) -> tuple[ApprovalRecord, PersonKind]:
        """As ``check``, with the kind the decision takes."""
        record = self.records.get(decision.call_id)
        if record is None:
            waiting = ", ".join(r.call_id for r in self.pending) or "none"
            raise ValueError(f"no approval is pending for call {decision.call_id!r} (pending: {waiting})")
        if record.state != "pending":
            by = f"judge {record.by}" if record.via == "judge" else record.by
            raise ValueError(f"call {decision.call_id!r} was already {record.state} by {by}")
        if record.deadline is not None and now >= record.deadline:
            raise ValueError(f"call {decision.call_id!r} is past its approval deadline")
        digest = decision.arguments_digest
        if digest is not None and digest != record.arguments_digest:
            raise ValueError(
                f"call {decision.call_id!r} has arguments digest {record.arguments_digest}, not {digest}:"
                " look at its arguments again (pending_approvals)"
            )
        allowed = record.allowed_decisions
        kind = parse_outcome(decision) if record.asked == "outcome_unknown" else parse(decision)
        if refused := [name for name in kind.kinds if name not in allowed]:
            raise ValueError(
                f"{refused[0]!r} is not a decision allowed for {record.tool} (allowed: {', '.join(allowed)})"
            )
        if record.approvers is not None and decision.by not in record.approvers:
            raise ValueError(
                f"{decision.by} may not decide {record.tool} (approvers: {', '.join(record.approvers)})"
            )
        kind.check(record.tool, self._schema_of)
        return record, kind

    def decide(self, decision: Decision, now: datetime, verdict: Verdict | None = None) -> ApprovalRecord:
        record, kind = self._checked(decision, now)
        self._apply(record, kind, now, "update", verdict)
        return record

    def arguments_for(self, call: ToolCall) -> dict[str, Any]:
        """The arguments the call runs with: a person's edit, or the model's own."""
        record = self.records.get(call.id)
        kind = decided(record) if record else None
        step = kind.then(call) if kind else None
        return step.arguments if isinstance(step, RunTool) else call.arguments

    def allowance(self, tool: str) -> ToolAllowance | None:
        """The tool's standing allowance, if a person gave one and nobody revoked it."""
        return next((a for a in self.allowances if a.tool == tool and a.revoked_at is None), None)

    def check_revocation(self, revocation: Revocation) -> ToolAllowance:
        """The allowance to revoke; ``ValueError`` when the tool has none."""
        if (allowance := self.allowance(revocation.tool)) is None:
            allowed = ", ".join(a.tool for a in self.allowances if a.revoked_at is None) or "none"
            raise ValueError(f"{revocation.tool} is not allowed for this conversation (allowed: {allowed})")
        return allowance

    def revoke(self, revocation: Revocation, now: datetime) -> ToolAllowance:
        """Later calls of the tool wait for a person again (calls already approved stay approved)."""
        allowance = self.check_revocation(revocation)
        allowance.revoked_by, allowance.revoked_at = revocation.by, now
        return allowance

    def time_out(self, record: ApprovalRecord, now: datetime) -> None:
        TimedOut().close(record, now)

    def cancel_pending(self, reason: str, now: datetime) -> None:
        """The conversation was cancelled: nobody will decide these any more."""
        for record in self.pending:
            Cancelled(reason).close(record, now)

    def _apply(
        self,
        record: ApprovalRecord,
        kind: PersonKind,
        now: datetime,
        via: Channel,
        verdict: Verdict | None = None,
    ) -> None:
        kind.take(record, now, via, verdict)
        if (granted := kind.allowance(record, now)) and self.allowance(record.tool) is None:
            self.allowances.append(granted)
