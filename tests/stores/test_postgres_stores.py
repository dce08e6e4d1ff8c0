"""The PostgreSQL stores (AGENT_DATABASE_URL) against a real server: same contracts as the SQLite ones."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import StorageDriverRetrieveContext, StorageDriverStoreContext

from durable_agents.dev_server import EmbeddedServer
from durable_agents.settings import Settings
from durable_agents.stores.errors import StoreDown
from durable_agents.stores.idempotency import run_once
from durable_agents.stores.postgres import (
    SCHEMA_VERSION,
    Database,
    PostgresConversationStore,
    PostgresIdempotencyStore,
    PostgresPayloadDriver,
    PostgresWorkspaces,
    SchemaError,
)
from durable_agents.stores.workspaces import LocalWorkspace, Workspace, WorkspaceError
from durable_agents.workflows.messages import AssistantMessage, UserMessage
from tests.support.paths import ROOT
from tests.support.postgres import PASSWORD, Postgres


@pytest.fixture
async def db(postgres: Postgres) -> AsyncIterator[Database]:
    database = Database(await postgres.new_database())
    await database.open()
    yield database
    await database.close()


async def test_tables_are_created_once_with_a_schema_version_by_workers_starting_together(
    postgres: Postgres,
) -> None:
    url = await postgres.new_database()
    workers = [Database(url) for _ in range(4)]
    await asyncio.gather(*(w.open() for w in workers))
    for w in workers:
        await w.close()
    connection = await asyncpg.connect(url)
    try:
        versions = [row[0] for row in await connection.fetch("SELECT version FROM agent_schema")]
        tables = {
            row[0]
            for row in await connection.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
            )
        }
        await connection.execute("INSERT INTO agent_schema VALUES ($1)", SCHEMA_VERSION + 1)
    finally:
        await connection.close()
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert tables == {
        "agent_schema",
        "agent_store",  # the store's identity (durable_agents/stores/errors.py)
        "agent_messages",
        "agent_results",
        "agent_payloads",
        "agent_payload_owners",  # the workflows that stored each payload (delete, forget)
        "agent_files",
        "agent_workers",  # the worker leases (durable_agents/worker/lost_calls.py)
        "agent_takeovers",  # leases taken, their epochs fenced (durable_agents/stores/leases.py)
        "agent_claims",  # ctx.once steps running (durable_agents/stores/idempotency.py)
        "agent_ledger",  # the shared ledger (durable_agents/stores/ledger.py)
        "agent_ledger_cached",  # its rows' cached input tokens
        "agent_rate",
        "agent_slowdown",
    }
    assert len({w.identity for w in workers}) == 1  # one store, one identity, whoever made it

    newer = Database(url)
    with pytest.raises(SchemaError) as info:
        await newer.open()
    assert str(info.value) == (
        f"the database at {url.replace(PASSWORD, '***')} has schema version {SCHEMA_VERSION + 1}; "
        f"this worker knows up to {SCHEMA_VERSION}: upgrade the worker"
    )


async def test_conversation_store_keeps_messages_by_position_and_reports_a_gap(db: Database) -> None:
    store = PostgresConversationStore(db)
    first = [UserMessage(text="hi"), AssistantMessage(text="hello")]
    await store.save("w/r", 0, first)
    await store.save("w/r", 2, [UserMessage(text="again")])
    await store.save("w/r", 2, [UserMessage(text="again")])  # a retried attempt writes the same rows

    assert await store.load("w/r", 3) == [*first, UserMessage(text="again")]
    assert await store.load("w/r", 2) == first
    assert await store.load("w/r", 4) is None
    assert await store.load("other/r", 1) is None


async def test_idempotency_store_keeps_the_first_result(db: Database) -> None:
    store = PostgresIdempotencyStore(db)
    calls: list[int] = []

    def effect() -> dict:
        calls.append(1)
        return {"receipt": len(calls)}

    assert await run_once(store, "k/step", effect) == {"receipt": 1}
    assert await run_once(store, "k/step", effect) == {"receipt": 1}
    await store.put("k/step", '"other"')
    assert (calls, await store.get("k/step"), await store.get("nothing")) == ([1], '{"receipt": 1}', None)


async def test_payload_driver_stores_by_content_and_names_what_is_missing(db: Database) -> None:
    driver = PostgresPayloadDriver(db)
    payloads = [Payload(data=b"x" * 200_000), Payload(data=b"y")]
    claims = await driver.store(StorageDriverStoreContext(target=None), payloads)
    again = await driver.store(StorageDriverStoreContext(target=None), payloads[:1])

    assert again[0].claim_data == claims[0].claim_data
    assert await driver.retrieve(StorageDriverRetrieveContext(), claims) == payloads
    lost = type(claims[0])(claim_data={"key": "0" * 64})
    with pytest.raises(
        RuntimeError, match=f"payload store agent-postgres lacks 1 payload\\(s\\), e.g. {'0' * 64}"
    ):
        await driver.retrieve(StorageDriverRetrieveContext(), [lost])


async def test_an_unreachable_database_outside_an_activity_is_one_store_down_naming_the_masked_url() -> None:
    url = f"postgresql://agent:{PASSWORD}@127.0.0.1:9/agents"  # port 9: nothing listens
    with pytest.raises(StoreDown) as info:
        await Database(url, connect_timeout=1, outage_seconds=0.2).run(lambda c: c.fetchval("SELECT 1"))
    assert str(info.value).startswith(
        "PostgreSQL postgresql://agent:***@127.0.0.1:9/agents unavailable: cannot be reached: "
    )
    assert PASSWORD not in str(info.value)


def test_worker_stops_at_start_with_one_line_when_the_database_is_unreachable(server: EmbeddedServer) -> None:
    url = f"postgresql://agent:{PASSWORD}@127.0.0.1:9/agents"
    done = subprocess.run(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "TEMPORAL_ADDRESS": server.address, "AGENT_DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("worker: cannot reach the database at postgresql://agent:***@127.0.0.1:9/agents: ")
    assert PASSWORD not in done.stderr + done.stdout


async def test_worker_says_at_start_that_its_stores_are_on_postgresql(
    server: EmbeddedServer, postgres: Postgres
) -> None:
    url = await postgres.new_database()
    env = {"PATH": "/usr/bin:/bin", "TEMPORAL_ADDRESS": server.address, "AGENT_DATABASE_URL": url}
    env["AGENT_TASK_QUEUE"] = "stores-banner"
    proc = subprocess.Popen(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = await asyncio.to_thread(proc.stdout.readline)  # type: ignore[union-attr]
        second = await asyncio.to_thread(proc.stdout.readline)  # type: ignore[union-attr]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert first == (
        "Stores: conversations, idempotency, payloads and workspaces on PostgreSQL "
        f"{url.replace(PASSWORD, '***')} (shared by every host).\n"
    )
    assert second.startswith("Worker (all) running on task queue 'stores-banner'")
    assert "Warning" not in err and PASSWORD not in err


def test_a_database_url_that_is_not_postgresql_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError) as info:
        Settings.from_env({"AGENT_DATABASE_URL": "mysql://u:pw@db/agents"})
    assert str(info.value) == "AGENT_DATABASE_URL must be a postgresql:// URL, not 'mysql://u:***@db/agents'"


def test_workers_with_local_stores_and_a_remote_temporal_are_warned() -> None:
    local = Settings.from_env({}).stores
    shared = Settings.from_env({"AGENT_DATABASE_URL": "postgresql://u:pw@db.internal/agents"}).stores

    assert local.several_hosts_warning("localhost:7233") is None
    assert local.several_hosts_warning("127.0.0.1:7233") is None
    assert local.several_hosts_warning("[::1]:7233") is None
    assert shared.several_hosts_warning("temporal.internal:7233") is None
    assert local.several_hosts_warning("temporal.internal:7233") == (
        "Warning: Temporal at temporal.internal:7233 is not on this machine, but the stores are this host's "
        "files: workers on several hosts need AGENT_DATABASE_URL (a postgresql:// URL) to share "
        "conversations, payloads, idempotency results and workspaces."
    )
    assert shared.describe() == (
        "Stores: conversations, idempotency, payloads and workspaces on PostgreSQL "
        "postgresql://u:***@db.internal/agents (shared by every host)."
    )


@pytest.fixture(params=["local", "postgres"])
async def workspace(request: pytest.FixtureRequest, tmp_path: Path, db: Database) -> Workspace:
    if request.param == "local":
        return LocalWorkspace(tmp_path / "ws")
    return PostgresWorkspaces(db).open("conv/run-1")


async def test_workspaces_follow_the_same_path_rules_locally_and_on_postgresql(workspace: Workspace) -> None:
    async def outcome(call) -> object:  # what the model would be told
        try:
            return await call
        except WorkspaceError as e:
            return str(e)

    await workspace.write("notes/a.txt", b"hello")
    await workspace.write("./notes/sub/../b.txt", b"second")
    await workspace.write("top.txt", b"top")
    await workspace.write("top.txt", b"top again")

    assert await workspace.read("notes/a.txt") == b"hello"
    assert await workspace.read("notes/b.txt") == b"second"
    assert await workspace.read("top.txt") == b"top again"
    assert await workspace.list(".") == ["notes/", "top.txt"]
    assert await workspace.list("") == ["notes/", "top.txt"]
    assert await workspace.list("notes") == ["a.txt", "b.txt"]
    assert await workspace.list("nothing/here") == []
    assert [
        await outcome(workspace.read("missing.txt")),
        await outcome(workspace.read("notes")),
        await outcome(workspace.read(".")),
        await outcome(workspace.list("top.txt")),
        await outcome(workspace.write("top.txt/x", b"")),
        await outcome(workspace.write("notes", b"")),
        await outcome(workspace.read("../x")),
        await outcome(workspace.write("/etc/passwd", b"")),
        await outcome(workspace.list("a/../../x")),
    ] == [
        "No file 'missing.txt' in the workspace.",
        "No file 'notes' in the workspace.",
        "No file '.' in the workspace.",
        "'top.txt' is not a folder.",
        "Cannot write 'top.txt/x': a folder on its path is a file.",
        "'notes' is a folder.",
        "Path '../x' is outside the workspace; use a path relative to it.",
        "Path '/etc/passwd' is outside the workspace; use a path relative to it.",
        "Path 'a/../../x' is outside the workspace; use a path relative to it.",
    ]


async def test_postgresql_workspaces_of_two_conversations_are_apart(db: Database) -> None:
    workspaces = PostgresWorkspaces(db)
    await workspaces.open("alice_notes/r1").write("n.txt", b"mine")
    other = workspaces.open("alice/notes/r1")

    assert await other.list(".") == []
    with pytest.raises(WorkspaceError):
        await other.read("n.txt")
    assert await workspaces.open("alice_notes/r1").read("n.txt") == b"mine"
