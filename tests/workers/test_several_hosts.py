"""Workers on several hosts share one truth through AGENT_DATABASE_URL (a real PostgreSQL server).

Each "host" is a worker process with its own data folder, so anything still kept in local files
would be split between them; the test process (and ``starter.py``, run from a third folder) reach
the conversations only through Temporal and the database.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import MessageInput
from durable_agents.workflows.config import AgentSpec, CallPolicy
from durable_agents.workflows.messages import ScriptStep
from durable_agents.workflows.records import Decision
from tests.support.conversations import running_activity, wait_for_pending
from tests.support.history import no_task_failures
from tests.support.host_worker import big_text
from tests.support.hosts import AUTO, TOOLS, Host
from tests.support.paths import ROOT
from tests.support.postgres import Postgres


@pytest.fixture
def hosts(server: EmbeddedServer, database_url: str, tmp_path: Path) -> Iterator[tuple[Host, Host, str]]:
    task_queue = f"hosts-{uuid.uuid4().hex[:8]}"
    env = {
        "TEMPORAL_ADDRESS": server.address,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_DATABASE_URL": database_url,
        "FAULT_EFFECTS": str(tmp_path / "effects.txt"),  # the outside world both hosts reach
    }
    a, b = Host(tmp_path / "host-a", env), Host(tmp_path / "host-b", env)
    yield a, b, task_queue
    a.kill()
    b.kill()


async def _start(client: Client, task_queue: str, agent, prompt: str = "go", **kwargs) -> WorkflowHandle:
    return await client.start_workflow(
        AgentWorkflow.run,
        conversation(agent, prompt, **kwargs),
        id=f"hosts-{uuid.uuid4().hex[:10]}",
        task_queue=task_queue,
    )


async def _events(handle: WorkflowHandle) -> list:
    return [e async for e in handle.fetch_history_events()]


async def test_twenty_conversations_on_two_hosts_with_large_payloads_complete_and_read_back_elsewhere(
    shared: Client, hosts: tuple[Host, Host, str], tmp_path: Path, server: EmbeddedServer, database_url: str
) -> None:
    a, b, task_queue = hosts
    await asyncio.gather(asyncio.to_thread(a.start), asyncio.to_thread(b.start))
    big = {"tools": TOOLS, "max_tool_output_chars": 250_000}
    prompt = big_text(300_000, 99)
    plan: list[tuple[AgentSpec, str, str]] = [  # agent, prompt, the right answer
        (scripted_agent(step("", ("add", {"a": i, "b": 1})), step("{last_result}")), "go", str(i + 1))
        for i in range(14)
    ]
    for i in range(4):  # two 200 KB tool outputs each
        emits = [step("", ("emit", {"chars": 200_000, "seed": seed})) for seed in (i, 10 + i)]
        plan.append((scripted_agent(*emits, step("{last_result}"), **big), "go", big_text(200_000, 10 + i)))
    plan.append((scripted_agent(step("{user}"), **big), prompt, prompt))  # a 300 KB prompt
    charge = scripted_agent(step("", ("charge", {"amount": 5})), step("{last_result}"), **big)
    plan.append((charge, "go", "charged 5 EUR"))
    expected = [answer for _, _, answer in plan]
    starts = [_start(shared, task_queue, agent, text) for agent, text, _ in plan]
    handles = await asyncio.gather(*starts)
    results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), timeout=120)

    assert [r.final_text for r in results] == expected
    identities = set()
    for handle in handles:
        events = await _events(handle)
        assert not [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED], handle.id
        identities |= {
            e.activity_task_started_event_attributes.identity
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        }
    assert len(identities) == 2  # both hosts ran activities

    third = tmp_path / "third"
    third.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "TEMPORAL_ADDRESS": server.address,
        "AGENT_DATABASE_URL": database_url,
        "AGENT_DATA_DIR": str(third / "data"),
        "AGENT_TASK_QUEUE": task_queue,
    }

    async def history(handle: WorkflowHandle) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "starter.py"), "history", handle.id, "--json",
            cwd=third, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        return proc.returncode or 0, (out or err).decode()

    readers = asyncio.Semaphore(4)

    async def limited(handle: WorkflowHandle) -> tuple[int, str]:
        async with readers:
            return await history(handle)

    read = await asyncio.gather(*(limited(h) for h in handles))
    assert [code for code, _ in read] == [0] * 20
    for (_, out), text in zip(read, expected, strict=True):
        assert f'"text": "{text}"' in out
    assert not (third / "data").exists()  # nothing was read from or written to the third folder


async def _stored_results(url: str, workflow_id: str) -> int:
    """``ctx.once`` results the database holds for a conversation."""
    connection = await asyncpg.connect(url)
    try:
        return await connection.fetchval(
            "SELECT count(*) FROM agent_results WHERE starts_with(key, $1)", f"{workflow_id}/"
        )
    finally:
        await connection.close()


async def test_an_effect_happens_once_when_the_retry_runs_on_the_other_host(
    shared: Client, hosts: tuple[Host, Host, str], tmp_path: Path, database_url: str
) -> None:
    a, b, task_queue = hosts
    effects = tmp_path / "effects.txt"
    a.start(FAULT_AFTER_EFFECT="20")
    agent = scripted_agent(step("", ("charge", {"amount": 30})), step("{last_result}"), tools=["charge"])
    handle = await _start(shared, task_queue, agent)
    deadline = time.monotonic() + 30
    while not await _stored_results(database_url, handle.id):  # charged on A, recorded; the activity runs on
        assert time.monotonic() < deadline, "the tool never charged"
        await asyncio.sleep(0.05)
    assert effects.read_text() != ""
    a.kill()
    b.start(FAULT_AFTER_EFFECT="0")
    result = await handle.result()

    assert result.final_text == "charged 30 EUR"
    assert effects.read_text() == f"{handle.id}/{handle.first_execution_run_id}/call_1_0 30\n"
    [started] = [
        e.activity_task_started_event_attributes
        for e in await _events(handle)
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.attempt == 2
    ]
    assert started.identity.startswith(f"{b.proc.pid}@")  # type: ignore[union-attr]
    await no_task_failures(handle)


async def test_files_and_transcripts_follow_a_conversation_from_host_to_host(
    shared: Client, hosts: tuple[Host, Host, str]
) -> None:
    """Each turn runs on the other host: it reads the file the last turn wrote, and the model call
    finds the transcript in the store (a gap would record the 60 KB prompt in history again)."""
    a, b, task_queue = hosts
    turns = 4

    def agent(n: int):
        steps = [step("", ("write_file", {"path": "turn1.txt", "content": f"turn 1 of {n}"})), step("done")]
        for k in range(2, turns + 1):
            read = ("read_file", {"path": f"turn{k - 1}.txt"})
            steps += [step("", read, ("write_file", {"path": f"turn{k}.txt", "content": f"turn {k} of {n}"}))]
            steps += [step("{last_result}")]
        return scripted_agent(*steps, tools=TOOLS, chat=True)

    a.start()
    prompt = "p" * 60_000
    handles = await asyncio.gather(
        *(_start(shared, task_queue, agent(n), prompt, approval=AUTO) for n in range(6))
    )
    for handle in handles:
        for _ in range(400):
            if (await handle.query(AgentWorkflow.status)).state == "idle":
                break
            await asyncio.sleep(0.05)
    sizes = [[sum(e.ByteSize() for e in await _events(h))] for h in handles]
    replies: list[list[str]] = [[] for _ in handles]
    running, idle = a, b
    for _ in range(2, turns + 1):
        running.kill()
        idle.start()
        running, idle = idle, running
        answers = await asyncio.gather(
            *(h.execute_update(AgentWorkflow.send_message, MessageInput(text="next")) for h in handles)
        )
        for n, (handle, answer) in enumerate(zip(handles, answers, strict=True)):
            replies[n].append(answer.text)
            sizes[n].append(sum(e.ByteSize() for e in await _events(handle)))

    assert replies == [
        [
            f"turn {k - 1} of {n}, Wrote {len(f'turn {k} of {n}')} bytes to turn{k}.txt."
            for k in range(2, turns + 1)
        ]
        for n in range(6)
    ]
    for handle, size in zip(handles, sizes, strict=True):
        growth = [after - before for before, after in itertools.pairwise(size)]
        # ~13 KB a turn on every host; a store gap would record the 60 KB prompt again.
        assert max(growth) < 20_000, f"{handle.id}: history grew by {growth} bytes per turn"
        assert max(growth) - min(growth) < 6_000, f"{handle.id}: history grew by {growth} bytes per turn"
        await no_task_failures(handle)
    await asyncio.gather(*(h.signal(AgentWorkflow.end) for h in handles))


async def test_a_postgresql_restart_during_a_burst_loses_and_repeats_nothing(
    shared: Client, hosts: tuple[Host, Host, str], tmp_path: Path, postgres: Postgres
) -> None:
    a, b, task_queue = hosts
    effects = tmp_path / "effects.txt"
    await asyncio.gather(asyncio.to_thread(a.start), asyncio.to_thread(b.start))

    def agent(n: int):
        return scripted_agent(
            step("", ("add", {"a": n, "b": 1})),
            step("", ("charge", {"amount": n})),
            step("", ("emit", {"chars": 150_000, "seed": n})),
            step("{last_result}"),
            tools=TOOLS,
            max_tool_output_chars=200_000,
        )

    handles = await asyncio.gather(*(_start(shared, task_queue, agent(n)) for n in range(12)))
    deadline = time.monotonic() + 30
    while not (effects.exists() and effects.read_text()):  # the burst is under way
        assert time.monotonic() < deadline, "no conversation got to its charge"
        await asyncio.sleep(0.02)
    await asyncio.to_thread(postgres.restart)
    results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), timeout=120)

    for n, result in enumerate(results):
        assert [c.content for c in result.tool_calls] == [
            str(n + 1),
            f"charged {n} EUR",
            big_text(150_000, n),
        ]
        assert [m.kind for m in result.messages] == ["user", *["assistant", "tool_result"] * 3, "assistant"]
    charged = sorted(effects.read_text().splitlines())
    assert charged == sorted(f"{h.id}/{h.first_execution_run_id}/call_2_0 {n}" for n, h in enumerate(handles))
    for handle in handles:
        await no_task_failures(handle)


async def _records(url: str, host: Host, table: str) -> list[str | None]:
    """The ``record`` of each of the host's rows in ``table``: ``agent_workers`` holds its lease,
    ``agent_takeovers`` the takeover of it (its record cleared once the calls were reclaimed)."""
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch(
            f"SELECT record FROM {table} WHERE starts_with(worker, $1)",
            f"{host.proc.pid}@",  # type: ignore[union-attr]
        )
    finally:
        await connection.close()
    return [row["record"] for row in rows]


async def _lease(url: str, host: Host) -> dict | None:
    """The host's worker lease as the database holds it (None: there is none)."""
    records = await _records(url, host, "agent_workers")
    return json.loads(records[0]) if records and records[0] else None


