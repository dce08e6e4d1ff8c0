"""A conversation exported for an audit: one JSON object per line, its sub-agents after it.

Each line is ``{"type": ..., "conversation": <workflow id>, "data": {...}}``, ``type`` one of:

- ``conversation``: who and what (agent, tenant, user, state, start and close, the parent's id)
- ``message``: each message of the transcript, with its ``position`` (the neutral message model)
- ``tool_call``: each tool call, its arguments and result (a sub-agent's names its conversation)
- ``approval``: each call that waited for a person: who decided, when, through what, and ``how``
  (``signed`` by an approver key, ``self-declared``, or ``none``: no person decided)
- ``usage``: tokens and US dollars by ``provider:model``, and their totals
- ``subagent``: a sub-agent the conversation asked; its own lines follow

Read from the conversation's history: its result once completed, else its worker's answer (the
``history`` query); payloads come through the client's data converter, decrypted with the key the
client has (``AGENT_ENCRYPTION_KEY``) and read from the payload store.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client

from durable_agents.client.conversations import agent_state, conversation_history
from durable_agents.workflows.api import AGENT_NAME, AGENT_PARENT, AGENT_TENANT, AGENT_USER
from durable_agents.workflows.messages import Usage
from durable_agents.workflows.records import ApprovalRecord


async def export_conversation(client: Client, workflow_id: str) -> list[dict[str, Any]]:
    """The lines of conversation ``workflow_id`` and of its sub-agents, in order."""
    handle = client.get_workflow_handle(workflow_id)
    described = await handle.describe()
    history = await conversation_history(client, handle)
    attributes = described.typed_search_attributes
    usage = sum(history.usage_by_model.values(), Usage())

    def line(type_: str, data: dict[str, Any]) -> dict[str, Any]:
        return {"type": type_, "conversation": workflow_id, "data": data}

    lines = [
        line(
            "conversation",
            {
                "agent": attributes.get(AGENT_NAME),
                "tenant": attributes.get(AGENT_TENANT),
                "user": attributes.get(AGENT_USER),
                "parent": attributes.get(AGENT_PARENT),
                "state": agent_state(described),
                "started_at": described.start_time.isoformat() if described.start_time else None,
                "closed_at": described.close_time.isoformat() if described.close_time else None,
            },
        ),
        *(
            line("message", {"position": n, "message": m.model_dump(mode="json")})
            for n, m in enumerate(history.messages)
        ),
        *(line("tool_call", call.model_dump(mode="json")) for call in history.tool_calls),
        *(line("approval", {"how": how(a), **a.model_dump(mode="json")}) for a in history.approvals),
        line(
            "usage",
            {
                "by_model": {model: u.model_dump() for model, u in history.usage_by_model.items()},
                "cost_by_model": history.cost_by_model,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cost": sum(history.cost_by_model.values()),
            },
        ),
    ]
    for call in history.tool_calls:
        if call.subagent_workflow_id is not None:
            lines.append(
                line("subagent", {"call_id": call.call_id, "workflow_id": call.subagent_workflow_id})
            )
            lines += await export_conversation(client, call.subagent_workflow_id)
    return lines


def how(approval: ApprovalRecord) -> str:
    """``signed`` or ``self-declared`` as the worker verified the decision; ``none`` when no person
    decided (a deadline, a cancellation, a remembered allowance, a judge) or it still waits."""
    return approval.verdict.approver if approval.verdict is not None else "none"
