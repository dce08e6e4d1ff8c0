"""A dead worker's activities retried at once, and its conversations taken off its sticky queue.

A worker that dies (SIGKILL, OOM, a lost host) leaves its running activity attempts to Temporal's
timeouts: a model call is retried when its heartbeat timeout expires, an activity without
heartbeats only at its start-to-close timeout; and the next workflow task of every conversation it
had cached waits for it on its sticky queue for the sticky timeout (5 s), times out, and only then
goes to any worker. Here each worker holds a lease while it runs, a record of the attempts it is
running (task tokens) and of the conversations it caches. Every worker looks for the leases of dead
workers every ``SWEEP_SECONDS``; for each it takes the conversations off the dead worker's sticky
queue (``ResetStickyTaskQueue``), fails the attempts (Temporal retries each at once, on a live
worker), and removes the lease (``reclaim``: the same whoever keeps the leases).

Two ``LeaseStore``\\ s keep them. ``FileLeases`` (the default): a file under
``<data dir>/workers/<namespace>@<server>`` that the worker keeps locked (``flock``: the kernel
releases the lock when the process ends, however it ends), the record beside it; only workers that
share the data dir see each other (one host). ``stores.leases.PostgresLeases`` (with
``AGENT_DATABASE_URL``): a row per worker that it refreshes, dead when the database's clock says it
was not refreshed for a while; every host sees every other.

A worker that cannot write its lease stops (``LeaseError``): running on, its calls would wait for
their timeouts after a crash, and nobody would know why. So does a worker whose lease another took
(it was paused or cut off past the dead interval: its calls were retried elsewhere): it cancels the
attempts it runs, and an attempt it was handed starts only after a fresh read of the lease says it
was not taken (``check``; ``durable_agents/stores/leases.py``), its epoch then the fencing token of its
``ctx.once`` claims (``durable_agents/stores/idempotency.py``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    WorkflowInstanceDetails,
    WorkflowRunner,
)

from durable_agents.settings import LEASE_DEAD_SECONDS, REFRESH_SECONDS
from durable_agents.stores.idempotency import EPOCH, StaleEpoch
from durable_agents.worker.metrics import count_takeover
from durable_agents.worker.runners import Activate, Around, AroundAttempts, Attempt, WatchingRunner

logger = logging.getLogger(__name__)

SWEEP_SECONDS = 0.5
"""How often a worker looks for the leases of dead workers."""
WRITE_DELAY = 0.05
"""A new attempt is in the lease within this (an attempt started just before the worker died
may be missed: its heartbeat timeout then retries it)."""
LOST_ERROR = "WorkerLost"
RETRY_AT_ONCE = timedelta(milliseconds=10)
"""The retry delay a dead worker's attempts get instead of their retry policy's backoff."""
"""The type of the failure a dead worker's attempts get (retryable)."""

Reclaim = Callable[[str], Awaitable[None]]
"""Moves what a dead worker's lease record names (``reclaim`` with its client)."""


class LeaseError(RuntimeError):
    """This worker cannot keep its lease: it stops rather than run unannounced."""


class LeaseStore(Protocol):
    """Where the leases of the workers of one Temporal server and namespace are kept. A record is
    the JSON ``Lease.record`` writes."""

    async def hold(self, record: str) -> bool:
        """Take this worker's lease; False (with a warning) where leases cannot work: then the
        worker neither has one nor judges the others'. Raises when it cannot be written."""
        ...

    async def write(self, record: str | None) -> None:
        """The record when it changed, None to say only that the worker is alive."""
        ...

    async def sweep(self, reclaim: Reclaim) -> None:
        """``reclaim`` each dead worker's record, then remove its lease (left for the next sweep
        if ``reclaim`` raises)."""
        ...

    async def check(self) -> int | None:
        """This worker's epoch (None where leases carry none), read afresh: raises ``StaleEpoch``
        when another worker took the lease."""
        ...

    async def release(self) -> None:
        """The worker stopped cleanly: nothing of it is left to reclaim."""
        ...


