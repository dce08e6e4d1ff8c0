"""docs/approvals.md "Human approval" promises, each through what an operator uses: an agent file with
``default = "require"``, ``decide`` refusing a call past its deadline, the ``decide`` update from
the ``temporal`` CLI, ``AgentStatus`` in ``temporal workflow list --query``, and the
``search-attribute create`` commands a worker prints when it may not register them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import IndexedValueType, UpdateWorkflowExecutionLifecycleStage
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
    RemoveSearchAttributesRequest,
)
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from durable_agents.activities.tools import ToolRegistry, default_registry, tool
from durable_agents.connection import AGENT_PROMPT, SEARCH_ATTRIBUTES
from durable_agents.dev_server import EmbeddedServer, dev_server_flags, temporal_cli
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import ApprovalPolicy
from durable_agents.workflows.records import Decision
from tests.support.cli import temporal
from tests.support.conversations import wait_for_pending
from tests.support.history import activity_types
from tests.support.paths import ROOT
from tests.support.workers import Env, running_worker

KEYWORD = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD


async def test_default_require_makes_every_tool_wait_unless_listed_in_auto(
    client: Client, tmp_path: Path
) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "careful.toml").write_text(
        textwrap.dedent(
            """\
            name = "careful"
            tools = ["add", "multiply", "subtract"]

            [model]
            provider = "scripted"
            model = "script"

            [[model.script]]
            tool_calls = [
              { name = "add", arguments = { a = 1, b = 2 } },
              { name = "multiply", arguments = { a = 3, b = 4 } },
              { name = "subtract", arguments = { a = 9, b = 5 } },
            ]

            [[model.script]]
            text = "{last_result}"

            [approval]
            default = "require"
            auto = ["add"]
            """
        )
    )
    async with running_worker(client, tmp_path, agents_dir=agents) as worker:
        handle = await worker.start(ConversationInput(prompt="go", agent="careful"))
        pending = await wait_for_pending(handle, 2)
        assert [(p.call_id, p.tool) for p in pending] == [("call_1_1", "multiply"), ("call_1_2", "subtract")]
        for record in pending:
            await handle.execute_update(
                AgentWorkflow.decide, Decision(call_id=record.call_id, approve=True, by="alice")
            )
        result = await handle.result()
    assert result.final_text == "3, 12, 4"
    assert [(a.call_id, a.tool, a.state) for a in result.approvals] == [
        ("call_1_1", "multiply", "approved"),
        ("call_1_2", "subtract", "approved"),
    ]


async def test_decide_refuses_a_call_past_its_deadline_even_before_the_timer_fired(
    client: Client, tmp_path: Path
) -> None:
    """The worker is away when the deadline passes; a late approval arrives with the timer's task."""
    queue = f"late-{uuid.uuid4().hex[:8]}"
    agent = scripted_agent(
        step("", ("write_file", {"path": "late.txt", "content": "x"})),
        step("{last_result}"),
        tools=["write_file"],
    )
    policy = ApprovalPolicy(tool_deadlines={"write_file": 6.0})  # the worker is gone well before
    async with running_worker(client, tmp_path, task_queue=queue) as worker:
        handle = await worker.start(conversation(agent, approval=policy))
        [record] = await wait_for_pending(handle)
    assert record.deadline is not None
    while datetime.now(UTC) <= record.deadline:
        await asyncio.sleep(0.1)
    # The server holds the late decision before any worker is back: the next workflow task carries
    # it together with the deadline's timer.
    late = asyncio.create_task(
        handle.execute_update(
            AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="alice"), id="late-decision"
        )
    )
    await _admitted(client, handle.id, "late-decision")
    async with running_worker(client, tmp_path, task_queue=queue):
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await late
        result = await handle.result()

    assert refused.value.cause.message == "call 'call_1_0' is past its approval deadline"
    [audit] = result.approvals
    assert (audit.state, audit.by, audit.via) == ("timed_out", "system", "deadline")
    assert result.final_text == "Tool call 'write_file' was rejected by system: approval timed out"
    assert "durable_agents.run_tool" not in await activity_types(handle)
    assert list(tmp_path.rglob("late.txt")) == []


async def _admitted(client: Client, workflow_id: str, update_id: str) -> None:
    """Wait until the server holds the update ``update_id`` (no worker has seen it yet)."""
    request = PollWorkflowExecutionUpdateRequest(
        namespace=client.namespace,
        update_ref=UpdateRef(
            workflow_execution=WorkflowExecution(workflow_id=workflow_id), update_id=update_id
        ),
        wait_policy=WaitPolicy(
            lifecycle_stage=UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
        ),
    )
    for _ in range(200):
        try:
            await client.workflow_service.poll_workflow_execution_update(request)
            return
        except RPCError as e:
            if e.status != RPCStatusCode.NOT_FOUND:
                raise
        await asyncio.sleep(0.05)
    raise AssertionError(f"the server never admitted update {update_id}")


