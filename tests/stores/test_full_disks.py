"""A store out of room is an outage like any other: PostgreSQL out of disk, memory or connections
(SQLSTATE class 53) and a SQLite file on a full disk are waited out, never a failed tool or a
worker gone. The disks are small tmpfs file systems this test mounts (it runs as root, as CI does)
and fills while a conversation's 150 KB tool result waits to be stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from temporalio.client import Client

from durable_agents.converter import data_converter
from durable_agents.dev_server import EmbeddedServer
from durable_agents.settings import LEASE_DEAD_SECONDS
from durable_agents.stores.conversations import SQLitePayloadDriver, masked
from durable_agents.stores.errors import StoreDown, outage
from durable_agents.stores.leases import PostgresLeases
from durable_agents.stores.postgres import Database, PostgresPayloadDriver, database
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from tests.support.disks import fill
from tests.support.host_worker import big_text
from tests.support.hosts import Host
from tests.support.postgres import Postgres

pytestmark = pytest.mark.timeout(240)

FULL_SECONDS = 20
"""How long a disk stays full: longer than the tool's three attempts could wait without heartbeats
(a 3 s heartbeat timeout each, and the retries' backoff)."""


@contextlib.contextmanager
def _tmpfs(folder: Path, size: str, owner: str = "root") -> Iterator[Path]:
    """A file system of its own at ``folder``, unmounted afterwards."""
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (this test needs root): {mounted.stderr.strip()}")
    try:
        shutil.chown(folder, owner, owner)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


async def _when(path: Path, lines: int) -> None:
    deadline = time.monotonic() + 60
    while not (path.exists() and len(path.read_text().splitlines()) >= lines):
        assert time.monotonic() < deadline, f"{path.name} never had {lines} lines"
        await asyncio.sleep(0.02)


def _reports(count: int):
    """Charges once (``ctx.once``), works 2 s (the disk fills meanwhile), returns 150 KB."""
    return [
        scripted_agent(
            step("", ("charge_and_report", {"amount": n, "chars": 150_000})),
            step("done"),
            tools=["charge_and_report"],
            max_tool_output_chars=400_000,
        )
        for n in range(count)
    ]


async def _fill_during_reports(
    client: Client, host: Host, effects: Path, disk: Path, count: int, **env: str
) -> list:
    """``count`` conversations charge, then the disk is full while their reports wait to be stored;
    then there is room again. Their results, once they complete by themselves (each charged once)."""
    await asyncio.to_thread(host.start, **env)
    handles = [
        await client.start_workflow(
            AgentWorkflow.run,
            conversation(agent),
            id=f"full-{n}-{uuid.uuid4().hex[:8]}",
            task_queue=host.env["AGENT_TASK_QUEUE"],
        )
        for n, agent in enumerate(_reports(count))
    ]
    await _when(effects.with_name(effects.name + ".recorded"), count)  # charged; 2 s to go
    fill(disk)
    try:
        await asyncio.sleep(FULL_SECONDS)
        assert host.proc is not None and host.proc.poll() is None, "the worker exited"
    finally:
        (disk / "filler").unlink()
    results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), timeout=120)
    assert sorted(effects.read_text().splitlines()) == sorted(
        f"{h.id}/{h.first_execution_run_id}/call_1_0 {n}" for n, h in enumerate(handles)
    )
    return results


def _check_reports(results: list) -> None:
    for n, result in enumerate(results):
        [call] = result.tool_calls
        assert (call.is_error, call.content) == (False, f"charged {n} EUR\n{big_text(150_000, n)}")
        assert result.final_text == "done"


def test_a_connection_refused_for_a_full_disk_is_an_outage_and_other_internal_errors_are_not() -> None:
    """A new connection to a database whose disk is full can end before it starts: the backend
    cannot write its relation cache's file (XX000, not 53100). The lease store, reconnecting then,
    ended its worker (seen once in the test below); any other internal error stays a bug."""
    refused = asyncpg.exceptions.InternalServerError("could not write init file")
    assert outage(refused) == "is out of disk space: could not write init file"
    assert outage(asyncpg.exceptions.InternalServerError("cache lookup failed for relation 16384")) is None


