"""Retention passes (``starter.py retention``, workflows/retention.py): a closed conversation's data
goes from every store once the (shortened) retention passed, a running one's stays, the data of a
conversation Temporal no longer knows (deleted there, or past its retention) goes as orphans; two
hosts' passes at once remove each row once and fail nothing. On SQLite and on PostgreSQL; the stores
are checked with SQL of the test's own."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import ScheduleActionStartWorkflow

from durable_agents.client.lifecycle import RETENTION_SCHEDULE
from durable_agents.dev_server import EmbeddedServer
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.retention import RetentionRequest, RetentionWorkflow
from tests.support.cli import starter_cli
from tests.support.conversations import until_state
from tests.support.lifecycle import (
    BIG,
    NOTHING,
    Stores,
    a_user,
    conversation_key,
    finished,
    lifecycle_worker,
)
from tests.support.postgres import Postgres
from tests.support.workers import Env


async def test_retention_removes_closed_and_orphaned_conversations_data_and_keeps_a_running_ones(
    lifecycle: tuple[Env, Stores], server: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    env, stores = lifecycle
    user = a_user("erin")
    chat = await env.start(ConversationInput(prompt="hi", agent="chatty"), f"chat-{uuid.uuid4().hex[:8]}")
    await until_state(chat, "idle", timeout=60)
    kept, kept_helper = await finished(env, user)
    keys = {h.id: await conversation_key(h) for h in (kept, kept_helper)}
    chat_key = await conversation_key(chat, tenant=None)
    held = {key: await stores.held(key, workflow_id) for workflow_id, key in keys.items()}
    orphaned = f"gone-{uuid.uuid4().hex[:8]}"  # never known to this server, as one Temporal removed
    orphan_key = f"tenants/acme/{orphaned}/{uuid.uuid4()}"
    await stores.plant(orphan_key)

    code, out, err = await starter_cli(env, capsys, "retention", "--days", "365")

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "Retention pass (keeping 365 day(s)): 1 conversation(s) removed.",
        "STORE               REMOVED",
        "ledger rows folded  0",
        "messages            1",
        "once results        1",
        "workspace files     1",
        "payloads            0",
        "ledger rows         0",
    ]
    assert await stores.held(orphan_key, orphaned) == NOTHING
    for handle in (kept, kept_helper):
        assert await stores.held(keys[handle.id], handle.id) == held[keys[handle.id]]

    code, out, err = await starter_cli(env, capsys, "retention", "--days", "0")

    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "Retention pass (keeping 0 day(s)): 2 conversation(s) removed."
    for handle in (kept, kept_helper):
        assert await stores.held(keys[handle.id], handle.id) == NOTHING
    assert (await stores.held(chat_key, chat.id))["messages"] == 1  # running: untouched
    await chat.terminate()


async def test_two_hosts_passes_at_once_remove_each_row_once_and_fail_nothing(
    server: EmbeddedServer, postgres: Postgres, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = await postgres.new_database()
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    async with (
        lifecycle_worker(url, server, monkeypatch, tmp_path / "a", task_queue) as (env, stores),
        lifecycle_worker(url, server, monkeypatch, tmp_path / "b", task_queue),
    ):
        user = a_user("finn")
        prompts = [f"{BIG}{n}" for n in range(3)]  # payloads of their own: each removed once
        pairs = await asyncio.gather(*(finished(env, user, prompt) for prompt in prompts))
        handles = [handle for pair in pairs for handle in pair]
        keys = {h.id: await conversation_key(h) for h in handles}
        before = [await stores.held(keys[h.id], h.id) for h in handles]

        passes = [
            await env.client.start_workflow(
                RetentionWorkflow.run,
                RetentionRequest(retention_seconds=0, batch=1),
                id=f"retention-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
            )
            for _ in range(2)
        ]
        first, second = await asyncio.gather(*(p.result() for p in passes))

        for store in ("messages", "once results", "payloads", "ledger rows", "workspace files"):
            removed = first.removed.get(store, 0) + second.removed.get(store, 0)
            assert removed == sum(held[store] for held in before), store
        for handle in handles:
            assert await stores.held(keys[handle.id], handle.id) == NOTHING


async def test_the_retention_schedule_is_created_once_and_updated_in_place(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = env.client.get_schedule_handle(RETENTION_SCHEDULE)
    try:
        for hours in ("6", "6", "12"):
            code, out, err = await starter_cli(env, capsys, "retention", "--every", hours, "--days", "30")
            assert (code, err) == (0, "")
            assert (
                out
                == f"Retention: a pass every {hours} hour(s), keeping closed conversations' data 30 day(s).\n"
            )
            described = await handle.describe()
            assert [i.every for i in described.schedule.spec.intervals] == [timedelta(hours=int(hours))]
        action = described.schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow)
        assert (action.workflow, action.id, action.task_queue) == (
            "durable_agents.Retention", RETENTION_SCHEDULE, env.task_queue,
        )  # fmt: skip
        schedules = [s.id async for s in await env.client.list_schedules()]
        assert schedules.count(RETENTION_SCHEDULE) == 1
    finally:
        await handle.delete()


async def test_a_pass_whose_worker_stops_midway_finishes_on_another_and_counts_each_conversation_once(
    server: EmbeddedServer, postgres: Postgres, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The first worker stops as a host being replaced does (its running batch finishes, no next one
    starts); the pass, its cursor in history, goes on on the second. (A worker killed mid-batch has
    its batch tried again after the heartbeat timeout; every removal is idempotent.)"""
    url = await postgres.new_database()
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    orphans = [f"tenants/acme/gone-{n:03}/{uuid.uuid4()}" for n in range(300)]
    async with contextlib.AsyncExitStack() as first:
        env, stores = await first.enter_async_context(
            lifecycle_worker(url, server, monkeypatch, tmp_path / "a", task_queue)
        )
        for key in orphans:
            await stores.plant(key)
        handle = await env.client.start_workflow(
            RetentionWorkflow.run,
            RetentionRequest(retention_seconds=0, batch=1),
            id=f"retention-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        async with asyncio.timeout(60):
            while sum([(await stores.held(key, key))["messages"] for key in orphans[:1]]) > 0:
                await asyncio.sleep(0.05)
    # the first worker stopped with the pass under way (its batches' cursor in the pass's history)
    assert (await stores.held(orphans[-1], orphans[-1]))["messages"] == 1

    async with lifecycle_worker(url, server, monkeypatch, tmp_path / "b", task_queue):
        done = await handle.result()

    assert done.conversations == len(orphans)
    assert done.removed["messages"] == len(orphans)
    for key in orphans:
        assert await stores.held(key, key) == NOTHING