async def test_decide_through_the_temporal_cli_refuses_then_approves(
    env: Env, server: EmbeddedServer
) -> None:
    agent = scripted_agent(
        step("", ("write_file", {"path": "cli.txt", "content": "from the cli"})),
        step("{last_result}"),
        tools=["write_file"],
    )
    handle = await env.start(conversation(agent))
    await wait_for_pending(handle)

    async def decide(decision: dict) -> subprocess.CompletedProcess[str]:
        return await temporal(
            server,
            "workflow", "update", "execute", "--workflow-id", handle.id, "--name", "decide",
            "--input", json.dumps(decision), "--output", "json",
        )  # fmt: skip

    refused = await decide({"call_id": "call_9_9", "approve": True, "by": "alice"})
    assert refused.returncode == 1
    assert "no approval is pending for call 'call_9_9' (pending: call_1_0)" in refused.stderr

    approved = await decide({"call_id": "call_1_0", "approve": True, "by": "alice", "reason": "ok"})
    assert approved.returncode == 0, approved.stderr
    answer = json.loads(approved.stdout)["result"]
    assert (answer["call_id"], answer["state"], answer["by"], answer["via"]) == (
        "call_1_0",
        "approved",
        "alice",
        "update",
    )

    result = await handle.result()
    assert result.final_text == "Wrote 12 bytes to cli.txt."
    assert [(a.state, a.by, a.reason, a.via) for a in result.approvals] == [
        ("approved", "alice", "ok", "update")
    ]


async def _listed(server: EmbeddedServer, query: str, attempts: int = 150) -> list[str]:
    """Workflow ids ``temporal workflow list --query`` shows, once it shows any (visibility lags)."""
    for _ in range(attempts):
        listed = await temporal(server, "workflow", "list", "--query", query, "-o", "json")
        assert listed.returncode == 0, listed.stderr
        ids = [wf["execution"]["workflowId"] for wf in json.loads(listed.stdout or "[]")]
        if ids:
            return ids
        await asyncio.sleep(0.1)
    return []


class TestAgentStatus:
    @pytest.fixture
    def gate(self) -> asyncio.Event:
        return asyncio.Event()

    @pytest.fixture
    def registry(self, gate: asyncio.Event) -> ToolRegistry:
        @tool
        async def wait_for_gate() -> str:
            """Wait until the test opens the gate."""
            await gate.wait()
            return "through"

        return default_registry(wait_for_gate)

    async def test_running_while_a_tool_runs(
        self, env: Env, server: EmbeddedServer, gate: asyncio.Event
    ) -> None:
        agent = scripted_agent(
            step("", ("wait_for_gate", {})), step("{last_result}"), tools=["wait_for_gate"]
        )
        handle = await env.start(conversation(agent))
        running = await _listed(server, f'WorkflowId = "{handle.id}" AND AgentStatus = "running"')
        gate.set()
        assert running == [handle.id]
        assert (await handle.result()).final_text == "through"
        assert await _listed(server, f'WorkflowId = "{handle.id}" AND AgentStatus = "completed"') == [
            handle.id
        ]

    async def test_failed_when_the_conversation_fails(self, env: Env, server: EmbeddedServer) -> None:
        agent = scripted_agent(step("", ("add", {"a": 1, "b": 1})), max_iterations=1, on_limit="fail")
        handle = await env.start(conversation(agent))
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        assert await _listed(server, f'WorkflowId = "{handle.id}" AND AgentStatus = "failed"') == [handle.id]


@pytest.fixture
async def bare_server() -> AsyncIterator[Client]:
    """A dev server of its own, started without our search attributes (as any other server is)."""
    env = await WorkflowEnvironment.start_local(
        ip="127.0.0.1",
        ui=False,
        dev_server_existing_path=temporal_cli(),
        dev_server_extra_args=dev_server_flags(),
    )
    yield env.client
    await env.shutdown()


def _worker_process(address: str) -> subprocess.Popen[str]:
    env = os.environ | {
        "TEMPORAL_ADDRESS": address,
        "AGENT_TASK_QUEUE": f"bare-{uuid.uuid4().hex[:8]}",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("AGENT_ENCRYPTION_KEY", None)
    return subprocess.Popen(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def _until_running(worker: subprocess.Popen[str]) -> tuple[str, str]:
    """Read the worker's stdout until it says it runs; then stop it (SIGTERM, by PID). Its running
    line and all it wrote to stderr."""
    assert worker.stdout is not None
    lines: list[str] = []
    try:
        while line := await asyncio.to_thread(worker.stdout.readline):
            lines.append(line)
            if line.startswith("Worker (all) running"):
                break
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        try:
            _, err = worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            _, err = worker.communicate()
    running = lines[-1] if lines else ""
    assert running.startswith("Worker (all) running"), f"the worker did not start: {''.join(lines)} {err}"
    return running, err


async def _custom_attributes(client: Client) -> dict[str, int]:
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace="default")
    )
    return dict(listed.custom_attributes)


