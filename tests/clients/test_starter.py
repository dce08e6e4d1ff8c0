"""The operator's CLI, run in-process against the embedded server."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from durable_agents.cli import starter
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.records import arguments_digest
from tests.support.cli import starter_cli
from tests.support.conversations import wait_for_pending
from tests.support.workers import Env


async def test_start_pending_approve_and_history(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = await starter_cli(
        env, capsys, "start", "What is (12 + 30) * 2?", "--agent", "demo", "--id", "cli-1"
    )
    assert code == 0
    assert out.splitlines() == [
        "Started cli-1",
        "Web UI: http://localhost:8233/namespaces/default/workflows/cli-1",
    ]
    await wait_for_pending(env.client.get_workflow_handle("cli-1"))

    code, out, _ = await starter_cli(env, capsys, "pending")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == [
        "WORKFLOW",
        "ID",
        "CALL",
        "ID",
        "TOOL",
        "DIGEST",
        "AGE",
        "DEADLINE",
        "DECISIONS",
        "ARGUMENTS",
    ]
    assert [row.split()[:3] for row in rows if row.startswith("cli-1 ")] == [
        ["cli-1", "call_3_0", "write_file"]
    ]

    code, _, err = await starter_cli(env, capsys, "reject", "cli-1", "nope", "--by", "alice")
    assert (code, err) == (
        1,
        "error: not rejected: no approval is pending for call 'nope' (pending: call_3_0)\n",
    )

    code, out, _ = await starter_cli(
        env, capsys, "approve", "cli-1", "call_3_0", "--by", "alice", "--reason", "ok"
    )
    assert (code, out) == (0, "write_file call call_3_0 of cli-1: approved by alice\n")

    code, out, _ = await starter_cli(env, capsys, "result", "cli-1")
    assert (
        out.splitlines()[0]
        == "(12 + 30) * 2 = 84. I saved it to answer.txt in this conversation's workspace."
    )

    code, out, _ = await starter_cli(env, capsys, "history", "cli-1")
    lines = out.splitlines()
    assert lines[1] == "[user] What is (12 + 30) * 2?"
    assert lines[-1] == "[approval call_3_0] write_file approved by alice (self-declared) via update: ok"


@pytest.mark.parametrize("agent", ["demo", "asker"])
async def test_wait_says_once_which_call_waits_and_the_command_that_ends_the_wait(
    env: Env, capsys: pytest.CaptureFixture[str], agent: str
) -> None:
    """``start --wait`` once said nothing while a call waited for a person: now one line says which
    call and how to decide it (or, for a client tool, answer it); the answer follows the decision."""
    workflow_id = f"cli-wait-{agent}-{uuid.uuid4().hex[:8]}"
    prompt = {"demo": "What is (12 + 30) * 2?", "asker": "What's the weather?"}[agent]
    starting = [
        "--task-queue",
        env.task_queue,
        "start",
        prompt,
        "--agent",
        agent,
        "--id",
        workflow_id,
        "--wait",
    ]
    write = {"path": "answer.txt", "content": "(12 + 30) * 2 = 84\n"}
    waiting, deciding, answer = {
        "demo": (
            f"Waiting for a person: write_file call call_3_0 {json.dumps(write)}"
            f" (digest {arguments_digest(write)}); decide with: python starter.py approve {workflow_id}"
            f" call_3_0 --digest {arguments_digest(write)}"
            f" (or python starter.py reject {workflow_id} call_3_0)",
            ["approve", workflow_id, "call_3_0", "--by", "alice"],
            [
                f"write_file call call_3_0 of {workflow_id}: approved by alice",
                "(12 + 30) * 2 = 84. I saved it to answer.txt in this conversation's workspace.",
                "-- stop reason: completed; iterations: 4; model calls: 4; tool calls: 4;"
                " tokens: 40 in / 20 out",
            ],
        ),
        "asker": (
            'Waiting for the client: ask_user call call_1_0 {"question": "Which city are you in?"};'
            f" answer it with: python starter.py answer {workflow_id} call_1_0 TEXT",
            ["answer", workflow_id, "call_1_0", "Lisbon"],
            [
                f"ask_user call call_1_0 of {workflow_id}: delivered",
                "Then the weather in Lisbon it is.",
                "-- stop reason: completed; iterations: 2; model calls: 2; tool calls: 1;"
                " tokens: 20 in / 10 out",
            ],
        ),
    }[agent]
    start = asyncio.create_task(starter.run(starting))
    out = ""
    try:
        for _ in range(1200):  # a minute, on a loaded machine
            out += capsys.readouterr().out
            if waiting in out.splitlines() or start.done():
                break
            await asyncio.sleep(0.05)
        assert out.splitlines()[2:] == [waiting]

        assert await starter.run(["--task-queue", env.task_queue, *deciding]) == 0
        assert await asyncio.wait_for(start, timeout=120) == 0
    finally:
        start.cancel()
    assert [*out.splitlines(), *capsys.readouterr().out.splitlines()][2:] == [waiting, *answer]


async def test_invalid_start_input_is_one_clear_line(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await starter_cli(env, capsys, "start", "", "--agent", "demo")
    assert (code, out, err) == (
        1,
        "",
        "error: invalid input: prompt: String should have at least 1 character\n",
    )


async def test_unknown_conversation_is_one_clear_line(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await starter_cli(env, capsys, "status", "no-such-conversation")
    assert (code, out) == (1, "")
    assert err.startswith("error: no-such-conversation: ") and err.count("\n") == 1


async def test_duplicate_id_is_refused(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    await starter_cli(env, capsys, "start", "hi", "--agent", "demo", "--id", "cli-dup")
    code, _, err = await starter_cli(env, capsys, "start", "hi", "--agent", "demo", "--id", "cli-dup")
    assert (code, err) == (1, "error: a conversation with id 'cli-dup' already exists\n")


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["start", "hi"], "error: start: the following arguments are required: --agent (see --help)\n"),
        (
            ["list", "--limit", "0"],
            "error: list: argument --limit: give a whole number from 1 on, not '0' (see --help)\n",
        ),
        (
            ["list", "--limit", "-5"],
            "error: list: argument --limit: give a whole number from 1 on, not '-5' (see --help)\n",
        ),
    ],
    ids=["start-without-agent", "limit-0", "limit-negative"],
)
async def test_a_command_line_argparse_refuses_is_one_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], error: str
) -> None:
    with pytest.raises(SystemExit) as info:
        await starter.run(argv)
    assert (info.value.code, capsys.readouterr()) == (2, ("", error))


async def test_a_new_chat_without_an_agent_is_refused(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    assert await starter_cli(env, capsys, "chat") == (
        1,
        "",
        "error: give --agent NAME to start a chat, or the id of one to join\n",
    )


async def test_status_and_history_of_a_conversation_no_worker_serves_say_so_at_once(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    task_queue = f"tq-none-{uuid.uuid4().hex[:8]}"
    handle = await env.client.start_workflow(
        AgentWorkflow.run,
        ConversationInput(prompt="hi", agent="demo"),
        id=f"cli-nobody-{task_queue}",
        task_queue=task_queue,
    )
    try:
        for command in ("status", "history"):
            assert await starter_cli(env, capsys, command, handle.id) == (
                1,
                "",
                f"error: {handle.id}: no worker is polling task queue {task_queue}\n",
            )
    finally:
        await handle.terminate()


async def test_wait_on_a_chat_returns_its_first_reply_and_so_does_a_fork_of_it(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    # long-chat is a chat by its agent file: the starter does not know it, the event stream tells.
    origin_id, fork_id = f"cli-chat-{uuid.uuid4().hex[:8]}", f"cli-chat-fork-{uuid.uuid4().hex[:8]}"
    code, out, err = await starter_cli(
        env,
        capsys,
        "start",
        "Remember that my order is 12345.",
        "--agent",
        "long-chat",
        "--id",
        origin_id,
        "--wait",
    )
    assert (code, err) == (0, "")
    assert out.splitlines()[2:] == _first_reply(origin_id)

    code, out, err = await starter_cli(env, capsys, "fork", origin_id, "--at", "2", "--id", fork_id, "--wait")
    assert (code, err) == (0, "")
    assert out.splitlines()[2:] == _first_reply(fork_id)
    for workflow_id in (origin_id, fork_id):
        await env.client.get_workflow_handle(workflow_id).terminate()


def _first_reply(workflow_id: str) -> list[str]:
    """What ``--wait`` prints after the Web UI link for long-chat's first reply."""
    return [
        "Noted: order 12345.",
        "-- stop reason: completed; iterations: 1; the chat stays open:"
        f" python starter.py send {workflow_id} TEXT (end {workflow_id} closes it)",
    ]


