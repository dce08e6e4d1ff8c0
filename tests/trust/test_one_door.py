"""One door for every decision: the same decisions, sent through every way a person or a program
decides (the ``temporal`` CLI, ``starter.py approve``, serve's decisions endpoint, AG-UI's
``resume``, the console), meet the same checks and end the same way; a signature fits only the
conversation it was made for, even under a reused workflow id."""

from __future__ import annotations

import base64
import html
import json
import re
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from temporalio.client import WorkflowHandle

from durable_agents.activities.approver_keys import sign
from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import ApprovalPolicy
from durable_agents.workflows.records import Decision, arguments_digest
from durable_agents.workflows.signatures import SignedDecision
from tests.support.cli import starter, temporal_decide
from tests.support.conversations import delegating, wait_for_pending
from tests.support.serving import Served, serving
from tests.support.workers import Env

ALICE = base64.b64encode(bytes(range(32))).decode()
WRITE = {"path": "door.txt", "content": "through the door"}
DIGEST = arguments_digest(WRITE)
APPROVED = "approved"


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    """The worker checks signatures: alice's key."""
    keys = tmp_path / "approvers.toml"
    keys.write_text(f'alice = "{ALICE}"\n')
    return {"AGENT_APPROVER_KEYS": str(keys)}


def _writer() -> Any:
    return scripted_agent(
        step("Writing.", ("write_file", WRITE)), step("{last_result}"), tools=["write_file"]
    )


def _signature(handle: WorkflowHandle, conversation: str, reason: str = "") -> str:
    decision = Decision(call_id="call_1_0", approve=True, by="alice", reason=reason)
    return sign(base64.b64decode(ALICE), SignedDecision.of(handle.id, conversation, DIGEST, decision))


def _first_run(handle: WorkflowHandle) -> str:
    run = handle.first_execution_run_id or handle.run_id
    assert run is not None
    return run


UNSIGNED = (
    "unsigned: this conversation's workers take only decisions signed with the approver's key"
    " (AGENT_APPROVER_KEY with --by, or starter.py sign)"
)
NOT_ALICES = (
    "the signature is not alice's for this decision (its conversation, call, arguments digest, kind, edit"
    " and reason)"
)
MAX_REASON = ApprovalPolicy().max_reason_bytes
BIG = "x" * (MAX_REASON + 1)

# Each row: what a caller sends, as the decision's JSON (``signed`` fills in a signature made for this
# conversation), and how every door must end it. The right decision comes last: the others leave
# the call waiting.
ROWS: list[tuple[str, dict[str, Any], str]] = [
    (
        "wrong digest",
        {"arguments_digest": "000000000000", "signed": True},
        f"call 'call_1_0' has arguments digest {DIGEST}, not 000000000000: look at its arguments again"
        " (pending_approvals)",
    ),
    (
        "misspelt field",
        {"arguments_digst": DIGEST, "signed": True},
        "decide: arguments_digst: unknown field; did you mean 'arguments_digest'?",
    ),
    ("unsigned with keys on", {"arguments_digest": DIGEST}, UNSIGNED),
    ("replayed signature", {"arguments_digest": DIGEST, "replayed": True}, NOT_ALICES),
    (
        "oversized reason",
        {"arguments_digest": DIGEST, "reason": BIG, "signed": True},
        f"decide: reason is {len(BIG)} bytes; this conversation takes at most {MAX_REASON}",
    ),
    ("right", {"arguments_digest": DIGEST, "signed": True}, APPROVED),
]


def _body(handle: WorkflowHandle, row: dict[str, Any]) -> dict[str, Any]:
    """The decision a caller sends for ``row``: signed for this conversation, or for one that used the
    same id before (``replayed``)."""
    body: dict[str, Any] = {"call_id": "call_1_0", "approve": True, "by": "alice"}
    body |= {k: v for k, v in row.items() if k not in ("signed", "replayed")}
    if row.get("signed"):
        body["signature"] = _signature(handle, _first_run(handle), body.get("reason", ""))
    if row.get("replayed"):
        body["signature"] = _signature(handle, "a-run-of-an-earlier-conversation-with-this-id")
    return body