def server_of(client: Client) -> str:
    """A task token means nothing to another server or namespace: leases are kept per both."""
    return f"{client.namespace}@{client.service_client.config.target_host}"


class FileLeases:
    """Leases as locked files in one folder per server and namespace (see the module docstring)."""

    def __init__(self, folder: Path, name: str) -> None:
        self.lock_path = folder / f"{name}.lock"
        self._calls_path = folder / f"{name}.calls"
        self._fd: int | None = None
        self._writing: asyncio.Future[None] | None = None

    def __str__(self) -> str:
        return str(self.lock_path.parent)

    async def hold(self, record: str) -> bool:
        """The file is locked under another name first and then renamed: a worker looking for dead
        leases never sees it unlocked."""
        unlocked = self.lock_path.with_suffix(".new")
        try:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(unlocked, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as e:
            raise LeaseError(f"cannot write the lease {e.filename or unlocked}: {e.strerror}") from e
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _lockable(unlocked):  # a file system whose locks do nothing: every lease would look dead
            logger.warning("no lease: file locks do not work in %s", self)
            os.close(fd)
            unlocked.unlink(missing_ok=True)
            return False
        unlocked.replace(self.lock_path)
        self._fd = fd
        await self.write(record)
        return True

    async def write(self, record: str | None) -> None:
        """In a thread: replacing a file can wait for the disk (ext4 writes a file renamed over
        another out first), which on the event loop held up every activity for 1-2 ms, 20 times a
        second in a burst (py-spy, ``bench.peers``)."""
        if record is None or self._fd is None:
            return  # the lock says it is alive; or released meanwhile
        self._writing = asyncio.ensure_future(asyncio.to_thread(self._write, record))
        await asyncio.shield(self._writing)  # cancelled, it still ends before ``release``

    def _write(self, record: str) -> None:
        partial = self._calls_path.with_suffix(".partial")
        try:
            partial.write_text(record)
            partial.replace(self._calls_path)  # a reader sees the old record or the new one, never half
        except OSError as e:
            raise LeaseError(f"cannot write the lease {partial}: {e.strerror}") from e

    async def sweep(self, reclaim: Reclaim) -> None:
        for lock_path in sorted(self.lock_path.parent.glob("*.lock")):
            if lock_path == self.lock_path:
                continue
            try:
                fd = os.open(lock_path, os.O_RDWR)
            except FileNotFoundError:
                continue  # another worker removed it
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its worker is alive
                if os.fstat(fd).st_nlink == 0:
                    continue  # another worker removed it while we opened it
                calls_path = lock_path.with_suffix(".calls")
                try:
                    record = calls_path.read_text()
                except FileNotFoundError:  # it died before its first write
                    record = json.dumps({"identity": lock_path.stem, "running": []})
                await reclaim(record)
                for path in (calls_path, calls_path.with_suffix(".partial"), lock_path):
                    path.unlink(missing_ok=True)
            finally:
                os.close(fd)

    async def check(self) -> int | None:
        """No epoch: a locked file cannot be taken from a process that is alive, paused or not."""
        return None

    async def release(self) -> None:
        if self._fd is None:
            return
        if self._writing is not None:  # a write left running would put the record back
            await asyncio.gather(self._writing, return_exceptions=True)
        for path in (self._calls_path, self._calls_path.with_suffix(".partial"), self.lock_path):
            path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None


def _lockable(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


class Lease:
    """This worker's lease: what it runs and caches, written to its ``LeaseStore`` as it changes."""

    def __init__(self, store: LeaseStore, identity: str) -> None:
        self.store = store
        self.identity = identity
        self._running: dict[bytes, tuple[str, str]] = {}
        """Task token → the conversation (workflow id, run id) of each running attempt."""
        self._cached: set[tuple[str, str]] = set()
        """The conversations (workflow id, run id) this worker has in its cache."""
        self._changed = asyncio.Event()
        self._attempts: dict[bytes, asyncio.Task] = {}
        """Task token → the task running the attempt: cancelled when the lease is taken."""

    def started(self, task_token: bytes, workflow_id: str, run_id: str) -> None:
        self._running[task_token] = (workflow_id, run_id)
        if (task := asyncio.current_task()) is not None:
            self._attempts[task_token] = task
        self._changed.set()

    def finished(self, task_token: bytes) -> None:
        self._running.pop(task_token, None)
        self._attempts.pop(task_token, None)
        self._changed.set()

    def cancel_running(self) -> None:
        """The lease was taken: every attempt runs elsewhere now. A ``ctx.once`` step that has run
        its function still records its result (``durable_agents/stores/idempotency.py``)."""
        for task in self._attempts.values():
            task.cancel()

    def cached(self, workflow_id: str, run_id: str) -> None:
        self._cached.add((workflow_id, run_id))
        self._changed.set()

    def evicted(self, workflow_id: str, run_id: str) -> None:
        self._cached.discard((workflow_id, run_id))
        self._changed.set()

    def record(self) -> str:
        """Task tokens base64 (JSON has no bytes); workflows: every conversation whose next workflow
        task could wait for this worker (not standalone activities: no workflow id)."""
        tokens = [base64.b64encode(token).decode() for token in self._running]
        workflows = sorted({each for each in self._running.values() if each[0]} | self._cached)
        return json.dumps({"identity": self.identity, "running": tokens, "workflows": workflows})

    async def keep(self) -> None:
        """Write the record within ``WRITE_DELAY`` of a change, else say every ``REFRESH_SECONDS``
        that the worker is alive. Returns only by raising: the lease cannot be kept, or was taken."""
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), REFRESH_SECONDS)
                if not self._changed.is_set():
                    await self.store.write(None)
                    continue
                await asyncio.sleep(WRITE_DELAY)  # one write for the attempts that start together
                self._changed.clear()
                await self.store.write(self.record())
        except StaleEpoch as e:
            self.cancel_running()
            raise LeaseError(str(e)) from e

    async def sweep(self, client: Client) -> None:
        """Every ``SWEEP_SECONDS`` (the first time at once: a replacement retries its predecessor's
        calls as it starts) reclaim what the dead workers left."""
        while True:
            try:
                await self.store.sweep(partial(reclaim, client))
            except Exception:  # the server or the database unreachable for a moment: next time
                logger.exception("could not retry the calls of a dead worker")
            await asyncio.sleep(SWEEP_SECONDS)


