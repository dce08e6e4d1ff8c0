"""``starter.py delete`` and ``forget``: a conversation (with its sub-agent) or a user removed from
Temporal and from every store, checked store by store with SQL of the test's own, on SQLite and on
PostgreSQL; another user's conversation untouched (docs/production.md, "Deleting and erasing")."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import asyncpg
import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from durable_agents.activities.tools import ToolContext, ToolRegistry, default_registry, tool
from durable_agents.client.conversations import start_conversation
from durable_agents.converter import data_converter
from durable_agents.dev_server import EmbeddedServer
from durable_agents.settings import Settings
from durable_agents.stores.layouts import folder_name
from durable_agents.stores.postgres import PostgresPayloadDriver, database
from durable_agents.testing import scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec, ApprovalPolicy
from durable_agents.workflows.tenancy import scoped_key
from tests.support.cli import starter_cli
from tests.support.conversations import until_state
from tests.support.postgres import Postgres
from tests.support.workers import Env

BIG = "x" * 200_000
"""A prompt over the payload store's threshold: the start input goes to the payload store."""


@tool
async def stamp(text: str, ctx: ToolContext) -> str:
    """Stamp a text, at most once.

    Args:
        text: What to stamp.
    """
    return await ctx.once("stamp", lambda: f"stamped {text}")


def _agents() -> dict[str, AgentSpec]:
    auto = ApprovalPolicy(auto=["write_file"])
    keeper = scripted_agent(
        step(
            "",
            ("write_file", {"path": "note.txt", "content": "mine"}),
            ("stamp", {"text": "a"}),
            ("ask_helper", {"task": "write yours"}),
        ),
        step("done: {last_result}"),
        tools=["write_file", "stamp"],
        subagents=["helper"],
        approval=auto,
    ).model_copy(update={"name": "keeper"})
    helper = scripted_agent(
        step("", ("write_file", {"path": "yours.txt", "content": "helper's"}), ("stamp", {"text": "b"})),
        step("written"),
        tools=["write_file", "stamp"],
        approval=auto,
    ).model_copy(update={"name": "helper"})
    chatty = scripted_agent(step("hello"), tools=[], chat=True).model_copy(update={"name": "chatty"})
    return {"keeper": keeper, "helper": helper, "chatty": chatty}


class Stores:
    """What each store holds of one conversation, read with the test's own SQL."""

    def __init__(self, settings: Settings, workspace_root: Path) -> None:
        settings.stores.ledger()  # its tables, if no call was counted yet
        self._settings = settings
        self._workspace_root = workspace_root

    async def held(self, key: str, workflow_id: str) -> dict[str, int]:
        counts = [
            ("messages", "SELECT count(*) FROM {messages} WHERE conversation = ?", key),
            ("once results", "SELECT count(*) FROM {results} WHERE key LIKE ?", f"{key}/%"),
            ("payloads", "SELECT count(*) FROM {owners} WHERE owner = ?", workflow_id),
            ("ledger rows", "SELECT count(*) FROM agent_ledger WHERE conversation = ?", key),
        ]
        held = {name: await self._count(sql, value) for name, sql, value in counts}
        held["workspace files"] = await self._files(key)
        return held

    async def ledger_users(self) -> set[str]:
        rows = await self._rows("SELECT DISTINCT user_name FROM agent_ledger", "ledger")
        return {row[0] for row in rows}

    async def _count(self, sql: str, value: str) -> int:
        table = sql.split("FROM ")[1].split()[0]
        store = {
            "{messages}": "conversations",
            "{results}": "idempotency",
            "{owners}": "payloads",
            "agent_ledger": "ledger",
        }[table]
        return (await self._rows(sql, store, value))[0][0]

    async def _rows(self, sql: str, store: str, *args: str) -> list[tuple]:
        url = self._settings.database_url
        names = {"messages": "messages", "results": "results", "owners": "payload_owners"}
        if url is not None:
            names = {k: f"agent_{v}" for k, v in names.items()}
            connection = await asyncpg.connect(url)
            try:
                query = sql.format(**names).replace("?", "$1")
                return [tuple(row) for row in await connection.fetch(query, *args)]
            finally:
                await connection.close()
        stores = self._settings.stores
        path = {
            "conversations": stores.conversations,
            "idempotency": stores.idempotency,
            "payloads": stores.payloads,
            "ledger": stores.conversations.parent / "ledger.db",
        }[store]
        with closing(sqlite3.connect(path)) as db:
            return db.execute(sql.format(**names), args).fetchall()

    async def _files(self, key: str) -> int:
        if (url := self._settings.database_url) is None:
            folder = self._workspace_root / folder_name(key)
            return sum(1 for path in folder.rglob("*") if path.is_file())
        connection = await asyncpg.connect(url)
        try:
            return await connection.fetchval("SELECT count(*) FROM agent_files WHERE workspace = $1", key)
        finally:
            await connection.close()


