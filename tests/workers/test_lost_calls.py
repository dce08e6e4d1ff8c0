"""Worker leases (durable_agents/worker/lost_calls.py) without a Temporal server: which leases count as
dead, what is failed, what is left, on files and on PostgreSQL. The crash itself is in test_faults
(a real SIGKILL) and, across hosts, in test_several_hosts."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import asyncpg
import pytest
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import ActivityEnvironment

from durable_agents.stores.idempotency import StaleEpoch
from durable_agents.stores.leases import PostgresLeases
from durable_agents.worker import lost_calls
from durable_agents.worker.lost_calls import (
    FileLeases,
    Lease,
    RecordCachedConversations,
    RecordRunningCalls,
    lease_store,
    reclaim,
)
from durable_agents.workflows.agent import AgentWorkflow
from tests.support.postgres import Postgres


class FakeClient:
    """What leases use of a Client: its server's name, failing an attempt by task token, and
    taking a conversation off its worker's sticky queue. ``finished``: what the server no longer
    knows (NOT_FOUND), by task token or workflow id."""

    namespace = "default"
    service_client = SimpleNamespace(config=SimpleNamespace(target_host="127.0.0.1:7233", runtime=None))

    def __init__(self, finished: tuple[str, ...] = ()) -> None:
        self.done: list[tuple[str, ...]] = []
        self.finished = finished
        self.workflow_service = SimpleNamespace(reset_sticky_task_queue=self._unstick)

    @property
    def failed(self) -> list[tuple[str, ...]]:
        return [each for each in self.done if each[0] == "failed"]

    async def _unstick(self, request: ResetStickyTaskQueueRequest) -> None:
        execution = request.execution
        if execution.workflow_id in self.finished:
            raise RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b"")
        self.done.append(("unstuck", request.namespace, execution.workflow_id, execution.run_id))

    def get_async_activity_handle(self, *, task_token: bytes) -> SimpleNamespace:
        async def fail(error: Exception) -> None:
            if task_token.decode() in self.finished:
                raise RPCError("activity not found", RPCStatusCode.NOT_FOUND, b"")
            self.done.append(("failed", task_token.decode(), error.message))  # type: ignore[attr-defined]

        return SimpleNamespace(fail=fail)


def _dead_lease(
    folder: Path, name: str, identity: str, tokens: list[bytes], workflows: list[list[str]] | None = None
) -> Path:
    """A lease its worker left behind: the files are there, nobody holds the lock. Without
    ``workflows``, as a worker wrote it before leases named the conversations."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.lock").write_text(identity)
    calls = {"identity": identity, "running": [base64.b64encode(t).decode() for t in tokens]}
    if workflows is not None:
        calls["workflows"] = workflows
    (folder / f"{name}.calls").write_text(json.dumps(calls))
    return folder / f"{name}.lock"


def _file_lease(folder: Path, identity: str) -> Lease:
    return Lease(FileLeases(folder, f"{identity}-{uuid.uuid4().hex[:8]}"), identity)


async def test_a_dead_workers_attempts_are_failed_and_a_live_ones_left_alone(tmp_path: Path) -> None:
    client = FakeClient()
    live = _file_lease(tmp_path, "111@host.example")
    assert await live.store.hold(live.record())
    live.started(b"live-token", "conv-live", "run-live")
    live.cached("conv-idle", "run-idle")
    await live.store.write(live.record())
    dead = _dead_lease(
        tmp_path, "222@host.example-0badc0de", "222@host.example", [b"t1", b"t2"], [["conv-1", "run-1"]]
    )
    sweeper = _file_lease(tmp_path, "333@host.example")  # a third worker finds the dead lease
    assert await sweeper.store.hold(sweeper.record())

    await sweeper.store.sweep(partial(reclaim, client))  # the live lease is held: not claimed

    # The conversation first leaves the dead worker's sticky queue, then its calls are retried.
    assert client.done == [
        ("unstuck", "default", "conv-1", "run-1"),
        ("failed", "t1", "worker 222@host.example stopped while running this attempt"),
        ("failed", "t2", "worker 222@host.example stopped while running this attempt"),
    ]
    assert not dead.exists() and not dead.with_suffix(".calls").exists()
    assert json.loads(live.store.lock_path.with_suffix(".calls").read_text()) == {  # type: ignore[attr-defined]
        "identity": "111@host.example",
        "running": [base64.b64encode(b"live-token").decode()],
        "workflows": [["conv-idle", "run-idle"], ["conv-live", "run-live"]],
    }
    await live.store.release()
    await sweeper.store.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


async def test_leases_are_kept_per_temporal_server_and_namespace(tmp_path: Path) -> None:
    store = lease_store(None, tmp_path, FakeClient(), "1@h")  # type: ignore[arg-type]
    assert store.lock_path.parent == tmp_path / "default@127.0.0.1:7233"  # type: ignore[attr-defined]


