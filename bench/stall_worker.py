"""The worker process of ``bench.lease_stall``: ``bench.worker_proc``'s worker, with a monitor on its
event loop, the loop that also runs the lease's refreshes (``durable_agents/worker/lost_calls.py``).

    TEMPORAL_ADDRESS=... OPENAI_BASE_URL=... AGENT_DATABASE_URL=... AGENT_DATA_DIR=... \\
        .venv/bin/python -m bench.stall_worker --task-queue bench

The monitor sleeps ``TICK`` in a loop and prints, every ``WINDOW``, how late it woke at worst:
``late <unix time> <ms>`` (a stall of the event loop: workflow threads holding the GIL, a long
callback, the garbage collector).
"""

from __future__ import annotations

import asyncio
import time

from temporalio.worker import Worker

from bench.serve import serve
from bench.worker_proc import ours

TICK = 0.01
"""Seconds the monitor sleeps each time."""
WINDOW = 0.5
"""Seconds over which the monitor reports its worst lateness."""

_monitors: set[asyncio.Task] = set()


async def watch_loop() -> None:
    loop = asyncio.get_running_loop()
    worst, since = 0.0, loop.time()
    while True:
        asked = loop.time()
        await asyncio.sleep(TICK)
        woke = loop.time()
        worst = max(worst, woke - asked - TICK)
        if woke - since >= WINDOW:
            print(f"late {time.time():.3f} {worst * 1000:.1f}", flush=True)
            worst, since = 0.0, woke


async def worker(task_queue: str) -> Worker:
    monitor = asyncio.create_task(watch_loop(), name="stall-monitor")
    _monitors.add(monitor)  # the loop keeps only a weak reference to a task
    return await ours(task_queue)


if __name__ == "__main__":
    serve(worker, __doc__.splitlines()[0])
