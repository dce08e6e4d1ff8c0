"""Nothing an operator sends can wedge a conversation; an approval binds to what a person saw.

Operator paths go through the real ``temporal`` CLI; the fuzz test sends random JSON, ``null``,
nothing and too much to every signal, update and query of a running conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import uuid
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError

from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import MessageInput
from durable_agents.workflows.records import ApprovalSignal, Decision, arguments_digest
from tests.support.cli import temporal
from tests.support.conversations import wait_for_pending, workspace_of
from tests.support.history import event_types, no_task_failures
from tests.support.workers import Env

WRITE = ("write_file", {"path": "out.txt", "content": "hi"})


def _writer(**kwargs: Any):
    return scripted_agent(step("Writing.", WRITE), step("{last_result}"), tools=["write_file"], **kwargs)


async def test_signals_without_input_are_dropped_and_the_conversation_goes_on(
    env: Env, server: EmbeddedServer
) -> None:
    handle = await env.start(conversation(_writer()))
    await wait_for_pending(handle)
    for name in ("approve", "reject", "post_message"):
        done = await temporal(server, "workflow", "signal", "--workflow-id", handle.id, "--name", name)
        assert done.returncode == 0, done.stderr
    for name, body in (("approve", "null"), ("reject", '"call_1_0"'), ("post_message", '{"text": 5}')):
        done = await temporal(server, "workflow", "signal", "-w", handle.id, "--name", name, "--input", body)
        assert done.returncode == 0, done.stderr

    status = await handle.query(AgentWorkflow.status)
    assert (status.state, status.pending_approvals, status.queued_messages) == ("awaiting_approval", 1, 0)
    approve = json.dumps({"call_id": "call_1_0", "by": "alice"})
    done = await temporal(
        server, "workflow", "signal", "-w", handle.id, "--name", "approve", "--input", approve
    )
    assert done.returncode == 0, done.stderr

    result = await handle.result()
    assert result.final_text == "Wrote 2 bytes to out.txt."
    assert (result.approvals[0].state, result.approvals[0].by) == ("approved", "alice")
    await no_task_failures(handle)


@pytest.mark.parametrize(
    ("inputs", "reason"),
    [
        ([], "decide takes one JSON object such as"),
        (["null"], "decide takes one JSON object such as"),
        (['"yes"'], "decide: input: Input should be a valid dictionary or instance of Decision"),
        (['{"call_id": "call_1_0"}'], "decide: approve: Field required"),
        (['{"call_id": "call_1_0", "approve": "maybe"}'], "decide: approve: Input should be a valid boolean"),
        (['{"call_id": "call_1_0", "approve": true}', "{}"], "decide takes one JSON object such as"),
    ],
    ids=["nothing", "null", "string", "missing-field", "wrong-type", "two-inputs"],
)
async def test_the_decide_update_refuses_bad_input_with_one_line(
    env: Env, server: EmbeddedServer, inputs: list[str], reason: str
) -> None:
    handle = await env.start(conversation(_writer()))
    await wait_for_pending(handle)
    argv = ["workflow", "update", "execute", "-w", handle.id, "--name", "decide"]
    for body in inputs:
        argv += ["--input", body]
    done = await temporal(server, *argv)
    assert done.returncode == 1
    assert reason in done.stderr
    [line] = [line for line in done.stderr.splitlines() if reason in line]
    assert line.strip().startswith("Error:") or reason in line

    record = await handle.execute_update(AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True))
    assert record.state == "approved"
    assert (await handle.result()).final_text == "Wrote 2 bytes to out.txt."
    await no_task_failures(handle)


async def test_a_start_without_input_fails_the_conversation_at_once(env: Env, server: EmbeddedServer) -> None:
    workflow_id = f"no-input-{uuid.uuid4().hex[:8]}"
    done = await temporal(
        server,
        "workflow",
        "start",
        "--type",
        "AgentWorkflow",
        "--task-queue",
        env.task_queue,
        "-w",
        workflow_id,
    )
    assert done.returncode == 0, done.stderr
    handle = env.client.get_workflow_handle(workflow_id)
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable) == ("InvalidInput", True)
    assert cause.message == (
        'the start input takes one JSON object such as {"prompt": "...", "agent": "demo"}; got no input'
    )
    await no_task_failures(handle)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("null", "the start input takes one JSON object such as"),
        ('"hello"', "the start input: input: Input should be a valid dictionary"),
        ('{"agent": "demo"}', "the start input: prompt: Field required"),
    ],
    ids=["null", "string", "no-prompt"],
)
async def test_a_bad_start_input_fails_the_conversation_naming_what_is_wrong(
    env: Env, server: EmbeddedServer, body: str, message: str
) -> None:
    workflow_id = f"bad-input-{uuid.uuid4().hex[:8]}"
    done = await temporal(
        server, "workflow", "start", "--type", "AgentWorkflow", "--task-queue", env.task_queue,
        "-w", workflow_id, "--input", body,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    handle = env.client.get_workflow_handle(workflow_id)
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    assert info.value.cause.message.startswith(message)
    assert "\n" not in info.value.cause.message
    await no_task_failures(handle)


async def test_an_approval_sent_before_the_call_exists_approves_nothing(env: Env) -> None:
    handle = await env.client.start_workflow(
        AgentWorkflow.run,
        conversation(_writer()),
        id=f"early-{uuid.uuid4().hex[:6]}",
        task_queue=env.task_queue,
        start_signal="approve",
        start_signal_args=[ApprovalSignal(call_id="call_1_0", by="early-bird")],
    )
    [pending] = await wait_for_pending(handle)
    assert (pending.call_id, pending.state) == ("call_1_0", "pending")
    assert not (workspace_of(env.workspace, handle) / "out.txt").exists()

    await handle.execute_update(AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="alice"))
    result = await handle.result()
    assert (result.approvals[0].state, result.approvals[0].by) == ("approved", "alice")
    assert (workspace_of(env.workspace, handle) / "out.txt").read_text() == "hi"


async def test_a_decision_binds_to_the_arguments_digest_the_person_saw(
    env: Env, server: EmbeddedServer
) -> None:
    handle = await env.start(conversation(_writer()))
    [pending] = await wait_for_pending(handle)
    digest = arguments_digest(WRITE[1])
    assert pending.arguments_digest == digest
    assert len(digest) == 12

    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(
            AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, arguments_digest="0" * 12)
        )
    assert refused.value.cause.message == (
        f"call 'call_1_0' has arguments digest {digest}, not 000000000000:"
        " look at its arguments again (pending_approvals)"
    )
    wrong = json.dumps({"call_id": "call_1_0", "by": "mallory", "arguments_digest": "f" * 12})
    done = await temporal(
        server, "workflow", "signal", "-w", handle.id, "--name", "approve", "--input", wrong
    )
    assert done.returncode == 0, done.stderr
    assert [r.state for r in await handle.query(AgentWorkflow.pending_approvals)] == ["pending"]

    right = json.dumps({"call_id": "call_1_0", "by": "alice", "arguments_digest": digest})
    done = await temporal(
        server, "workflow", "signal", "-w", handle.id, "--name", "approve", "--input", right
    )
    assert done.returncode == 0, done.stderr
    result = await handle.result()
    assert (result.approvals[0].state, result.approvals[0].by) == ("approved", "alice")


async def test_a_message_over_the_size_limit_is_refused_before_it_enters_history(env: Env) -> None:
    agent = scripted_agent(step("first"), step("second: {user}"), chat=True, max_message_bytes=1000)
    handle = await env.start(conversation(agent))
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(AgentWorkflow.send_message, MessageInput(text="é" * 501))
    assert refused.value.cause.message == (
        "send_message: the message is 1002 bytes; this conversation takes at most 1000"
    )
    await handle.signal(AgentWorkflow.post_message, MessageInput(text="x" * 1001))
    reply = await handle.execute_update(AgentWorkflow.send_message, MessageInput(text="y" * 1000))
    assert reply.text == "second: " + "y" * 1000
    await handle.signal(AgentWorkflow.end)
    result = await handle.result()
    assert [r.message_id for r in result.replies] == ["m1", "m2"]
    accepted = [
        e for e in await event_types(handle) if e == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    assert len(accepted) == 1


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON value; objects sometimes use the handlers' own field names with wrong values."""
    kind = rng.choice(
        ["null", "bool", "int", "float", "str", "list", "dict", "fields"][: 5 if depth > 2 else 8]
    )
    match kind:
        case "null":
            return None
        case "bool":
            return rng.random() < 0.5
        case "int":
            return rng.choice([0, -1, 1, 2**63, rng.randint(-1000, 1000)])
        case "float":
            return rng.choice([0.5, -1e300, 3.14])
        case "str":
            return rng.choice(["", "call_1_0", "é\u0000\u202e", "x" * rng.randint(0, 300)])
        case "list":
            return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        case "dict":
            return {rng.choice(["a", "", "text", "ü"]): _random_json(rng, depth + 1) for _ in range(3)}
    names = ["call_id", "approve", "by", "reason", "text", "arguments_digest", "prompt"]
    names += ["arguments", "remember", "tool"]
    return {name: _random_json(rng, depth + 1) for name in rng.sample(names, rng.randint(1, 4))}


