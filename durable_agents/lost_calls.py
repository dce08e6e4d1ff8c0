"""A dead worker's activities retried at once, not at their timeouts.

A worker that dies (SIGKILL, OOM, a lost host) leaves its running activity attempts to Temporal's
timeouts: a model call is retried when its heartbeat timeout expires, an activity without
heartbeats only at its start-to-close timeout. Here each worker holds a lease while it runs: a
file under ``<data dir>/workers/<namespace>@<server>`` that it keeps locked (``flock``: the kernel
releases the lock when the process ends, however it ends), and beside it the task tokens of the
attempts it is running. Every worker looks at the other leases every second; a lease it can lock
belongs to a worker that is gone: it fails that worker's attempts (Temporal retries each at once,
on a live worker) and removes the lease. The conversations of those attempts also lose their
sticky queue (``ResetStickyTaskQueue``): the dead worker had them cached, and their next workflow
task would otherwise wait for it the sticky timeout (5 s) and time out before going to any worker.
(A conversation that a live worker has cached while its call ran on the dead one is replayed once
on its next step: the price of not knowing which worker caches what.)

Only workers that share the data dir see each other's leases (one host, or a shared folder
whose file locks work); a worker on another host is still noticed by the heartbeat timeout.
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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

logger = logging.getLogger(__name__)

SWEEP_SECONDS = 1.0
"""How often a worker looks for the leases of dead workers."""
WRITE_DELAY = 0.05
"""A new attempt is in the lease file within this (an attempt started just before the worker died
may be missed: its heartbeat timeout then retries it)."""
LOST_ERROR = "WorkerLost"
"""The type of the failure a dead worker's attempts get (retryable)."""


