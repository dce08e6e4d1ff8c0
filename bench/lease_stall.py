"""The dead interval from a measurement (issue 41): how long a busy host leaves its lease
unrefreshed, and how soon a paused host's calls run on the other.

    .venv/bin/python -m bench.lease_stall            # about a minute; --keep keeps the logs
    options: --burst N (200), --delay-ms MS (1000: each model call of the takeover burst)

Everything on 127.0.0.1: an embedded dev server, a throwaway PostgreSQL server
(``durable_agents.testing.postgres``), the fake model (``bench/fake_model.py``) and two worker
processes (``bench.stall_worker``) as two hosts: each its own data dir, the database in common,
PostgreSQL leases with the default dead interval. The lease is refreshed by a task on the worker's
event loop (``Lease.keep``), the loop that runs the activities and that the two workflow threads
share the GIL with: so a stall of that loop is a missed refresh.

Stall: ``--burst`` conversations at once (3 model calls at 0 ms and 2 tool calls each, CPU-bound)
over both hosts. Per host: the event loop's worst lateness (``bench.stall_worker``'s monitor) and
the longest gap between two refreshes of its lease by the database's clock (a trigger on
``agent_workers`` logs each refresh): the gap is what the other host judges, a lease whose gap
exceeds the dead interval is taken. A takeover here would be a live host taken for dead.

Takeover: ``--burst`` more, each model call ``--delay-ms`` (heartbeat timeout 30 s, so a call
retried before then was retried by the lease); once host A's lease names 25 running calls (or 10 s
into the burst) A gets SIGSTOP. Figures: SIGSTOP to the takeover (``agent_takeovers.taken_at``, the
database's clock), the takeover to each call's retry starting on B (the attempt's start time in the
history, its previous attempt failed ``WorkerLost``), calls retried by their heartbeat timeout
instead, workflow tasks timed out, and B's worst stall and refresh gap while it took over. A is
killed at the end.
Figures, not assertions: tests/workers/test_several_hosts.py and test_fencing.py hold the behaviour.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from bench.harness import bounded, run_benchmark
from bench.measure import Load
from bench.processes import STARTED, Procs, Worker, bench_dev_server, dev_server_pids, postgres_server
from bench.workload import bench_agent, check_result, conversation, text_agent
from durable_agents.converter import data_converter
from durable_agents.settings import Settings
from durable_agents.stores.postgres import Database, PostgresPayloadDriver, database
from durable_agents.worker.lost_calls import LOST_ERROR
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import AgentSpec, CallPolicy

RUNNING_AT_STOP = 25
"""Host A is stopped once its lease names this many running calls, or ``STOP_BY`` seconds into the
burst (a loaded machine runs fewer at once)."""
STOP_BY = 10.0
HEARTBEAT_SECONDS = 30
"""The takeover burst's model calls: a call retried before this was retried by the lease."""

LOG_REFRESHES = [
    "CREATE TABLE bench_refreshes (worker text NOT NULL, gap double precision NOT NULL,"
    " at timestamptz NOT NULL)",
    "CREATE FUNCTION bench_refresh() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    " INSERT INTO bench_refreshes VALUES"
    " (NEW.worker, extract(epoch FROM NEW.refreshed_at - OLD.refreshed_at), NEW.refreshed_at);"
    " RETURN NEW; END $$",
    "CREATE TRIGGER bench_refresh AFTER UPDATE OF refreshed_at ON agent_workers"
    " FOR EACH ROW EXECUTE FUNCTION bench_refresh()",
]
"""Every lease refresh, with the time since the one before by the database's clock."""


def slow_agent(delay_ms: int) -> AgentSpec:
    """The bench agent with slow model calls whose heartbeat timeout comes well after a takeover."""
    return bench_agent(delay_ms).model_copy(
        update={"model_call": CallPolicy(timeout_seconds=120, heartbeat_seconds=HEARTBEAT_SECONDS)}
    )


def reclaimed(worker: Worker) -> str:
    """What the worker's reclaim said it moved (``lost_calls.reclaim``'s warning)."""
    for line in worker.log.read_text(errors="replace").splitlines():
        if " is gone: " in line:
            return line.split(" is gone: ", 1)[1]
    return ""


def loop_lateness(worker: Worker, since: float, until: float) -> float:
    """The worst lateness (ms) the worker's monitor reported for windows ending in [since, until]."""
    worst = 0.0
    for line in worker.log.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "late" and since <= float(parts[1]) <= until:
            worst = max(worst, float(parts[2]))
    return worst