@pytest.fixture
def registry() -> ToolRegistry:
    return default_registry(stamp)


@pytest.fixture(params=["sqlite", "postgresql"])
async def setup(
    request: pytest.FixtureRequest,
    server: EmbeddedServer,
    client: Client,
    registry: ToolRegistry,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> AsyncIterator[tuple[Env, Stores]]:
    """A worker with these agents, on local files or on a fresh PostgreSQL database (set before the
    worker starts, so the starter in this process reads it too)."""
    if request.param == "postgresql":
        postgres: Postgres = request.getfixturevalue("postgres")
        url = await postgres.new_database()
        monkeypatch.setenv("AGENT_DATABASE_URL", url)
        client = await Client.connect(
            server.address,
            data_converter=data_converter(payload_driver=PostgresPayloadDriver(database(url))),
        )
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    local = {"workspace_root": tmp_path} if request.param == "sqlite" else {}  # else the database's
    async with build_worker(client, task_queue=task_queue, registry=registry, agents=_agents(), **local):
        yield Env(client, task_queue, tmp_path), Stores(Settings.from_env(), tmp_path)


async def _finished(env: Env, user: str, agent: str = "keeper") -> tuple[WorkflowHandle, WorkflowHandle]:
    """A conversation of ``user`` that wrote a file, stamped once, asked its helper, and spent."""
    handle = await start_conversation(
        env.client,
        ConversationInput(prompt=BIG, agent=agent, tenant="acme", user=user),
        id=f"erase-{uuid.uuid4().hex[:8]}",
        task_queue=env.task_queue,
    )
    await handle.result()
    return handle, env.client.get_workflow_handle(f"{handle.id}/call_1_2")


async def _key(handle: WorkflowHandle, tenant: str | None = "acme") -> str:
    described = await handle.describe()
    first = described.raw_description.workflow_execution_info.first_run_id
    return scoped_key(f"{handle.id}/{first}", tenant)


async def _gone(*handles: WorkflowHandle) -> None:
    """Until Temporal no longer knows the workflows: it carries a delete out on its own time (the
    dev server some 30 s after the run closed)."""

    async def gone(handle: WorkflowHandle) -> None:
        while True:
            try:
                await handle.describe()
            except RPCError as e:
                assert e.status == RPCStatusCode.NOT_FOUND
                return
            await asyncio.sleep(0.5)

    async with asyncio.timeout(180):
        await asyncio.gather(*(gone(handle) for handle in handles))


def _user(name: str) -> str:
    """A user of this test alone: an erasure finds a user's conversations across the namespace."""
    return f"{name}-{uuid.uuid4().hex[:6]}"


NOTHING = {"messages": 0, "once results": 0, "payloads": 0, "ledger rows": 0, "workspace files": 0}


async def test_delete_removes_a_conversation_and_its_subagent_from_every_store_and_from_temporal(
    setup: tuple[Env, Stores], capsys: pytest.CaptureFixture[str]
) -> None:
    env, stores = setup
    ann_name, bob_name = _user("ann"), _user("bob")
    (ann, ann_helper), (bob, _) = await _finished(env, ann_name), await _finished(env, bob_name)
    keys = {h.id: await _key(h) for h in (ann, ann_helper, bob)}
    before = await stores.held(keys[bob.id], bob.id)
    held = await stores.held(keys[ann.id], ann.id)
    assert held == {"messages": 5, "once results": 1, "payloads": 3, "ledger rows": 2, "workspace files": 1}
    assert await stores.held(keys[ann_helper.id], ann_helper.id) == {
        "messages": 4, "once results": 1, "payloads": 0, "ledger rows": 2, "workspace files": 1,
    }  # fmt: skip

    code, out, err = await starter_cli(env, capsys, "delete", ann.id)

    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"Deleted {ann.id}: 2 conversation(s) ({ann.id}, {ann_helper.id})."
    assert out.splitlines()[1:] == [
        "STORE            REMOVED",
        "messages         9",
        "once results     2",
        "workspace files  2",
        "payloads         3",
        "ledger rows      4",
        "temporal runs    2",
    ]
    for handle in (ann, ann_helper):
        assert await stores.held(keys[handle.id], handle.id) == NOTHING
    assert await stores.held(keys[bob.id], bob.id) == before
    assert (await bob.describe()).status == WorkflowExecutionStatus.COMPLETED
    assert {ann_name, bob_name} <= await stores.ledger_users()  # ann's spend stays, as day totals
    await _gone(ann, ann_helper)


async def test_delete_refuses_a_running_conversation_and_cancels_it_with_cancel(
    setup: tuple[Env, Stores], capsys: pytest.CaptureFixture[str]
) -> None:
    env, stores = setup
    handle = await env.start(ConversationInput(prompt="hi", agent="chatty"), f"chat-{uuid.uuid4().hex[:8]}")
    await until_state(handle, "idle", timeout=60)
    key = await _key(handle, tenant=None)

    code, out, err = await starter_cli(env, capsys, "delete", handle.id)

    assert (code, out) == (1, "")
    assert err == (
        f"error: not deleted: {handle.id} still running: cancel it first, or ask with cancel"
        " (starter.py delete --cancel)\n"
    )
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    assert (await stores.held(key, handle.id))["messages"] == 1

    code, out, err = await starter_cli(env, capsys, "delete", handle.id, "--cancel")

    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"Deleted {handle.id}: 1 conversation(s) ({handle.id})."
    assert out.splitlines()[-1] == "temporal runs    1"  # carried out later (the other tests wait)
    assert await stores.held(key, handle.id) == NOTHING


async def test_forget_erases_every_conversation_of_a_user_and_keeps_the_others(
    setup: tuple[Env, Stores], capsys: pytest.CaptureFixture[str]
) -> None:
    env, stores = setup
    carol, dave_name = _user("carol"), _user("dave")
    (first, first_helper), (second, second_helper) = await _finished(env, carol), await _finished(env, carol)
    (dave, _) = await _finished(env, dave_name)
    keys = {h.id: await _key(h) for h in (first, first_helper, second, second_helper, dave)}
    before = await stores.held(keys[dave.id], dave.id)

    code, out, err = await starter_cli(env, capsys, "forget", "--user", carol, "--tenant", "acme")

    assert (code, err) == (0, "")
    assert out.splitlines()[0].startswith(f"Forgot user {carol} of tenant acme: 4 conversation(s) (")
    assert out.splitlines()[1:] == [
        "STORE                         REMOVED",
        "messages                      18",
        "once results                  4",
        "workspace files               4",
        "payloads                      5",  # one start input both had: one payload
        "ledger rows                   8",
        "temporal runs                 4",
        "ledger totals made anonymous  4",
    ]
    for handle in (first, first_helper, second, second_helper):
        assert await stores.held(keys[handle.id], handle.id) == NOTHING
    assert await stores.held(keys[dave.id], dave.id) == before
    assert carol not in await stores.ledger_users()
    assert dave_name in await stores.ledger_users()
    await _gone(first, first_helper, second, second_helper)

    code, out, err = await starter_cli(env, capsys, "forget", "--user", carol, "--tenant", "acme")

    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"Forgot user {carol} of tenant acme: 0 conversation(s)."