async def test_send_with_another_agent_to_a_running_conversation_is_refused(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    workflow_id = f"cli-other-{uuid.uuid4().hex[:8]}"
    assert (await starter_cli(env, capsys, "send", workflow_id, "hello", "--agent", "long-chat"))[:2] == (
        0,
        "Noted: order 12345.\n",
    )

    assert await starter_cli(env, capsys, "send", workflow_id, "and now?", "--agent", "demo") == (
        1,
        "",
        f"error: not sent: {workflow_id} is a conversation with agent long-chat, not demo;"
        " send without --agent, or to a new id\n",
    )
    history = await env.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id).query(
        AgentWorkflow.history
    )
    assert [m.text for m in history.messages if m.kind == "user"] == ["hello"]  # nothing sent
    await env.client.get_workflow_handle(workflow_id).terminate()


async def test_an_unexpected_error_is_one_line_and_traceback_shows_where(
    env: Env, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(settings: object) -> None:
        raise RuntimeError("the converter broke")

    monkeypatch.setattr(starter, "data_converter", broken)

    assert await starter_cli(env, capsys, "list") == (
        1,
        "",
        "error: unexpected RuntimeError: the converter broke (--traceback shows where)\n",
    )
    with pytest.raises(RuntimeError):
        await starter.run(["--traceback", "list"])
