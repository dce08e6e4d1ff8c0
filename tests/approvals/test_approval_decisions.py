"""Decisions beyond yes or no, sent as an operator sends them (the real ``temporal`` CLI, ``starter.py``):
approve with edited arguments, reject with words the model reads, approve and remember the tool for
the conversation (and revoke that), and an agent's per-tool ``approval.tool_decisions``."""

from __future__ import annotations

import asyncio
import json
import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from durable_agents.activities.agent_files import AgentFileError, load_agent_file
from durable_agents.activities.tools import default_registry
from durable_agents.cli import starter
from durable_agents.client.live import follow
from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec, ApprovalPolicy
from durable_agents.workflows.decisions import schema_error
from durable_agents.workflows.events import ApprovalDecided, ApprovalRequested
from durable_agents.workflows.messages import AssistantMessage, ModelSettings, ToolCall, ToolResultMessage
from durable_agents.workflows.records import arguments_digest
from tests.support.cli import refusal, temporal_decide, temporal_revoke, temporal_signal
from tests.support.conversations import wait_for_pending, workspace_of
from tests.support.fake_provider import FakeProvider, Reply, anthropic_message, openai_completion
from tests.support.history import activity_types
from tests.support.workers import Env, running_worker

WRITE = {"path": "out.txt", "content": "hi"}
EDITED = {"path": "out.txt", "content": "edited"}
NOTE = (
    '[alice edited the arguments before the call ran; it ran with {"path": "out.txt", "content": "edited"}]'
)


def _writer(**kwargs: Any) -> AgentSpec:
    return scripted_agent(
        step("Writing.", ("write_file", WRITE)), step("{last_result}"), tools=["write_file"], **kwargs
    )


# ---------------------------------------------------------------------------------------------------
# approve with edited arguments


async def test_edited_arguments_reach_the_tool_and_the_record_keeps_both(
    env: Env, server: EmbeddedServer
) -> None:
    handle = await env.start(conversation(_writer()))
    await wait_for_pending(handle)

    done = await temporal_decide(
        server, handle, {"call_id": "call_1_0", "approve": True, "by": "alice", "arguments": EDITED}
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)["result"]
    assert (answer["state"], answer["arguments"], answer["edited_arguments"]) == ("approved", WRITE, EDITED)

    result = await handle.result()
    assert (workspace_of(env.workspace, handle) / "out.txt").read_text() == "edited"
    [audit] = result.approvals
    assert (audit.arguments, audit.arguments_digest, audit.edited_arguments) == (
        WRITE,
        arguments_digest(WRITE),
        EDITED,
    )
    content = f"{NOTE}\nWrote 6 bytes to out.txt."
    assert [(c.arguments, c.content, c.is_error) for c in result.tool_calls] == [(EDITED, content, False)]
    # The model's own call stays as it asked; its result says what ran instead.
    assert result.messages[1:3] == [
        AssistantMessage(
            text="Writing.", tool_calls=[ToolCall(id="call_1_0", name="write_file", arguments=WRITE)]
        ),
        ToolResultMessage(call_id="call_1_0", name="write_file", content=content),
    ]
    assert result.final_text == content


