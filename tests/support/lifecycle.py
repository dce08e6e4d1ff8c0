"""What the data-lifecycle tests share (``tests/stores/test_erasure.py``,
``tests/stores/test_retention.py``): a worker on fresh stores (SQLite files of its own, or a fresh
PostgreSQL database), agents that leave something in every store, and what each store holds of a
conversation, read with SQL of the test's own."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

import asyncpg
import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from durable_agents.activities.tools import ToolContext, default_registry, tool
from durable_agents.client.conversations import start_conversation
from durable_agents.converter import data_converter
from durable_agents.dev_server import EmbeddedServer
from durable_agents.settings import Settings
from durable_agents.stores.layouts import folder_name
from durable_agents.stores.ledger import numbered
from durable_agents.stores.workspaces import LocalWorkspaces
from durable_agents.testing import scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec, ApprovalPolicy
from durable_agents.workflows.messages import UserMessage
from durable_agents.workflows.tenancy import scoped_key
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


def lifecycle_agents() -> dict[str, AgentSpec]:
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

    async def plant(self, key: str) -> None:
        """What a conversation Temporal no longer knows left (its history removed by Temporal's own
        retention): a message, a ``ctx.once`` result, a file; written by the stores themselves."""
        stores = self._settings.stores
        await stores.conversation_store().save(key, 0, [UserMessage(text="hello")])
        await stores.idempotency_store().put(f"{key}/call_1_0/stamp", '"stamped"')
        local = self._settings.database_url is None
        workspaces = LocalWorkspaces(self._workspace_root) if local else stores.workspaces()
        await workspaces.open(key).write("note.txt", b"left behind")

    async def plant_payload(self, owner: str, stored_at: float) -> None:
        """A payload that only workflow ``owner`` stored, at ``stored_at`` (epoch seconds)."""
        await self._settings.stores.open()  # the database's tables, if nothing made them yet
        key = uuid.uuid4().hex
        await self._rows("INSERT INTO {payloads} VALUES (?, ?)", "payloads", key, b"left behind")
        owned = "INSERT INTO {owners} (owner, key, stored_at) VALUES (?, ?, ?)"
        await self._rows(owned, "payloads", owner, key, stored_at)

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

    async def _rows(self, sql: str, store: str, *args: object) -> list[tuple]:
        url = self._settings.database_url
        names = {"messages": "messages", "results": "results", "payloads": "payloads"}
        names["owners"] = "payload_owners"
        if url is not None:
            names = {k: f"agent_{v}" for k, v in names.items()}
            connection = await asyncpg.connect(url)
            try:
                query = numbered(sql.format(**names))
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
        with closing(sqlite3.connect(path)) as db, db:
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


def lifecycle_settings(database_url: str | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """The settings of stores of their own: SQLite files in ``tmp_path``, or the database at
    ``database_url``, set in the environment (the starter in this process reads the same)."""
    if database_url is not None:
        monkeypatch.setenv("AGENT_DATABASE_URL", database_url)
    files = {"STORE": "conversations", "IDEMPOTENCY_STORE": "idempotency", "PAYLOAD_STORE": "payloads"}
    for name, file in files.items():  # set for the session already: changed, not added
        monkeypatch.setenv(f"AGENT_{name}", str(tmp_path / f"{file}.db"))
    return Settings.from_env()


@asynccontextmanager
async def lifecycle_worker(
    database_url: str | None,
    server: EmbeddedServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    task_queue: str | None = None,
) -> AsyncIterator[tuple[Env, Stores]]:
    """A worker with ``lifecycle_agents`` on stores of its own: SQLite files in ``tmp_path``, or the
    database at ``database_url`` (set before the worker starts, so that the starter in this process
    reads the same). Its workspaces are local on SQLite, in the database on PostgreSQL."""
    settings = lifecycle_settings(database_url, monkeypatch, tmp_path)
    client = await Client.connect(server.address, data_converter=data_converter(settings))
    task_queue = task_queue or f"tq-{uuid.uuid4().hex[:10]}"
    local = {"workspace_root": tmp_path / "workspace"} if database_url is None else {}
    agents = lifecycle_agents()
    async with build_worker(
        client, task_queue=task_queue, registry=default_registry(stamp), agents=agents, **local
    ):
        yield Env(client, task_queue, tmp_path / "workspace"), Stores(settings, tmp_path / "workspace")


async def finished(env: Env, user: str, prompt: str = BIG) -> tuple[WorkflowHandle, WorkflowHandle]:
    """A conversation of ``user`` that wrote a file, stamped once, asked its helper, and spent."""
    handle = await start_conversation(
        env.client,
        ConversationInput(prompt=prompt, agent="keeper", tenant="acme", user=user),
        id=f"erase-{uuid.uuid4().hex[:8]}",
        task_queue=env.task_queue,
    )
    await handle.result()
    return handle, env.client.get_workflow_handle(f"{handle.id}/call_1_2")


async def conversation_key(handle: WorkflowHandle, tenant: str | None = "acme") -> str:
    described = await handle.describe()
    first = described.raw_description.workflow_execution_info.first_run_id
    return scoped_key(f"{handle.id}/{first}", tenant)


async def gone(*handles: WorkflowHandle) -> None:
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

    async with asyncio.timeout(90):
        await asyncio.gather(*(gone(handle) for handle in handles))


def a_user(name: str) -> str:
    """A user of this test alone: an erasure finds a user's conversations across the namespace."""
    return f"{name}-{uuid.uuid4().hex[:6]}"


NOTHING = {"messages": 0, "once results": 0, "payloads": 0, "ledger rows": 0, "workspace files": 0}
