"""Model and tool calls on their own task queues, and a queue-wide rate limit on model calls."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from connection import EmbeddedServer
from tests.conftest import conversation, scripted_agent, step
from tests.fake_provider import FakeProvider, Reply
from tests.processes import WorkerProcess
from workflows.agent import AgentWorkflow
from workflows.messages import ModelSettings

DATA = Path(__file__).parent / "data"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        yield server


@pytest.fixture
def pools(server: EmbeddedServer, tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Start worker processes with ``spawn(task_queue, role, rate)``; all are killed at the end."""
    started: list[WorkerProcess] = []

    def spawn(task_queue: str, role: str, rate: float | None = None) -> None:
        env = {"AGENT_WORKER_ROLE": role} | ({"AGENT_RATE_LIMIT": str(rate)} if rate else {})
        process = WorkerProcess(server.address, task_queue, tmp_path / "effects.txt", **env)
        process.start()
        started.append(process)

    yield spawn  # type: ignore[misc]
    for process in started:
        process.kill()


async def test_model_and_tool_calls_run_on_their_own_worker_processes(client: Client, pools) -> None:
    loop, models, tools = (f"{name}-{uuid.uuid4().hex[:6]}" for name in ("loop", "models", "tools"))
    pools(loop, "workflows")
    pools(models, "models")
    pools(tools, "tools")
    agent = scripted_agent(step("", ("add", {"a": 2, "b": 3})), step("{last_result}"))
    agent = agent.model_copy(update={"model_task_queue": models, "tool_task_queue": tools})
    handle = await client.start_workflow(
        AgentWorkflow.run, conversation(agent), id=f"split-{uuid.uuid4().hex[:6]}", task_queue=loop
    )
    assert (await handle.result()).final_text == "5"
    scheduled = [
        e.activity_task_scheduled_event_attributes
        async for e in handle.fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    queues = {a.activity_type.name: a.task_queue.name for a in scheduled}
    assert queues == {"resolve_agent": loop, "call_model": models, "run_tool": tools}


async def test_rate_limit_holds_across_two_model_worker_processes_under_a_burst(
    client: Client, fake: FakeProvider, pools
) -> None:
    loop, models = f"loop-{uuid.uuid4().hex[:6]}", f"models-{uuid.uuid4().hex[:6]}"
    pools(loop, "workflows")
    pools(models, "models", rate=3)
    pools(models, "models", rate=3)
    answer = json.loads((DATA / "openai_text_response.json").read_text())
    fake.queue(*[Reply(body=answer) for _ in range(12)])
    agent = scripted_agent(step("unused"), tools=[]).model_copy(
        update={"model": ModelSettings(provider="openai", model="gpt-4o-mini"), "model_task_queue": models}
    )
    handles = [
        await client.start_workflow(
            AgentWorkflow.run, conversation(agent), id=f"burst-{uuid.uuid4().hex[:6]}", task_queue=loop
        )
        for _ in range(12)
    ]
    results = [await h.result() for h in handles]

    assert [r.final_text for r in results] == ["12 + 30 = 42."] * 12
    times = sorted(r.at for r in fake.received)
    # Temporal's limiter is a token bucket: up to `rate` calls may go at once, then `rate` a second.
    after_burst = times[3:]
    rate = (len(after_burst) - 1) / (after_burst[-1] - after_burst[0])
    print(f"\nmodel calls per second under the burst: {rate:.2f} (limit 3)")
    assert rate <= 3.3