async def test_invalid_edits_are_refused_with_the_schema_s_error_and_the_call_stays_pending(
    env: Env, server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    handle = await env.start(conversation(_writer()))
    await wait_for_pending(handle)

    refusals = [
        ({"path": "out.txt", "content": 5}, "$.content must be of type string, not integer"),
        ({"path": "out.txt"}, "$ lacks the required property 'content'"),
    ]
    for arguments, error in refusals:
        done = await temporal_decide(
            server, handle, {"call_id": "call_1_0", "approve": True, "arguments": arguments}
        )
        assert refusal(done) == f"edited arguments for write_file do not fit its schema: {error}"
    done = await temporal_decide(
        server, handle, {"call_id": "call_1_0", "approve": False, "arguments": EDITED}
    )
    assert refusal(done) == "a rejection takes no 'arguments' and no 'remember'"

    with caplog.at_level(logging.INFO, logger="temporalio.workflow"):
        await temporal_signal(
            server, handle, "approve", {"call_id": "call_1_0", "arguments": {**EDITED, "mode": "a"}}
        )
        # Taken only because the signal before it was dropped (a decided call refuses another).
        done = await temporal_decide(server, handle, {"call_id": "call_1_0", "approve": True, "by": "bob"})
        assert done.returncode == 0, done.stderr

    result = await handle.result()
    assert (workspace_of(env.workspace, handle) / "out.txt").read_text() == "hi"
    assert [(a.state, a.by, a.via, a.edited_arguments) for a in result.approvals] == [
        ("approved", "bob", "update", None)
    ]
    assert result.final_text == "Wrote 2 bytes to out.txt."
    logged = [r.args for r in caplog.records if str(r.msg).startswith("%s signal: %s")]
    assert logged == [
        (
            "approve",
            "ignored: edited arguments for write_file do not fit its schema:"
            " $ has the unexpected property 'mode'",
        )
    ]


# ---------------------------------------------------------------------------------------------------
# the model's side, over the providers' wire protocols


def _provider_agent(provider: str) -> AgentSpec:
    model = "gpt-4o-mini" if provider == "openai" else "claude-haiku-4-5"
    return AgentSpec(
        name=f"writer-{provider}", model=ModelSettings(provider=provider, model=model), tools=["write_file"]
    )  # type: ignore[arg-type]


def _replies(provider: str, calls: list[tuple[str, str, dict]], text: str) -> list[Reply]:
    if provider == "openai":
        return [
            Reply(body=openai_completion(calls=calls, finish="tool_calls")),
            Reply(body=openai_completion(text)),
        ]
    return [
        Reply(body=anthropic_message(calls=calls, stop_reason="tool_use")),
        Reply(body=anthropic_message(text)),
    ]


async def test_the_rejection_reason_is_in_the_model_s_next_request(
    env: Env, server: EmbeddedServer, fake: FakeProvider
) -> None:
    fake.queue(*_replies("openai", [("call_w1", "write_file", WRITE)], "I will write notes.txt instead."))
    handle = await env.start(conversation(_provider_agent("openai")))
    await wait_for_pending(handle)
    await temporal_signal(
        server, handle, "reject", {"call_id": "call_w1", "by": "alice", "reason": "write notes.txt instead"}
    )

    assert (await handle.result()).final_text == "I will write notes.txt instead."
    _, second = fake.received
    assert second.body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_w1",
        "content": "Error: Tool call 'write_file' was rejected by alice: write notes.txt instead",
    }


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_an_edited_call_is_a_well_formed_transcript_for_the_provider(
    env: Env, server: EmbeddedServer, fake: FakeProvider, provider: str
) -> None:
    fake.queue(*_replies(provider, [("call_w1", "write_file", WRITE)], "Done."))
    handle = await env.start(conversation(_provider_agent(provider)))
    await wait_for_pending(handle)
    done = await temporal_decide(
        server, handle, {"call_id": "call_w1", "approve": True, "by": "alice", "arguments": EDITED}
    )
    assert done.returncode == 0, done.stderr

    assert (await handle.result()).final_text == "Done."
    _, second = fake.received
    content = f"{NOTE}\nWrote 6 bytes to out.txt."
    if provider == "openai":
        assert second.body["messages"][-2:] == [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_w1",
                        "type": "function",
                        "function": {"name": "write_file", "arguments": json.dumps(WRITE)},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_w1", "content": content},
        ]
    else:
        assert second.body["messages"][-2:] == [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "call_w1", "name": "write_file", "input": WRITE}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_w1",
                        "content": content,
                        "cache_control": {"type": "ephemeral"},  # the newest message: a cache breakpoint
                    }
                ],
            },
        ]


# ---------------------------------------------------------------------------------------------------
# approve and remember; revoke


