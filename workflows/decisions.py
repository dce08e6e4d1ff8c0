"""Decisions beyond yes or no: which kinds a decision takes (an agent may allow only some), edited
arguments checked against the tool's JSON schema, and what the model is told of an edit."""

from __future__ import annotations

import json
from typing import Any

from workflows.config import DecisionKind
from workflows.records import ApprovalRecord, Decision
from workflows.schemas import check, problems


def kinds_of(decision: Decision) -> list[DecisionKind]:
    """The kinds of decision it takes: each must be among the call's ``allowed_decisions``."""
    if not decision.approve:
        if decision.arguments is not None or decision.remember:
            raise ValueError("a rejection takes no 'arguments' and no 'remember'")
        return ["reject"]
    kinds: list[DecisionKind] = ["approve" if decision.arguments is None else "edit"]
    return [*kinds, "remember"] if decision.remember else kinds


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
