"""Retention passes (``starter.py retention``, workflows/retention.py): a closed conversation's data
goes from every store once the (shortened) retention passed, a running one's stays, the data of a
conversation Temporal no longer knows (deleted there, or past its retention) goes as orphans; two
hosts' passes at once remove each row once and fail nothing. On SQLite and on PostgreSQL; the stores
are checked with SQL of the test's own."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest
from temporalio.client import Client, ScheduleActionStartWorkflow, WorkflowFailureError, WorkflowHandle

from durable_agents.activities.lifecycle import START_GRACE_SECONDS
from durable_agents.client.conversations import start_conversation
from durable_agents.client.lifecycle import RETENTION_SCHEDULE
from durable_agents.converter import data_converter
from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.lost_calls import LOST_ERROR
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import GuardrailConfig, GuardrailsConfig, ModelSettings
from durable_agents.workflows.retention import RetentionRequest, RetentionWorkflow
from tests.support.cli import starter_cli
from tests.support.conversations import until_state
from tests.support.history import no_task_failures
from tests.support.hosts import AUTO, Host
from tests.support.lifecycle import (
    BIG,
    NOTHING,
    Stores,
    a_user,
    conversation_key,
    finished,
    lifecycle_settings,
    lifecycle_worker,
)
from tests.support.postgres import Postgres
from tests.support.workers import Env


async def _pass(env: Env) -> RetentionRequest:
    """One retention pass over everything closed (a retention of 0 s), to its end."""
    return await env.client.execute_workflow(
        RetentionWorkflow.run,
        RetentionRequest(retention_seconds=0),
        id=f"retention-{uuid.uuid4().hex[:8]}",
        task_queue=env.task_queue,
    )


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


async def test_retention_removes_a_conversation_that_closed_before_its_first_model_call(
    lifecycle: tuple[Env, Stores],
) -> None:
    """Its input guardrail's model check stopped the first message: the ledger holds that check's
    call, and no store holds a message."""
    env, stores = lifecycle
    verdict = step('{"verdict": "deny", "reason": "not about an order"}')
    checker = ModelSettings(provider="scripted", model="checker", script=[verdict])
    guard = GuardrailConfig(name="topic", kind="model", model=checker, instructions="Orders only.")
    agent = scripted_agent(step("never said"), guardrails=GuardrailsConfig(input=[guard]))
    handle = await start_conversation(
        env.client,
        ConversationInput(prompt="the weather?", agent_spec=agent, tenant="acme", user=a_user("gus")),
        id=f"stopped-{uuid.uuid4().hex[:8]}",
        task_queue=env.task_queue,
    )
    assert (await handle.result()).stop_reason == "guardrail_tripped"
    key = await conversation_key(handle)
    assert await stores.held(key, handle.id) == NOTHING | {"ledger rows": 1}

    done = await _pass(env)

    assert done.conversations == 1
    assert done.removed == {"ledger rows folded": 0} | {store: 0 for store in NOTHING} | {"ledger rows": 1}
    assert await stores.held(key, handle.id) == NOTHING


async def test_retention_removes_the_start_input_of_a_conversation_that_failed_before_any_call(
    lifecycle: tuple[Env, Stores],
) -> None:
    """It names no agent the worker knows: its only data is its start input (over the payload
    store's threshold), kept under its workflow id."""
    env, stores = lifecycle
    handle = await env.client.start_workflow(
        AgentWorkflow.run,
        ConversationInput(prompt=BIG, agent="nobody"),
        id=f"failed-{uuid.uuid4().hex[:8]}",
        task_queue=env.task_queue,
    )
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    key = await conversation_key(handle, tenant=None)
    assert await stores.held(key, handle.id) == NOTHING | {"payloads": 1}

    done = await _pass(env)

    assert await stores.held(key, handle.id) == NOTHING
    # counted as payloads, not as a conversation: no store names its key
    assert (done.conversations, done.removed["payloads"]) == (0, 1)


async def test_retention_removes_the_payloads_of_a_workflow_temporal_does_not_know_once_they_are_old(
    lifecycle: tuple[Env, Stores],
) -> None:
    """Unknown to Temporal: deleted there, or a start still on its way (it stores its input first)."""
    env, stores = lifecycle
    gone, starting = (f"gone-{uuid.uuid4().hex[:8]}" for _ in range(2))
    await stores.plant_payload(gone, time.time() - START_GRACE_SECONDS - 60)
    await stores.plant_payload(starting, time.time())

    done = await _pass(env)

    assert done.removed == {"ledger rows folded": 0, "payloads": 1}
    assert [(await stores.held(owner, owner))["payloads"] for owner in (gone, starting)] == [0, 1]


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
    starts); the pass, its cursor in history, goes on on the second. (A worker killed mid-batch: the
    last test.)"""
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


async def test_a_pass_whose_worker_is_killed_mid_batch_finishes_on_another_host_and_removes_everything(
    server: EmbeddedServer, postgres: Postgres, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A worker process killed (SIGKILL) while its batch removes a conversation's data, halfway: the
    second host takes the dead worker's attempt over at once (PostgreSQL leases) and runs the batch
    again from the same cursor, which finds that conversation again and removes the rest."""
    url = await postgres.new_database()
    settings = lifecycle_settings(url, monkeypatch, tmp_path / "test")
    stores = Stores(settings, tmp_path / "test" / "workspace")
    client = await Client.connect(server.address, data_converter=data_converter(settings))
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    env = {"TEMPORAL_ADDRESS": server.address, "AGENT_TASK_QUEUE": task_queue, "AGENT_DATABASE_URL": url}
    a, b = Host(tmp_path / "host-a", env), Host(tmp_path / "host-b", env)
    try:
        await asyncio.to_thread(a.start)
        writes = step("", ("write_file", {"path": "note.txt", "content": "mine"}))
        agent = scripted_agent(writes, step("written"), tools=["write_file"], approval=AUTO, chat=True)
        chat = await client.start_workflow(
            AgentWorkflow.run,
            conversation(agent),
            id=f"zz-chat-{uuid.uuid4().hex[:8]}",  # its key after the orphans': the last batch's
            task_queue=task_queue,
        )
        await until_state(chat, "idle", timeout=60)
        chat_key = await conversation_key(chat, tenant=None)
        chat_held = await stores.held(chat_key, chat.id)
        orphans = [f"tenants/acme/gone-{n:02}/{uuid.uuid4()}" for n in range(12)]
        for key in orphans:
            await stores.plant(key)
        first = orphans[0]

        async with files_locked(url, first), waiting_statements(url) as waiting:
            handle = await client.start_workflow(
                RetentionWorkflow.run,
                RetentionRequest(retention_seconds=0, batch=5),
                id=f"retention-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
            )
            async with asyncio.timeout(60):  # the batch heartbeats, and waits to remove the first's files
                while await heartbeat(client, handle) != [first] or await waiting("count(pid)") == 0:
                    await asyncio.sleep(0.05)
            held = await stores.held(first, first)
            assert (held["once results"], held["workspace files"]) == (0, 1)  # part removed, the rest waits
            a.kill()
            # the dead host's statement, waiting for the lock, goes with its connection
            assert await waiting("count(pg_terminate_backend(pid))") == 1
        await asyncio.to_thread(b.start)
        done = await asyncio.wait_for(handle.result(), timeout=120)
    finally:
        a.kill()
        b.kill()

    assert done.conversations == len(orphans)
    assert done.removed == {
        "ledger rows folded": 0,
        "messages": len(orphans),
        "once results": len(orphans) - 1,  # the killed attempt removed the first one's
        "workspace files": len(orphans),
        "payloads": 0,
        "ledger rows": 0,
    }
    for key in orphans:
        assert await stores.held(key, key) == NOTHING
    assert await stores.held(chat_key, chat.id) == chat_held
    assert await retried_batches(handle) == [LOST_ERROR]  # taken over at once, not at its timeout
    await no_task_failures(handle)
    await chat.terminate()


