"""The operator's CLI, run in-process against the embedded server."""

from __future__ import annotations

import pytest

from tests.conftest import Env, starter_cli, wait_for_pending


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
    assert lines[-1] == "[approval call_3_0] write_file approved by alice via update: ok"


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
