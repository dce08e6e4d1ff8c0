"""A rolling deploy without versioning: the previous release's worker (tests/upgrade/BASE, its own
checkout and process) and this release's poll one queue while both releases' starters start and
decide conversations. Nothing is lost: every conversation answers right, no workflow task fails on
either worker, no activity attempt fails for a name a worker does not know; this release writes
what it starts the way the previous one replays (durable_agents/worker/fleet.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agents.dev_server import EmbeddedServer
from durable_agents.settings import Settings
from durable_agents.worker.fleet import release_in
from durable_agents.worker.plugin import build_worker
from durable_agents.worker.versioning import releases_in
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.versioning import RELEASE
from tests.support.cli import starter
from tests.support.conversations import wait_for_pending
from tests.support.paths import ROOT, TESTS
from tests.support.releases import ReleaseWorker

BASE = (TESTS / "upgrade" / "BASE").read_text().split()[0]
ANSWER = "(12 + 30) * 2 = 84. I saved it to answer.txt in this conversation's workspace."
PER_STARTER = 4


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A git worktree of the previous release, removed afterwards."""
    path = tmp_path_factory.mktemp("previous") / "checkout"
    added = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(path), BASE],
        capture_output=True,
        text=True,
    )
    if added.returncode != 0:
        pytest.skip(f"git history lacks the previous release {BASE} (tests/upgrade/BASE): {added.stderr}")
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False)


async def _previous_starter(checkout: Path, server: EmbeddedServer, *argv: str) -> tuple[int, str, str]:
    """The previous release's ``starter.py`` against the test server."""
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "starter.py", *argv],
        cwd=checkout,
        env={"PATH": "/usr/bin:/bin", "TEMPORAL_ADDRESS": server.address, "PYTHONPATH": str(checkout)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


async def test_a_rolling_deploy_loses_nothing_with_both_releases_polling_one_queue(
    previous: Path, server: EmbeddedServer, client: Client, tmp_path: Path
) -> None:
    queue, suffix = f"mixed-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:6]
    data = tmp_path / "data"
    theirs = [f"mixed-prev-{i}-{suffix}" for i in range(PER_STARTER)]
    ours = [f"mixed-this-{i}-{suffix}" for i in range(PER_STARTER)]
    older = ReleaseWorker(previous, server.address, queue, data)
    try:
        await older.polling()
        async with build_worker(client, task_queue=queue, settings=Settings(data_dir=data)):
            prompt = "What is (12 + 30) * 2? Save the answer to answer.txt."
            started = await asyncio.gather(
                *(
                    _previous_starter(
                        previous,
                        server,
                        "--task-queue",
                        queue,
                        "start",
                        prompt,
                        "--agent",
                        "demo",
                        "--id",
                        id,
                    )
                    for id in theirs
                ),
                *(
                    starter(server, "--task-queue", queue, "start", prompt, "--agent", "demo", "--id", id)
                    for id in ours
                ),
            )
            assert [code for code, _, _ in started] == [0] * (2 * PER_STARTER), started
            handles = [client.get_workflow_handle_for(AgentWorkflow.run, id) for id in theirs + ours]
            for handle in handles:
                await wait_for_pending(handle, timeout=60)
            # Each release's starter decides the other's conversations.
            decided = await asyncio.gather(
                *(
                    _previous_starter(previous, server, "approve", id, "call_3_0", "--by", "previous")
                    for id in ours
                ),
                *(starter(server, "approve", id, "call_3_0", "--by", "this") for id in theirs),
            )
            assert [code for code, _, _ in decided] == [0] * (2 * PER_STARTER), decided
            results = await asyncio.gather(*(asyncio.wait_for(h.result(), 120) for h in handles))
            histories = [await h.fetch_history() for h in handles]
    finally:
        older.stop()

    assert [r.final_text for r in results] == [ANSWER] * (2 * PER_STARTER)
    assert [r.approvals[0].by for r in results] == ["this"] * PER_STARTER + ["previous"] * PER_STARTER
    trouble = {
        EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
        EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
    }
    assert [[e.event_type for e in h.events if e.event_type in trouble] for h in histories] == [[]] * (
        2 * PER_STARTER
    )
    retried = [
        e.activity_task_started_event_attributes.attempt
        for h in histories
        for e in h.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert set(retried) == {1}
    workers = {
        release_in(started.identity, started.worker_version.build_id)
        for h in histories
        for e in h.events
        if (started := e.activity_task_started_event_attributes)
        and e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    }
    assert workers == {RELEASE - 1, RELEASE}  # both took work
    assert all(RELEASE not in releases_in(h.events) for h in histories)  # written the older way