async def reclaim(client: Client, record: str) -> None:
    """Take a dead worker's conversations off its sticky queue, then fail its attempts. What has
    finished meanwhile (NOT_FOUND) is expected, and only logged at debug level."""
    recorded = json.loads(record)
    identity = recorded["identity"]
    count_takeover(client)
    # All at once: each conversation's next workflow task waits on the dead worker's sticky queue
    # only until its sticky timeout (5 s), which one call after another used to outlast.
    moved = sum(
        await asyncio.gather(*(_unstick(client, wid, run) for wid, run in recorded.get("workflows", [])))
    )  # before their calls are retried
    error = ApplicationError(  # retried at once: the attempt did not fail, its worker did
        f"worker {identity} stopped while running this attempt",
        type=LOST_ERROR,
        next_retry_delay=RETRY_AT_ONCE,
    )

    async def fail(token: str) -> bool:
        try:
            await client.get_async_activity_handle(task_token=base64.b64decode(token)).fail(error)
            return True
        except RPCError as e:
            if e.status != RPCStatusCode.NOT_FOUND:
                raise
            logger.debug("an attempt of the dead worker %s had finished: %s", identity, e)
            return False

    failed = sum(await asyncio.gather(*(fail(token) for token in recorded["running"])))
    if failed or moved:
        logger.warning(
            "worker %s is gone: retried %d of its attempts, took %d conversations off its sticky queue",
            identity,
            failed,
            moved,
        )