def _would_take_effect(name: str, value: Any) -> bool:
    """Inputs that are valid on purpose: those are not the fuzzer's business."""
    if not isinstance(value, dict):
        return False
    if name in ("approve", "reject", "decide"):
        return value.get("call_id") == "call_1_0"
    if name in ("post_message", "send_message"):
        return isinstance(value.get("text"), str) and bool(value["text"])
    return False


async def test_fuzzed_signals_updates_and_queries_never_fail_a_workflow_task(env: Env) -> None:
    handle = await env.start(conversation(_writer()))
    await wait_for_pending(handle)
    rng = random.Random(20261123)
    signals = ["approve", "reject", "post_message"]  # `end` would end it: see the next test
    updates = ["decide", "send_message", "refresh_tools", "revoke"]
    queries = ["history", "status", "pending_approvals", "replies"]
    sent = 0
    for _ in range(120):
        name = rng.choice(signals + updates + queries)
        shape = rng.choice(["nothing", "one", "one", "one", "two"])
        args = {"nothing": [], "one": [_random_json(rng)], "two": [_random_json(rng), _random_json(rng)]}[
            shape
        ]
        if any(_would_take_effect(name, a) for a in args) and len(args) == 1:
            continue
        sent += 1
        if name in signals:
            await handle.signal(name, args=args)
        elif name in updates:
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update(name, args=args)
        else:  # a query answers or fails; either way the conversation is untouched
            with contextlib.suppress(WorkflowQueryFailedError):
                await handle.query(name, args=args)
    assert sent > 100

    status = await handle.query(AgentWorkflow.status)
    assert (status.state, status.queued_messages) == ("awaiting_approval", 0)
    await handle.execute_update(AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True))
    result = await handle.result()
    assert result.final_text == "Wrote 2 bytes to out.txt."
    assert [r.message_id for r in result.replies] == ["m1"]
    await no_task_failures(handle)


async def test_end_with_any_input_still_ends_a_chat(env: Env, server: EmbeddedServer) -> None:
    handle = await env.start(conversation(scripted_agent(step("hello"), chat=True)))
    while not await handle.query(AgentWorkflow.replies):
        await asyncio.sleep(0.05)
    done = await temporal(server, "workflow", "signal", "-w", handle.id, "--name", "end", "--input", '"now"')
    assert done.returncode == 0, done.stderr
    result = await handle.result()
    assert (result.closed_by, result.final_text) == ("end_signal", "hello")
    await no_task_failures(handle)