async def _until_lease(url: str, host: Host, holds: Callable[[dict | None], bool]) -> None:
    for _ in range(1200):  # a minute, more on a loaded machine
        if holds(await _lease(url, host)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the lease of {host.folder.name} is {await _lease(url, host)}")


async def _until_reclaimed(url: str, host: Host) -> None:
    """Another host took the lease and has reclaimed what it named (its conversations are off
    the host's sticky queue): the takeover's record is cleared only after ``reclaim`` returns, while
    the lease's row goes first (a decision sent between the two would wait on the sticky queue)."""
    for _ in range(1200):  # a minute, more on a loaded machine
        if (taken := await _records(url, host, "agent_takeovers")) == [None]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the takeover of {host.folder.name}'s lease is {taken}")


async def test_a_killed_hosts_calls_and_conversations_move_to_the_other_host_without_a_timeout(
    shared: Client, hosts: tuple[Host, Host, str], database_url: str
) -> None:
    """kill -9 of host A (its leases in PostgreSQL): host B sees A's lease expire, takes A's
    conversations off A's sticky queue and fails A's running model calls (``WorkerLost``), not at
    their heartbeat timeout (ten minutes here); no workflow task waits for A and times out, neither
    of the conversations whose calls A ran nor of those it kept cached waiting for a person."""
    a, b, task_queue = hosts
    a.start()
    slow = scripted_agent(  # long enough that B is up before the calls end, even on a busy machine
        ScriptStep(text="done", delay_seconds=8),
        model_call=CallPolicy(timeout_seconds=900, heartbeat_seconds=600),
    )
    waiting = scripted_agent(
        step("", ("write_file", {"path": "a.txt", "content": "a"})), step("{last_result}"), tools=TOOLS
    )
    calls = await asyncio.gather(*(_start(shared, task_queue, slow) for _ in range(3)))
    approvals = await asyncio.gather(*(_start(shared, task_queue, waiting) for _ in range(2)))
    for handle in calls:
        await running_activity(handle, "durable_agents.call_model")
    for handle in approvals:
        await wait_for_pending(handle, timeout=60)
    cached = {handle.id for handle in approvals}
    await _until_lease(  # A's lease names its calls and the conversations it caches
        database_url,
        a,
        lambda lease: (
            lease is not None
            and len(lease["running"]) == 3
            and cached <= {workflow_id for workflow_id, _ in lease["workflows"]}
        ),
    )
    await asyncio.to_thread(b.start)
    a.kill()
    await _until_reclaimed(database_url, a)
    for handle in approvals:
        decision = Decision(call_id="call_1_0", approve=True, by="alice")
        assert (await handle.execute_update(AgentWorkflow.decide, decision)).state == "approved"
    results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in [*calls, *approvals])), timeout=60)

    assert [r.final_text for r in results] == ["done"] * 3 + ["Wrote 1 bytes to a.txt."] * 2
    for handle in calls:
        started = [
            e.activity_task_started_event_attributes
            for e in await _events(handle)
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        ]
        assert [(s.attempt, s.last_failure.application_failure_info.type) for s in started] == [
            (2, "WorkerLost")
        ]
        assert started[0].identity.startswith(f"{b.proc.pid}@")  # type: ignore[union-attr]
    for handle in [*calls, *approvals]:
        timed_out = [
            e for e in await _events(handle) if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
        ]
        assert timed_out == [], handle.id
        await no_task_failures(handle)