async def test_remember_skips_later_approvals_of_that_tool_only_until_revoked(
    env: Env, server: EmbeddedServer
) -> None:
    agent = scripted_agent(
        step("", ("write_file", {"path": "a.txt", "content": "a"})),
        step("", ("write_file", {"path": "b.txt", "content": "b"}), ("add", {"a": 1, "b": 2})),
        step("", ("write_file", {"path": "c.txt", "content": "c"})),
        step("{last_result}"),
        tools=["write_file", "add"],
        approval=ApprovalPolicy(require=["add"]),
        continue_as_new_after=1,  # each model call in a run of its own: the allowance crosses them
    )
    handle = await env.start(conversation(agent))
    await wait_for_pending(handle)
    await temporal_signal(server, handle, "approve", {"call_id": "call_1_0", "by": "alice", "remember": True})

    # write_file runs without asking now; add still waits.
    await _wait_until(handle, lambda p: [r.call_id for r in p] == ["call_2_1"])
    done = await temporal_revoke(server, handle, {"tool": "write_file", "by": "bob"})
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["result"]["tool"], json.loads(done.stdout)["result"]["revoked_by"]) == (
        "write_file",
        "bob",
    )
    assert refusal(await temporal_revoke(server, handle, {"tool": "write_file"})) == (
        "write_file is not allowed for this conversation (allowed: none)"
    )
    await temporal_signal(server, handle, "approve", {"call_id": "call_2_1", "by": "alice"})

    # Revoked: write_file waits for a person again.
    [pending] = await _wait_until(handle, lambda p: [r.call_id for r in p] == ["call_3_0"])
    assert pending.allowed_decisions == ["approve", "edit", "reject", "remember"]
    await temporal_signal(
        server, handle, "reject", {"call_id": "call_3_0", "by": "bob", "reason": "enough files"}
    )

    result = await handle.result()
    assert result.runs == 5  # a run per model call, and the last one that closes
    assert [(a.call_id, a.tool, a.state, a.by, a.via, a.remember) for a in result.approvals] == [
        ("call_1_0", "write_file", "approved", "alice", "signal", True),
        ("call_2_0", "write_file", "approved", "alice", "remember", False),
        ("call_2_1", "add", "approved", "alice", "signal", False),
        ("call_3_0", "write_file", "rejected", "bob", "signal", False),
    ]
    remembered = result.approvals[1]
    assert (remembered.reason, remembered.deadline, remembered.decided_at) == (
        "write_file allowed for the conversation on call call_1_0",
        None,
        remembered.requested_at,
    )
    [allowance] = result.allowances
    assert (allowance.tool, allowance.by, allowance.call_id, allowance.revoked_by) == (
        "write_file",
        "alice",
        "call_1_0",
        "bob",
    )
    workspace = workspace_of(env.workspace, handle)
    assert sorted(p.name for p in workspace.iterdir()) == ["a.txt", "b.txt"]
    assert result.final_text == "Tool call 'write_file' was rejected by bob: enough files"


async def test_a_call_a_remembered_tool_approves_shows_as_decided_never_as_requested(env: Env) -> None:
    agent = scripted_agent(
        step("", ("write_file", {"path": "a.txt", "content": "a"})),
        step("", ("write_file", {"path": "b.txt", "content": "b"})),
        step("{last_result}"),
        tools=["write_file"],
    )
    handle = await env.start(conversation(agent))
    await wait_for_pending(handle)
    await handle.signal(AgentWorkflow.approve, {"call_id": "call_1_0", "by": "alice", "remember": True})
    assert (await handle.result()).final_text == "Wrote 1 bytes to b.txt."

    events = [
        (e.type, e.record.call_id, e.record.state, e.record.via)
        async for _, e in follow(env.client, handle.id)
        if isinstance(e, ApprovalRequested | ApprovalDecided)
    ]
    assert events == [
        ("approval_requested", "call_1_0", "pending", None),
        ("approval_decided", "call_1_0", "approved", "signal"),
        ("approval_decided", "call_2_0", "approved", "remember"),  # nobody was asked
    ]


