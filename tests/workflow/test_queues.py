"""Model and tool calls on their own task queues, and a queue-wide rate limit on model calls."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import RateLimitSource, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.messages import ModelSettings
from tests.support.fake_provider import FakeProvider, Reply
from tests.support.paths import DATA
from tests.support.processes import WorkerProcess


@pytest.fixture
def pools(server: EmbeddedServer, tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Start worker processes with ``spawn(task_queue, role, rate)``; all are killed at the end."""
    started: list[WorkerProcess] = []

    def spawn(task_queue: str, role: str, rate: float | None = None) -> WorkerProcess:
        env = {"AGENT_WORKER_ROLE": role} | ({"AGENT_RATE_LIMIT": str(rate)} if rate else {})
        process = WorkerProcess(server.address, task_queue, tmp_path / "effects.txt", **env)
        process.start()
        started.append(process)
        return process

    yield spawn  # type: ignore[misc]
    for process in started:
        process.kill()


async def test_model_and_tool_calls_run_on_their_own_worker_processes(client: Client, pools) -> None:
    loop, models, tools = (f"{name}-{uuid.uuid4().hex}" for name in ("loop", "models", "tools"))
    pools(loop, "workflows")
    pools(models, "models")
    pools(tools, "tools")
    agent = scripted_agent(step("", ("add", {"a": 2, "b": 3})), step("{last_result}"))
    agent = agent.model_copy(update={"model_task_queue": models, "tool_task_queue": tools})
    handle = await client.start_workflow(
        AgentWorkflow.run, conversation(agent), id=f"split-{uuid.uuid4().hex}", task_queue=loop
    )
    assert (await handle.result()).final_text == "5"
    scheduled = [
        e.activity_task_scheduled_event_attributes
        async for e in handle.fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    queues = {a.activity_type.name: a.task_queue.name for a in scheduled}
    # resolve_agent is a local activity: it runs in the loop's workflow task, on no queue
    assert queues == {"durable_agents.call_model": models, "durable_agents.run_tool": tools}


async def test_rate_limit_holds_across_two_model_worker_processes_under_a_burst(
    client: Client, fake: FakeProvider, pools
) -> None:
    loop, models = f"loop-{uuid.uuid4().hex}", f"models-{uuid.uuid4().hex}"
    pools(loop, "workflows")
    model_workers = [pools(models, "models", rate=3), pools(models, "models", rate=3)]
    answer = json.loads((DATA / "openai_text_response.json").read_text())
    # A reply for every attempt the 12 calls may make (5 each): a loaded machine retries some.
    fake.queue(*[Reply(body=answer) for _ in range(12 * 5)])
    agent = scripted_agent(step("unused"), tools=[]).model_copy(
        update={"model": ModelSettings(provider="openai", model="gpt-4o-mini"), "model_task_queue": models}
    )
    handles = [
        await client.start_workflow(
            AgentWorkflow.run, conversation(agent), id=f"burst-{uuid.uuid4().hex}", task_queue=loop
        )
        for _ in range(12)
    ]
    results = [await h.result() for h in handles]

    assert [r.final_text for r in results] == ["12 + 30 = 42."] * 12
    # Every model call went through the rate-limited queue, to one of its two workers...
    identities = {f"{w.proc.pid}@{socket.gethostname()}" for w in model_workers}
    attempts = 0
    for handle in handles:
        [(queue, attempt)] = await _model_calls(handle)
        assert queue == models
        assert await _model_call_identities(handle) <= identities
        attempts += attempt
    assert len(fake.received) == attempts  # the provider saw each attempt once (12 unless one was retried)
    # ... and the server holds that queue to the workers' 3 a second, for both of them together
    # (the calls per second it let through are measured by bench/run.py, not asserted here).
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=models),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            report_config=True,
        )
    )
    limit = described.effective_rate_limit
    assert (limit.requests_per_second, limit.rate_limit_source) == (
        3.0,
        RateLimitSource.RATE_LIMIT_SOURCE_WORKER,
    )


async def _model_calls(handle) -> list[tuple[str, int]]:
    """Each ``call_model``: the task queue it was scheduled on and its attempt that ended."""
    queues: dict[int, str] = {}
    calls = []
    async for e in handle.fetch_history_events():
        if e.HasField("activity_task_scheduled_event_attributes"):
            scheduled = e.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name == "durable_agents.call_model":
                queues[e.event_id] = scheduled.task_queue.name
        elif e.HasField("activity_task_started_event_attributes"):
            started = e.activity_task_started_event_attributes
            if started.scheduled_event_id in queues:
                calls.append((queues[started.scheduled_event_id], started.attempt))
    return calls


async def _model_call_identities(handle) -> set[str]:
    """The worker identities that ran the conversation's activities of type ``call_model``."""
    model_calls = set()
    found = set()
    async for e in handle.fetch_history_events():
        if e.HasField("activity_task_scheduled_event_attributes"):
            if e.activity_task_scheduled_event_attributes.activity_type.name == "durable_agents.call_model":
                model_calls.add(e.event_id)
        elif e.HasField("activity_task_started_event_attributes"):
            started = e.activity_task_started_event_attributes
            if started.scheduled_event_id in model_calls:
                found.add(started.identity)
    return found