Door = Callable[[WorkflowHandle, dict[str, Any]], Awaitable[str | None]]
"""Sends a row's decision its way: APPROVED, the reason it was refused, or None where the door has no
way to say it (a person at the console cannot misspell a field)."""


async def test_every_door_meets_the_same_checks_with_the_same_outcome(
    env: Env, server: EmbeddedServer, tmp_path: Path
) -> None:
    async with (
        serving(server.address, tmp_path / "serve.log") as served,
        httpx2.AsyncClient(timeout=60) as http,
    ):
        doors: dict[str, Door] = {
            "temporal CLI": lambda h, row: _by_temporal_cli(server, h, row),
            "starter": lambda h, row: _by_starter(server, h, row),
            "serve decisions": lambda h, row: _by_decisions_endpoint(http, served, h, row),
            "AG-UI resume": lambda h, row: _by_ag_ui(http, served, h, row),
            "console": lambda h, row: _by_console(http, served, h, row),
        }
        outcomes: dict[str, list[tuple[str, str | None]]] = {}
        for name, door in doors.items():
            handle = await env.start(conversation(_writer()))
            await wait_for_pending(handle)
            outcomes[name] = [(row, await door(handle, given)) for row, given, _ in ROWS]
            assert (await handle.result()).final_text.startswith("Wrote")

    expected = [(row, outcome) for row, _, outcome in ROWS]
    for name, got in outcomes.items():
        assert [(row, outcome) for row, outcome in got if outcome is not None] == [
            (row, outcome) for row, outcome in expected if (row, None) not in got
        ], name
    expressible = {
        name: [row for row, outcome in got if outcome is not None] for name, got in outcomes.items()
    }
    every = [row for row, _, _ in ROWS]
    assert expressible == {
        "temporal CLI": every,
        "starter": ["wrong digest", "unsigned with keys on", "oversized reason", "right"],
        "serve decisions": every,
        "AG-UI resume": every,
        "console": ["wrong digest", "unsigned with keys on", "oversized reason", "right"],
    }


async def _by_temporal_cli(server: EmbeddedServer, handle: WorkflowHandle, row: dict[str, Any]) -> str:
    done = await temporal_decide(server, handle, _body(handle, row))
    return APPROVED if done.returncode == 0 else _cli_refusal(done)


def _cli_refusal(done: subprocess.CompletedProcess[str]) -> str:
    [line] = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    refused = re.fullmatch(r"Error: unable to update workflow: (.*) \(type: \w+, retryable: \w+\)", line)
    assert refused, line
    return refused[1]


async def _by_starter(server: EmbeddedServer, handle: WorkflowHandle, row: dict[str, Any]) -> str | None:
    if "arguments_digest" not in row or row.get("replayed"):  # it signs itself; it has no fields to misspell
        return None
    argv = ["approve", handle.id, "call_1_0", "--by", "alice", "--digest", row["arguments_digest"]]
    argv += ["--reason", row["reason"]] if "reason" in row else []
    code, out, err = await starter(server, *argv, AGENT_APPROVER_KEY=ALICE if row.get("signed") else None)
    if code == 0:
        assert out.startswith("write_file call call_1_0 of "), out
        return APPROVED
    assert (code, err.startswith("error: not approved: ")) == (1, True), err
    return err.removeprefix("error: not approved: ").rstrip("\n")


async def _by_decisions_endpoint(
    http: httpx2.AsyncClient, served: Served, handle: WorkflowHandle, row: dict[str, Any]
) -> str:
    answer = await http.post(f"{served.url}/conversations/{handle.id}/decisions", json=_body(handle, row))
    if answer.status_code == 200:
        return str(answer.json()["state"])
    assert answer.status_code in (400, 409), answer.text
    return answer.text.rstrip("\n").removeprefix("not decided: ")


