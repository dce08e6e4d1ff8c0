"""A call that waits for a person or a client, in one line with the command that decides or answers
it: ``starter.py start --wait`` prints it, and the Web UI's current details of a waiting conversation
show it (``details``, written by workflows/status.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from durable_agents.workflows.records import ApprovalRecord, ClientCall

WAITING_ARGUMENTS = 80
"""Characters of a waiting call's arguments shown (``starter.py pending`` shows them all)."""
MOST_SHOWN = 5
"""Waiting calls the Web UI's details name; the rest are counted."""


def waiting_line(
    workflow_id: str,
    waiting: ApprovalRecord | ClientCall,
    *,
    markdown: bool = False,
    program: str = "python starter.py",
) -> str:
    """The call, its tool, its arguments (cut to ``WAITING_ARGUMENTS``) and the command that ends its
    wait, run as ``program``. ``markdown``: arguments and command as code spans, so that what a model
    wrote in the arguments is never rendered (a backtick in them is escaped as JSON allows: ``\\u0060``)."""
    arguments = cut_arguments(waiting.arguments)

    def code(text: str) -> str:
        return "`" + text.replace("`", "\\u0060") + "`" if markdown else text

    call = f"{waiting.tool} call {waiting.call_id} {code(arguments)}"
    if isinstance(waiting, ClientCall):
        command = f"{program} answer {workflow_id} {waiting.call_id} TEXT"
        return f"Waiting for the client: {call}; answer it with: {code(command)}"
    digest = waiting.arguments_digest
    command = f"{program} approve {workflow_id} {waiting.call_id} --digest {digest}"
    return (
        f"Waiting for a person: {call} (digest {digest}); decide with: {code(command)}"
        f" (or {code(f'{program} reject {workflow_id} {waiting.call_id}')})"
    )


def cut_arguments(arguments: dict[str, Any]) -> str:
    """A call's arguments as JSON, cut to ``WAITING_ARGUMENTS`` characters."""
    text = json.dumps(arguments)
    return text if len(text) <= WAITING_ARGUMENTS else text[: WAITING_ARGUMENTS - 1] + "…"


def details(detail: str, workflow_id: str, waiting: Sequence[ApprovalRecord | ClientCall]) -> str:
    """The Web UI's current details (markdown): the status line, then each call that waits."""
    if not waiting:
        return detail
    lines = [f"- {waiting_line(workflow_id, each, markdown=True)}" for each in waiting[:MOST_SHOWN]]
    if len(waiting) > MOST_SHOWN:
        lines.append(f"- and {len(waiting) - MOST_SHOWN} more: `python starter.py pending`")
    return "\n".join([detail, "", *lines])
