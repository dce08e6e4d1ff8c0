"""Crash tests against real processes: SIGKILLed workers, a SIGKILLed dev server, a soak.

Each test prints the recovery figures it measured (run with ``-s`` to see them);
the README's Guarantees section quotes them.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client, WorkflowHandle

from connection import (
    SEARCH_ATTRIBUTES,
    EmbeddedServer,
    data_converter,
    dev_server_flags,
    temporal_cli,
)
from tests.conftest import conversation, scripted_agent, step, wait_for_pending
from tests.processes import WorkerProcess
from workflows.agent import AgentWorkflow
from workflows.messages import ScriptStep
from workflows.models import ApprovalPolicy, ApprovalSignal, Decision

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def workers(server: EmbeddedServer, tmp_path: Path) -> Iterator[tuple[WorkerProcess, Path]]:
    effects = tmp_path / "effects.txt"
    process = WorkerProcess(server.address, f"faults-{uuid.uuid4().hex[:8]}", effects)
    yield process, effects
    process.kill()


async def _start(client: Client, worker: WorkerProcess, agent, **kwargs) -> WorkflowHandle:
    return await client.start_workflow(
        AgentWorkflow.run,
        conversation(agent, **kwargs),
        id=f"fault-{uuid.uuid4().hex[:8]}",
        task_queue=worker._env["AGENT_TASK_QUEUE"],
    )


async def _running_activity(handle: WorkflowHandle, name: str, attempt: int = 1, timeout: float = 60):
    """The pending activity ``name`` once an attempt >= ``attempt`` has started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pending in (await handle.describe()).raw_description.pending_activities:
            if (
                pending.activity_type.name == name
                and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                and pending.attempt >= attempt
            ):
                return pending
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} attempt {attempt} never started")


