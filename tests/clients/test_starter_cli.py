"""The operator's CLI as people run it: ``python starter.py ...`` in a process of its own.

Each test gives the exact lines printed and the exit code; errors are one line on stderr.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.converter import StorageDriver, StorageDriverClaim
from temporalio.service import RPCError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from durable_agents.converter import PayloadStoreMismatchError, data_converter
from durable_agents.dev_server import EmbeddedServer
from durable_agents.encryption import EncryptionCodec
from durable_agents.settings import Settings
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows import wire
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput, ConversationResult
from durable_agents.workflows.config import AgentSpec, HookConfig
from durable_agents.workflows.messages import ModelSettings
from durable_agents.workflows.records import arguments_digest
from tests.support.cli import starter
from tests.support.conversations import until_state, wait_for_pending
from tests.support.fake_provider import FakeProvider, openai_completion, openai_stream
from tests.support.paths import ROOT
from tests.support.workers import Env, running_worker

DEMO_WRITE = {"path": "answer.txt", "content": "(12 + 30) * 2 = 84\n"}
"""The arguments of the demo agent's write_file call (call_3_0), which waits for approval."""


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _answering(*texts: str, **kwargs) -> AgentSpec:
    return scripted_agent(*(step(text) for text in texts), tools=[], **kwargs)


@pytest.fixture
async def leftovers(client: Client) -> AsyncIterator[list[str]]:
    """Ids of conversations a test leaves waiting: terminated after it, so that no later
    `pending` asks them once their worker is gone."""
    ids: list[str] = []
    yield ids
    for workflow_id in ids:
        with contextlib.suppress(RPCError):  # closed already
            await client.get_workflow_handle(workflow_id).terminate()


async def _demo_awaiting_approval(
    server: EmbeddedServer, client: Client, task_queue: str, prefix: str, leftovers: list[str]
) -> WorkflowHandle:
    """A demo conversation started with the CLI, once its write_file call (call_3_0) waits."""
    workflow_id = _id(prefix)
    leftovers.append(workflow_id)
    code, _, err = await starter(
        server,
        "--task-queue",
        task_queue,
        "start",
        "What is (12 + 30) * 2?",
        "--agent",
        "demo",
        "--id",
        workflow_id,
    )
    assert (code, err) == (0, "")
    handle = client.get_workflow_handle(workflow_id)
    await wait_for_pending(handle)
    return handle


# ---------------------------------------------------------------------------------------------------
# One-line errors


async def test_a_payload_missing_from_the_payload_store_is_one_line(
    server: EmbeddedServer, env: Env, tmp_path: Path
) -> None:
    # From 128 KiB on, the result is kept in the payload store; history holds a reference to it.
    handle = await env.start(conversation(_answering("Noted."), "x" * 140_000), _id("cli-big"))
    await handle.result()

    code, out, err = await starter(
        server, "history", handle.id, AGENT_PAYLOAD_STORE=str(tmp_path / "other.db")
    )

    assert (code, out) == (1, "")
    assert re.fullmatch(
        r"error: payload store agent-sqlite lacks 1 payload\(s\), e\.g\. [0-9a-f]{64};"
        r" use the worker's payload store \(AGENT_PAYLOAD_STORE or AGENT_DATABASE_URL\)\n",
        err,
    ), err


async def test_a_payload_in_a_store_of_another_kind_is_one_line_naming_the_setting(
    server: EmbeddedServer, env: Env
) -> None:
    # The worker keeps large payloads in its SQLite file; this starter is set up for PostgreSQL
    # (never reached: the reference names the store, so the starter knows at once).
    handle = await env.start(conversation(_answering("Noted."), "x" * 140_000), _id("cli-big-sqlite"))
    await handle.result()

    assert await starter(
        server, "history", handle.id, AGENT_DATABASE_URL="postgresql://agent@127.0.0.1:9/agent"
    ) == (
        1,
        "",
        "error: large payloads are in payload store agent-sqlite, not in this process's agent-postgres:"
        " a SQLite file: unset AGENT_DATABASE_URL and set AGENT_PAYLOAD_STORE to the worker's\n",
    )


