"""Benchmark of fairness across tenants: tenant A starts a burst of conversations at once, tenant B
a few once A's backlog waits in the server's queues; B's median latency (start to answer) with and
without A's burst, on an embedded dev server, per setting of the server and the worker
(docs/tenants.md, docs/benchmarks.md).

    .venv/bin/python -m bench.fairness [--burst 500] [--others 10] [--delay 0.05] [--slots 4]
        [--settings off,on,on-1p,on-1p-uncached,off-1p]

Each conversation is one call of the offline scripted model (``--delay`` seconds of "thinking").
One worker in a process of its own (``bench/fairness_worker.py``) runs at most ``--slots`` tasks of
each kind at a time, so A's burst backlogs the queues. A's conversations start from one client, B's
from another (its own connection: B's starts and result polls never queue behind A's 500). Every
conversation starts with its tenant as fairness key (durable_agents/client/conversations.py).

The settings: ``off``: the server's defaults (tasks in order); ``on``: ``matching.useNewMatcher``
and ``matching.enableFairness`` (tasks by fairness key, in proportion to the weights); ``-1p``: one
partition per task queue (``matching.numTaskqueueReadPartitions=1``, ``...WritePartitions=1``:
the dev server's default is 4, each with its own queue); ``-uncached``: the worker caches no
conversation (``max_cached_workflows=0``), so no workflow task goes to its sticky queue;
``-sticky0.2``: a conversation's next workflow task waits 0.2 s (not 5) for the worker's sticky
queue before it goes to the task queue. Prints
JSON: per setting, B's median alone and during the burst and their ratio, A's median, and the
priority the server recorded on a B conversation's start and its activities.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from bench.processes import ROOT, Procs, bench_dev_server, output_to
from durable_agents.client.conversations import start_conversation
from durable_agents.converter import data_converter
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.messages import ModelSettings, ScriptStep

ONE_PARTITION = {
    "matching.numTaskqueueReadPartitions": "1",
    "matching.numTaskqueueWritePartitions": "1",
}
SETTINGS = {
    "off": (False, False, None, None),
    "on": (True, False, None, None),
    "on-1p": (True, True, None, None),
    "on-1p-uncached": (True, True, 0, None),
    "on-1p-sticky0.2": (True, True, None, 0.2),
    "off-1p": (False, True, None, None),
}
"""name: (fairness, one partition, the worker's max_cached_workflows, its sticky queue timeout in
seconds; None: the worker's defaults, 200 conversations and 5 s)."""


def _agent(delay: float) -> AgentSpec:
    step = ScriptStep(text="done", delay_seconds=delay, repeat=1)
    return AgentSpec(name="fair", model=ModelSettings(provider="scripted", model="fair", script=[step]))


async def _start(
    client: Client, queue: str, tenant: str, count: int, delay: float
) -> list[tuple[float, WorkflowHandle]]:
    """Start ``count`` conversations of ``tenant`` at once: (when it was asked for, its handle)."""

    async def one(i: int) -> tuple[float, WorkflowHandle]:
        began = time.monotonic()
        handle = await start_conversation(
            client,
            ConversationInput(prompt=f"{tenant} {i}", agent_spec=_agent(delay), tenant=tenant),
            id=f"fair-{tenant}-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        return began, handle

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def _latencies(started: list[tuple[float, WorkflowHandle]]) -> list[float]:
    async def one(began: float, handle: WorkflowHandle) -> float:
        await handle.result()
        return time.monotonic() - began

    return list(await asyncio.gather(*(one(b, h) for b, h in started)))


async def _run(client: Client, queue: str, tenant: str, count: int, delay: float) -> list[float]:
    return await _latencies(await _start(client, queue, tenant, count, delay))


async def _priorities(handle: WorkflowHandle) -> dict[str, Any]:
    """The priority the server recorded: on the start, and on each scheduled activity."""
    found: dict[str, Any] = {"activities": []}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            p = event.workflow_execution_started_event_attributes.priority
            found["start"] = {"fairness_key": p.fairness_key, "priority_key": p.priority_key}
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            a = event.activity_task_scheduled_event_attributes
            found["activities"].append(
                {
                    "type": a.activity_type.name,
                    "fairness_key": a.priority.fairness_key,
                    "priority_key": a.priority.priority_key,
                }
            )
    described = await handle.describe()
    p = described.raw_description.workflow_execution_info.priority
    found["described"] = {"fairness_key": p.fairness_key, "priority_key": p.priority_key}
    return found


async def _setting(name: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    fairness, one_partition, cached, sticky = SETTINGS[name]
    folder = folder / name
    folder.mkdir()
    server = await bench_dev_server(
        folder, fairness=fairness, dynamic_config=ONE_PARTITION if one_partition else None
    )
    procs = Procs(folder, server.address, ROOT)
    procs.fake_url = "http://127.0.0.1:9"  # the scripted model calls no server
    os.environ["FAIR_SLOTS"] = str(args.slots)
    os.environ["AGENT_MAX_CACHED_WORKFLOWS"] = "" if cached is None else str(cached)
    os.environ["FAIR_STICKY_SECONDS"] = "5" if sticky is None else str(sticky)
    try:
        queue = f"fair-{uuid.uuid4().hex[:6]}"
        worker = procs.spawn_worker(queue, module="bench.fairness_worker")
        await worker.wait_ready()
        client_a = server.client
        client_b = await Client.connect(server.address, data_converter=data_converter())
        await _run(client_b, queue, "warmup", 5, args.delay)
        alone = await _start(client_b, queue, "b", args.others, args.delay)
        alone_s = await _latencies(alone)
        began = time.monotonic()
        a_started = await _start(client_a, queue, "a", args.burst, args.delay)
        a_start_s = time.monotonic() - began
        a_results = asyncio.create_task(_latencies(a_started))
        await asyncio.sleep(args.after)
        loaded = await _start(client_b, queue, "b", args.others, args.delay)
        loaded_s = await _latencies(loaded)
        a = await a_results
        return {
            "setting": name,
            "fairness": fairness,
            "one_partition": one_partition,
            "max_cached_workflows": cached,
            "sticky_seconds": sticky,
            "b_median_alone_s": round(statistics.median(alone_s), 3),
            "b_median_during_burst_s": round(statistics.median(loaded_s), 3),
            "ratio": round(statistics.median(loaded_s) / statistics.median(alone_s), 2),
            "a_starts_s": round(a_start_s, 2),
            "a_median_s": round(statistics.median(a), 3),
            "a_last_s": round(max(a), 3),
            "b_priority": await _priorities(loaded[0][1]),
            "worker_cpu_s": round(worker.cpu(), 1),
        }
    finally:
        procs.stop_all()
        with output_to(folder / "server.log"):
            await server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=500, help="tenant A's conversations, at once")
    parser.add_argument("--others", type=int, default=10, help="tenant B's conversations")
    parser.add_argument(
        "--after", type=float, default=0.5, help="seconds between A's last start and B's starts"
    )
    parser.add_argument("--delay", type=float, default=0.05, help="the scripted model's seconds per call")
    parser.add_argument("--slots", type=int, default=4, help="the worker's concurrent tasks of each kind")
    parser.add_argument("--settings", default="off,on,on-1p,on-1p-uncached", help=f"of {', '.join(SETTINGS)}")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        for name in args.settings.split(","):
            results.append(await _setting(name, args, Path(tmp)))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # as it goes
    print(
        json.dumps(
            {
                "burst": args.burst,
                "others": args.others,
                "delay": args.delay,
                "slots": args.slots,
                "settings": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
