"""Pending approvals and decisions of one conversation: plain deterministic state, no I/O."""

from __future__ import annotations

from datetime import datetime, timedelta

from workflows.messages import ToolCall
from workflows.records import ApprovalRecord, ApprovalSignal, Decision

MAX_EARLY_DECISIONS = 100
"""Bound of the decisions kept for calls not requested yet (conversations started before
decisions were bound to pending calls; see ``keep_early``)."""


class Approvals:
    def __init__(self, records: list[ApprovalRecord] = (), early: list[Decision] = ()) -> None:  # type: ignore[assignment]
        self.records: dict[str, ApprovalRecord] = {r.call_id: r for r in records}
        self._early: dict[str, Decision] = {d.call_id: d for d in early}

    @property
    def early(self) -> list[Decision]:
        """Decisions for calls not requested yet, carried across continue-as-new."""
        return list(self._early.values())

    @property
    def pending(self) -> list[ApprovalRecord]:
        return [r for r in self.records.values() if r.state == "pending"]

    def request(self, call: ToolCall, deadline: timedelta | None, now: datetime) -> ApprovalRecord:
        record = ApprovalRecord(
            call_id=call.id,
            tool=call.name,
            arguments=call.arguments,
            requested_at=now,
            deadline=now + deadline if deadline is not None else None,
        )
        self.records[call.id] = record
        if early := self._early.pop(call.id, None):
            self._apply(record, early, now, "signal")
        return record

    def on_signal(
        self, signal: ApprovalSignal, approve: bool, now: datetime, *, keep_early: bool = False
    ) -> str:
        """Apply a decision from a signal; returns what happened, for the log.

        A decision binds to a call that waits now: one for a call nobody has seen yet is dropped
        (``keep_early`` keeps it, as conversations started before this rule did).
        """
        decision = Decision(approve=approve, **signal.model_dump())
        if signal.call_id not in self.records and keep_early:
            if len(self._early) >= MAX_EARLY_DECISIONS or signal.call_id in self._early:
                return f"ignored decision for unknown call {signal.call_id!r}"
            self._early[signal.call_id] = decision
            return f"kept decision for call {signal.call_id!r}, not requested yet"
        try:
            record = self.check(decision, now)
        except ValueError as e:
            if (late := self.records.get(signal.call_id)) and late.deadline and now >= late.deadline:
                self.time_out(late, now)  # too late, even if the timer has not fired yet
            return f"ignored: {e}"
        self._apply(record, decision, now, "signal")
        return f"call {signal.call_id!r} {record.state} by {record.by}"

    def check(self, decision: ApprovalSignal, now: datetime) -> ApprovalRecord:
        """The pending record the decision is for; ``ValueError`` with the reason when it cannot be taken.

        Changes nothing: the ``decide`` update's validator calls it.
        """
        record = self.records.get(decision.call_id)
        if record is None:
            waiting = ", ".join(r.call_id for r in self.pending) or "none"
            raise ValueError(f"no approval is pending for call {decision.call_id!r} (pending: {waiting})")
        if record.state != "pending":
            raise ValueError(f"call {decision.call_id!r} was already {record.state} by {record.by}")
        if record.deadline is not None and now >= record.deadline:
            raise ValueError(f"call {decision.call_id!r} is past its approval deadline")
        digest = decision.arguments_digest
        if digest is not None and digest != record.arguments_digest:
            raise ValueError(
                f"call {decision.call_id!r} has arguments digest {record.arguments_digest}, not {digest}:"
                " look at its arguments again (pending_approvals)"
            )
        return record

    def decide(self, decision: Decision, now: datetime) -> ApprovalRecord:
        record = self.check(decision, now)
        self._apply(record, decision, now, "update")
        return record

    def time_out(self, record: ApprovalRecord, now: datetime) -> None:
        self._close(record, "timed_out", "approval timed out", now, "deadline")

    def cancel_pending(self, reason: str, now: datetime) -> None:
        """The conversation was cancelled: nobody will decide these any more."""
        for record in self.pending:
            self._close(record, "cancelled", reason, now, "cancellation")

    @staticmethod
    def _close(record: ApprovalRecord, state: str, reason: str, now: datetime, via: str) -> None:
        if record.state != "pending":
            return
        record.state = state  # type: ignore[assignment]
        record.by = "system"
        record.reason = reason
        record.decided_at = now
        record.via = via  # type: ignore[assignment]

    @staticmethod
    def _apply(record: ApprovalRecord, decision: Decision, now: datetime, via: str) -> None:
        record.state = "approved" if decision.approve else "rejected"
        record.by = decision.by
        record.reason = decision.reason
        record.decided_at = now
        record.via = via  # type: ignore[assignment]