async def test_a_reference_to_a_postgres_payload_store_names_its_setting_where_sqlite_is_used(
    tmp_path: Path,
) -> None:
    class InMemory(StorageDriver):
        def __init__(self) -> None:
            self.kept: dict[str, Payload] = {}

        def name(self) -> str:
            return "agent-postgres"

        async def store(self, context: Any, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
            self.kept |= {str(i): p for i, p in enumerate(payloads, start=len(self.kept))}
            return [StorageDriverClaim(claim_data={"key": str(len(self.kept) - 1)})]

        async def retrieve(self, context: Any, claims: Sequence[StorageDriverClaim]) -> list[Payload]:
            return [self.kept[c.claim_data["key"]] for c in claims]

    settings = Settings(payload_store=tmp_path / "payloads.db")
    [reference] = await data_converter(settings, InMemory()).encode(["x" * 140_000])

    with pytest.raises(PayloadStoreMismatchError) as info:
        await data_converter(settings).decode([reference], [str])
    assert str(info.value) == (
        "large payloads are in payload store agent-postgres, not in this process's agent-sqlite:"
        " a PostgreSQL database: set AGENT_DATABASE_URL to the worker's"
    )


KEY = base64.b64encode(bytes(range(32))).decode()
OTHER_KEY = base64.b64encode(bytes(range(100, 132))).decode()


@pytest.mark.parametrize(
    ("key", "error"),
    [
        (
            None,
            "error: cannot decrypt: the conversation is encrypted;"
            " set AGENT_ENCRYPTION_KEY to the worker's keys\n",
        ),
        (
            OTHER_KEY,
            "error: cannot decrypt: payload encrypted with key id 'default' does not decrypt with that key"
            " (a different key under the same id, or the data was altered)\n",
        ),
        (
            f"k2:{OTHER_KEY}",
            "error: cannot decrypt: payload is encrypted with key id 'default', which AGENT_ENCRYPTION_KEY"
            " does not have (it has: k2)\n",
        ),
    ],
    ids=["missing", "wrong", "other-id"],
)
async def test_a_missing_or_wrong_encryption_key_is_one_line(
    server: EmbeddedServer, tmp_path: Path, key: str | None, error: str
) -> None:
    codec = EncryptionCodec.from_env_value(KEY)
    client = await Client.connect(
        server.address, data_converter=dataclasses.replace(data_converter(), payload_codec=codec)
    )
    task_queue = _id("tq-cli-codec")
    async with running_worker(client, tmp_path, task_queue=task_queue) as worker:
        handle = await worker.start(conversation(_answering("Secret.")), workflow_id=_id("cli-codec"))
        await handle.result()

    for command in ("history", "status", "result"):
        assert await starter(server, command, handle.id, AGENT_ENCRYPTION_KEY=key) == (1, "", error)
    assert await starter(server, "result", handle.id, AGENT_ENCRYPTION_KEY=KEY) == (
        0,
        "Secret.\n"
        "-- stop reason: completed; iterations: 1; model calls: 1; tool calls: 0; tokens: 10 in / 5 out\n",
        "",
    )


async def test_local_input_errors_give_the_first_error_on_one_line(server: EmbeddedServer) -> None:
    assert await starter(server, "approve", "no-such-conversation", "") == (
        1,
        "",
        "error: invalid decision: call_id: String should have at least 1 character\n",
    )
    assert await starter(server, "start", "", "--agent", "demo", "--max-iterations", "0") == (
        1,
        "",
        "error: invalid input: prompt: String should have at least 1 character (and 1 more)\n",
    )
    assert await starter(server, "send", "no-such-conversation", "") == (
        1,
        "",
        "error: invalid message: text: String should have at least 1 character\n",
    )


class _StrictDecision(BaseModel):
    model_config = {"extra": "forbid"}
    call_id: str = Field(pattern=r"^call_\d+_\d+$")
    approve: bool


@workflow.defn(name="AgentWorkflow")
class OlderAgentWorkflow:
    """Stands for a worker of another version, whose typed update inputs pydantic refuses for it."""

    @workflow.run
    async def run(self, input: dict) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.update(name=wire.DECIDE)
    def decide(self, decision: _StrictDecision) -> None:
        pass


async def test_an_update_refused_with_pydantic_text_gives_its_first_error(
    server: EmbeddedServer, client: Client
) -> None:
    task_queue = _id("tq-cli-older")
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[OlderAgentWorkflow],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await client.start_workflow("AgentWorkflow", {}, id=_id("cli-older"), task_queue=task_queue)
        code, out, err = await starter(server, "approve", handle.id, "write-it")
        await handle.terminate()

    assert (code, out, err) == (
        1,
        "",
        "error: not approved: call_id: String should match pattern '^call_\\d+_\\d+$' (and 1 more)\n",
    )


async def test_no_server_is_one_line(server: EmbeddedServer) -> None:
    code, out, err = await starter(server, "list", TEMPORAL_ADDRESS="127.0.0.1:1")
    assert (code, out, err.count("\n")) == (1, "", 1)
    assert err.startswith(
        "error: cannot connect to Temporal at 127.0.0.1:1; start a worker (python worker.py),"
        " which starts the embedded server ("
    ), err


async def test_output_cut_by_a_reader_that_left_ends_quietly(server: EmbeddedServer) -> None:
    """``starter.py list | head -0``: the pipe's reader is gone before the starter writes."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    environ = os.environ | {"TEMPORAL_ADDRESS": server.address}
    try:
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "starter.py", "list"],
            cwd=ROOT, env=environ, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")


# ---------------------------------------------------------------------------------------------------
# Nothing done, non-zero exit


async def test_cancel_and_end_of_a_closed_conversation_say_so_and_exit_1(
    server: EmbeddedServer, env: Env
) -> None:
    handle = await env.start(conversation(_answering("Done.")), _id("cli-closed"))
    await handle.result()

    assert await starter(server, "cancel", handle.id) == (
        1,
        "",
        f"error: {handle.id} is already closed (completed); nothing to cancel\n",
    )
    assert await starter(server, "end", handle.id) == (
        1,
        "",
        f"error: {handle.id} is already closed (completed); nothing to end\n",
    )


async def test_cancel_twice_says_the_second_time_that_it_was_cancelled(
    server: EmbeddedServer, env: Env, leftovers: list[str]
) -> None:
    handle = await _demo_awaiting_approval(server, env.client, env.task_queue, "cli-cancel", leftovers)

    assert await starter(server, "cancel", handle.id) == (0, f"Cancellation requested for {handle.id}.\n", "")
    await _closed(handle)
    assert await starter(server, "cancel", handle.id) == (
        1,
        "",
        f"error: {handle.id} is already closed (cancelled); nothing to cancel\n",
    )


async def _closed(handle: WorkflowHandle) -> WorkflowExecutionStatus | None:
    """Its status once it is no longer running (a minute at most)."""
    for _ in range(1200):
        if (status := (await handle.describe()).status) != WorkflowExecutionStatus.RUNNING:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"{handle.id} still runs")


async def test_result_and_history_of_a_cancelled_conversation_show_its_transcript(
    server: EmbeddedServer, env: Env, leftovers: list[str]
) -> None:
    handle = await _demo_awaiting_approval(server, env.client, env.task_queue, "cli-cancelled", leftovers)
    await starter(server, "cancel", handle.id, "--reason", "not now")
    assert await _closed(handle) == WorkflowExecutionStatus.CANCELED

    assert await starter(server, "result", handle.id) == (
        0,
        "Saving the answer.\n-- stop reason: cancelled; iterations: 3; model calls: 3; tool calls: 4;"
        " tokens: 30 in / 15 out\n",
        "",
    )
    code, out, err = await starter(server, "history", handle.id)
    assert (code, err) == (0, "")
    assert out.splitlines()[-4:] == [
        "[assistant] Saving the answer.",
        '[tool call call_3_0] write_file({"path": "answer.txt", "content": "(12 + 30) * 2 = 84\\n"})',
        "[tool error call_3_0] Tool call 'write_file' was cancelled with the conversation.",
        "[approval call_3_0] write_file cancelled by system via cancellation:"
        " conversation cancelled: not now",
    ]


# ---------------------------------------------------------------------------------------------------
# Web UI links


async def test_web_ui_link_uses_agent_ui_url_and_quotes_the_id(
    server: EmbeddedServer, leftovers: list[str]
) -> None:
    workflow_id = f"team/{_id('cli-ui')}"  # no worker listens on the queue: it only has to start
    quoted = workflow_id.replace("/", "%2F")
    leftovers += [workflow_id, f"{workflow_id}-2"]
    code, out, err = await starter(
        server, "--task-queue", _id("tq-none"), "start", "hi", "--agent", "demo", "--id", workflow_id,
        AGENT_UI_URL="https://temporal.example.com/ui/",
    )  # fmt: skip
    assert (code, out, err) == (
        0,
        f"Started {workflow_id}\nWeb UI: https://temporal.example.com/ui/namespaces/default/workflows/{quoted}\n",
        "",
    )

    code, out, _ = await starter(
        server, "--task-queue", _id("tq-none"), "start", "hi", "--agent", "demo", "--id", f"{workflow_id}-2"
    )
    assert out.splitlines()[1] == f"Web UI: http://localhost:8233/namespaces/default/workflows/{quoted}-2"


async def test_a_web_ui_address_that_is_no_url_is_refused_before_anything_starts(
    server: EmbeddedServer,
) -> None:
    workflow_id = _id("cli-ui-bad")
    assert await starter(
        server, "start", "hi", "--agent", "demo", "--id", workflow_id, AGENT_UI_URL="temporal.example.com"
    ) == (
        1,
        "",
        "error: AGENT_UI_URL must be an http:// or https:// address, not 'temporal.example.com'\n",
    )
    assert await starter(server, "status", workflow_id) == (
        1,
        "",
        f"error: {workflow_id}: workflow not found for ID: {workflow_id}\n",
    )


# ---------------------------------------------------------------------------------------------------
# Text from a file or stdin


async def test_start_takes_a_prompt_too_long_for_an_argument_from_a_file(
    server: EmbeddedServer, env: Env, tmp_path: Path, leftovers: list[str]
) -> None:
    prompt = "Summarise this:\n" + "lorem ipsum " * 12_000  # 144 KiB: over Linux's 128 KiB per argument
    (tmp_path / "prompt.txt").write_text(prompt)
    workflow_id = _id("cli-file")
    leftovers.append(workflow_id)

    code, out, err = await starter(
        server,
        "--task-queue",
        env.task_queue,
        "start",
        "--agent",
        "demo",
        "--file",
        str(tmp_path / "prompt.txt"),
        "--id",
        workflow_id,
    )
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"Started {workflow_id}"
    await wait_for_pending(env.client.get_workflow_handle(workflow_id))
    code, out, _ = await starter(server, "history", workflow_id, "--json")
    assert json.loads(out)["messages"][1] == {"kind": "user", "text": prompt}


async def test_send_takes_the_message_from_stdin(server: EmbeddedServer, env: Env) -> None:
    agent = scripted_agent(step("Hello."), step("You said: {user}"), tools=[], chat=True)
    handle = await env.start(conversation(agent))
    await until_state(handle, "idle")

    assert await starter(server, "send", handle.id, "--file", "-", stdin="line one\nline two\n") == (
        0,
        "You said: line one\nline two\n\n",
        "",
    )


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["start", "--agent", "demo"],
            "error: give the prompt as an argument, or with --file PATH (--file - reads stdin)\n",
        ),
        (
            ["start", "hi", "--agent", "demo", "--file", "-"],
            "error: give the prompt as an argument or with --file, not both\n",
        ),
        (
            ["send", "some-id"],
            "error: give the message as an argument, or with --file PATH (--file - reads stdin)\n",
        ),
        (
            ["start", "--agent", "demo", "--file", "no/such/prompt.txt"],
            "error: cannot read --file no/such/prompt.txt: No such file or directory\n",
        ),
    ],
    ids=["no-prompt", "both", "no-message", "missing-file"],
)
async def test_prompt_and_file_exactly_one_of_them(
    server: EmbeddedServer, argv: list[str], error: str
) -> None:
    assert await starter(server, *argv, stdin="") == (1, "", error)


async def test_a_file_that_is_not_utf8_is_refused(server: EmbeddedServer, tmp_path: Path) -> None:
    (tmp_path / "image.bin").write_bytes(b"GIF89a\xff\xfe")
    path = str(tmp_path / "image.bin")
    assert await starter(server, "start", "--agent", "demo", "--file", path) == (
        1,
        "",
        f"error: --file {path} is not UTF-8 text (byte 6)\n",
    )


# ---------------------------------------------------------------------------------------------------
# status without a worker


async def test_status_of_a_finished_conversation_needs_no_worker(
    server: EmbeddedServer, client: Client, tmp_path: Path
) -> None:
    task_queue = _id("tq-cli-status")
    agent = scripted_agent(step("", ("add", {"a": 1, "b": 2})), step("3."))
    looping = scripted_agent(step("", ("add", {"a": 1, "b": 2})), max_iterations=1, on_limit="fail")
    async with running_worker(client, tmp_path, task_queue=task_queue) as worker:
        handle = await worker.start(conversation(agent), workflow_id=_id("cli-status"))
        await handle.result()
        failing = await client.start_workflow(
            AgentWorkflow.run, conversation(looping), id=_id("cli-status-failed"), task_queue=task_queue
        )
        with pytest.raises(WorkflowFailureError):
            await failing.result()

    code, out, err = await starter(server, "status", handle.id)
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "state": "completed",
        "agent": "test-agent",
        "iteration": 2,
        "max_iterations": 0,
        "model_calls": 2,
        "usage": {"input_tokens": 20, "output_tokens": 10},
        "cost": None,
        "pending_approvals": 0,
        "queued_messages": 0,
        "run": 1,
        "detail": "finished: answered",
    }

    code, out, err = await starter(server, "status", failing.id)
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "state": "failed",
        "agent": "test-agent",
        "iteration": 0,
        "max_iterations": 0,
        "model_calls": 0,
        "usage": {"input_tokens": 0, "output_tokens": 0},
        "cost": None,
        "pending_approvals": 0,
        "queued_messages": 0,
        "run": 1,
        "detail": "failed: iteration limit of 1 reached",
    }


async def test_status_of_a_terminated_conversation_says_so_without_a_worker(
    server: EmbeddedServer, client: Client
) -> None:
    handle = await client.start_workflow(
        AgentWorkflow.run, conversation(_answering("never")), id=_id("cli-term"), task_queue=_id("tq-none")
    )
    await handle.terminate(reason="stopped by the operator")

    code, out, err = await starter(server, "status", handle.id)
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "state": "failed",
        "agent": "",
        "iteration": 0,
        "max_iterations": 0,
        "model_calls": 0,
        "usage": {"input_tokens": 0, "output_tokens": 0},
        "cost": None,
        "pending_approvals": 0,
        "queued_messages": 0,
        "run": 1,
        "detail": "terminated: stopped by the operator",
    }


# ---------------------------------------------------------------------------------------------------
# list


async def test_list_has_a_header_aligned_columns_the_agent_status_and_name(
    server: EmbeddedServer, env: Env, leftovers: list[str]
) -> None:
    waiting = await _demo_awaiting_approval(server, env.client, env.task_queue, "cli-list-waiting", leftovers)
    finished = await env.start(conversation(_answering("Done.")), _id("cli-list-done-and-longer"))
    await finished.result()
    stopped = await env.client.start_workflow(
        AgentWorkflow.run,
        conversation(_answering("never")),
        id=_id("cli-list-term"),
        task_queue=_id("tq-none"),
    )
    await stopped.terminate()
    expected = {
        waiting.id: ("awaiting_approval", "demo", "-", "-"),
        finished.id: ("completed", "test-agent", "-", "-"),
        stopped.id: ("terminated", "-", "-", "-"),
    }
    await _visible(env.client, f'WorkflowId = "{waiting.id}" AND AgentStatus = "awaiting_approval"')
    await _visible(env.client, f'WorkflowId = "{finished.id}" AND AgentStatus = "completed"')
    await _visible(env.client, f'WorkflowId = "{stopped.id}" AND ExecutionStatus = "Terminated"')

    code, out, err = await starter(server, "list", "--limit", "1000")

    assert (code, err) == (0, "")
    header, *lines = out.splitlines()
    # Newest first, open or not.
    assert [line.split()[0] for line in lines if line.split()[0] in expected] == [
        stopped.id,
        finished.id,
        waiting.id,
    ]
    assert header.split() == ["WORKFLOW", "ID", "STATUS", "AGENT", "TENANT", "USER", "STARTED"]
    columns = [header.index(name) for name in ("STATUS", "AGENT", "TENANT", "USER", "STARTED")]
    mine = {line.split()[0]: line for line in lines if line.split()[0] in expected}
    assert set(mine) == set(expected)
    for workflow_id, line in mine.items():
        started = (await env.client.get_workflow_handle(workflow_id).describe()).start_time
        cells = [line[start:end].strip() for start, end in zip([0, *columns], [*columns, None], strict=True)]
        assert cells == [workflow_id, *expected[workflow_id], f"{started:%Y-%m-%d %H:%M:%S}Z"]


async def test_list_limit_gives_the_newest_conversations(
    server: EmbeddedServer, env: Env, client: Client, leftovers: list[str]
) -> None:
    older_open = await client.start_workflow(
        AgentWorkflow.run, conversation(_answering("never")), id=_id("cli-older"), task_queue=_id("tq-none")
    )
    leftovers.append(older_open.id)
    newer = await env.start(conversation(_answering("Done.")), _id("cli-newer"))
    await newer.result()
    await _visible(env.client, f'WorkflowId = "{newer.id}" AND AgentStatus = "completed"')

    code, out, err = await starter(server, "list", "--limit", "1")

    assert (code, err) == (0, "")
    assert [line.split()[:2] for line in out.splitlines()] == [
        ["WORKFLOW", "ID"],
        [newer.id, "completed"],
    ]


async def _visible(client: Client, query: str) -> None:
    """Visibility lags behind: wait until the list query finds the workflow."""
    for _ in range(150):
        if [wf async for wf in client.list_workflows(query)]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"nothing matches {query}")


# ---------------------------------------------------------------------------------------------------
# watch


async def test_watch_prints_only_the_new_part_of_a_streamed_answer(
    server: EmbeddedServer, env: Env, fake: FakeProvider
) -> None:
    answer = "The answer is forty-two, computed with care and checked twice."
    fake.queue(openai_stream(openai_completion(answer), delay=0.3))
    spec = AgentSpec(
        name="streamer", model=ModelSettings(provider="openai", model="gpt-4o-mini", stream=True)
    )
    handle = await env.start(ConversationInput(prompt="6 * 7?", agent_spec=spec), _id("cli-watch"))

    code, out, err = await starter(server, "watch", handle.id)

    assert (code, err) == (0, "")
    lines = out.splitlines()
    [typing] = [i for i, line in enumerate(lines) if line.startswith("agent (typing)> ")]
    assert f"agent (typing)> {answer}".startswith(lines[typing])
    # The growing line ends before the transcript shows the answer (a status line may come between).
    assert lines.index(f"[assistant] {answer}") > typing
    assert [line for line in lines if line.startswith("agent (typing)> ")] == [lines[typing]]
    assert lines[-2:] == [
        answer,
        "-- stop reason: completed; iterations: 1; model calls: 1; tool calls: 0; tokens: 100 in / 10 out",
    ]


# ---------------------------------------------------------------------------------------------------
# pending and the arguments digest


async def test_pending_shows_the_digest_and_a_decision_must_match_it(
    server: EmbeddedServer, env: Env, leftovers: list[str]
) -> None:
    handle = await _demo_awaiting_approval(server, env.client, env.task_queue, "cli-digest", leftovers)
    digest = arguments_digest(DEMO_WRITE)

    code, out, err = await starter(server, "pending")
    assert code == 0
    _only_warnings_about_others(err, handle.id)
    header, *lines = out.splitlines()
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
    [mine] = [line for line in lines if line.startswith(f"{handle.id} ")]
    assert mine.split()[:4] == [handle.id, "call_3_0", "write_file", digest]
    assert mine[header.index("DIGEST") :].startswith(digest)
    assert mine[header.index("DECISIONS") :].startswith("approve,edit,reject,remember ")
    assert mine[header.index("ARGUMENTS") :] == json.dumps(DEMO_WRITE)

    assert await starter(server, "approve", handle.id, "call_3_0", "--digest", "0123456789ab") == (
        1,
        "",
        f"error: not approved: call 'call_3_0' has arguments digest {digest}, not 0123456789ab:"
        " look at its arguments again (pending_approvals)\n",
    )
    assert await starter(server, "approve", handle.id, "call_3_0", "--digest", digest, "--by", "alice") == (
        0,
        f"write_file call call_3_0 of {handle.id}: approved by alice\n",
        "",
    )


async def test_pending_lists_the_others_when_a_conversation_s_worker_is_gone(
    server: EmbeddedServer, env: Env, client: Client, tmp_path: Path, leftovers: list[str]
) -> None:
    task_queue = _id("tq-cli-gone")
    async with build_worker(client, task_queue=task_queue, workspace_root=tmp_path / "gone"):
        gone = await _demo_awaiting_approval(server, client, task_queue, "cli-gone", leftovers)
    alive = await _demo_awaiting_approval(server, client, env.task_queue, "cli-alive", leftovers)

    code, out, err = await starter(server, "pending")

    assert code == 0
    assert [line.split()[:3] for line in out.splitlines() if line.startswith(("cli-gone", "cli-alive"))] == [
        [alive.id, "call_3_0", "write_file"]
    ]
    [warning] = [line for line in err.splitlines() if gone.id in line]
    # Its queue was polled moments ago, so the query is made, and nobody answers it.
    assert (
        warning
        == f"warning: {gone.id}: no answer: no worker polling task queue {task_queue} answered within 10 s"
    )
    _only_warnings_about_others(err, alive.id)


def _only_warnings_about_others(err: str, workflow_id: str) -> None:
    """Conversations other tests left waiting may not answer: warnings about those, none about ours."""
    assert all(line.startswith("warning: ") and workflow_id not in line for line in err.splitlines()), err


# ---------------------------------------------------------------------------------------------------
# history


async def test_history_json_of_a_finished_conversation_keeps_the_hook_audit(
    server: EmbeddedServer, env: Env
) -> None:
    agent = _answering("Two.", hooks=HookConfig(user_prompt_submit=["refuse_empty_prompt"]))
    handle = await env.start(conversation(agent, "  what is   1 + 1 "), _id("cli-hooks"))
    result: ConversationResult = await handle.result()
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED

    code, out, err = await starter(server, "history", handle.id, "--json")

    assert (code, err) == (0, "")
    assert json.loads(out)["hooks"] == [
        {"event": "user_prompt_submit", "target": "m1", "hook": "refuse_empty_prompt", "action": "rewrite",
         "reason": "whitespace tidied"},
    ]  # fmt: skip
    assert json.loads(out)["hooks"] == [h.model_dump() for h in result.hooks]