async def test_no_lease_where_file_locks_do_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On such a file system every lease would look dead: the worker neither holds one nor judges."""
    monkeypatch.setattr(lost_calls.fcntl, "flock", lambda fd, how: None)
    client = FakeClient()
    lease = _file_lease(tmp_path, "1@h")
    other = _dead_lease(tmp_path, "2@h-00000000", "2@h", [b"t"])
    ran = []

    async def run() -> None:
        ran.append("the worker")

    async def stop() -> None:
        raise AssertionError("nothing to stop it for")

    await lost_calls.run_with_lease(lease, client, run, stop)  # type: ignore[arg-type]

    assert ran == ["the worker"]
    assert client.failed == [] and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "2@h-00000000.calls",
        "2@h-00000000.lock",
    ]


async def test_a_lease_written_before_leases_named_conversations_still_has_its_calls_retried(
    tmp_path: Path,
) -> None:
    client = FakeClient()
    _dead_lease(tmp_path, "3@h-00000000", "3@h", [b"t3"])
    sweeper = _file_lease(tmp_path, "4@h")
    assert await sweeper.store.hold(sweeper.record())

    await sweeper.store.sweep(partial(reclaim, client))

    assert client.done == [("failed", "t3", "worker 3@h stopped while running this attempt")]


async def test_what_a_dead_worker_left_that_has_finished_is_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A replacement finds its predecessor's lease: conversations that have completed since, and
    attempts already retried, answer NOT_FOUND. Expected: no warning for each, one line for what moved."""
    client = FakeClient(finished=("t-done", "conv-done-1", "conv-done-2"))
    workflows = [["conv-done-1", "r1"], ["conv-done-2", "r2"], ["conv-live", "r3"]]
    _dead_lease(tmp_path, "5@h-00000000", "5@h", [b"t-done", b"t-live"], workflows)
    sweeper = _file_lease(tmp_path, "6@h")
    assert await sweeper.store.hold(sweeper.record())

    with caplog.at_level(logging.WARNING, logger=lost_calls.__name__):
        await sweeper.store.sweep(partial(reclaim, client))

    assert client.done == [
        ("unstuck", "default", "conv-live", "r3"),
        ("failed", "t-live", "worker 5@h stopped while running this attempt"),
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "worker 5@h is gone: retried 1 of its attempts, took 1 conversations off its sticky queue"
    ]


class _Runner:
    """A workflow runner whose instances do nothing: what ``RecordCachedConversations`` wraps."""

    def create_instance(self, det: object) -> SimpleNamespace:
        return SimpleNamespace(activate=lambda act: "completion")


async def test_the_lease_names_the_conversations_the_worker_caches_until_they_are_evicted(
    tmp_path: Path,
) -> None:
    """Their next workflow task would wait for this worker's sticky queue after it died."""
    lease = _file_lease(tmp_path, "7@h")
    runner = RecordCachedConversations(_Runner(), lease)  # type: ignore[arg-type]
    agent = SimpleNamespace(cls=AgentWorkflow)  # the runner watches conversations, no other workflow
    info = SimpleNamespace(workflow_id="conv-1", run_id="run-1")
    instance = runner.create_instance(SimpleNamespace(info=info, defn=agent))  # type: ignore[arg-type]
    info = SimpleNamespace(workflow_id="conv-2", run_id="run-2")
    runner.create_instance(SimpleNamespace(info=info, defn=agent))  # type: ignore[arg-type]
    assert json.loads(lease.record())["workflows"] == [["conv-1", "run-1"], ["conv-2", "run-2"]]

    step = WorkflowActivation(run_id="run-1")
    step.jobs.add().signal_workflow.signal_name = "approve"
    assert await asyncio.to_thread(instance.activate, step) == "completion"  # workflow threads
    eviction = WorkflowActivation(run_id="run-1")
    eviction.jobs.add().remove_from_cache.message = "cache full"
    assert await asyncio.to_thread(instance.activate, eviction) == "completion"
    await asyncio.sleep(0)  # the eviction reaches the lease on the event loop

    assert json.loads(lease.record())["workflows"] == [["conv-2", "run-2"]]


@pytest.fixture(scope="module")
async def leases_url(postgres: Postgres) -> str:
    return await postgres.new_database()


def _pg_lease(url: str, server: str, identity: str) -> PostgresLeases:
    return PostgresLeases(url, server, f"{identity}-{uuid.uuid4().hex[:8]}", dead_seconds=0.3)


async def _sweeps(sweeper: PostgresLeases, reclaimed: list[str], times: int) -> None:
    """Refresh and sweep as a worker does, ``times`` times."""
    for _ in range(times):
        await sweeper.write(None)
        await sweeper.sweep(_recorder(reclaimed))
        await asyncio.sleep(0.05)