async def _by_ag_ui(
    http: httpx2.AsyncClient, served: Served, handle: WorkflowHandle, row: dict[str, Any]
) -> str:
    payload = _body(handle, row)
    entry = {"interruptId": payload.pop("call_id"), "status": "resolved", "payload": payload}
    run = {"threadId": handle.id, "runId": "r1", "messages": [], "resume": [entry]}
    answer = await http.post(f"{served.url}/agents/demo/ag-ui", json=run)
    events = [json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: ")]
    if errors := [e["message"] for e in events if e["type"] == "RUN_ERROR"]:
        return errors[0].removeprefix("not decided: ")
    assert events[-1]["type"] == "RUN_FINISHED", events
    [record] = (await handle.query(AgentWorkflow.history)).approvals
    return record.state


async def _by_console(
    http: httpx2.AsyncClient, served: Served, handle: WorkflowHandle, row: dict[str, Any]
) -> str | None:
    if "arguments_digest" not in row or row.get("replayed"):  # it signs with the person's key; no fields
        return None
    console = f"{served.url}/console"
    key = ALICE if row.get("signed") else ""
    login = await http.post(f"{console}/login", data={"name": "alice", "token": "", "approver_key": key})
    assert login.status_code in (200, 303), login.text
    page = await http.get(f"{console}/")
    [csrf] = re.findall(r'"X-CSRF-Token": "([^"]+)"', html.unescape(page.text))
    form = {
        "call_id": "call_1_0",
        "digest": row["arguments_digest"],
        "action": "approve",
        "reason": row.get("reason", ""),
        "csrf": csrf,
    }
    answer = await http.post(f"{console}/c/{handle.id}/decide", data=form)
    assert answer.status_code == 200, answer.text
    if refused := re.fullmatch(
        r'<span class="refused" role="alert">Refused: (.*)</span>', answer.text.strip()
    ):
        return html.unescape(refused[1])
    [record] = (await handle.query(AgentWorkflow.history)).approvals
    return record.state


async def test_a_signature_from_a_closed_conversation_is_refused_by_the_next_one_under_its_id(
    env: Env, server: EmbeddedServer
) -> None:
    first = await env.start(conversation(_writer()), f"reused-{env.task_queue}")
    await wait_for_pending(first)
    signed = {
        "call_id": "call_1_0",
        "approve": True,
        "by": "alice",
        "signature": _signature(first, _first_run(first)),
    }
    assert (await temporal_decide(server, first, signed)).returncode == 0
    await first.result()

    again = await env.start(conversation(_writer()), first.id)  # Temporal allows the reuse
    await wait_for_pending(again)
    replayed = await temporal_decide(server, again, signed)

    assert _cli_refusal(replayed) == NOT_ALICES
    [waiting] = await again.query(AgentWorkflow.pending_approvals)
    assert (waiting.call_id, waiting.state, waiting.conversation) == (
        "call_1_0",
        "pending",
        _first_run(again),
    )
    await again.terminate()


async def test_serve_binds_a_decision_to_its_digest_and_routes_a_sub_agent_s_id(
    env: Env, server: EmbeddedServer, tmp_path: Path
) -> None:
    parent, child = await delegating(env)
    [record] = await parent.query(AgentWorkflow.pending_approvals)
    async with (
        serving(server.address, tmp_path / "serve.log") as served,
        httpx2.AsyncClient(timeout=60) as http,
    ):
        forged = await http.post(  # the request: a digest nobody saw, a signature, remember
            f"{served.url}/conversations/{parent.id}/decisions",
            json={
                "call_id": record.call_id,
                "approve": True,
                "by": "x",
                "arguments_digest": "000000000000",
                "remember": True,
                "signature": "deadbeef",
            },
        )
        still = await child.query(AgentWorkflow.pending_approvals)
        [asked] = still
        decision = Decision(call_id="call_1_0", approve=True, by="alice")
        assert asked.conversation is not None
        signed = SignedDecision.of(child.id, asked.conversation, asked.arguments_digest, decision)
        at_child = await http.post(
            f"{served.url}/conversations/{child.id}/decisions",
            json=decision.model_dump(include={"call_id", "approve", "by"})
            | {"signature": sign(base64.b64decode(ALICE), signed)},
        )

    assert (forged.status_code, forged.text) == (
        409,
        f"not decided: call {record.call_id!r} has arguments digest {record.arguments_digest},"
        " not 000000000000: look at its arguments again (pending_approvals)\n",
    )
    assert [r.state for r in still] == ["pending"]
    answered = at_child.json()
    verdict = answered["verdict"]
    assert (at_child.status_code, answered["state"], verdict["approver"], verdict["key"]) == (
        200,
        "approved",
        "signed",
        "alice",
    )
    await parent.result()
