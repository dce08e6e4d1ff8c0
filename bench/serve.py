"""Run one benchmark worker process until a signal ends it: shared by ours and the peers.

Kept free of project imports: the peers' workers import only their own framework, so their
start-up time and memory are theirs alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable

from temporalio.worker import Worker


async def _run(make_worker: Callable[[str], Awaitable[Worker]], task_queue: str) -> None:
    worker = await make_worker(task_queue)
    async with worker:
        print(f"ready {os.getpid()}", flush=True)
        await asyncio.Event().wait()  # until a signal ends the process


def serve(make_worker: Callable[[str], Awaitable[Worker]], description: str) -> None:
    """Parse ``--task-queue``, run the worker ``make_worker`` builds for it, print ``ready <pid>``
    once it polls, and leave with ``os._exit`` on SIGTERM (the benchmark wants it gone at once)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--task-queue", required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    try:
        asyncio.run(_run(make_worker, args.task_queue))
    except BaseException as e:  # report anything, then leave without the SDK's teardown
        print(f"{sys.argv[0]}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        os._exit(1)
    os._exit(0)
