"""One embedded Temporal dev server for the whole session; a fresh worker and task queue per test."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from activities.tools import ToolRegistry, default_registry
from durable_agents import starter_cli as starter
from durable_agents.connection import ensure_search_attributes
from durable_agents.converter import data_converter
from durable_agents.dev_server import EmbeddedServer, start_embedded_server
from durable_agents.plugin import build_worker
from durable_agents.testing import time_skipping_server
from stores.postgres import PostgresPayloadDriver, database
from stores.workspaces import folder_name
from tests.support.fake_provider import FakeProvider
from tests.support.postgres import Postgres, postgres  # noqa: F401  (the session's PostgreSQL server fixture)
from workflows.agent import AgentWorkflow
from workflows.api import ConversationInput, ConversationResult
from workflows.config import AgentSpec
from workflows.records import ApprovalRecord


@pytest.fixture(scope="session", autouse=True)
def _worker_files(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Workers built without explicit paths keep their store and workspaces out of the repo."""
    root = tmp_path_factory.mktemp("worker")
    os.environ["AGENT_DATA_DIR"] = str(root)
    os.environ["AGENT_STORE"] = str(root / "conversations.db")
    os.environ["AGENT_WORKSPACE"] = str(root / "workspace")
    os.environ["AGENT_PAYLOAD_STORE"] = str(root / "payloads.db")
    os.environ["AGENT_IDEMPOTENCY_STORE"] = str(root / "idempotency.db")


@pytest.fixture(scope="session")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[EmbeddedServer]:
    srv = await start_embedded_server(
        port=None, ui=False, db_file=tmp_path_factory.mktemp("temporal") / "t.db"
    )
    # Set before any worker runs: tests that point the starter at this server then change a value
    # instead of adding a variable while a worker reads the environment (see ``env``).
    os.environ["TEMPORAL_ADDRESS"] = srv.address
    yield srv
    await srv.stop()


@pytest.fixture(scope="session")
def client(server: EmbeddedServer) -> Client:
    return server.client


@pytest.fixture(scope="session")
async def time_skipping() -> AsyncIterator[WorkflowEnvironment]:
    """Temporal's time-skipping test server: a 24 h deadline passes in moments."""
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter(), test_server_existing_path=time_skipping_server()
    )
    await ensure_search_attributes(env.client)
    yield env
    await env.shutdown()


@dataclass
class Env:
    client: Client
    task_queue: str
    workspace: Path

    async def start(self, conversation: ConversationInput, workflow_id: str | None = None) -> WorkflowHandle:
        return await self.client.start_workflow(
            AgentWorkflow.run,
            conversation,
            id=workflow_id or f"test-{uuid.uuid4().hex[:10]}",
            task_queue=self.task_queue,
        )

    async def run(self, conversation: ConversationInput) -> ConversationResult:
        return await (await self.start(conversation)).result()


def workspace_of(root: Path, handle: WorkflowHandle) -> Path:
    """The conversation's workspace folder under ``root``: keyed by workflow id and first run id."""
    assert handle.first_execution_run_id, "needs the handle start_workflow returned"
    return root / folder_name(f"{handle.id}/{handle.first_execution_run_id}")


@pytest.fixture
def registry() -> ToolRegistry:
    """Tests may override this fixture to give the worker other tools."""
    return default_registry()


@pytest.fixture
def worker_agents() -> dict[str, AgentSpec] | None:
    """Tests may override this fixture to give the worker other agents (None: the files in agents/)."""
    return None


@pytest.fixture(scope="module")
async def database_url(postgres: Postgres) -> str:  # noqa: F811
    """A fresh database on the session's PostgreSQL server, for one test module."""
    return await postgres.new_database()


@pytest.fixture
async def shared(server: EmbeddedServer, database_url: str) -> Client:
    """A client whose large payloads go to the shared database, as the starter's on any host."""
    return await Client.connect(
        server.address,
        data_converter=data_converter(payload_driver=PostgresPayloadDriver(database(database_url))),
    )


@pytest.fixture
def environ() -> dict[str, str]:
    """Tests may override this fixture to give the worker environment variables (see ``env``)."""
    return {}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    """A fake provider speaking OpenAI's and Anthropic's wire protocols, both SDKs pointed at it.
    With ``env``, it is set up before the worker starts (see there), whatever the test's order."""
    with FakeProvider() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        yield server


@pytest.fixture
async def env(
    client: Client,
    registry: ToolRegistry,
    worker_agents: dict[str, AgentSpec] | None,
    environ: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Env]:
    """A worker on a fresh task queue, started after ``environ`` (and ``fake``'s variables, when the
    test uses it) is in the process environment.

    Never add a variable to the environment while a worker starts: its core threads read the
    environment (``getenv``) as they start, and glibc's ``setenv`` may free the array they read
    (the test process then dies of a segmentation fault). Changing the value of one set already is safe.
    """
    if "fake" in request.fixturenames:
        request.getfixturevalue("fake")
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    async with build_worker(
        client, task_queue=task_queue, registry=registry, agents=worker_agents, workspace_root=tmp_path
    ):
        before = set(os.environ)
        yield Env(client=client, task_queue=task_queue, workspace=tmp_path)
        if added := sorted(set(os.environ) - before - {"PYTEST_CURRENT_TEST"}):
            pytest.fail(f"environment variables added while the worker ran: {added}; give them in `environ`")


async def starter_cli(env: Env, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``starter.py ARGV`` against the session's server and ``env``'s task queue: (code, stdout, stderr)."""
    code = await starter.run(["--task-queue", env.task_queue, *argv])
    out, err = capsys.readouterr()
    return code, out, err


async def activity_calls(handle: WorkflowHandle) -> list[tuple[str, bool]]:
    """(activity name, ran locally) in the order they were scheduled: server-scheduled ones by their
    ActivityTaskScheduled event, local ones by their marker."""
    calls = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            calls.append((event.activity_task_scheduled_event_attributes.activity_type.name, False))
        elif event.marker_recorded_event_attributes.marker_name == "core_local_activity":
            [data] = event.marker_recorded_event_attributes.details["data"].payloads
            calls.append((json.loads(data.data)["activity_type"], True))
    return calls


async def activity_types(handle: WorkflowHandle) -> list[str]:
    """Activity names in the order they were scheduled (local ones too), from history."""
    return [name for name, _ in await activity_calls(handle)]


async def last_attempts(handle: WorkflowHandle) -> dict[str, int]:
    """Each activity type's highest attempt (a started event records the attempt that ended)."""
    names: dict[int, str] = {}
    attempts: dict[str, int] = {}
    async for e in handle.fetch_history_events():
        if e.HasField("activity_task_scheduled_event_attributes"):
            names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.HasField("activity_task_started_event_attributes"):
            started = e.activity_task_started_event_attributes
            name = names[started.scheduled_event_id]
            attempts[name] = max(attempts.get(name, 0), started.attempt)
    return attempts


async def event_types(handle: WorkflowHandle) -> list[int]:
    return [event.event_type async for event in handle.fetch_history_events()]


async def wait_for_pending(
    handle: WorkflowHandle, count: int = 1, timeout: float = 10.0
) -> list[ApprovalRecord]:
    """Poll the ``pending_approvals`` query until ``count`` approvals wait."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        pending = await handle.query(AgentWorkflow.pending_approvals)
        if len(pending) >= count:
            return pending
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"expected {count} pending approvals, have {len(pending)}")
        await asyncio.sleep(0.05)