async def _sweep_until(sweeper: PostgresLeases, reclaimed: list[str], count: int) -> None:
    """Refresh and sweep as a worker does until ``count`` leases were reclaimed (20 s at most)."""
    for _ in range(400):
        if len(reclaimed) >= count:
            return
        await _sweeps(sweeper, reclaimed, 1)
    raise AssertionError(f"reclaimed only {reclaimed}")


def _recorder(reclaimed: list[str]) -> Callable[[str], Awaitable[None]]:
    async def record(lease: str) -> None:
        reclaimed.append(json.loads(lease)["identity"])

    return record


async def _keep_alive(lease: PostgresLeases) -> None:
    while True:
        await lease.write(None)
        await asyncio.sleep(0.05)


async def _rows(url: str, server: str) -> int:
    connection = await asyncpg.connect(url)
    try:
        return await connection.fetchval("SELECT count(*) FROM agent_workers WHERE server = $1", server)
    finally:
        await connection.close()


async def test_a_postgresql_lease_not_refreshed_is_reclaimed_once_and_a_refreshed_one_never(
    leases_url: str,
) -> None:
    server = f"default@{uuid.uuid4().hex}"
    sweeper, live, dead = (_pg_lease(leases_url, server, name) for name in ("sweeper", "live", "dead"))
    for store, name in ((sweeper, "sweeper"), (live, "live"), (dead, "dead")):
        assert await store.hold(json.dumps({"identity": name, "running": []}))
    other_server = _pg_lease(leases_url, f"other@{uuid.uuid4().hex}", "elsewhere")
    assert await other_server.hold(json.dumps({"identity": "elsewhere", "running": []}))
    reclaimed: list[str] = []
    alive = asyncio.create_task(_keep_alive(live))
    try:
        await _sweep_until(sweeper, reclaimed, 1)  # "dead" stopped refreshing after hold
        await _sweeps(sweeper, reclaimed, 20)  # and nothing else is ever reclaimed
    finally:
        alive.cancel()

    assert reclaimed == ["dead"]
    assert await _rows(leases_url, server) == 2
    for store in (sweeper, live, other_server):
        await store.release()
    assert await _rows(leases_url, server) == 0


async def test_after_the_database_was_unreachable_no_worker_is_judged_until_refreshes_have_lasted(
    leases_url: str,
) -> None:
    """While the database is down nobody refreshes: afterwards every lease looks old. The sweeper
    judges nobody before its own refreshes have succeeded for the dead interval, by when the live
    workers have refreshed too; a worker that really died is still reclaimed then."""
    server = f"default@{uuid.uuid4().hex}"
    sweeper, live, dead = (_pg_lease(leases_url, server, name) for name in ("sweeper", "live", "dead"))
    for store, name in ((sweeper, "sweeper"), (live, "live"), (dead, "dead")):
        assert await store.hold(json.dumps({"identity": name, "running": []}))
    connection = await asyncpg.connect(leases_url)
    try:  # the outage: every lease an hour old, the sweeper's connection dropped
        await connection.execute("UPDATE agent_workers SET refreshed_at = now() - interval '1 hour'")
        await connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await connection.close()
    reclaimed: list[str] = []
    await sweeper.write(None)  # fails: the connection is gone
    await sweeper.write(None)  # the database is back
    await sweeper.sweep(_recorder(reclaimed))  # every other lease an hour old: nobody judged yet
    assert reclaimed == []
    alive = asyncio.create_task(_keep_alive(live))  # the live worker refreshes after the outage too
    try:
        await _sweep_until(sweeper, reclaimed, 1)
    finally:
        alive.cancel()

    assert reclaimed == ["dead"]
    for store in (sweeper, live):
        await store.release()


async def test_an_attempt_handed_to_a_worker_whose_lease_was_taken_is_refused_before_it_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A paused host's open polls were handed attempts before its lease was taken; resumed, it
    starts none of them: each is failed at once for another worker (``WorkerLost``), the tool never
    called. (test_fencing runs it across two hosts, where which comes first after the host resumes,
    this refusal or the host stopping, is a race in that host.)"""

    class Taken(FileLeases):
        async def check(self) -> int | None:
            raise StaleEpoch("the lease of worker w (epoch 3) was taken by another worker")

    lease = Lease(Taken(tmp_path, "w"), "w")
    ran: list[str] = []

    async def attempt() -> None:
        ran.append("the tool")

    async def handed() -> None:
        await RecordRunningCalls(lease)._recorded(None, attempt)  # type: ignore[arg-type]

    with caplog.at_level(logging.WARNING), pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(handed)
    assert (refused.value.type, refused.value.non_retryable, ran, lease.record()) == (
        lost_calls.LOST_ERROR,
        False,
        [],
        json.dumps({"identity": "w", "running": [], "workflows": []}),
    )
    assert "refused an attempt" in caplog.text