async def _unstick(client: Client, workflow_id: str, run_id: str) -> bool:
    """The conversation's next workflow task goes to any worker, not to the dead one's sticky queue."""
    request = ResetStickyTaskQueueRequest(
        namespace=client.namespace, execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id)
    )
    try:
        await client.workflow_service.reset_sticky_task_queue(request)
        return True
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:  # the conversation has completed
            logger.debug("conversation %s of a dead worker has completed: %s", workflow_id, e)
        else:  # only a delay is at stake: the calls are retried all the same
            logger.warning("conversation %s stays on the dead worker's sticky queue: %s", workflow_id, e)
        return False


async def run_with_lease(
    lease: Lease, client: Client, run: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]
) -> None:
    """``run`` (the worker) while its lease is held and the dead workers' leases are swept. A lease
    that cannot be written ``stop``\\ s the worker, and the ``LeaseError`` is raised once it has."""
    held = await lease.store.hold(lease.record())
    watchers = [asyncio.create_task(lease.keep(), name="lease")] if held else []
    if held:
        watchers.append(asyncio.create_task(lease.sweep(client), name="lost-calls"))
    run_task = asyncio.ensure_future(run())
    try:
        await asyncio.wait([run_task, *watchers[:1]], return_when=asyncio.FIRST_COMPLETED)
        if not run_task.done():  # the keeper returns only by raising: the lease cannot be kept
            await stop()
            await asyncio.wait([run_task])
            watchers[0].result()
        await run_task
    finally:
        for task in (run_task, *watchers):  # still running only if this call was cancelled
            task.cancel()
        await asyncio.gather(run_task, *watchers, return_exceptions=True)
        await lease.store.release()


def lease_store(
    database_url: str | None,
    leases: Path,
    client: Client,
    identity: str,
    dead_seconds: float = LEASE_DEAD_SECONDS,
) -> LeaseStore:
    """PostgreSQL leases with a database (every host sees them, dead after ``dead_seconds``
    without a refresh), else files under ``leases``."""
    name = f"{identity.replace('/', '_')}-{uuid.uuid4().hex[:8]}"
    if database_url:
        from durable_agents.stores.leases import PostgresLeases  # asyncpg only where a database is used

        return PostgresLeases(database_url, server_of(client), name, dead_seconds)
    return FileLeases(leases / server_of(client).replace("/", "_"), name)


class RecordRunningCalls(Interceptor):
    """Keeps the lease's list of running attempts, each started only while the lease holds (local
    activities run inside a workflow task: a dead worker's workflow task is retried, not them)."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return AroundAttempts(next, self._recorded)

    async def _recorded(self, input: ExecuteActivityInput, attempt: Attempt) -> Any:
        """Starts an attempt only after a fresh read says the lease was not taken, and records it."""
        info = activity.info()
        if info.is_local:
            return await attempt()
        try:
            EPOCH.set(await self.lease.store.check())
        except StaleEpoch as e:  # handed to this worker before its lease was taken: it runs elsewhere
            logger.warning("refused an attempt of %s: %s", info.activity_type, e)
            raise ApplicationError(
                f"{e}: this attempt runs elsewhere", type=LOST_ERROR, next_retry_delay=RETRY_AT_ONCE
            ) from e
        self.lease.started(info.task_token, info.workflow_id or "", info.workflow_run_id or "")
        try:
            return await attempt()
        finally:
            self.lease.finished(info.task_token)


class RecordCachedConversations(WatchingRunner):
    """Wraps the worker's workflow runner to keep the lease's list of cached conversations: the
    runner makes an instance when a conversation enters the cache, and the instance gets the
    eviction as its last activation."""

    def __init__(self, runner: WorkflowRunner, lease: Lease) -> None:
        super().__init__(runner)
        self._lease = lease

    def watch(self, det: WorkflowInstanceDetails) -> tuple[WorkflowInstanceDetails, Around]:
        key = (det.info.workflow_id, det.info.run_id)
        self._lease.cached(*key)
        loop = asyncio.get_running_loop()  # activations run in the workflow threads

        def around(act: WorkflowActivation, activate: Activate) -> WorkflowActivationCompletion:
            completion = activate(act)
            if any(job.HasField("remove_from_cache") for job in act.jobs):
                loop.call_soon_threadsafe(self._lease.evicted, *key)
            return completion

        return det, around