async def test_a_worker_registers_the_search_attributes_a_server_lacks(bare_server: Client) -> None:
    address = bare_server.service_client.config.target_host
    assert "AgentStatus" not in await _custom_attributes(bare_server)
    await _until_running(_worker_process(address))
    attributes = await _custom_attributes(bare_server)
    assert (attributes["AgentStatus"], attributes["AgentName"]) == (KEYWORD, KEYWORD)


async def test_a_worker_that_may_not_register_agent_prompt_alone_starts_and_warns_with_the_command(
    bare_server: Client,
) -> None:
    address = bare_server.service_client.config.target_host
    # Ours registered but AgentPromptWords, and every KeywordList slot of the server's visibility store taken.
    ours = {key.name: key.indexed_value_type for key in SEARCH_ATTRIBUTES if key != AGENT_PROMPT}
    others = {f"OtherList{i}": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST for i in range(3)}
    await bare_server.operator_service.add_search_attributes(
        AddSearchAttributesRequest(namespace="default", search_attributes=ours | others)
    )
    running, err = await _until_running(_worker_process(address))
    assert running.startswith("Worker (all) running on task queue")
    assert "AgentPromptWords" not in await _custom_attributes(bare_server)
    warning = err[err.index("WARNING durable_agents.connection: ") :].splitlines()
    assert warning[0].startswith(
        "WARNING durable_agents.connection: the namespace 'default' lacks the search attributes"
        " AgentPromptWords and this worker may not add them ("
    )
    assert warning[1:3] == [
        "  temporal operator search-attribute create --namespace default --type KeywordList"
        " --name AgentPromptWords",
        "(until then conversations start without them)",
    ]


async def test_a_worker_that_may_not_register_them_prints_the_commands_that_do(bare_server: Client) -> None:
    address = bare_server.service_client.config.target_host
    # Every Keyword slot of the server's visibility store taken: adding ours fails, as it does for a
    # worker without the permission.
    others = {f"Other{i}": KEYWORD for i in range(10)}
    await bare_server.operator_service.add_search_attributes(
        AddSearchAttributesRequest(namespace="default", search_attributes=others)
    )
    worker = _worker_process(address)
    try:
        _, err = await asyncio.to_thread(worker.communicate, timeout=60)
    finally:
        if worker.poll() is None:  # it should have stopped by itself
            worker.kill()
            worker.communicate()
    assert worker.returncode == 2
    first, *rest = err.splitlines()
    assert first.startswith(
        "worker: the namespace 'default' lacks the search attributes AgentStatus, AgentName, AgentParent,"
        " AgentForkOf, AgentTenant, AgentUser, AgentCost, AgentPromptWords and this worker may not add them ("
    )
    commands = [
        "  temporal operator search-attribute create --namespace default --type Keyword --name AgentStatus",
        "  temporal operator search-attribute create --namespace default --type Keyword --name AgentName",
        "  temporal operator search-attribute create --namespace default --type Keyword --name AgentParent",
        "  temporal operator search-attribute create --namespace default --type Keyword --name AgentForkOf",
        "  temporal operator search-attribute create --namespace default --type Keyword --name AgentTenant",
        "  temporal operator search-attribute create --namespace default --type Keyword --name AgentUser",
        "  temporal operator search-attribute create --namespace default --type Double --name AgentCost",
        "  temporal operator search-attribute create --namespace default --type KeywordList"
        " --name AgentPromptWords",
    ]
    assert first.endswith("). Ask an operator to run:")
    assert rest == [*commands, "(on Temporal Cloud: tcld namespace search-attributes add, or the Cloud UI)"]

    # The operator makes room and runs exactly what was printed; the worker then starts.
    await bare_server.operator_service.remove_search_attributes(
        RemoveSearchAttributesRequest(
            namespace="default", search_attributes=[f"Other{i}" for i in range(len(commands))]
        )
    )
    for command in commands:
        program, *args = command.split()
        assert program == "temporal"
        ran = await temporal(address, *args)
        assert ran.returncode == 0, ran.stderr
    attributes = await _custom_attributes(bare_server)
    assert (attributes["AgentStatus"], attributes["AgentName"]) == (KEYWORD, KEYWORD)
    assert attributes["AgentCost"] == IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE
    assert attributes["AgentPromptWords"] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST
    running, _ = await _until_running(_worker_process(address))
    assert running.startswith("Worker (all) running on task queue")