async def _no_task_failures(handle: WorkflowHandle) -> None:
    failed = [
        e
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert failed == []


async def test_worker_killed_during_a_model_call(client: Client, workers) -> None:
    worker, _ = workers
    worker.start()
    agent = scripted_agent(
        step("", ("add", {"a": 20, "b": 22})),
        ScriptStep(text="The answer is {last_result}.", delay_seconds=4),
    )
    handle = await _start(client, worker, agent)
    await _running_activity(handle, "call_model")  # the first, quick call may still be running
    await _running_activity_after_tool(handle)
    worker.kill()
    spawned = worker.start()
    retry = await _running_activity(handle, "call_model", attempt=2)
    recovery = retry.last_started_time.ToDatetime().timestamp() - spawned

    assert (await handle.result()).final_text == "The answer is 42."
    await _no_task_failures(handle)
    print(f"\nrecovery after kill during model call: {recovery:.2f}s")
    assert recovery < 10


async def _running_activity_after_tool(handle: WorkflowHandle) -> None:
    """Wait for the second model call (the slow one) to be running."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        names = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ]
        if names.count("call_model") == 2:
            await _running_activity(handle, "call_model")
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the second model call never started")


async def test_worker_killed_during_a_slow_tool(client: Client, workers) -> None:
    worker, _ = workers
    worker.start()
    agent = scripted_agent(
        step("", ("slow_step", {"seconds": 4})), step("{last_result}"), tools=["slow_step"]
    )
    handle = await _start(client, worker, agent)
    await _running_activity(handle, "run_tool")
    worker.kill()
    spawned = worker.start()
    retry = await _running_activity(handle, "run_tool", attempt=2)
    recovery = retry.last_started_time.ToDatetime().timestamp() - spawned

    assert (await handle.result()).final_text == "slept 4s"
    await _no_task_failures(handle)
    print(f"\nrecovery after kill during slow tool: {recovery:.2f}s")
    assert recovery < 10


async def test_worker_killed_while_waiting_for_approval(client: Client, workers) -> None:
    worker, _ = workers
    worker.start()
    agent = scripted_agent(step("", ("write_file", {"path": "a.txt", "content": "a"})), step("{last_result}"))
    agent.tools.append("write_file")
    handle = await _start(client, worker, agent)
    await wait_for_pending(handle)
    worker.kill()
    spawned = worker.start()
    await handle.execute_update(AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="alice"))
    recovery = time.time() - spawned

    assert (await handle.result()).final_text == "Wrote 1 bytes to a.txt."
    print(f"\ndecision taken {recovery:.2f}s after the replacement worker spawned")
    assert recovery < 10


async def test_effect_is_applied_once_when_the_worker_dies_after_it(client: Client, workers) -> None:
    worker, effects = workers
    worker.start(FAULT_AFTER_EFFECT="20")
    agent = scripted_agent(step("", ("charge", {"amount": 30})), step("{last_result}"), tools=["charge"])
    handle = await _start(client, worker, agent)
    deadline = time.monotonic() + 30
    while not (effects.exists() and effects.read_text()):  # the card is charged; the activity is not done
        assert time.monotonic() < deadline, "the tool never charged"
        await asyncio.sleep(0.05)
    worker.kill()
    worker.start(FAULT_AFTER_EFFECT="0")
    result = await handle.result()

    assert result.final_text == "charged 30 EUR"
    assert effects.read_text() == f"{handle.id}/{handle.first_execution_run_id}/call_1_0 30\n"
    attempts = [
        e.activity_task_started_event_attributes.attempt
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert max(attempts) >= 2  # the tool really ran twice, and charged once


async def test_soak_50_conversations_survive_repeated_worker_kills(client: Client, workers) -> None:
    worker, _ = workers
    worker.start()
    rng = random.Random(7)
    agent = scripted_agent(
        ScriptStep.model_validate(
            {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}], "delay_seconds": 0.3}
        ),
        step("", ("slow_step", {"seconds": 1})),
        ScriptStep(text="{last_result} after 3", delay_seconds=0.3),
        tools=["add", "slow_step"],
    )
    handles = await asyncio.gather(*(_start(client, worker, agent) for _ in range(50)))
    for _ in range(3):
        await asyncio.sleep(rng.uniform(1.0, 3.0))
        worker.kill()
        worker.start()
    results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), timeout=240)

    assert [r.final_text for r in results] == ["slept 1s after 3"] * 50
    assert len({h.id for h in handles}) == 50
    for handle in handles:
        await _no_task_failures(handle)


class DevServerProcess:
    """``temporal server start-dev`` with a SQLite file, killable with SIGKILL and restartable."""

    def __init__(self, db_file: Path, port: int) -> None:
        self.address = f"127.0.0.1:{port}"
        self._command = [
            temporal_cli(), "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port),
            "--db-filename", str(db_file), "--log-level", "error",
            *[arg for key in SEARCH_ATTRIBUTES for arg in ("--search-attribute", f"{key.name}=Keyword")],
            *dev_server_flags(),
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.proc = subprocess.Popen(self._command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                client = await Client.connect(self.address)
                await client.workflow_service.get_system_info(GetSystemInfoRequest())
                return
            except Exception:
                await asyncio.sleep(0.2)
        raise AssertionError("the dev server did not start")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
async def dev_server(tmp_path: Path) -> AsyncIterator[DevServerProcess]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = DevServerProcess(tmp_path / "server.db", port)
    await process.start()
    yield process
    process.kill()


async def test_dev_server_killed_and_restarted_mid_conversation(
    dev_server: DevServerProcess, tmp_path: Path
) -> None:
    worker = WorkerProcess(dev_server.address, "server-kill", tmp_path / "effects.txt")
    worker.start()
    try:
        client = await Client.connect(dev_server.address, data_converter=data_converter())
        agent = scripted_agent(
            step("", ("add", {"a": 1, "b": 2})),
            step("", ("write_file", {"path": "a.txt", "content": "a"})),
            step("{last_result}"),
            tools=["add", "write_file"],
            approval=ApprovalPolicy(deadline=3600),
        )
        handle = await _start(client, worker, agent)
        [before] = await wait_for_pending(handle)

        dev_server.kill()
        await dev_server.start()
        client = await Client.connect(dev_server.address, data_converter=data_converter())
        handle = client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
        [after] = await wait_for_pending(handle, timeout=60)
        assert after == before  # same call, same deadline
        assert after.deadline - after.requested_at == timedelta(hours=1)

        await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id=after.call_id, by="alice"))
        result = await asyncio.wait_for(handle.result(), timeout=120)
        assert result.final_text == "Wrote 1 bytes to a.txt."
        assert [c.content for c in result.tool_calls] == ["3", "Wrote 1 bytes to a.txt."]
    finally:
        worker.kill()
