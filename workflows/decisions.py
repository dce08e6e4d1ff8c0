"""What a decision about a waiting tool call means, and what it does: one type per kind.

A person decides (``PERSON_KINDS``; an agent's ``approval.decisions`` names which it allows):

- ``Approve``: the call runs as the model asked.
- ``Edit``: approve with edited arguments (checked against the tool's schema): the call runs with
  them, and the model reads that a person changed them, and to what, before the result.
- ``Reject``: the call does not run; the model reads who refused it and why (``reason``).
- ``Remember``: an ``Approve`` or an ``Edit`` that also allows the tool for the rest of the
  conversation: later calls of it run without asking, until someone revokes it.

Or a judge does (``Judged``, workflows/judges.py): approved, or rejected when its denial is final;
recorded as a person's is (``via`` ``judge``, ``by`` the judge's name).

A call of an at-most-once tool whose attempt's outcome is unknown (``OUTCOME_KINDS``, the record's
``asked`` is ``outcome_unknown``): ``RunAgain`` (approve), ``RecordResult`` (approve with a
``result``: the model reads it as the call's result), ``FailCall`` (reject).

Or nobody does, at the time (``NOBODY_KINDS``):

- ``Allowed``: approved at once, the tool being allowed for the conversation (nobody is asked).
- ``TimedOut``: nobody decided before the call's deadline; the model reads it as a rejection.
- ``Cancelled``: the conversation (or the sub-agent's that waited) closed first.

Each kind writes itself into the call's ``ApprovalRecord`` (the audit trail, and what
``pending_approvals``, ``history`` and the ``decide`` update answer), reads back from it
(``decided``: after a continue-as-new the record is all there is), and says what the agent loop
does with the call (``then``: ``RunTool`` or ``Refuse``) and whether it allows the tool from now on
(``allowance``). The payloads people send (``ApprovalSignal``, ``Decision`` in workflows/records.py,
unchanged) become a kind here, at the boundary (``parse``), and nowhere else.

Adding a kind: its type below, in ``PERSON_KINDS`` or ``NOBODY_KINDS``, in ``parse`` and
``decided``, and its row in tests/approvals/test_decisions.py; a person's kind also goes into ``DecisionKind``
(workflows/config.py), and a payload or record field it needs into workflows/records.py (its
default pinned in tests/data/recorded_defaults.json). ``DECISION_KINDS``, what an agent allows by
default, stays as it is: records leave it out as their default, so a kind added there would be
allowed by every call recorded before it. Only a kind whose ``then`` is neither ``RunTool`` nor
``Refuse`` changes the loop (workflows/agent.py).

Also here: the bounds of what a person writes, and edited arguments checked against the schema.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal

from durable_agents.workflows.config import ApprovalPolicy, DecisionKind
from durable_agents.workflows.messages import ToolCall
from durable_agents.workflows.records import (
    ApprovalRecord,
    ApprovalSignal,
    Decision,
    Revocation,
    ToolAllowance,
    Verdict,
)
from durable_agents.workflows.schemas import check, problems

Channel = Literal["signal", "update"]
"""How a person's decision came (the record's ``via``)."""


# -- what the loop does ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunTool:
    """Run the call with ``arguments``; ``note``, when there is one, leads its result (the model
    reads it; the model's own call stays as it asked)."""

    arguments: dict[str, Any]
    note: str | None = None


@dataclass(frozen=True)
class Refuse:
    """Do not run the call: the model reads ``content`` as its result, an error."""

    content: str


@dataclass(frozen=True)
class Answer:
    """Do not run the call: the model reads ``content`` as its result (a person recorded it)."""

    content: str


def _refusal(call: ToolCall, by: str, reason: str) -> Refuse:
    why = f": {reason}" if reason else "."
    return Refuse(f"Tool call '{call.name}' was rejected by {by}{why}")


# -- the kinds ------------------------------------------------------------------------------------


class Kind(ABC):
    """How a waiting call was decided."""

    NAME: ClassVar[str]
    asks: ClassVar[bool] = True
    """Was a person asked (an ``approval_requested``, a wait)? Only not for ``Allowed``."""

    @abstractmethod
    def then(self, call: ToolCall) -> RunTool | Refuse | Answer:
        """What the agent loop does with ``call``."""


class PersonKind(Kind):
    """A person's decision: signed, bounded by the call's ``allowed_decisions`` and ``approvers``."""

    STATE: ClassVar[Literal["approved", "rejected"]] = "approved"
    """What it makes of the record's ``state``."""
    KEEPS: ClassVar[tuple[tuple[str, str], ...]] = ()
    """(record field, own field) pairs it copies into the record, beyond who, why and when."""
    by: str
    """Who decided."""
    reason: str

    @property
    def kinds(self) -> tuple[DecisionKind, ...]:
        """The names the call's ``allowed_decisions`` must all hold; joined by ``+``, what a
        signature names (workflows/signatures.py)."""
        return (self.NAME,)  # type: ignore[return-value]

    def check(self, tool: str, schema_of: Callable[[str], dict[str, Any] | None]) -> None:
        """``ValueError`` when the decision cannot apply to a call of ``tool`` (beyond its
        allowed decisions and approvers, which ``Approvals.check`` tests for every kind)."""

    def take(self, record: ApprovalRecord, now: datetime, via: Channel, verdict: Verdict | None) -> None:
        """The pending ``record`` as this decision leaves it."""
        record.state = self.STATE
        record.verdict = verdict
        record.by = self.by
        record.reason = self.reason
        record.decided_at = now
        record.via = via
        record.edited_arguments = None
        record.remember = False
        for field, own in self.KEEPS:
            setattr(record, field, getattr(self, own))

    def allowance(self, record: ApprovalRecord, now: datetime) -> ToolAllowance | None:
        """The standing allowance it grants the record's tool, if any."""
        return None


@dataclass(frozen=True)
class Approve(PersonKind):
    """Approved: the call runs as the model asked."""

    NAME: ClassVar[str] = "approve"

    by: str
    reason: str = ""

    def then(self, call: ToolCall) -> RunTool:
        return RunTool(call.arguments)


@dataclass(frozen=True)
class Edit(PersonKind):
    """Approved with ``arguments`` instead: the call runs with them, its result led by a note of the edit."""

    NAME: ClassVar[str] = "edit"
    KEEPS: ClassVar[tuple[tuple[str, str], ...]] = (("edited_arguments", "arguments"),)

    by: str
    reason: str
    arguments: dict[str, Any]

    def then(self, call: ToolCall) -> RunTool:
        edited = json.dumps(self.arguments, ensure_ascii=False)
        note = f"[{self.by} edited the arguments before the call ran; it ran with {edited}]"
        return RunTool(self.arguments, note)

    def check(self, tool: str, schema_of: Callable[[str], dict[str, Any] | None]) -> None:
        if (schema := schema_of(tool)) is None:
            raise ValueError(f"cannot check edited arguments: {tool} is no longer offered")
        if (error := schema_error(self.arguments, schema)) is not None:
            raise ValueError(f"edited arguments for {tool} do not fit its schema: {error}")


@dataclass(frozen=True)
class Reject(PersonKind):
    """Rejected: the call does not run; the model reads who refused it, and ``reason``."""

    NAME: ClassVar[str] = "reject"
    STATE: ClassVar[Literal["approved", "rejected"]] = "rejected"

    by: str
    reason: str = ""

    def then(self, call: ToolCall) -> Refuse:
        return _refusal(call, self.by, self.reason)


@dataclass(frozen=True)
class Remember(PersonKind):
    """``approval``, and its tool allowed for the rest of the conversation (until revoked)."""

    NAME: ClassVar[str] = "remember"

    approval: Approve | Edit

    @property
    def by(self) -> str:  # type: ignore[override]
        return self.approval.by

    @property
    def reason(self) -> str:  # type: ignore[override]
        return self.approval.reason

    @property
    def kinds(self) -> tuple[DecisionKind, ...]:
        return (*self.approval.kinds, "remember")

    def then(self, call: ToolCall) -> RunTool:
        return self.approval.then(call)

    def check(self, tool: str, schema_of: Callable[[str], dict[str, Any] | None]) -> None:
        self.approval.check(tool, schema_of)

    def take(self, record: ApprovalRecord, now: datetime, via: Channel, verdict: Verdict | None) -> None:
        self.approval.take(record, now, via, verdict)
        record.remember = True

    def allowance(self, record: ApprovalRecord, now: datetime) -> ToolAllowance:
        return ToolAllowance(tool=record.tool, by=self.by, call_id=record.call_id, granted_at=now)


@dataclass(frozen=True)
class Judged(Kind):
    """A judge decided first: approved, or rejected (a final denial); ``by`` is the judge's name."""

    NAME: ClassVar[str] = "judged"

    by: str
    approve: bool
    reason: str = ""

    def then(self, call: ToolCall) -> RunTool | Refuse:
        if self.approve:
            return RunTool(call.arguments)
        return _refusal(call, f"judge {self.by}", self.reason)

    def take(self, record: ApprovalRecord, now: datetime) -> None:
        state: Literal["approved", "rejected"] = "approved" if self.approve else "rejected"
        record.state, record.by, record.reason, record.decided_at = state, self.by, self.reason, now
        record.via = "judge"


# -- an at-most-once call whose outcome is unknown ---------------------------------------------


@dataclass(frozen=True)
class RunAgain(Approve):
    """Run the call again: the person judged that its attempt did not take effect (recorded as an
    approval, as ``Approve`` is)."""


@dataclass(frozen=True)
class RecordResult(PersonKind):
    """Do not run it again: ``result`` is its result (the person found out what happened)."""

    NAME: ClassVar[str] = "result"
    KEEPS: ClassVar[tuple[tuple[str, str], ...]] = (("result", "result"),)

    by: str
    result: str
    reason: str = ""

    @property
    def kinds(self) -> tuple[DecisionKind, ...]:
        return ("approve",)  # an approval that gives the result (a signature names it "result")

    def then(self, call: ToolCall) -> Answer:
        return Answer(f"[the outcome of this call was unknown; {self.by} recorded its result] {self.result}")


@dataclass(frozen=True)
class FailCall(Reject):
    """Fail the call: the model reads that its outcome is unknown and who failed it (recorded as a
    rejection, as ``Reject`` is)."""

    def then(self, call: ToolCall) -> Refuse:
        why = f": {self.reason}" if self.reason else "."
        return Refuse(
            f"Tool call '{call.name}' may or may not have taken effect (its outcome is unknown);"
            f" {self.by} failed it{why}"
        )


OUTCOME_KINDS: tuple[type[PersonKind], ...] = (RunAgain, RecordResult, FailCall)
OUTCOME_DECISIONS: list[DecisionKind] = ["approve", "reject"]
"""What a person may decide about a call whose outcome is unknown (approve with a ``result``: record it)."""


class NobodyKind(Kind):
    """Decided with nobody deciding at the time; ``by`` the workflow, or by an earlier allowance."""

    def close(self, record: ApprovalRecord, now: datetime) -> None:
        """The record as this leaves it, if it is still pending (a decided call stays decided)."""
        if record.state == "pending":
            self._close(record, now)

    @abstractmethod
    def _close(self, record: ApprovalRecord, now: datetime) -> None:
        """The pending ``record`` as this leaves it."""


def _system(record: ApprovalRecord, state: str, reason: str, now: datetime, via: str) -> None:
    record.state = state  # type: ignore[assignment]
    record.by = "system"
    record.reason = reason
    record.decided_at = now
    record.via = via  # type: ignore[assignment]


@dataclass(frozen=True)
class Allowed(NobodyKind):
    """Approved at once, nobody asked: a person allowed the tool for the conversation."""

    NAME: ClassVar[str] = "allowed"
    asks: ClassVar[bool] = False

    by: str
    """Who allowed the tool."""
    reason: str

    @classmethod
    def by_allowance(cls, allowance: ToolAllowance) -> Allowed:
        return cls(allowance.by, f"{allowance.tool} allowed for the conversation on call {allowance.call_id}")

    def then(self, call: ToolCall) -> RunTool:
        return RunTool(call.arguments)

    def _close(self, record: ApprovalRecord, now: datetime) -> None:
        record.state, record.by, record.decided_at, record.via = "approved", self.by, now, "remember"
        record.reason = self.reason
        record.deadline = None


@dataclass(frozen=True)
class TimedOut(NobodyKind):
    """Nobody decided before the deadline: refused, as by ``system``."""

    NAME: ClassVar[str] = "timed_out"
    REASON: ClassVar[str] = "approval timed out"

    def then(self, call: ToolCall) -> Refuse:
        return _refusal(call, "system", self.REASON)

    def _close(self, record: ApprovalRecord, now: datetime) -> None:
        _system(record, "timed_out", self.REASON, now, "deadline")


@dataclass(frozen=True)
class Cancelled(NobodyKind):
    """The conversation (or the sub-agent's that waited) closed first: refused, as by ``system``."""

    NAME: ClassVar[str] = "cancelled"

    reason: str

    def then(self, call: ToolCall) -> Refuse:
        return _refusal(call, "system", self.reason)

    def _close(self, record: ApprovalRecord, now: datetime) -> None:
        _system(record, "cancelled", self.reason, now, "cancellation")


PERSON_KINDS: tuple[type[PersonKind], ...] = (Approve, Edit, Reject, Remember)
"""What a person may decide, as ``DecisionKind`` (workflows/config.py) names them, in its order."""
NOBODY_KINDS: tuple[type[NobodyKind], ...] = (Allowed, TimedOut, Cancelled)


# -- from the wire, and from the record -----------------------------------------------------------


def parse(payload: Decision) -> Approve | Edit | Reject | Remember:
    """The kind a person's payload decides (the ``decide`` update's; a signal's, with ``approve``
    from its name); ``ValueError`` for a payload no kind takes."""
    if payload.result is not None:
        raise ValueError("a 'result' is only for a call whose outcome is unknown (at most once)")
    if not payload.approve:
        if payload.arguments is not None or payload.remember:
            raise ValueError("a rejection takes no 'arguments' and no 'remember'")
        return Reject(payload.by, payload.reason)
    if payload.arguments is None:
        approval: Approve | Edit = Approve(payload.by, payload.reason)
    else:
        approval = Edit(payload.by, payload.reason, payload.arguments)
    return Remember(approval) if payload.remember else approval


def parse_outcome(payload: Decision) -> RunAgain | RecordResult | FailCall:
    """The kind a person's payload decides about a call whose outcome is unknown."""
    if payload.arguments is not None or payload.remember:
        raise ValueError("a call whose outcome is unknown takes no 'arguments' and no 'remember'")
    if not payload.approve:
        if payload.result is not None:
            raise ValueError("a rejection takes no 'result'")
        return FailCall(payload.by, payload.reason)
    if payload.result is not None:
        return RecordResult(payload.by, payload.result, payload.reason)
    return RunAgain(payload.by, payload.reason)


def decided(record: ApprovalRecord) -> Kind | None:
    """The decision ``record`` holds; None while the call waits."""
    by, reason = record.by or "", record.reason or ""
    match record.state:
        case "pending":
            return None
        case "timed_out":
            return TimedOut()
        case "cancelled":
            return Cancelled(reason)
    if record.via == "judge":
        return Judged(by, record.state == "approved", reason)
    if record.asked == "outcome_unknown":
        if record.state == "rejected":
            return FailCall(by, reason)
        return RunAgain(by, reason) if record.result is None else RecordResult(by, record.result, reason)
    if record.state == "rejected":
        return Reject(by, reason)
    if record.via == "remember":
        return Allowed(by, reason)
    if record.edited_arguments is None:
        approval: Approve | Edit = Approve(by, reason)
    else:
        approval = Edit(by, reason, record.edited_arguments)
    return Remember(approval) if record.remember else approval


def asks(record: ApprovalRecord) -> bool:
    """Is a person asked about the record's call (one that waits, or was decided by a person)?"""
    kind = decided(record)
    return kind is None or kind.asks


# -- bounds and schemas ---------------------------------------------------------------------------


def oversize(payload: ApprovalSignal | Revocation, policy: ApprovalPolicy) -> str | None:
    """Which of a person's texts goes past the agent's bound (``approval.max_*_bytes``), on one line;
    None if all fit. They reach the audit trail, the event stream and, for a rejection, the model."""
    texts = [("by", payload.by, policy.max_by_bytes)]
    if isinstance(payload, ApprovalSignal):
        texts.append(("reason", payload.reason, policy.max_reason_bytes))
        if payload.arguments is not None:
            edited = json.dumps(payload.arguments, ensure_ascii=False, separators=(",", ":"))
            texts.append(("arguments", edited, policy.max_arguments_bytes))
    for name, text, limit in texts:
        if (size := len(text.encode())) > limit:
            return f"{name} is {size} bytes; this conversation takes at most {limit}"
    return None


def schema_error(arguments: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """The first way ``arguments`` break ``schema``, on one line (``$.field ...``); None if they fit.
    A schema (say, an MCP server's) the workflow's validator cannot enforce in full refuses every edit."""
    try:
        check(schema, "schema")
        return next(problems(arguments, schema), None)
    except Exception as e:  # never a failed workflow task: a reference back to itself recurses, say
        return f"the tool's schema cannot be checked ({' '.join(str(e).split())})"
