"""A host paused (SIGSTOP) past the dead interval, its lease taken by the other host, then resumed:
no ``ctx.once`` effect twice, and nothing it was handed before the takeover starts after it.

Two worker processes as two hosts on one PostgreSQL (``tests.support.host_worker``), with a short
dead interval set here; the effects go to a file outside the workspaces, one line each.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from tests.support.hosts import Host

DEAD_SECONDS = "1.5"
"""The hosts' dead interval (``AGENT_LEASE_DEAD_SECONDS``)."""


@pytest.fixture
def hosts(server: EmbeddedServer, database_url: str, tmp_path: Path) -> Iterator[tuple[Host, Host, str]]:
    task_queue = f"fence-{uuid.uuid4().hex[:8]}"
    env = {
        "TEMPORAL_ADDRESS": server.address,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_DATABASE_URL": database_url,
        "AGENT_LEASE_DEAD_SECONDS": DEAD_SECONDS,
        "FAULT_EFFECTS": str(tmp_path / "effects.txt"),  # the outside world both hosts reach
    }
    a, b = Host(tmp_path / "host-a", env), Host(tmp_path / "host-b", env)
    yield a, b, task_queue
    for host in (a, b):
        if host.proc and host.proc.poll() is None:
            host.proc.send_signal(signal.SIGCONT)  # a stopped process ignores SIGKILL until continued
        host.kill()


async def _start(client: Client, task_queue: str, agent) -> WorkflowHandle:
    return await client.start_workflow(
        AgentWorkflow.run,
        conversation(agent),
        id=f"fence-{uuid.uuid4().hex[:10]}",
        task_queue=task_queue,
        task_timeout=timedelta(seconds=2),  # a workflow task handed to the paused host moves soon
    )


async def _lease_gone(url: str, host: Host) -> None:
    """Until the other host has taken the host's lease (its row is no longer in ``agent_workers``)."""
    pid = host.proc.pid  # type: ignore[union-attr]
    connection = await asyncpg.connect(url)
    try:
        for _ in range(1200):  # a minute, more on a loaded machine
            if not await connection.fetchval(
                "SELECT count(*) FROM agent_workers WHERE starts_with(worker, $1)", f"{pid}@"
            ):
                return
            await asyncio.sleep(0.05)
    finally:
        await connection.close()
    raise AssertionError(f"the lease of {host.folder.name} was never taken")


async def _until(holds, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not holds():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def _started_on(handle: WorkflowHandle, host: Host) -> None:
    """Until the conversation's running call is an attempt the host started (or it has completed)."""
    pid = f"{host.proc.pid}@"  # type: ignore[union-attr]

    def on_host(pending) -> bool:
        started = pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        return started and pending.last_worker_identity.startswith(pid)

    for _ in range(1200):
        described = await handle.describe()
        if described.status != WorkflowExecutionStatus.RUNNING or any(
            on_host(p) for p in described.raw_description.pending_activities
        ):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{handle.id}: no attempt started on {host.folder.name}")


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_a_paused_host_inside_a_once_step_leaves_each_effect_once(
    shared: Client, hosts: tuple[Host, Host, str], tmp_path: Path, database_url: str
) -> None:
    """A is stopped inside three ``ctx.once`` functions (two blocked in a synchronous call in a
    thread, one awaiting); B takes A's lease and retries the calls, which wait for A's claims; A continues,
    finishes each function and records its result, which B's retries return."""
    a, b, task_queue = hosts
    effects = tmp_path / "effects.txt"
    a.start(FAULT_INSIDE_SECONDS="2")
    agents = [
        scripted_agent(
            step("", ("pay_inside", {"amount": n, "blocking": n < 2})),
            step("{last_result}"),
            tools=["pay_inside"],
        )
        for n in range(3)
    ]
    handles = [await _start(shared, task_queue, agent) for agent in agents]
    await _until(lambda: len(_lines(effects.with_suffix(".inside"))) == 3, "A never got inside the steps")
    os.kill(a.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
    await asyncio.to_thread(b.start, FAULT_INSIDE_SECONDS="2")
    await _lease_gone(database_url, a)
    for handle in handles:
        await _started_on(handle, b)
    await asyncio.sleep(3)  # B's retries wait for A's claims (unfenced, they ran the steps again)
    os.kill(a.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
    results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), timeout=60)

    assert [r.final_text for r in results] == ["paid 0 EUR", "paid 1 EUR", "paid 2 EUR"]
    keys = [f"{h.id}/{h.first_execution_run_id}/call_1_0/pay" for h in handles]
    assert sorted(_lines(effects)) == sorted(f"{key} {n}" for n, key in enumerate(keys))


async def test_a_resumed_host_starts_nothing_it_was_handed_before_its_lease_was_taken(
    shared: Client, hosts: tuple[Host, Host, str], tmp_path: Path, database_url: str
) -> None:
    """A is stopped while idle; the burst that follows is handed partly to A's waiting polls (each
    call's first attempt starts on B, eagerly, and fails; its retry is queued), and B runs every call
    once their attempts time out. A, continued, starts nothing it was handed, and stops."""
    a, b, task_queue = hosts
    effects = tmp_path / "effects.txt"
    await asyncio.gather(asyncio.to_thread(a.start), asyncio.to_thread(b.start))
    os.kill(a.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
    await _lease_gone(database_url, a)
    agent = scripted_agent(step("", ("note", {"text": "once"})), step("{last_result}"), tools=["note"])
    handles = [await _start(shared, task_queue, agent) for _ in range(8)]
    results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), timeout=90)
    assert [r.final_text for r in results] == ["noted once"] * 8
    os.kill(a.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]

    def settled() -> bool:  # A has stopped, or started what it was handed
        twice = [key for key, count in Counter(_lines(effects)).items() if count > 1]
        return bool(twice) or a.proc.poll() is not None  # type: ignore[union-attr]

    await _until(settled, "A neither stopped nor ran anything after it was continued")
    await asyncio.sleep(2)  # what A was handed reaches it at once: anything it starts shows by now

    keys = [f"{h.id}/{h.first_execution_run_id}/call_1_0 once" for h in handles]
    assert sorted(_lines(effects)) == sorted(keys)
    # A started none of what it was handed (each effect above once), and stopped. An attempt that
    # reaches it before it stops is refused ("refused an attempt", test_lost_calls), one that comes
    # after is dropped with it: which comes first once A resumes is a race in A, seen both ways.
    assert "this worker stops" in (a.folder / "worker.log").read_text()
