"""Who else polls a worker's task queue, so that a new conversation is written in a way every one of
them can replay.

A new run of this release records no marker (workflows/versioning.py, ``begin``): a worker of the
previous release cannot replay such a history. During a rolling deploy, both poll one queue and a
conversation's next workflow task may go to either; so while any worker of an earlier release (or
one whose release it cannot tell) polls, new runs are written the previous release's way, with its
marker, which both replay (``Fleet.way``, the workflow's extern function ``WAY``). Once every poller
is of this release, new runs are unmarked. A rolling deploy spans one release: a worker of an
older one still polling cannot replay what this one writes, and the worker says so.

Each worker names its release in its build id (``built``: ``durable-agents-4-<digest>``, where the
worker's options name none and it is not versioned) or else in its identity (``tagged``:
``12345@host durable-agents/4``), and reads the others' from Temporal's list of the queue's
pollers (``DescribeTaskQueue``), every ``REFRESH`` seconds, counting those seen in the last
``RECENT``. A build id goes into history with each task the worker takes, as the SDK's default
does, at the same length; an identity's tag would add its bytes to 22 events of a conversation. A
worker that names no release (its own build id and its own identity) is to the others of an earlier
release, and they write the older way.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Interceptor, WorkflowInboundInterceptor, WorkflowInterceptorClassInput

import durable_agents.activities
import durable_agents.workflows
from durable_agents.workflows.versioning import BUILD, FIRST_LEAN, RELEASE, WAY, release_built

logger = logging.getLogger(__name__)

REFRESH = 10.0
"""Seconds between two looks at the queue's pollers."""
RECENT = timedelta(seconds=75)
"""A poller seen this recently still polls (a long poll lasts up to a minute)."""
_TAG = re.compile(r" durable-agents/(\d+)$")


def tagged(identity: str) -> str:
    """``identity`` naming this release, for a worker whose build id cannot (``built``)."""
    return f"{identity} durable-agents/{RELEASE}"


@functools.cache
def built() -> str:
    """The build id of a worker whose options name none: this release, then a digest of the
    package's code (32 characters, as the SDK's default, a digest of all the loaded code). A worker
    of your own code that needs a build id of its own sets it (its identity then names the release)."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]  # durable_agents, and where its mapped folders are
    roots = (package, *durable_agents.workflows.__path__, *durable_agents.activities.__path__)
    # A set: installed, the mapped folders are inside the package, and each file counts once.
    for path in sorted({path.resolve() for root in roots for path in Path(root).rglob("*.py")}):
        digest.update(path.read_bytes())
    built = f"durable-agents-{RELEASE}-"
    assert BUILD.match(built)
    return built + digest.hexdigest()[: 32 - len(built)]


def release_in(identity: str, build_id: str = "") -> int:
    """The release a worker names in its build id (``built``) or its identity (``tagged``); one
    before ``FIRST_LEAN`` when it names none."""
    if (named := release_built(build_id)) is not None:
        return named
    found = _TAG.search(identity)
    return int(found[1]) if found else FIRST_LEAN - 1


class Fleet(Interceptor):
    """The oldest release among the other workers polling ``task_queue``, and so the way this
    worker writes a new conversation (``way``), which it gives the workflow as the extern function
    ``WAY``: an interceptor of the worker only for that."""

    def __init__(self, client: Client, task_queue: str, identity: str) -> None:
        self._client, self._task_queue, self._identity = client, task_queue, identity
        self.oldest: int | None = None
        """None until the pollers were read: until then, new runs are written the previous way."""

    def way(self) -> int:
        """Whose way a new run is written: this release's once every other poller is of it (or
        later), else the previous release's (a rolling deploy spans one release)."""
        if self.oldest is not None and self.oldest >= RELEASE:
            return RELEASE
        return max(RELEASE - 1, FIRST_LEAN)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        input.unsafe_extern_functions[WAY] = self.way
        return None

    async def refresh(self) -> None:
        """Read the queue's pollers; keep what was known when Temporal does not answer."""
        try:
            polling = await releases_polling(self._client, self._task_queue)
        except RPCError as e:
            logger.warning("cannot list the pollers of task queue %s: %s", self._task_queue, e.message)
            return
        others = [release for identity, release in polling.items() if identity != self._identity]
        oldest = min(others, default=RELEASE)
        changed, self.oldest = oldest != self.oldest, oldest
        if changed and oldest < RELEASE:
            if oldest < self.way():
                logger.warning(
                    "a worker of release %d polls task queue %s: it cannot replay what this worker"
                    " (release %d) writes; a rolling deploy spans one release (docs/production.md)",
                    oldest,
                    self._task_queue,
                    RELEASE,
                )
            else:
                logger.info(
                    "a worker of release %d polls task queue %s: new conversations are written so"
                    " that it can replay them",
                    oldest,
                    self._task_queue,
                )

    async def watch(self) -> None:
        """Read the pollers again every ``REFRESH`` seconds, until cancelled."""
        while True:
            await asyncio.sleep(REFRESH)
            await self.refresh()


async def releases_polling(client: Client, task_queue: str) -> dict[str, int]:
    """The release of each worker seen polling ``task_queue``'s workflow tasks in the last ``RECENT``,
    by identity (``release_in``: from its build id or its identity). Raises ``RPCError`` when
    Temporal does not answer."""
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        ),
        timeout=timedelta(seconds=5),
    )
    since = datetime.now(UTC) - RECENT
    return {
        poller.identity: release_in(poller.identity, poller.worker_version_capabilities.build_id)
        for poller in described.pollers
        if poller.last_access_time.ToDatetime(tzinfo=UTC) > since
    }
