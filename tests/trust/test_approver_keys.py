"""Who approved is a fact: with approver keys (``AGENT_APPROVER_KEYS``) on the worker, a decision
takes only with a signature by the key of the approver it names, over its conversation, call,
arguments digest and decision; the record keeps the verdict. Sent as operators send them: the real
``temporal`` CLI, ``starter.py`` (approve, sign) and the few lines of Python in docs/trust.md."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer

from durable_agents.activities.approver_keys import sign
from durable_agents.converter import data_converter
from durable_agents.dev_server import EmbeddedServer
from durable_agents.settings import Settings
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import ApprovalPolicy
from durable_agents.workflows.records import Decision, arguments_digest
from durable_agents.workflows.signatures import SignedDecision
from tests.support.cli import starter, temporal_decide, temporal_signal
from tests.support.conversations import delegating, wait_for_pending
from tests.support.docs import code_blocks, docs_page
from tests.support.paths import ROOT
from tests.support.workers import Env

ALICE = base64.b64encode(bytes(range(32))).decode()
OPS = base64.b64encode(bytes(range(50, 82))).decode()
MALLORY = base64.b64encode(bytes(range(100, 132))).decode()
WRITES = [{"path": f"f{i}.txt", "content": str(i)} for i in range(4)]


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    """The worker's approver keys: alice's and ops-lead's (not mallory's)."""
    keys = tmp_path / "approvers.toml"
    keys.write_text(f'alice = "{ALICE}"\nops-lead = "{OPS}"\n')
    return {"AGENT_APPROVER_KEYS": str(keys)}


def _writer(**kwargs: Any) -> Any:
    calls = [("write_file", w) for w in WRITES]
    return scripted_agent(step("Writing.", *calls), step("{last_result}"), tools=["write_file"], **kwargs)


def _signature(
    secret: str, handle: WorkflowHandle, call_id: str, approve: bool = True, by: str = "alice"
) -> str:
    decision = Decision(call_id=call_id, approve=approve, by=by)
    digest = arguments_digest(WRITES[int(call_id.rsplit("_", 1)[1])])
    conversation = handle.first_execution_run_id or handle.run_id
    assert conversation is not None
    return sign(base64.b64decode(secret), SignedDecision.of(handle.id, conversation, digest, decision))


def _refused(done: subprocess.CompletedProcess[str]) -> str:
    """The worker's one-line reason for a refused ``decide``, out of the temporal CLI's line."""
    assert done.returncode == 1, done.stdout
    [line] = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    refused = re.fullmatch(r"Error: unable to update workflow: (.*) \(type: \w+, retryable: \w+\)", line)
    assert refused, line
    return refused[1]


def _docs_signer() -> Any:
    """The ``sign`` for ops tools of docs/trust.md, as it stands there."""
    [code] = [block for block in code_blocks(docs_page("trust"), "python") if "def sign(" in block]
    scope: dict[str, Any] = {}
    exec(code, scope)
    return scope["sign"]


async def test_a_signed_decision_takes_and_forged_replayed_or_unsigned_ones_are_refused(
    env: Env, server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    handle = await env.start(conversation(_writer()))
    await wait_for_pending(handle, 4)
    digest = arguments_digest(WRITES[0])
    unsigned = await temporal_decide(server, handle, {"call_id": "call_1_0", "approve": True, "by": "alice"})
    forged = await temporal_decide(
        server,
        handle,
        {
            "call_id": "call_1_0",
            "approve": True,
            "by": "alice",
            "signature": _signature(MALLORY, handle, "call_1_0"),
        },
    )
    replayed = await temporal_decide(  # alice's real signature, for another call
        server,
        handle,
        {
            "call_id": "call_1_1",
            "approve": True,
            "by": "alice",
            "signature": _signature(ALICE, handle, "call_1_0"),
        },
    )
    turned = await temporal_decide(  # alice's approval, sent as a rejection
        server,
        handle,
        {
            "call_id": "call_1_0",
            "approve": False,
            "by": "alice",
            "signature": _signature(ALICE, handle, "call_1_0"),
        },
    )
    stranger = await temporal_decide(
        server,
        handle,
        {"call_id": "call_1_0", "approve": True, "by": "mallory",
         "signature": _signature(MALLORY, handle, "call_1_0", by="mallory")},
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="temporalio.workflow"):
        await temporal_signal(server, handle, "approve", {"call_id": "call_1_0", "by": "alice"})
        not_alices = {"call_id": "call_1_0", "by": "alice", "signature": _signature(OPS, handle, "call_1_0")}
        await temporal_signal(server, handle, "approve", not_alices)
        await temporal_signal(
            server, handle, "reject", {"call_id": "call_1_0", "by": "alice", "signature": "00"}
        )

        unsigned_reason = (
            "unsigned: this conversation's workers take only decisions signed with the approver's key"
            " (AGENT_APPROVER_KEY with --by, or starter.py sign)"
        )
        bad = (
            "the signature is not alice's for this decision (its conversation, call, arguments digest,"
            " kind, edit and reason)"
        )
        assert _refused(unsigned) == unsigned_reason
        assert _refused(forged) == _refused(replayed) == _refused(turned) == bad
        assert _refused(stranger) == "no approver key is named 'mallory' ('by' names the key that signed)"
        assert [r.call_id for r in await wait_for_pending(handle, 4)] == [f"call_1_{i}" for i in range(4)]
        await wait_for_logged(caplog, 3)
    refusals = [r.args for r in caplog.records if str(r.msg).startswith("%s signal refused: ")]
    assert refusals == [("approve", unsigned_reason), ("approve", bad), ("reject", bad)]

    # Signed: by the starter (AGENT_APPROVER_KEY and --by), by the temporal CLI with `starter.py sign`,
    # and by an ops tool with the lines of Python in docs/trust.md, as a signal.
    code, out, err = await starter(
        server, "approve", handle.id, "call_1_0", "--by", "alice", AGENT_APPROVER_KEY=ALICE
    )
    assert (code, err) == (0, "")
    assert out == f"write_file call call_1_0 of {handle.id}: approved by alice (signed with key alice)\n"
    code, signature, err = await starter(
        server, "sign", handle.id, "call_1_1", "--reject", "--by", "ops-lead", "--reason", "not f1",
        "--digest", arguments_digest(WRITES[1]), "--conversation", handle.first_execution_run_id,
        AGENT_APPROVER_KEY=OPS,
    )  # fmt: skip
    assert (code, err) == (0, "")
    rejected = await temporal_decide(server, handle, {
        "call_id": "call_1_1", "approve": False, "by": "ops-lead", "reason": "not f1",
        "signature": signature.strip(),
    })  # fmt: skip
    assert rejected.returncode == 0, rejected.stderr
    docs_sign = _docs_signer()
    for i in (2, 3):
        by_script = docs_sign(
            ALICE, handle.id, handle.first_execution_run_id, f"call_1_{i}", arguments_digest(WRITES[i]),
            "approve", "alice",
        )  # fmt: skip
        await temporal_signal(
            server, handle, "approve", {"call_id": f"call_1_{i}", "by": "alice", "signature": by_script}
        )

    result = await handle.result()
    verdicts = [
        (a.call_id, a.state, a.by, a.via, a.verdict.approver, a.verdict.key) for a in result.approvals
    ]
    assert verdicts == [
        ("call_1_0", "approved", "alice", "update", "signed", "alice"),
        ("call_1_1", "rejected", "ops-lead", "update", "signed", "ops-lead"),
        ("call_1_2", "approved", "alice", "signal", "signed", "alice"),
        ("call_1_3", "approved", "alice", "signal", "signed", "alice"),
    ]
    assert digest == result.approvals[0].arguments_digest
    await _replays(handle)  # refused and verified decisions alike decide the same on replay


async def _replays(handle: WorkflowHandle) -> None:
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=data_converter())
    await replayer.replay_workflow(await handle.fetch_history())


async def wait_for_logged(caplog: pytest.LogCaptureFixture, count: int) -> None:
    """Until the worker has logged ``count`` refused signals (they are handled after the CLI returns)."""
    for _ in range(200):
        if sum(str(r.msg).startswith("%s signal refused: ") for r in caplog.records) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the refused signals were not logged")


async def test_only_the_approvers_an_agent_names_may_decide_its_tools(
    env: Env, server: EmbeddedServer
) -> None:
    policy = ApprovalPolicy(
        require=["write_file"], approvers=["alice"], tool_approvers={"write_file": ["ops-lead"]}
    )
    handle = await env.start(conversation(_writer(), approval=policy))
    [first, *_] = await wait_for_pending(handle, 4)
    assert first.approvers == ["ops-lead"]

    code, out, err = await starter(
        server, "approve", handle.id, "call_1_0", "--by", "alice", AGENT_APPROVER_KEY=ALICE
    )
    assert (code, out, err) == (
        1,
        "",
        "error: not approved: alice may not decide write_file (approvers: ops-lead)\n",
    )
    for i in range(4):
        code, _, err = await starter(
            server, "approve", handle.id, f"call_1_{i}", "--by", "ops-lead", AGENT_APPROVER_KEY=OPS
        )
        assert (code, err) == (0, "")
    assert {a.verdict.key for a in (await handle.result()).approvals} == {"ops-lead"}


async def test_a_sub_agent_s_call_is_decided_with_one_signature_at_the_parent(
    env: Env, server: EmbeddedServer
) -> None:
    parent, child = await delegating(env)
    unsigned = await temporal_decide(
        server, parent, {"call_id": "call_1_0/call_1_0", "approve": True, "by": "alice"}
    )
    assert _refused(unsigned).startswith("unsigned: ")  # at once, at the parent

    code, out, err = await starter(
        server, "approve", parent.id, "call_1_0/call_1_0", "--by", "alice", AGENT_APPROVER_KEY=ALICE
    )
    assert (code, err) == (0, "")
    assert (
        out
        == f"write_file call call_1_0/call_1_0 of {parent.id}: approved by alice (signed with key alice)\n"
    )
    [record] = (await child.result()).approvals  # the sub-agent checked the same signature itself
    assert (record.state, record.via, record.verdict.approver, record.verdict.key) == (
        "approved", "signal", "signed", "alice"
    )  # fmt: skip
    assert (await parent.result()).final_text == "The scribe says: Wrote 9 bytes to note.txt."
    await _replays(parent)
    await _replays(child)


async def test_a_bad_key_file_stops_the_worker_naming_the_entry(tmp_path: Path) -> None:
    keys = tmp_path / "approvers.toml"
    keys.write_text('alice = "c2hvcnQ="\n')
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env=environ | {"AGENT_DATA_DIR": str(tmp_path), "AGENT_APPROVER_KEYS": str(keys)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (
        2,
        f"worker: AGENT_APPROVER_KEYS: {keys}: key 'alice' is 5 bytes; an approver key has 16 at least"
        " (make one with: python codec.py new-key)\n",
    )


async def test_without_keys_the_record_says_the_approver_is_self_declared(
    client: Client, server: EmbeddedServer, tmp_path: Path
) -> None:
    settings = dataclasses.replace(Settings.from_env(), approver_keys=None)
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    async with build_worker(client, settings, task_queue=task_queue, workspace_root=tmp_path):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            conversation(_writer()),
            id=f"keys-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        await wait_for_pending(handle, 4)
        for i in range(4):
            decided = await temporal_decide(
                server, handle, {"call_id": f"call_1_{i}", "approve": True, "by": "anyone"}
            )
            assert decided.returncode == 0, decided.stderr
        result = await handle.result()
    assert {(a.by, a.verdict.approver, a.verdict.key) for a in result.approvals} == {
        ("anyone", "self-declared", None)
    }
    code, out, _ = await starter(server, "history", handle.id)
    assert (code, out.splitlines()[-1]) == (
        0,
        "[approval call_1_3] write_file approved by anyone (self-declared) via update",
    )


def test_the_docs_signer_signs_as_the_starter_does_edits_and_remember_included() -> None:
    edited = {"path": "ü.txt", "content": "x", "mode": {"b": 1, "a": [1, 2]}}
    decision = Decision(
        call_id="call_2_0", approve=True, by="ops-lead", reason="größer", arguments=edited, remember=True
    )
    signed = SignedDecision.of("wf/call_1_0", "run-1", "0123456789ab", decision)
    ours = sign(base64.b64decode(OPS), signed)
    theirs = _docs_signer()(
        OPS, "wf/call_1_0", "run-1", "call_2_0", "0123456789ab", "edit+remember", "ops-lead", "größer", edited
    )
    assert theirs == ours