async def refresh_gaps(url: str, worker: Worker, since: float, until: float) -> dict[str, Any]:
    """The longest gap between two refreshes of the worker's lease ending in [since, until]."""
    connection = await asyncpg.connect(url)
    try:
        row = await connection.fetchrow(
            "SELECT max(gap) AS longest, count(*) AS refreshes FROM bench_refreshes"
            " WHERE starts_with(worker, $1) AND at BETWEEN to_timestamp($2) AND to_timestamp($3)",
            f"{worker.pid}@",
            since,
            until,
        )
    finally:
        await connection.close()
    return {"longest_refresh_gap_s": round(row["longest"] or 0.0, 3), "refreshes": row["refreshes"]}


async def host_figures(url: str, worker: Worker, since: float, until: float) -> dict[str, Any]:
    return {
        "worst_loop_lateness_ms": loop_lateness(worker, since, until),
        **await refresh_gaps(url, worker, since, until),
    }


async def start_burst(
    client: Client, task_queue: str, agent: AgentSpec, n: int, tag: str
) -> list[WorkflowHandle]:
    return await asyncio.gather(
        *(
            client.start_workflow(
                AgentWorkflow.run,
                conversation(agent),
                id=f"{tag}-{i}-{uuid.uuid4().hex[:6]}",
                task_queue=task_queue,
            )
            for i in range(n)
        )
    )


async def activities_per_host(handles: list[WorkflowHandle], hosts: dict[str, Worker]) -> dict[str, int]:
    """Activity attempts each host started (by the identity in the histories)."""
    by_pid = {str(worker.pid): name for name, worker in hosts.items()}
    counts = dict.fromkeys(hosts, 0)
    for handle in handles:
        async for e in handle.fetch_history_events():
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                name = by_pid.get(e.activity_task_started_event_attributes.identity.split("@")[0])
                if name:
                    counts[name] += 1
    return counts


async def takeovers(url: str) -> list[tuple[str, float]]:
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch("SELECT worker, extract(epoch FROM taken_at) FROM agent_takeovers")
    finally:
        await connection.close()
    return [(worker, float(at)) for worker, at in rows]


async def running_calls(url: str, worker: Worker) -> int:
    connection = await asyncpg.connect(url)
    try:
        record = await connection.fetchval(
            "SELECT record FROM agent_workers WHERE starts_with(worker, $1)", f"{worker.pid}@"
        )
    finally:
        await connection.close()
    return len(json.loads(record)["running"]) if record else 0


def load_now() -> str:
    return " ".join(f"{each:.2f}" for each in os.getloadavg())


def burst_figures(results: list[Any], since: float, until: float, load: Load, before: str) -> dict[str, Any]:
    """What both bursts report of themselves: right results, duration, and the machine's load
    around them (``before``: ``load_now()`` as the burst started; ``load``: started then too)."""
    return {
        "right_results": sum(check_result(r) for r in results),
        "seconds": round(until - since, 2),
        "load_average_before": before,
        "load_average_after": load_now(),
        "other_processes": load.since(),
    }


async def stall(
    client: Client, url: str, hosts: dict[str, Worker], task_queue: str, n: int
) -> dict[str, Any]:
    load, before = Load(), load_now()
    since = time.time()
    handles = await start_burst(client, task_queue, bench_agent(), n, "stall")
    results = await bounded("stall burst", asyncio.gather(*(h.result() for h in handles)), 300)
    until = time.time()
    return {
        "conversations": n,
        **burst_figures(results, since, until, load, before),
        "activities_per_host": await activities_per_host(handles, hosts),
        "hosts": {name: await host_figures(url, w, since, until) for name, w in hosts.items()},
        "live_hosts_taken_for_dead": len(await takeovers(url)),
    }