class Lease:
    """This worker's lease: a locked file while it runs (``hold`` to ``release``), and the attempts
    it is running."""

    def __init__(self, leases: Path, client: Client, identity: str) -> None:
        self.identity = identity
        # One folder per Temporal server and namespace: a task token means nothing to another.
        server = f"{client.namespace}@{client.service_client.config.target_host}"
        folder = leases / server.replace("/", "_")
        name = f"{identity.replace('/', '_')}-{uuid.uuid4().hex[:8]}"
        self.lock_path = folder / f"{name}.lock"
        self._calls_path = folder / f"{name}.calls"
        self._fd: int | None = None
        self._running: dict[bytes, tuple[str, str]] = {}
        """Task token → the conversation (workflow id, run id) of each running attempt."""
        self._write_pending = False

    def hold(self) -> bool:
        """Lock the lease file; False (with a warning) where that cannot work: then this worker
        neither has a lease nor judges the others'. The file is locked under another name first
        and then renamed: a worker looking for dead leases never sees it unlocked."""
        unlocked = self.lock_path.with_suffix(".new")
        try:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(unlocked, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as e:
            logger.warning("no lease (%s): a dead worker's calls wait for their timeouts", e)
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _lockable(unlocked):  # a file system whose locks do nothing: every lease would look dead
            logger.warning("no lease: file locks do not work in %s", self.lock_path.parent)
            os.close(fd)
            unlocked.unlink(missing_ok=True)
            return False
        os.write(fd, self.identity.encode())
        unlocked.replace(self.lock_path)
        self._fd = fd
        self._write()
        return True

    def started(self, task_token: bytes, workflow_id: str, run_id: str) -> None:
        self._running[task_token] = (workflow_id, run_id)
        self._schedule_write()

    def finished(self, task_token: bytes) -> None:
        self._running.pop(task_token, None)
        self._schedule_write()

    def _schedule_write(self) -> None:
        if not self._write_pending and self._fd is not None:
            self._write_pending = True
            asyncio.get_running_loop().call_later(WRITE_DELAY, self._write)

    def _write(self) -> None:
        self._write_pending = False
        if self._fd is None:
            return  # released meanwhile
        tokens = [base64.b64encode(token).decode() for token in self._running]
        workflows = sorted({each for each in self._running.values() if each[0]})  # not standalone ones
        partial = self._calls_path.with_suffix(".partial")
        partial.write_text(json.dumps({"identity": self.identity, "running": tokens, "workflows": workflows}))
        partial.replace(self._calls_path)  # a reader sees the old list or the new one, never half

    def release(self) -> None:
        """The worker stopped cleanly: nothing of it is left to fail."""
        if self._fd is None:
            return
        for path in (self._calls_path, self._calls_path.with_suffix(".partial"), self.lock_path):
            path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None


class RecordRunningCalls(Interceptor):
    """Keeps the lease's list of running attempts (local activities run inside a workflow task:
    a dead worker's workflow task is retried, not them)."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Recording(next, self.lease)


class _Recording(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, lease: Lease) -> None:
        super().__init__(next)
        self._lease = lease

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if info.is_local:
            return await super().execute_activity(input)
        self._lease.started(info.task_token, info.workflow_id or "", info.workflow_run_id or "")
        try:
            return await super().execute_activity(input)
        finally:
            self._lease.finished(info.task_token)


async def fail_lost_calls(client: Client, folder: Path, own: Lease | None = None) -> int:
    """Fail the running attempts of every dead worker whose lease is in ``folder``; how many."""
    failed = 0
    for lock_path in sorted(folder.glob("*.lock")):
        if own is not None and lock_path == own.lock_path:
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
            failed += await _fail_calls_of(client, lock_path)
        finally:
            os.close(fd)
    return failed


def _lockable(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


async def _fail_calls_of(client: Client, lock_path: Path) -> int:
    calls_path = lock_path.with_suffix(".calls")
    try:
        recorded = json.loads(calls_path.read_text())
    except FileNotFoundError:
        recorded = {"identity": lock_path.stem, "running": []}
    error = ApplicationError(
        f"worker {recorded['identity']} stopped while running this attempt", type=LOST_ERROR
    )
    for workflow_id, run_id in recorded.get("workflows", []):  # before their calls are retried
        await _unstick(client, workflow_id, run_id)
    failed = 0
    for token in recorded["running"]:
        try:
            await client.get_async_activity_handle(task_token=base64.b64decode(token)).fail(error)
            failed += 1
        except RPCError as e:
            if e.status != RPCStatusCode.NOT_FOUND:  # NOT_FOUND: it finished, or was already retried
                raise
    if failed:
        logger.warning("retried %d attempts of the dead worker %s", failed, recorded["identity"])
    for path in (calls_path, calls_path.with_suffix(".partial"), lock_path):
        path.unlink(missing_ok=True)
    return failed


async def _unstick(client: Client, workflow_id: str, run_id: str) -> None:
    """The conversation's next workflow task goes to any worker, not to the dead one's sticky queue."""
    request = ResetStickyTaskQueueRequest(
        namespace=client.namespace, execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id)
    )
    try:
        await client.workflow_service.reset_sticky_task_queue(request)
    except RPCError as e:  # only a delay is at stake: the calls are retried all the same
        logger.warning("conversation %s stays on the dead worker's sticky queue: %s", workflow_id, e)


@contextlib.asynccontextmanager
async def watching_for_lost_calls(client: Client, lease: Lease) -> AsyncIterator[None]:
    """While the worker runs: its lease held, and every ``SWEEP_SECONDS`` the dead workers'
    attempts failed (the first time at once: a replacement retries its predecessor's calls as it
    starts)."""
    if not lease.hold():
        yield
        return

    async def sweep() -> None:
        while True:
            try:
                await fail_lost_calls(client, lease.lock_path.parent, lease)
            except Exception:  # the server unreachable for a moment: try again next time
                logger.exception("could not retry the calls of a dead worker")
            await asyncio.sleep(SWEEP_SECONDS)

    task = asyncio.create_task(sweep(), name="lost-calls")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        lease.release()
