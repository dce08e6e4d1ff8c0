"""Decisions beyond yes or no: which kinds a decision takes (an agent may allow only some), edited
arguments checked against the tool's JSON schema (by the validator of workflows/answers.py, which
judges the same on every replay), and what the model is told of an edit."""

from __future__ import annotations

import json
from typing import Any

from workflows.answers import schema_problems, unenforceable
from workflows.config import DecisionKind
from workflows.records import ApprovalRecord, Decision


def kinds_of(decision: Decision) -> list[DecisionKind]:
    """The kinds of decision it takes: each must be among the call's ``allowed_decisions``."""
    if not decision.approve:
        if decision.arguments is not None or decision.remember:
            raise ValueError("a rejection takes no 'arguments' and no 'remember'")
        return ["reject"]
    kinds: list[DecisionKind] = ["approve" if decision.arguments is None else "edit"]
    return [*kinds, "remember"] if decision.remember else kinds


def schema_error(arguments: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """The first way ``arguments`` break ``schema``, on one line; None if they fit. A schema that the
    validator cannot enforce in full (say, an MCP server's) refuses every edit: approve or reject."""
    if (why := unenforceable(schema, "schema")) is not None:
        return f"the tool's schema cannot be checked ({why})"
    return next(iter(schema_problems(arguments, schema, most=1)), None)


def edit_note(record: ApprovalRecord) -> str:
    """Leads the tool result, so the model knows that a person changed its call, and what ran."""
    edited = json.dumps(record.edited_arguments, ensure_ascii=False)
    return f"[{record.by} edited the arguments before the call ran; it ran with {edited}]"
