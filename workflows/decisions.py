"""Decisions beyond yes or no: which kinds a decision takes (an agent may allow only some), edited
arguments checked against the tool's JSON schema, the bounds of what a person writes, and what the
model is told of an edit."""

from __future__ import annotations

import json
from typing import Any

from workflows.config import ApprovalPolicy, DecisionKind
from workflows.records import ApprovalRecord, ApprovalSignal, Decision, Revocation
from workflows.schemas import check, problems


def kinds_of(decision: Decision) -> list[DecisionKind]:
    """The kinds of decision it takes: each must be among the call's ``allowed_decisions``."""
    if not decision.approve:
        if decision.arguments is not None or decision.remember:
            raise ValueError("a rejection takes no 'arguments' and no 'remember'")
        return ["reject"]
    kinds: list[DecisionKind] = ["approve" if decision.arguments is None else "edit"]
    return [*kinds, "remember"] if decision.remember else kinds


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


def edit_note(record: ApprovalRecord) -> str:
    """Leads the tool result, so the model knows that a person changed its call, and what ran."""
    edited = json.dumps(record.edited_arguments, ensure_ascii=False)
    return f"[{record.by} edited the arguments before the call ran; it ran with {edited}]"