async def _wait_until(handle: WorkflowHandle, ready: Any, timeout: float = 15.0) -> list:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            pending = await handle.query(AgentWorkflow.pending_approvals)
        except Exception:  # a run continuing as new between the query's lookups
            pending = None
        if pending is not None and ready(pending):
            return pending
        assert asyncio.get_running_loop().time() < deadline, f"pending approvals: {pending}"
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------------------------------------------
# the agent's allowed decisions


STRICT = textwrap.dedent(
    """\
    name = "strict"
    tools = ["write_file"]

    [model]
    provider = "scripted"
    model = "script"

    [[model.script]]
    tool_calls = [{ name = "write_file", arguments = { path = "out.txt", content = "hi" } }]

    [[model.script]]
    text = "{last_result}"

    [approval.tool_decisions]
    write_file = ["approve", "reject"]
    """
)


async def test_a_decision_the_agent_does_not_allow_is_refused(
    client: Client, server: EmbeddedServer, tmp_path: Path
) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "strict.toml").write_text(STRICT)
    async with running_worker(client, tmp_path, agents_dir=agents) as worker:
        handle = await worker.start(ConversationInput(prompt="go", agent="strict"))
        [pending] = await wait_for_pending(handle)
        assert pending.allowed_decisions == ["approve", "reject"]

        edit = await temporal_decide(
            server, handle, {"call_id": "call_1_0", "approve": True, "arguments": EDITED}
        )
        assert refusal(edit) == "'edit' is not a decision allowed for write_file (allowed: approve, reject)"
        remember = await temporal_decide(
            server, handle, {"call_id": "call_1_0", "approve": True, "remember": True}
        )
        assert refusal(remember) == (
            "'remember' is not a decision allowed for write_file (allowed: approve, reject)"
        )
        await temporal_signal(
            server, handle, "approve", {"call_id": "call_1_0", "by": "eve", "arguments": EDITED}
        )
        done = await temporal_decide(server, handle, {"call_id": "call_1_0", "approve": True, "by": "alice"})
        assert done.returncode == 0, done.stderr
        result = await handle.result()

    assert (workspace_of(tmp_path, handle) / "out.txt").read_text() == "hi"
    assert [(a.by, a.edited_arguments, a.remember) for a in result.approvals] == [("alice", None, False)]
    assert await activity_types(handle) == [
        "durable_agents.resolve_agent",
        "durable_agents.call_model",
        "durable_agents.verify_decision",  # the one decision that took: the refused ones never got that far
        "durable_agents.run_tool",
        "durable_agents.call_model",
    ]


@pytest.mark.parametrize(
    ("decisions", "error"),
    [
        (
            '["approve", "maybe"]',
            "field 'approval.tool_decisions.write_file.1':"
            " Input should be 'approve', 'edit', 'reject' or 'remember'",
        ),
        (
            "[]",
            "field 'approval.tool_decisions.write_file':"
            " List should have at least 1 item after validation, not 0",
        ),
    ],
    ids=["unknown", "empty"],
)
def test_an_agent_file_with_bad_decisions_names_the_field(tmp_path: Path, decisions: str, error: str) -> None:
    path = tmp_path / "strict.toml"
    path.write_text(STRICT.replace('["approve", "reject"]', decisions))
    with pytest.raises(AgentFileError) as bad:
        load_agent_file(path, default_registry())
    assert str(bad.value) == f"{path}: {error}"


# ---------------------------------------------------------------------------------------------------
# starter.py


