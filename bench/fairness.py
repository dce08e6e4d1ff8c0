"""Benchmark of fairness across tenants: tenant A starts a burst of conversations at once, tenant B
a few a moment later; B's median latency (start to answer) with and without A's burst, on an
embedded dev server with Temporal's fairness off, then on (docs/tenants.md).

    .venv/bin/python -m bench.fairness [--burst 500] [--others 10] [--delay 0.05] [--slots 4]

Each conversation is one call of the offline scripted model (``--delay`` seconds of "thinking"); one
worker in this process runs at most ``--slots`` model calls at a time, so A's burst backlogs the
queues. Every conversation starts with its tenant as fairness key (durable_agents/conversations.py);
with fairness off the server dispatches the backlog in order, B behind all of A's; with it on
(``matching.useNewMatcher``, ``matching.enableFairness``) by key, in proportion to the weights.
Prints JSON: B's median and the ratio to its unloaded median, per setting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from durable_agents.conversations import start_conversation
from durable_agents.dev_server import start_embedded_server
from durable_agents.plugin import AgentPlugin
from workflows.api import ConversationInput
from workflows.config import AgentSpec
from workflows.messages import ModelSettings, ScriptStep


def _agent(delay: float) -> AgentSpec:
    step = ScriptStep(text="done", delay_seconds=delay, repeat=1)
    return AgentSpec(name="fair", model=ModelSettings(provider="scripted", model="fair", script=[step]))


async def _run(client: Client, queue: str, tenant: str, count: int, delay: float) -> list[float]:
    """Start ``count`` conversations of ``tenant`` at once; each one's seconds from start to answer."""

    async def one(i: int) -> float:
        began = time.monotonic()
        handle = await start_conversation(
            client,
            ConversationInput(prompt=f"{tenant} {i}", agent_spec=_agent(delay), tenant=tenant),
            id=f"fair-{tenant}-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        await handle.result()
        return time.monotonic() - began

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def _setting(fairness: bool, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    server = await start_embedded_server(
        port=None, ui=False, db_file=folder / f"temporal-{fairness}.db", fairness=fairness
    )
    try:
        client = server.client
        queue = f"fair-{uuid.uuid4().hex[:6]}"
        worker = Worker(
            client,
            task_queue=queue,
            max_concurrent_activities=args.slots,
            max_concurrent_workflow_tasks=args.slots,
            max_concurrent_local_activities=args.slots,
            plugins=[AgentPlugin(agents={}, workspace_root=folder / "ws")],
        )
        async with worker:
            await _run(client, queue, "warmup", 5, args.delay)
            alone = statistics.median(await _run(client, queue, "b", args.others, args.delay))
            burst = asyncio.create_task(_run(client, queue, "a", args.burst, args.delay))
            await asyncio.sleep(args.after)
            loaded = statistics.median(await _run(client, queue, "b", args.others, args.delay))
            a = await burst
        return {
            "fairness": fairness,
            "b_median_alone_s": round(alone, 3),
            "b_median_during_burst_s": round(loaded, 3),
            "ratio": round(loaded / alone, 2),
            "a_median_s": round(statistics.median(a), 3),
        }
    finally:
        await server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=500, help="tenant A's conversations, at once")
    parser.add_argument("--others", type=int, default=10, help="tenant B's conversations")
    parser.add_argument("--after", type=float, default=1.0, help="seconds between A's burst and B's start")
    parser.add_argument("--delay", type=float, default=0.05, help="the scripted model's seconds per call")
    parser.add_argument("--slots", type=int, default=4, help="the worker's concurrent tasks of each kind")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = [await _setting(fairness, args, Path(tmp)) for fairness in (False, True)]
    print(json.dumps({"burst": args.burst, "others": args.others, "settings": results}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