async def takeover(
    client: Client, url: str, hosts: dict[str, Worker], task_queue: str, n: int, delay_ms: int
) -> dict[str, Any]:
    a, b = hosts["a"], hosts["b"]
    load, before = Load(), load_now()
    since = time.time()
    handles = await start_burst(client, task_queue, slow_agent(delay_ms), n, "takeover")

    async def busy() -> int:
        while (running := await running_calls(url, a)) < RUNNING_AT_STOP and time.time() - since < STOP_BY:
            await asyncio.sleep(0.02)
        return running

    running = await bounded("host A running calls", busy(), STOP_BY + 30)
    os.kill(a.pid, signal.SIGSTOP)
    stopped = time.time()

    async def taken() -> float:
        while not (found := [at for worker, at in await takeovers(url) if worker.startswith(f"{a.pid}@")]):
            await asyncio.sleep(0.02)
        return found[0]

    taken_at = await bounded("the takeover of host A's lease", taken(), 60)
    results = await bounded("takeover burst", asyncio.gather(*(h.result() for h in handles)), 300)
    until = time.time()
    a.kill()
    moved: list[float] = []
    by_heartbeat = timed_out = 0
    for handle in handles:
        async for e in handle.fetch_history_events():
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                timed_out += 1
            if e.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                continue
            started = e.activity_task_started_event_attributes
            if started.attempt < 2:
                continue
            if started.last_failure.application_failure_info.type == LOST_ERROR:
                moved.append(e.event_time.ToDatetime().timestamp() - taken_at)
            elif started.last_failure.HasField("timeout_failure_info"):
                by_heartbeat += 1
    moved.sort()
    return {
        "conversations": n,
        "model_delay_ms": delay_ms,
        **burst_figures(results, since, until, load, before),
        "stop_after_s": round(stopped - since, 2),
        "calls_host_a_ran_at_stop": running,
        "stop_to_takeover_s": round(taken_at - stopped, 3),
        "calls_moved": len(moved),
        "takeover_to_first_retry_s": round(moved[0], 3) if moved else None,
        "takeover_to_median_retry_s": round(statistics.median(moved), 3) if moved else None,
        "takeover_to_last_retry_s": round(moved[-1], 3) if moved else None,
        "calls_retried_by_heartbeat_timeout": by_heartbeat,
        "host_b_reclaimed": reclaimed(b),
        "timed_out_workflow_tasks": timed_out,
        "host_a_before_stop": await host_figures(url, a, since, stopped),
        "host_b": await host_figures(url, b, since, until),
    }


async def measure(burst: int, delay_ms: int, tmp: Path, code: Path) -> dict[str, Any]:
    procs: Procs | None = None
    with postgres_server("bench.lease_stall") as pg:
        url = await pg.new_database()
        tables = database(url)
        await tables.open()  # agent_workers, before the trigger on it
        await tables.close()
        connection = await asyncpg.connect(url)
        for statement in LOG_REFRESHES:
            await connection.execute(statement)
        await connection.close()
        server = await bench_dev_server(tmp)
        STARTED.update(dev_server_pids())
        try:
            procs = Procs(tmp, server.address, code)
            procs.start_fake()
            task_queue = f"stall-{uuid.uuid4().hex[:8]}"
            hosts = {
                name: procs.spawn_worker(
                    task_queue,
                    "bench.stall_worker",
                    {"AGENT_DATABASE_URL": url, "AGENT_DATA_DIR": str(tmp / f"host-{name}")},
                )
                for name in "ab"
            }
            for worker in hosts.values():
                await worker.wait_ready()
            client = await Client.connect(
                server.address,
                data_converter=data_converter(payload_driver=PostgresPayloadDriver(Database(url))),
            )
            warm = await start_burst(client, task_queue, text_agent(), 4, "warm")
            await bounded("warm-up", asyncio.gather(*(h.result() for h in warm)), 120)
            return {
                "dead_interval_s": Settings.from_env().lease_dead_seconds,  # as the workers read it
                "stall": await stall(client, url, hosts, task_queue, burst),
                "takeover": await takeover(client, url, hosts, task_queue, burst, delay_ms),
            }
        finally:
            if procs is not None:
                procs.stop_all()
            await asyncio.wait_for(server.stop(), 30)


def report(figures: dict[str, Any]) -> int:
    print(json.dumps(figures, indent=1))
    s, t = figures["stall"], figures["takeover"]
    worst = max(
        max(h["worst_loop_lateness_ms"] for h in s["hosts"].values()),
        t["host_a_before_stop"]["worst_loop_lateness_ms"],
        t["host_b"]["worst_loop_lateness_ms"],
    )
    gap = max(
        max(h["longest_refresh_gap_s"] for h in s["hosts"].values()),
        t["host_a_before_stop"]["longest_refresh_gap_s"],
        t["host_b"]["longest_refresh_gap_s"],
    )
    print(
        f"\nload average {s['load_average_before']} before, {t['load_average_after']} after;"
        f" worst event-loop stall {worst:.0f} ms; longest refresh gap {gap:.3f} s"
        f" (dead interval {figures['dead_interval_s']:g} s; live hosts taken for dead:"
        f" {s['live_hosts_taken_for_dead']});\nSIGSTOP to takeover {t['stop_to_takeover_s']} s;"
        f" takeover to retries on the other host {t['takeover_to_first_retry_s']}"
        f" / {t['takeover_to_median_retry_s']} / {t['takeover_to_last_retry_s']} s"
        f" (first / median / last of {t['calls_moved']} calls)"
    )
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--delay-ms", type=int, default=1000)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    args = parser.parse_args()
    run_benchmark(
        "bench.lease_stall",
        args.keep,
        lambda tmp, code: measure(args.burst, args.delay_ms, tmp, code),
        report,
    )


if __name__ == "__main__":
    main()
