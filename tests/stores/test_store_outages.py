"""A store outage is nobody's failure: PostgreSQL stopped under three worker hosts, then started again.

Each host is a real worker process with its own data folder; they share only the database. The
conversations write a file and charge a card through ``ctx.once``; the outage comes in the middle
of the burst. Nothing may fail, nothing may run twice, and the model never reads about the database.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durable_agents.converter import data_converter
from durable_agents.dev_server import EmbeddedServer
from durable_agents.stores.conversations import masked
from durable_agents.stores.postgres import Database, PostgresConversationStore, PostgresPayloadDriver
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.activity_io import brief
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import ApprovalPolicy
from durable_agents.workflows.records import ApprovalSignal
from tests.support.conversations import wait_for_pending
from tests.support.host_worker import big_text
from tests.support.hosts import AUTO, TOOLS, Host
from tests.support.postgres import Postgres

pytestmark = pytest.mark.timeout(300)


def _hosts(server: EmbeddedServer, url: str, folder: Path, names: str, **env: str) -> tuple[list[Host], str]:
    task_queue = f"outage-{uuid.uuid4().hex[:8]}"
    env = {
        "TEMPORAL_ADDRESS": server.address,
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_DATABASE_URL": url,
        "FAULT_EFFECTS": str(folder / "effects.txt"),
        **env,
    }
    return [Host(folder / f"host-{name}", env) for name in names], task_queue


@pytest.fixture
def three_hosts(
    server: EmbeddedServer, database_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[list[Host], str]]:
    hosts, task_queue = _hosts(server, database_url, tmp_path, "abc", **getattr(request, "param", {}))
    yield hosts, task_queue
    for host in hosts:
        host.kill()


def _agent(n: int):
    """Charges at once, works a few seconds (the outage begins meanwhile), then writes a file."""
    return scripted_agent(
        step("", ("charge", {"amount": n}), ("slow_step", {"seconds": 3})),
        step("", ("write_file", {"path": f"note{n}.txt", "content": f"note {n}"})),
        step("{last_result}"),
        tools=[*TOOLS, "slow_step"],
    )


async def _burst(
    client: Client, task_queue: str, count: int, first: int = 0, approval: ApprovalPolicy | None = AUTO
) -> list[WorkflowHandle]:
    return await asyncio.gather(
        *(
            client.start_workflow(
                AgentWorkflow.run,
                conversation(_agent(n), approval=approval),
                id=f"outage-{n}-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
            )
            for n in range(first, first + count)
        )
    )


async def _files(url: str, handles: list[WorkflowHandle]) -> list[bytes]:
    keys = [f"{h.id}/{h.first_execution_run_id}" for h in handles]
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch("SELECT data FROM agent_files WHERE workspace = ANY($1::text[])", keys)
    finally:
        await connection.close()
    return sorted(r["data"] for r in rows)


async def _when_charged(effects: Path, count: int) -> None:
    deadline = time.monotonic() + 60
    while not (effects.exists() and len(effects.read_text().splitlines()) >= count):
        assert time.monotonic() < deadline, "the burst never got to its charges"
        await asyncio.sleep(0.02)


async def _check_everything_happened_once(
    handles: list[WorkflowHandle], effects: Path, database_url: str
) -> None:
    results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), timeout=150)
    for n, result in enumerate(results):
        wrote = f"Wrote {len(f'note {n}')} bytes to note{n}.txt."
        assert result.final_text == wrote
        assert [(c.content, c.is_error) for c in result.tool_calls] == [
            (f"charged {n} EUR", False),
            ("slept 3s", False),
            (wrote, False),
        ]
        said = " ".join(m.model_dump_json() for m in result.messages).lower()
        for word in ("postgres", "database", "127.0.0.1", "unavailable"):
            assert word not in said, f"{handles[n].id}: the model read {word!r}"
    assert sorted(effects.read_text().splitlines()) == sorted(
        f"{h.id}/{h.first_execution_run_id}/call_1_0 {n}" for n, h in enumerate(handles)
    )
    assert await _files(database_url, handles) == sorted(f"note {n}".encode() for n in range(len(handles)))
    for handle in handles:
        failed = [
            e
            async for e in handle.fetch_history_events()
            if e.event_type
            in (EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED)
        ]
        assert failed == [], handle.id


async def test_a_90_second_postgresql_outage_mid_burst_fails_nothing_and_repeats_nothing(
    shared: Client, three_hosts: tuple[list[Host], str], tmp_path: Path, postgres: Postgres, database_url: str
) -> None:
    hosts, task_queue = three_hosts
    await asyncio.gather(*(asyncio.to_thread(h.start) for h in hosts))
    handles = await _burst(shared, task_queue, 30)
    await _when_charged(tmp_path / "effects.txt", 30)
    await asyncio.to_thread(postgres.stop)
    try:
        await asyncio.sleep(90)
    finally:
        await asyncio.to_thread(postgres.start)

    await _check_everything_happened_once(handles, tmp_path / "effects.txt", database_url)


@pytest.mark.parametrize("three_hosts", [{"AGENT_STORE_OUTAGE_SECONDS": "5"}], indirect=True)
async def test_past_the_outage_budget_conversations_say_waiting_for_storage_then_complete(
    shared: Client, three_hosts: tuple[list[Host], str], tmp_path: Path, postgres: Postgres, database_url: str
) -> None:
    hosts, task_queue = three_hosts
    await asyncio.gather(*(asyncio.to_thread(h.start) for h in hosts))
    handles = await _burst(shared, task_queue, 10)
    await _when_charged(tmp_path / "effects.txt", 10)
    await asyncio.to_thread(postgres.stop)
    try:
        waiting: dict[str, str] = {}
        deadline = time.monotonic() + 24
        while time.monotonic() < deadline and len(waiting) < len(handles):
            for handle in handles:
                status = await handle.query(AgentWorkflow.status)
                if status.state == "waiting_for_storage":
                    waiting[handle.id] = status.detail
            await asyncio.sleep(0.5)
        remaining = deadline - time.monotonic()
        if remaining > 0:
            await asyncio.sleep(remaining)
    finally:
        await asyncio.to_thread(postgres.start)

    assert waiting, "no conversation said it waits for storage"
    for detail in waiting.values():
        assert detail.startswith("waiting for PostgreSQL postgresql://agent:***@127.0.0.1:")
    await _check_everything_happened_once(handles, tmp_path / "effects.txt", database_url)


async def _admin(postgres: Postgres, *statements: str) -> None:
    connection = await asyncpg.connect(postgres.url())
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()


def _terminate(name: str) -> str:
    return f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"


async def test_a_database_dropped_then_made_anew_read_only_keeps_conversations_waiting(
    server: EmbeddedServer, postgres: Postgres, tmp_path: Path
) -> None:
    """The database gone, then back empty and read-only (a failover's new primary), then writable:
    the conversations wait throughout, and the worker makes its tables again."""
    url = await postgres.new_database()
    name = url.rpartition("/")[2]
    [host], task_queue = _hosts(server, url, tmp_path, "a")
    client = await Client.connect(
        server.address,
        data_converter=data_converter(payload_driver=PostgresPayloadDriver(Database(url))),
    )
    try:
        await asyncio.to_thread(host.start)
        handles = await _burst(client, task_queue, 4)
        await _when_charged(tmp_path / "effects.txt", 4)
        await _admin(postgres, f'DROP DATABASE "{name}" WITH (FORCE)')
        await asyncio.sleep(6)
        await _admin(  # made under another name, so nobody connects before it is read-only
            postgres,
            f'CREATE DATABASE "{name}_new"',
            f'ALTER DATABASE "{name}_new" SET default_transaction_read_only = on',
            f'ALTER DATABASE "{name}_new" RENAME TO "{name}"',
        )
        await asyncio.sleep(6)
        reset = f'ALTER DATABASE "{name}" RESET default_transaction_read_only'
        await _admin(postgres, reset, _terminate(name))
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), timeout=120)
    finally:
        host.kill()

    assert [r.final_text for r in results] == [
        f"Wrote {len(f'note {n}')} bytes to note{n}.txt." for n in range(4)
    ]
    log = (tmp_path / "host-a" / "worker.log").read_text().splitlines()
    prefix = f"PostgreSQL {masked(url)} unavailable: "
    said = {line.removeprefix(prefix).split(" (")[0].split(":")[0] for line in log if line.startswith(prefix)}
    assert said >= {"is read-only", "does not exist"}, said


async def test_two_hosts_on_two_databases_each_refuse_the_others_conversations(
    server: EmbeddedServer, postgres: Postgres, tmp_path: Path
) -> None:
    """A mixed configuration on one task queue: each conversation's calls run only on the host whose
    stores it started with. Each conversation waits for approval while its host is swapped for the
    other, which then refuses its write (and says so); it waits until its own host is back: nothing
    splits, nothing happens twice."""
    urls = [await postgres.new_database(), await postgres.new_database()]
    [a], task_queue = _hosts(server, urls[0], tmp_path, "a")
    b = Host(tmp_path / "host-b", a.env | {"AGENT_DATABASE_URL": urls[1]})
    client = await Client.connect(server.address, data_converter=data_converter())
    ids = [await PostgresConversationStore(Database(url)).identity() for url in urls]  # made here

    async def swap_while_waiting(own: Host, other: Host, first: int, theirs: str) -> list[WorkflowHandle]:
        await asyncio.to_thread(own.start)
        handles = await _burst(client, task_queue, 2, first=first, approval=None)
        for handle in handles:
            await wait_for_pending(handle, timeout=60)  # charged on its own host; now it waits
        own.kill()
        await asyncio.to_thread(other.start)
        await asyncio.gather(
            *(h.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_2_0")) for h in handles)
        )
        deadline = time.monotonic() + 60
        while f"its stores are {brief(theirs)}" not in (other.folder / "worker.log").read_text():
            assert time.monotonic() < deadline, "the other host never refused the write"
            await asyncio.sleep(0.1)
        other.kill()
        await asyncio.to_thread(own.start)
        await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), timeout=120)
        own.kill()
        return handles

    try:
        first = await swap_while_waiting(a, b, 0, ids[0])
        second = await swap_while_waiting(b, a, 2, ids[1])
    finally:
        a.kill()
        b.kill()

    effects = (tmp_path / "effects.txt").read_text().splitlines()
    assert sorted(effects) == sorted(
        f"{h.id}/{h.first_execution_run_id}/call_1_0 {n}" for n, h in enumerate(first + second)
    )
    assert await _files(urls[0], first + second) == [b"note 0", b"note 1"]
    assert await _files(urls[1], first + second) == [b"note 2", b"note 3"]
    for host, theirs, mine in ((a, ids[1], ids[0]), (b, ids[0], ids[1])):
        log = (host.folder / "worker.log").read_text()
        # a lean call carries its stores in brief
        said = f": its stores are {brief(theirs)}, this worker's are {mine} (in brief {brief(mine)})"
        assert said in log, host.folder


@pytest.mark.parametrize("three_hosts", [{"FAULT_AFTER_EFFECT": "2"}], indirect=True)
async def test_a_tool_that_returns_during_an_outage_is_reported_as_it_returned(
    shared: Client, three_hosts: tuple[list[Host], str], tmp_path: Path, postgres: Postgres
) -> None:
    """The tool charged (its receipt stored), then returned a 300 KB report while the database, which
    keeps large payloads, was down: the model reads the report, and the card was charged once."""
    [host, *_], task_queue = three_hosts
    await asyncio.to_thread(host.start)
    agent = scripted_agent(
        step("", ("charge_and_report", {"amount": 7, "chars": 300_000})),
        step("done"),
        tools=["charge_and_report"],
        max_tool_output_chars=400_000,
    )
    handle = await shared.start_workflow(
        AgentWorkflow.run, conversation(agent), id=f"report-{uuid.uuid4().hex[:8]}", task_queue=task_queue
    )
    await _when_charged(tmp_path / "effects.txt.recorded", 1)  # the receipt is stored; 2 s to go
    await asyncio.to_thread(postgres.stop)
    try:
        await asyncio.sleep(20)
    finally:
        await asyncio.to_thread(postgres.start)
    result = await asyncio.wait_for(handle.result(), timeout=120)

    [call] = result.tool_calls
    assert (call.is_error, call.content) == (False, f"charged 7 EUR\n{big_text(300_000, 7)}")
    assert (
        tmp_path / "effects.txt"
    ).read_text() == f"{handle.id}/{handle.first_execution_run_id}/call_1_0 7\n"


@pytest.mark.parametrize("three_hosts", [{"AGENT_STORE_OUTAGE_SECONDS": "2"}], indirect=True)
async def test_an_effect_whose_record_waits_for_the_store_is_not_repeated_when_the_call_runs_again(
    shared: Client, three_hosts: tuple[list[Host], str], tmp_path: Path, postgres: Postgres
) -> None:
    """The charge happened, then the database went down before its receipt was stored: the attempt
    gives up on the store (a 2 s budget) and hands the receipt on; the call, run again on any of the
    three hosts, stores it instead of charging again."""
    hosts, task_queue = three_hosts
    await asyncio.gather(*(asyncio.to_thread(h.start) for h in hosts))
    agent = scripted_agent(
        step("", ("charge_then_wait", {"amount": 9})), step("{last_result}"), tools=["charge_then_wait"]
    )
    handle = await shared.start_workflow(
        AgentWorkflow.run, conversation(agent), id=f"receipt-{uuid.uuid4().hex[:8]}", task_queue=task_queue
    )
    effects = tmp_path / "effects.txt"
    await _when_charged(effects, 1)
    await asyncio.to_thread(postgres.stop)
    try:
        (tmp_path / "effects.txt.go").touch()  # the charge returns; its receipt cannot be stored
        await asyncio.sleep(10)
    finally:
        await asyncio.to_thread(postgres.start)
    result = await asyncio.wait_for(handle.result(), timeout=120)

    assert result.final_text == "charged 9 EUR"
    assert effects.read_text() == f"{handle.id}/{handle.first_execution_run_id}/call_1_0 9\n"
    ran_again = [
        e
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
        and e.activity_task_failed_event_attributes.failure.application_failure_info.type
        == "StoreUnavailable"
    ]
    assert ran_again, "the store outage never made the call run again"