async def test_starter_edits_remembers_revokes_and_pending_shows_the_decisions(
    env: Env, server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", server.address)

    async def run(*argv: str) -> tuple[int, str, str]:
        code = await starter.run(["--task-queue", env.task_queue, *argv])
        out, err = capsys.readouterr()
        return code, out, err

    agent = scripted_agent(
        step("", ("write_file", WRITE)),
        step("", ("write_file", {"path": "two.txt", "content": "2"}), ("add", {"a": 1, "b": 2})),
        step("", ("write_file", {"path": "three.txt", "content": "3"})),
        step("{last_result}"),
        tools=["write_file", "add"],
        approval=ApprovalPolicy(
            require=["add"], tool_decisions={"write_file": ["approve", "edit", "remember"]}
        ),
    )
    handle = await env.start(conversation(agent))
    await wait_for_pending(handle)

    code, out, _ = await run("pending")
    assert code == 0
    header, *rows = out.splitlines()
    [mine] = [row for row in rows if row.startswith(f"{handle.id} ")]
    assert mine[header.index("DECISIONS") :].startswith("approve,edit,remember ")

    assert await run("approve", handle.id, "call_1_0", "--arguments", "[1]") == (
        1,
        "",
        'error: --arguments: give a JSON object, such as \'{"path": "notes.txt"}\'\n',
    )
    assert await run("reject", handle.id, "call_1_0", "--by", "alice") == (
        1,
        "",
        "error: not rejected: 'reject' is not a decision allowed for write_file"
        " (allowed: approve, edit, remember)\n",
    )
    edited = json.dumps(EDITED)
    assert await run(
        "approve", handle.id, "call_1_0", "--by", "alice", "--arguments", edited, "--remember"
    ) == (
        0,
        f"write_file call call_1_0 of {handle.id}: approved by alice with edited arguments;"
        " write_file allowed for the conversation\n",
        "",
    )
    # call_2_0 (write_file) ran without asking; add (call_2_1) waits while write_file is revoked.
    await _wait_until(handle, lambda p: [r.call_id for r in p] == ["call_2_1"])
    assert await run("revoke", handle.id, "write_file", "--by", "bob") == (
        0,
        f"write_file of {handle.id}: asks for approval again (revoked by bob)\n",
        "",
    )
    assert await run("revoke", handle.id, "write_file") == (
        1,
        "",
        "error: not revoked: write_file is not allowed for this conversation (allowed: none)\n",
    )
    assert (await run("approve", handle.id, "call_2_1", "--by", "alice"))[0] == 0
    await _wait_until(handle, lambda p: [r.call_id for r in p] == ["call_3_0"])
    assert (await run("approve", handle.id, "call_3_0", "--by", "alice"))[0] == 0

    result = await handle.result()
    assert [(a.call_id, a.via, a.edited_arguments, a.remember) for a in result.approvals] == [
        ("call_1_0", "update", EDITED, True),
        ("call_2_0", "remember", None, False),
        ("call_2_1", "update", None, False),
        ("call_3_0", "update", None, False),
    ]
    assert (await run("history", handle.id))[1].splitlines()[-4:] == [
        "[approval call_1_0] write_file approved by alice (self-declared) via update"
        f" (edited to {edited}) (write_file allowed for the conversation)",
        "[approval call_2_0] write_file approved by alice via remember:"
        " write_file allowed for the conversation on call call_1_0",
        "[approval call_2_1] add approved by alice (self-declared) via update",
        "[approval call_3_0] write_file approved by alice (self-declared) via update",
    ]


@pytest.mark.parametrize(
    ("arguments", "schema", "error"),
    [
        ({"xs": [1, 2]}, {"properties": {"xs": {"items": {"type": "integer"}}}}, None),
        (
            {"xs": [1, "b"]},
            {"properties": {"xs": {"items": {"type": "integer"}}}},
            "$.xs[1] must be of type integer, not string",
        ),
        (
            {"a": 1},
            {"properties": {"a": {"$ref": "#/$defs/nope"}}},
            "the tool's schema cannot be checked (schema.properties.a: reference #/$defs/nope leads nowhere)",
        ),
    ],
    ids=["fits", "nested", "unusable-schema"],
)
def test_schema_errors_name_the_field_and_an_unusable_schema_refuses(
    arguments: dict, schema: dict, error: str | None
) -> None:
    assert schema_error(arguments, schema) == error
