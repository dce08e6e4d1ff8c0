"""``starter.py export`` and ``GET /conversations/ID/export``: every message, tool call, approval
(who, when, how), the usage and the sub-agents of a conversation as JSON Lines, read back equal to
its history; through serve only for a token that reaches its tenant."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx2
import pytest
from pydantic import TypeAdapter

from durable_agents.client.conversations import conversation_history, start_conversation
from durable_agents.serve.app import Access, ServeOptions, app
from durable_agents.serve.identities import Tokens, token_hash
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.messages import Message
from durable_agents.workflows.records import ApprovalRecord, ApprovalSignal, ToolCallRecord
from tests.support.cli import starter_cli
from tests.support.conversations import wait_for_pending
from tests.support.workers import Env

MESSAGES = TypeAdapter(list[Message])
ACME, GLOBEX = "acme-reader", "globex-reader"


async def _delegated(env: Env) -> str:
    """The delegator (agents/delegator.toml) of tenant acme, its scribe's write approved by ann."""
    workflow_id = f"export-{uuid.uuid4().hex[:8]}"
    handle = await start_conversation(
        env.client,
        ConversationInput(prompt="save the note", agent="delegator", tenant="acme", user="ann"),
        id=workflow_id,
        task_queue=env.task_queue,
    )
    await wait_for_pending(handle, timeout=60)  # the parent shows its scribe's waiting call
    child = env.client.get_workflow_handle(f"{workflow_id}/call_1_0")
    [waiting] = await wait_for_pending(child, timeout=60)
    await child.signal(AgentWorkflow.approve, ApprovalSignal(call_id=waiting.call_id, by="ann"))
    await handle.result()
    return workflow_id


def _by_type(lines: list[dict], conversation: str, type_: str) -> list[dict]:
    return [line["data"] for line in lines if line["conversation"] == conversation and line["type"] == type_]


async def test_export_round_trips_every_message_tool_call_and_approval_with_its_subagent(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    workflow_id = await _delegated(env)
    child_id = f"{workflow_id}/call_1_0"

    code, out, err = await starter_cli(env, capsys, "export", workflow_id)

    assert (code, err) == (0, "")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(line["type"], line["conversation"]) for line in lines if line["type"] != "message"] == [
        ("conversation", workflow_id),
        ("tool_call", workflow_id),
        ("usage", workflow_id),
        ("subagent", workflow_id),
        ("conversation", child_id),
        ("tool_call", child_id),
        ("approval", child_id),
        ("usage", child_id),
    ]
    for conversation in (workflow_id, child_id):
        history = await conversation_history(env.client, env.client.get_workflow_handle(conversation))
        messages = _by_type(lines, conversation, "message")
        assert [m["position"] for m in messages] == list(range(len(history.messages)))
        assert MESSAGES.validate_python([m["message"] for m in messages]) == history.messages
        calls = [ToolCallRecord.model_validate(c) for c in _by_type(lines, conversation, "tool_call")]
        assert calls == history.tool_calls
        approvals = _by_type(lines, conversation, "approval")
        assert [ApprovalRecord.model_validate(a) for a in approvals] == history.approvals
    [approval] = _by_type(lines, child_id, "approval")
    assert (approval["how"], approval["by"], approval["state"], approval["via"]) == (
        "self-declared", "ann", "approved", "signal",
    )  # fmt: skip
    assert approval["decided_at"] is not None
    [header] = _by_type(lines, workflow_id, "conversation")
    assert {k: header[k] for k in ("agent", "tenant", "user", "parent", "state")} == {
        "agent": "delegator", "tenant": "acme", "user": "ann", "parent": None, "state": "completed",
    }  # fmt: skip
    assert _by_type(lines, workflow_id, "subagent") == [{"call_id": "call_1_0", "workflow_id": child_id}]
    [usage] = _by_type(lines, workflow_id, "usage")
    assert set(usage) == {"by_model", "cost_by_model", "input_tokens", "output_tokens", "cost"}


async def test_serve_exports_a_conversation_only_to_a_token_of_its_tenant(env: Env, tmp_path: Path) -> None:
    workflow_id = await _delegated(env)
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        f'[tokens.acme]\nsha256 = "{token_hash(ACME)}"\ntenant = "acme"\n'
        f'[tokens.globex]\nsha256 = "{token_hash(GLOBEX)}"\ntenant = "globex"\n'
    )
    served = app(env.client, options=ServeOptions(env.task_queue, Access(tokens=Tokens.load(tokens))))
    transport = httpx2.ASGITransport(app=served)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        url = f"/conversations/{workflow_id}/export"
        allowed = await http.get(url, headers={"authorization": f"Bearer {ACME}"})
        other = await http.get(url, headers={"authorization": f"Bearer {GLOBEX}"})
        nobody = await http.get(url)

    assert allowed.status_code == 200
    assert allowed.headers["content-type"] == "application/x-ndjson"
    exported = await env.client.get_workflow_handle(workflow_id).describe()
    lines = [json.loads(line) for line in allowed.text.splitlines()]
    assert lines[0]["conversation"] == exported.id
    assert [line["type"] for line in lines].count("conversation") == 2  # the delegator and its scribe
    assert (other.status_code, other.text) == (404, f"{workflow_id}: workflow not found\n")
    assert nobody.status_code == 401