@contextlib.asynccontextmanager
async def files_locked(url: str, workspace: str) -> AsyncIterator[asyncpg.Connection]:
    """The workspace's files locked (``FOR UPDATE``) while the block runs: removing them waits."""
    connection = await asyncpg.connect(url)
    try:
        async with connection.transaction():
            await connection.execute("SELECT 1 FROM agent_files WHERE workspace = $1 FOR UPDATE", workspace)
            yield connection
    finally:
        await connection.close()


@contextlib.asynccontextmanager
async def waiting_statements(url: str) -> AsyncIterator[Callable[[str], Awaitable[int]]]:
    """``what`` (an aggregate over ``pid``) of the database's statements that wait for a lock."""
    connection = await asyncpg.connect(url)

    async def waiting(what: str) -> int:
        return await connection.fetchval(
            f"SELECT {what} FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )

    try:
        yield waiting
    finally:
        await connection.close()


async def heartbeat(client: Client, handle: WorkflowHandle) -> list[str]:
    """What the pass's running batch last reported by heartbeat (the conversation it is at)."""
    described = await handle.describe()
    pending = described.raw_description.pending_activities
    if not pending or not pending[0].heartbeat_details.payloads:
        return []
    return await client.data_converter.decode(pending[0].heartbeat_details.payloads)


async def retried_batches(handle: WorkflowHandle) -> list[str]:
    """The failure type of each batch attempt that was tried again, in order."""
    retried = []
    async for event in handle.fetch_history_events():
        started = event.activity_task_started_event_attributes
        if event.HasField("activity_task_started_event_attributes") and started.attempt > 1:
            retried.append(started.last_failure.application_failure_info.type)
    return retried
