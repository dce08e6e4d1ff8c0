"""What infrastructure faults cost: a PostgreSQL outage under three worker hosts, and a host killed.

    .venv/bin/python -m bench.outage                 # both (about 3 minutes), a 90 s outage
    .venv/bin/python -m bench.outage --outage 20     # a shorter outage
    options: --only outage|kill, --conversations N (30), --budget S (AGENT_STORE_OUTAGE_SECONDS, 900)

Outage:
Everything runs locally: an embedded Temporal dev server, a throwaway PostgreSQL server
(``durable_agents.testing.postgres``), and three ``tests.support.host_worker`` processes, each with its own
data folder and only the database in common. Each conversation charges a card through ``ctx.once``,
works 3 s (the outage begins meanwhile), then writes a file and answers. Printed: the time from the
database answering again to the first and the last conversation done, how many conversations said
``waiting_for_storage``, and the checks the test asserts (every answer right, every effect once, no
failed workflow task).

Kill: two hosts with PostgreSQL leases (``durable_agents/worker/lost_calls.py``); host A runs 10 model calls
of 5 s (their heartbeat timeout ten minutes), host B starts, A is killed with SIGKILL. Printed: the
time from the kill to the first and the last call started again on B, and the workflow tasks that
timed out. Figures, not assertions: tests/stores/test_store_outages.py and tests/workers/test_several_hosts.py
hold the behaviour.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.processes import bench_dev_server, postgres_server
from durable_agents.converter import data_converter
from durable_agents.stores.postgres import Database, PostgresPayloadDriver
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.testing.postgres import Postgres
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import ApprovalPolicy, CallPolicy
from durable_agents.workflows.messages import ScriptStep

REPO = Path(__file__).resolve().parent.parent


def _agent(n: int):
    return scripted_agent(
        step("", ("charge", {"amount": n}), ("slow_step", {"seconds": 3})),
        step("", ("write_file", {"path": f"note{n}.txt", "content": f"note {n}"})),
        step("{last_result}"),
        tools=["charge", "slow_step", "write_file"],
    )


class Hosts:
    """Worker processes (``tests.support.host_worker``), each in its own folder, sharing only the database."""

    def __init__(self, tmp: Path, server_address: str, url: str, **env: str) -> None:
        self.tmp = tmp
        self.task_queue = f"bench-{uuid.uuid4().hex[:8]}"
        self.effects = tmp / "effects.txt"
        self._env = (
            os.environ
            | env
            | {
                "TEMPORAL_ADDRESS": server_address,
                "AGENT_TASK_QUEUE": self.task_queue,
                "AGENT_DATABASE_URL": url,
                "FAULT_EFFECTS": str(self.effects),
                "PYTHONPATH": str(REPO),
            }
        )
        self.procs: dict[str, subprocess.Popen] = {}

    async def start(self, name: str) -> None:
        folder = self.tmp / f"host-{name}"
        folder.mkdir(exist_ok=True)
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.host_worker"],
            cwd=folder,
            env=self._env | {"AGENT_DATA_DIR": str(folder / "data")},
            stdout=subprocess.PIPE,
            stderr=(folder / "worker.log").open("a"),
            text=True,
        )
        self.procs[name] = proc
        await asyncio.to_thread(proc.stdout.readline)  # type: ignore[union-attr]

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    def kill_all(self) -> None:
        for name in self.procs:
            self.kill(name)


async def measure_outage(
    outage: float, count: int, budget: float, tmp: Path, pg: Postgres, address: str
) -> dict:
    url = await pg.new_database()
    hosts = Hosts(tmp / "outage", address, url, AGENT_STORE_OUTAGE_SECONDS=str(budget))
    hosts.tmp.mkdir()
    try:
        await asyncio.gather(*(hosts.start(name) for name in "abc"))
        task_queue, effects = hosts.task_queue, hosts.effects
        client = await Client.connect(
            address,
            data_converter=data_converter(payload_driver=PostgresPayloadDriver(Database(url))),
        )
        handles = await asyncio.gather(
            *(
                client.start_workflow(
                    AgentWorkflow.run,
                    conversation(_agent(n), approval=ApprovalPolicy(auto=["write_file"])),
                    id=f"outage-{n}-{uuid.uuid4().hex[:8]}",
                    task_queue=task_queue,
                )
                for n in range(count)
            )
        )
        while not (effects.exists() and len(effects.read_text().splitlines()) >= count):
            await asyncio.sleep(0.02)
        await asyncio.to_thread(pg.stop)
        stopped = time.monotonic()
        waiting: set[str] = set()
        while time.monotonic() - stopped < outage:
            for handle in handles:
                if (await handle.query(AgentWorkflow.status)).state == "waiting_for_storage":
                    waiting.add(handle.id)
            await asyncio.sleep(1)
        await asyncio.to_thread(pg.start)
        back = time.monotonic()

        async def done(handle) -> float:
            await handle.result()
            return time.monotonic() - back

        after = sorted(await asyncio.gather(*(done(h) for h in handles)))
        results = [await h.result() for h in handles]
        right = sum(
            r.final_text == f"Wrote {len(f'note {n}')} bytes to note{n}.txt." for n, r in enumerate(results)
        )
        charged = sorted(effects.read_text().splitlines())
        once = charged == sorted(
            f"{h.id}/{h.first_execution_run_id}/call_1_0 {n}" for n, h in enumerate(handles)
        )
        failed_tasks = 0
        for handle in handles:
            async for e in handle.fetch_history_events():
                failed_tasks += e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        return {
            "outage_seconds": outage,
            "conversations": count,
            "budget_seconds": budget,
            "first_done_after_back_s": round(after[0], 2),
            "median_done_after_back_s": round(statistics.median(after), 2),
            "all_done_after_back_s": round(after[-1], 2),
            "said_waiting_for_storage": len(waiting),
            "right_answers": right,
            "every_effect_once": once,
            "failed_workflow_tasks": failed_tasks,
        }
    finally:
        hosts.kill_all()


async def measure_kill(tmp: Path, pg: Postgres, address: str) -> dict:
    url = await pg.new_database()
    hosts = Hosts(tmp / "kill", address, url)
    hosts.tmp.mkdir()
    try:
        await hosts.start("a")
        client = await Client.connect(
            address, data_converter=data_converter(payload_driver=PostgresPayloadDriver(Database(url)))
        )
        slow = scripted_agent(
            ScriptStep(text="done", delay_seconds=5),
            model_call=CallPolicy(timeout_seconds=900, heartbeat_seconds=600),
        )
        handles = await asyncio.gather(
            *(
                client.start_workflow(
                    AgentWorkflow.run,
                    conversation(slow),
                    id=f"kill-{n}-{uuid.uuid4().hex[:8]}",
                    task_queue=hosts.task_queue,
                )
                for n in range(10)
            )
        )
        for handle in handles:
            while not (await handle.describe()).raw_description.pending_activities:
                await asyncio.sleep(0.05)
        await hosts.start("b")
        await asyncio.sleep(1)  # A's lease names every running call
        killed = time.time()
        hosts.kill("a")
        await asyncio.gather(*(h.result() for h in handles))
        moved: list[float] = []
        timed_out = 0
        for handle in handles:
            async for e in handle.fetch_history_events():
                if (
                    e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                    and e.activity_task_started_event_attributes.attempt == 2
                ):
                    moved.append(e.event_time.ToDatetime().timestamp() - killed)
                timed_out += e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
        moved.sort()
        return {
            "calls": len(handles),
            "calls_moved": len(moved),
            "first_moved_after_kill_s": round(moved[0], 2) if moved else None,
            "last_moved_after_kill_s": round(moved[-1], 2) if moved else None,
            "timed_out_workflow_tasks": timed_out,
        }
    finally:
        hosts.kill_all()


async def measure(outage: float, count: int, budget: float, tmp: Path, only: str | None) -> dict:
    with postgres_server("bench.outage") as pg:
        server = await bench_dev_server(tmp)
        figures: dict = {}
        try:
            if only in (None, "kill"):
                figures["kill"] = await measure_kill(tmp, pg, server.address)
            if only in (None, "outage"):
                figures["outage"] = await measure_outage(outage, count, budget, tmp, pg, server.address)
            return figures
        finally:
            await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outage", type=float, default=90.0)
    parser.add_argument("--conversations", type=int, default=30)
    parser.add_argument("--budget", type=float, default=900.0)
    parser.add_argument("--only", choices=["outage", "kill"])
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-outage-"))
    try:
        figures = asyncio.run(measure(args.outage, args.conversations, args.budget, tmp, args.only))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(figures, indent=1))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
