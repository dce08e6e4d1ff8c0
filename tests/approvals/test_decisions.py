"""The kinds of decision about a waiting call (workflows/decisions.py): the list, and what each one
means and does, to the exact value: what the payload parses to, what the agent loop does with the
call, what goes into the record (and reads back from it), and whether it allows the tool."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, get_args

import pytest

from durable_agents.workflows.config import DECISION_KINDS, DecisionKind
from durable_agents.workflows.decisions import (
    NOBODY_KINDS,
    OUTCOME_DECISIONS,
    PERSON_KINDS,
    Allowed,
    Answer,
    Approve,
    Cancelled,
    Edit,
    FailCall,
    Judged,
    NobodyKind,
    PersonKind,
    RecordResult,
    Refuse,
    Reject,
    Remember,
    RunAgain,
    RunTool,
    TimedOut,
    asks,
    decided,
    parse,
    parse_outcome,
)
from durable_agents.workflows.messages import ToolCall
from durable_agents.workflows.records import ApprovalRecord, Decision, ToolAllowance, Verdict
from durable_agents.workflows.signatures import SignedDecision

NOW = datetime(2026, 1, 1, tzinfo=UTC)
WRITE = {"path": "out.txt", "content": "hi"}
EDITED = {"path": "out.txt", "content": "edited"}
CALL = ToolCall(id="call_1_0", name="write_file", arguments=WRITE)
NOTE = (
    '[alice edited the arguments before the call ran; it ran with {"path": "out.txt", "content": "edited"}]'
)
ALLOWANCE = ToolAllowance(tool="write_file", by="alice", call_id="call_1_0", granted_at=NOW)


def _pending() -> ApprovalRecord:
    return ApprovalRecord(
        call_id="call_1_0",
        tool="write_file",
        arguments=WRITE,
        requested_at=NOW - timedelta(seconds=5),
        deadline=NOW + timedelta(seconds=60),
    )


def _written(record: ApprovalRecord) -> tuple[Any, ...]:
    return (record.state, record.by, record.reason, record.via, record.edited_arguments, record.remember)


def test_the_kinds_of_decision() -> None:
    assert [kind.NAME for kind in PERSON_KINDS] == ["approve", "edit", "reject", "remember"]
    assert [kind.NAME for kind in PERSON_KINDS] == list(get_args(DecisionKind))
    # What an agent allows by default (pinned: a recorded call allows what it allowed then).
    assert DECISION_KINDS == ["approve", "edit", "reject", "remember"]
    assert [kind.NAME for kind in NOBODY_KINDS] == ["allowed", "timed_out", "cancelled"]


@pytest.mark.parametrize(
    ("payload", "kind", "names", "step", "written"),
    [
        (
            {"approve": True, "by": "alice", "reason": "fine"},
            Approve("alice", "fine"),
            ("approve",),
            RunTool(WRITE),
            ("approved", "alice", "fine", "update", None, False),
        ),
        (
            {"approve": True, "by": "alice", "arguments": EDITED},
            Edit("alice", "", EDITED),
            ("edit",),
            RunTool(EDITED, NOTE),
            ("approved", "alice", "", "update", EDITED, False),
        ),
        (
            {"approve": False, "by": "bob", "reason": "not today"},
            Reject("bob", "not today"),
            ("reject",),
            Refuse("Tool call 'write_file' was rejected by bob: not today"),
            ("rejected", "bob", "not today", "update", None, False),
        ),
        (
            {"approve": False, "by": "bob", "remember": False},
            Reject("bob"),
            ("reject",),
            Refuse("Tool call 'write_file' was rejected by bob."),
            ("rejected", "bob", "", "update", None, False),
        ),
        (
            {"approve": True, "by": "alice", "remember": True},
            Remember(Approve("alice")),
            ("approve", "remember"),
            RunTool(WRITE),
            ("approved", "alice", "", "update", None, True),
        ),
        (
            {"approve": True, "by": "alice", "arguments": EDITED, "remember": True},
            Remember(Edit("alice", "", EDITED)),
            ("edit", "remember"),
            RunTool(EDITED, NOTE),
            ("approved", "alice", "", "update", EDITED, True),
        ),
    ],
    ids=["approve", "edit", "reject", "reject-plain", "remember", "edit-remember"],
)
def test_what_a_person_s_decision_means(
    payload: dict, kind: Approve, names: tuple[str, ...], step: RunTool | Refuse, written: tuple
) -> None:
    decision = Decision(call_id="call_1_0", **payload)
    assert parse(decision) == kind
    assert kind.kinds == names
    assert SignedDecision.of("wf", "run-1", "0123456789ab", decision).kind == "+".join(names)
    assert kind.then(CALL) == step

    record, verdict = _pending(), Verdict(approver="self-declared")
    kind.take(record, NOW, "update", verdict)
    assert _written(record) == written
    assert (record.decided_at, record.verdict, record.deadline) == (NOW, verdict, NOW + timedelta(seconds=60))
    assert kind.allowance(record, NOW) == (ALLOWANCE if isinstance(kind, Remember) else None)
    # The record is all a continued run has: it reads back as the same decision.
    assert (decided(record), asks(record)) == (kind, True)


@pytest.mark.parametrize("payload", [{"arguments": EDITED}, {"remember": True}])
def test_a_rejection_takes_no_edit_and_no_remember(payload: dict) -> None:
    with pytest.raises(ValueError, match=r"^a rejection takes no 'arguments' and no 'remember'$"):
        parse(Decision(call_id="call_1_0", approve=False, **payload))


@pytest.mark.parametrize(
    ("kind", "step", "written", "asked"),
    [
        (
            Allowed.by_allowance(ALLOWANCE.model_copy(update={"call_id": "call_0_0"})),
            RunTool(WRITE),
            ("approved", "alice", "write_file allowed for the conversation on call call_0_0", "remember"),
            False,
        ),
        (
            TimedOut(),
            Refuse("Tool call 'write_file' was rejected by system: approval timed out"),
            ("timed_out", "system", "approval timed out", "deadline"),
            True,
        ),
        (
            Cancelled("conversation cancelled: bye"),
            Refuse("Tool call 'write_file' was rejected by system: conversation cancelled: bye"),
            ("cancelled", "system", "conversation cancelled: bye", "cancellation"),
            True,
        ),
    ],
    ids=["allowed", "timed_out", "cancelled"],
)
def test_what_is_decided_when_nobody_decides(
    kind: NobodyKind, step: RunTool | Refuse, written: tuple, asked: bool
) -> None:
    assert kind.then(CALL) == step
    record = _pending()
    kind.close(record, NOW)
    assert _written(record) == (*written, None, False)
    assert (record.decided_at, record.verdict) == (NOW, None)
    assert record.deadline == (None if isinstance(kind, Allowed) else NOW + timedelta(seconds=60))
    assert (decided(record), asks(record)) == (kind, asked)

    # A call decided already stays as it was decided.
    taken = _pending()
    Approve("alice").take(taken, NOW, "signal", None)
    kind.close(taken, NOW + timedelta(seconds=1))
    assert (_written(taken), decided(taken)) == (
        ("approved", "alice", "", "signal", None, False),
        Approve("alice"),
    )


def test_a_waiting_call_is_not_decided_and_asks_a_person() -> None:
    assert (decided(_pending()), asks(_pending())) == (None, True)


def test_a_judge_s_decision_is_written_and_read_back_like_a_person_s() -> None:
    for kind, step in [
        (Judged("notes-only", True, "2 rule(s) hold"), RunTool(WRITE)),
        (
            Judged("reviewer", False, "a key"),
            Refuse("Tool call 'write_file' was rejected by judge reviewer: a key"),
        ),
    ]:
        record = _pending()
        kind.take(record, NOW)
        assert (record.via, record.by, record.decided_at) == ("judge", kind.by, NOW)
        assert (decided(record), kind.then(CALL), asks(record)) == (kind, step, True)


@pytest.mark.parametrize(
    ("payload", "kind", "step"),
    [
        ({"approve": True, "by": "alice"}, RunAgain("alice"), RunTool(WRITE)),
        (
            {"approve": True, "by": "alice", "result": "paid"},
            RecordResult("alice", "paid"),
            Answer("[the outcome of this call was unknown; alice recorded its result] paid"),
        ),
        (
            {"approve": False, "by": "bob", "reason": "by hand"},
            FailCall("bob", "by hand"),
            Refuse(
                "Tool call 'write_file' may or may not have taken effect (its outcome is unknown);"
                " bob failed it: by hand"
            ),
        ),
    ],
    ids=["run_again", "result", "fail"],
)
def test_what_a_person_decides_about_a_call_whose_outcome_is_unknown(
    payload: dict, kind: PersonKind, step: RunTool | Answer | Refuse
) -> None:
    decision = Decision(call_id="call_1_0.unknown", **payload)
    assert parse_outcome(decision) == kind
    assert kind.kinds[0] in OUTCOME_DECISIONS
    record = _pending().model_copy(
        update={"call_id": "call_1_0.unknown", "asked": "outcome_unknown", "for_call": "call_1_0"}
    )
    kind.take(record, NOW, "update", None)
    assert (decided(record), kind.then(CALL)) == (kind, step)
    with pytest.raises(ValueError, match="only for a call whose outcome is unknown"):
        parse(Decision(call_id="call_1_0", approve=True, result="paid"))
