"""One embedded Temporal dev server for the whole session; a fresh worker and task queue per test."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_agents.activities.tools import ToolRegistry, default_registry
from durable_agents.connection import ensure_search_attributes
from durable_agents.converter import data_converter
from durable_agents.dev_server import EmbeddedServer, start_embedded_server
from durable_agents.stores.postgres import PostgresPayloadDriver, database
from durable_agents.testing import time_skipping_server
from durable_agents.workflows.config import AgentSpec
from tests.support.fake_provider import FakeProvider
from tests.support.postgres import PASSWORD, Postgres, find_binaries
from tests.support.processes import WorkerProcess
from tests.support.workers import Env, running_worker


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


@pytest.fixture
def registry() -> ToolRegistry:
    """Tests may override this fixture to give the worker other tools."""
    return default_registry()


@pytest.fixture
def worker_agents() -> dict[str, AgentSpec] | None:
    """Tests may override this fixture to give the worker other agents (None: the files in agents/)."""
    return None


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """The session's real PostgreSQL server (``durable_agents.testing.postgres``), started once, stopped
    at the end. Without the binaries the tests that need it skip, except in CI (``CI=true``), where
    they fail: CI installs the package (``.ci/run``)."""
    binaries = find_binaries()
    if binaries is None:
        reason = "PostgreSQL server binaries (initdb, pg_ctl) are missing: apt-get install postgresql"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    server = Postgres(binaries, password=PASSWORD)
    try:
        server.init()
        server.start()
        yield server
    finally:
        with contextlib.suppress(RuntimeError):  # never started, or already stopped
            server.stop("immediate")
        shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture(scope="module")
async def database_url(postgres: Postgres) -> str:
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
def worker_process(server: EmbeddedServer, tmp_path: Path) -> Iterator[WorkerProcess]:
    """A worker process (``tests.support.fault_worker``, not started yet) on a fresh task queue, its
    effects in ``tmp_path``; killed after the test."""
    process = WorkerProcess(server.address, f"process-{uuid.uuid4().hex[:10]}", tmp_path / "effects.txt")
    yield process
    process.kill()


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
    async with running_worker(client, tmp_path, registry=registry, agents=worker_agents) as worker:
        before = set(os.environ)
        yield worker
        if added := sorted(set(os.environ) - before - {"PYTEST_CURRENT_TEST"}):
            pytest.fail(f"environment variables added while the worker ran: {added}; give them in `environ`")