async def test_a_database_whose_disk_fills_while_tool_results_wait_keeps_its_worker_and_completes(
    server: EmbeddedServer, postgres: Postgres, tmp_path: Path
) -> None:
    """The agents' database in a tablespace on a small tmpfs: full for 20 s after the charges, while
    the reports wait to go to the payload store (``DiskFullError``, SQLSTATE 53100)."""
    with _tmpfs(postgres.root / f"disk-{uuid.uuid4().hex[:8]}", "32m", owner="postgres") as disk:
        (disk / "pg").mkdir()
        shutil.chown(disk / "pg", "postgres", "postgres")
        space, name = f"small_{uuid.uuid4().hex[:8]}", f"full_{uuid.uuid4().hex[:8]}"
        admin = await asyncpg.connect(postgres.url())
        try:
            await admin.execute(f"CREATE TABLESPACE {space} LOCATION '{disk / 'pg'}'")
            await admin.execute(f'CREATE DATABASE "{name}" TABLESPACE {space}')
            url = postgres.url(name)
            host = Host(
                tmp_path / "host",
                {
                    "AGENT_TASK_QUEUE": f"full-{uuid.uuid4().hex[:8]}",
                    "TEMPORAL_ADDRESS": server.address,
                    "AGENT_DATABASE_URL": url,
                    "FAULT_EFFECTS": str(tmp_path / "effects.txt"),
                    "FAULT_AFTER_EFFECT": "2",
                },
            )
            client = await Client.connect(
                server.address,
                data_converter=data_converter(payload_driver=PostgresPayloadDriver(Database(url))),
            )
            try:
                results = await _fill_during_reports(client, host, tmp_path / "effects.txt", disk, 3)
            finally:
                host.kill()
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.execute(f"DROP TABLESPACE IF EXISTS {space}")
            await admin.close()

    _check_reports(results)
    log = (tmp_path / "host" / "worker.log").read_text()
    assert f"PostgreSQL {masked(url)} unavailable: is out of disk space: could not extend file" in log


async def test_a_sqlite_payload_store_whose_disk_fills_while_tool_results_wait_is_waited_out(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """The payload store's SQLite file alone on a 4 MiB tmpfs (room for its WAL, which grows to 4 MiB
    before a checkpoint): full (SQLITE_FULL) for 20 s."""
    with _tmpfs(tmp_path / "disk", "4m") as disk:
        payloads = disk / "payloads.db"
        host = Host(
            tmp_path / "host",
            {
                "AGENT_TASK_QUEUE": f"full-{uuid.uuid4().hex[:8]}",
                "TEMPORAL_ADDRESS": server.address,
                "FAULT_EFFECTS": str(tmp_path / "effects.txt"),
                "FAULT_AFTER_EFFECT": "2",
            },
        )
        client = await Client.connect(
            server.address, data_converter=data_converter(payload_driver=SQLitePayloadDriver(payloads))
        )
        try:
            results = await _fill_during_reports(
                client, host, tmp_path / "effects.txt", disk, 1, AGENT_PAYLOAD_STORE=str(payloads)
            )
        finally:
            host.kill()

    _check_reports(results)
    assert (
        f"SQLite {payloads} unavailable: database or disk is full"
        in (tmp_path / "host" / "worker.log").read_text()
    )


@pytest.mark.parametrize(
    ("sqlstate", "reason"),
    [
        ("53100", "is out of disk space"),
        ("53200", "is out of memory"),
        ("53300", "refuses connections"),
        ("53400", "is at a configured limit"),
    ],
)
async def test_a_database_out_of_resources_is_waited_out_by_the_stores_and_the_leases(
    postgres: Postgres, sqlstate: str, reason: str
) -> None:
    """Each of SQLSTATE class 53, raised by the real server for every write: a store's statement is
    tried again until its budget is spent, then ``StoreDown`` says why in one line; a lease refresh
    waits for the next one. Neither raises the server's error, which would end the worker."""
    url = await postgres.new_database()
    leases = PostgresLeases(url, "server", f"worker-{uuid.uuid4().hex[:8]}", LEASE_DEAD_SECONDS)
    await leases.hold("{}")
    db = Database(url, outage_seconds=0.5)
    insert = "INSERT INTO agent_payloads (key, data) VALUES ($1, '')"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS"
            f" $$ BEGIN RAISE EXCEPTION 'refused for the test' USING ERRCODE = '{sqlstate}'; END $$"
        )
        for table in ("agent_payloads", "agent_workers"):
            await admin.execute(
                f"CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON {table} EXECUTE FUNCTION refuse()"
            )
        await leases.write(None)
        with pytest.raises(StoreDown) as down:
            await db.run(lambda c: c.execute(insert, "a"))
        await admin.execute("DROP FUNCTION refuse() CASCADE")
        await leases.write(None)
        await db.run(lambda c: c.execute(insert, "b"))
        held = await admin.fetchval("SELECT count(*) FROM agent_workers")
    finally:
        await admin.close()
        await leases.release()
        await db.close()
        await database(url).close()

    assert str(down.value) == f"PostgreSQL {masked(url)} unavailable: {reason}: refused for the test"
    assert held == 1
