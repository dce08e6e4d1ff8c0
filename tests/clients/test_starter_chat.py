"""`starter.py chat`, `send`, `end` and `refresh-tools` as a person types them: real processes, real stdin."""

from __future__ import annotations

import asyncio
import uuid

from durable_agents.dev_server import EmbeddedServer
from tests.support.cli import starter
from tests.support.workers import Env
from workflows.agent import AgentWorkflow

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
