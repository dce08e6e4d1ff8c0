"""`starter.py chat`, `send`, `end` and `refresh-tools` as a person types them: real processes, real stdin."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import pytest
from temporalio.client import WorkflowHandle

from durable_agents.dev_server import EmbeddedServer
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.messages import UserMessage
from durable_agents.workflows.records import ApprovalRecord, Decision
from tests.support.cli import starter
from tests.support.conversations import until_state, wait_for_pending
from tests.support.paths import ROOT
from tests.support.workers import Env

ANSWER = "(12 + 30) * 2 = 84. I saved it to answer.txt in this conversation's workspace."


async def test_a_chat_asks_about_approvals_inline_and_can_be_left_and_resumed(
    env: Env, server: EmbeddedServer
) -> None:
    code, out, err = await starter(
        server,
        "--task-queue", env.task_queue, "chat", "--agent", "demo",
        stdin="What is (12 + 30) * 2?\ny\n/leave\n",
    )  # fmt: skip
    assert (code, err) == (0, "")
    first_line, *_ = out.splitlines()
    workflow_id = first_line.split("(conversation ")[1].split(";")[0]
    assert first_line == f"you> (conversation {workflow_id}; /quit ends it, /leave leaves it open)"
    assert 'approve write_file({"path": "answer.txt", "content": "(12 + 30) * 2 = 84\\n"})? [y/N] ' in out
    assert f"agent> {ANSWER}\n" in out
    handle = env.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
    [record] = (await handle.query(AgentWorkflow.history)).approvals
    assert (record.state, record.reason, record.via) == ("approved", "answered in chat", "update")

    # Back to it by id; a blank line is skipped; /quit ends it.
    code, out, err = await starter(
        server, "--task-queue", env.task_queue, "chat", workflow_id, stdin="\nthanks\n/quit\n"
    )
    assert (code, err) == (0, "")
    assert "agent> " in out
    result = await handle.result()
    assert (result.closed_by, [r.message_id for r in result.replies]) == ("end_signal", ["m1", "m2"])


async def test_send_answers_with_the_reply_and_end_closes_the_chat(env: Env, server: EmbeddedServer) -> None:
    workflow_id = f"send-{uuid.uuid4().hex[:8]}"
    code, out, _ = await starter(
        server,
        "--task-queue",
        env.task_queue,
        "start",
        "hello",
        "--agent",
        "demo",
        "--chat",
        "--id",
        workflow_id,
    )
    assert code == 0 and out.startswith(f"Started {workflow_id}\n")
    handle = env.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
    while not await handle.query(AgentWorkflow.pending_approvals):
        await asyncio.sleep(0.05)
    await starter(server, "approve", workflow_id, "call_3_0")
    code, out, err = await starter(server, "send", workflow_id, "--file", "-", stdin="and now?\n")
    assert (code, err) == (0, "")
    assert out.strip()
    code, out, _ = await starter(server, "end", workflow_id)
    assert (code, out) == (0, f"{workflow_id} will close after its current turn.\n")
    code, out, _ = await starter(server, "result", workflow_id)
    assert code == 0 and "-- stop reason: completed;" in out
    code, _, err = await starter(server, "refresh-tools", workflow_id)
    assert code == 1 and err.startswith("error: ")


ARGUMENTS = '{"path": "answer.txt", "content": "(12 + 30) * 2 = 84\\n"}'
QUESTION = f"approve write_file({ARGUMENTS})? [y/N] "


async def _waiting_for_approval(env: Env, server: EmbeddedServer) -> tuple[WorkflowHandle, ApprovalRecord]:
    """A chat of the demo agent whose write_file call waits for approval, and that call."""
    workflow_id = f"join-{uuid.uuid4().hex[:8]}"
    code, _, err = await starter(
        server, "--task-queue", env.task_queue,
        "start", "hello", "--agent", "demo", "--chat", "--id", workflow_id,
    )  # fmt: skip
    assert (code, err) == (0, "")
    handle = env.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
    [record] = await wait_for_pending(handle, timeout=60)
    return handle, record


def _left(workflow_id: str, typed: str = "", still: str = "") -> str:
    """The chat's last line when the person leaves (``typed`` empty: at the end of the input)."""
    why = "" if typed else "end of input: "
    back = f"python starter.py chat {workflow_id} returns to it"
    return f"({why}left {workflow_id}; the conversation goes on{still}: {back})"


async def test_joining_a_chat_shows_the_waiting_approval_and_asks_it_before_taking_a_message(
    env: Env, server: EmbeddedServer
) -> None:
    handle, record = await _waiting_for_approval(env, server)
    code, out, err = await starter(
        server, "--task-queue", env.task_queue, "chat", handle.id, "--by", "alice", stdin="y\n"
    )
    assert (code, err) == (0, "")
    joined, waiting, answered, prompt, left = out.splitlines()
    assert joined.startswith(f"(joined {handle.id}: waiting for event ")
    assert waiting == (
        f"(waiting for approval: call_3_0 write_file({ARGUMENTS}); digest {record.arguments_digest};"
        f" deadline {record.deadline:%Y-%m-%d %H:%M:%S}Z)"
    )
    approved = "[approval call_3_0] write_file approved by alice (self-declared) via update: answered in chat"
    assert answered == QUESTION + approved
    assert (prompt, left) == ("you> ", _left(handle.id))
    # The `y` was the decision, not a message: the turn ends with the one reply, to `hello`.
    await until_state(handle, "idle", timeout=60)
    history = await handle.query(AgentWorkflow.history)
    [approval] = history.approvals
    assert (approval.state, approval.by, approval.via) == ("approved", "alice", "update")
    assert [m.text for m in history.messages if isinstance(m, UserMessage)] == ["hello"]
    assert [r.message_id for r in await handle.query(AgentWorkflow.replies)] == ["m1"]
    assert (await handle.query(AgentWorkflow.status)).queued_messages == 0


@pytest.mark.parametrize("typed", ["/leave", ""], ids=["leave", "end_of_input"])
async def test_leaving_at_the_approval_question_decides_nothing_and_the_call_keeps_waiting(
    env: Env, server: EmbeddedServer, typed: str
) -> None:
    handle, record = await _waiting_for_approval(env, server)
    stdin = f"{typed}\n" if typed else ""
    code, out, err = await starter(server, "--task-queue", env.task_queue, "chat", handle.id, stdin=stdin)
    assert (code, err) == (0, "")
    # Piped, nothing typed is echoed: a line typed leaves the prompt's line open; end of input ends it.
    left = _left(handle.id, typed, ", its write_file call call_3_0 waiting for a decision")
    assert out.splitlines()[2:] == ([QUESTION + left] if typed else [QUESTION, left])
    assert await handle.query(AgentWorkflow.pending_approvals) == [record]
    assert (await handle.query(AgentWorkflow.history)).approvals == [record]
    await handle.terminate()


async def test_an_answer_other_than_yes_or_no_decides_nothing_and_is_asked_again(
    env: Env, server: EmbeddedServer
) -> None:
    handle, record = await _waiting_for_approval(env, server)
    code, out, err = await starter(
        server, "--task-queue", env.task_queue, "chat", handle.id, stdin="yes please\n"
    )
    assert (code, err) == (0, "")
    assert out.splitlines()[2:] == [
        QUESTION + "(answer y or n, or /leave to leave it waiting; 'yes please' decides nothing)",
        QUESTION,
        _left(handle.id, "", ", its write_file call call_3_0 waiting for a decision"),
    ]
    assert await handle.query(AgentWorkflow.pending_approvals) == [record]
    await handle.terminate()


async def test_joining_a_chat_shows_a_client_tools_waiting_call_and_asks_it_before_taking_a_message(
    env: Env, server: EmbeddedServer
) -> None:
    workflow_id = f"join-ask-{uuid.uuid4().hex[:8]}"
    code, _, err = await starter(
        server, "--task-queue", env.task_queue,
        "start", "What's the weather?", "--agent", "asker", "--chat", "--id", workflow_id,
    )  # fmt: skip
    assert (code, err) == (0, "")
    handle = env.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
    await until_state(handle, "waiting_for_client", timeout=60)
    [waiting] = await handle.query(AgentWorkflow.pending_client_calls)
    code, out, err = await starter(
        server, "--task-queue", env.task_queue, "chat", workflow_id, stdin="Paris\n"
    )
    assert (code, err) == (0, "")
    assert out.splitlines()[1:] == [
        '(waiting for the client: call_1_0 ask_user({"question": "Which city are you in?"});'
        f" deadline {waiting.deadline:%Y-%m-%d %H:%M:%S}Z)",
        "agent asks> Which city are you in?",
        "answer> you> ",
        _left(workflow_id),
    ]
    await until_state(handle, "idle", timeout=60)
    [call] = (await handle.query(AgentWorkflow.history)).client_calls
    assert (call.state, call.result) == ("delivered", "Paris")
    assert [r.text for r in await handle.query(AgentWorkflow.replies)] == ["Then the weather in Paris it is."]


async def _chat_process(server: EmbeddedServer, env: Env, *argv: str) -> asyncio.subprocess.Process:
    """``starter.py chat ARGV`` with a pipe to type into, as a person would, line by line."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "starter.py", "--task-queue", env.task_queue, "chat", *argv,
        cwd=ROOT, env=os.environ | {"TEMPORAL_ADDRESS": server.address},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _printed_until(proc: asyncio.subprocess.Process, prompt: str) -> str:
    assert proc.stdout is not None
    return (await asyncio.wait_for(proc.stdout.readuntil(prompt.encode()), 120)).decode()


async def _type_last(proc: asyncio.subprocess.Process, line: str) -> tuple[int, str, str]:
    """Type ``line``, then end the input: the exit code and what the chat printed after."""
    assert proc.stdin is not None
    proc.stdin.write(line.encode())
    proc.stdin.close()
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_decision_refused_in_chat_is_one_line_and_not_asked_again(
    env: Env, server: EmbeddedServer
) -> None:
    proc = await _chat_process(server, env, "--agent", "demo", "--by", "alice")
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"What is (12 + 30) * 2?\n")
        workflow_id = (await _printed_until(proc, "[y/N] ")).split("(conversation ")[1].split(";")[0]
        handle = env.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
        await handle.execute_update(
            AgentWorkflow.decide, Decision(call_id="call_3_0", approve=False, by="bob")
        )
        code, out, err = await _type_last(proc, "y\n")
    finally:
        if proc.returncode is None:
            proc.kill()
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "(not decided: call 'call_3_0' was already rejected by bob)",
        f"agent> {ANSWER}",
        "you> ",
        _left(workflow_id),
    ]
    [approval] = (await handle.query(AgentWorkflow.history)).approvals
    assert (approval.state, approval.by) == ("rejected", "bob")


async def test_an_error_in_chat_is_one_line_and_a_failing_exit(env: Env, server: EmbeddedServer) -> None:
    proc = await _chat_process(server, env, "--agent", "demo")
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"What is (12 + 30) * 2?\n")
        workflow_id = (await _printed_until(proc, "[y/N] ")).split("(conversation ")[1].split(";")[0]
        await env.client.get_workflow_handle(workflow_id).terminate()
        code, _, err = await _type_last(proc, "y\n")
    finally:
        if proc.returncode is None:
            proc.kill()
    assert (code, err) == (1, f"error: {workflow_id}: workflow execution already completed\n")
