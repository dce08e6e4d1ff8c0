"""One benchmark worker process: ``worker.build_worker`` on a task queue, until SIGTERM or SIGKILL.

    TEMPORAL_ADDRESS=127.0.0.1:PORT OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 OPENAI_API_KEY=x \\
    AGENT_STORE=... AGENT_PAYLOAD_STORE=... AGENT_WORKSPACE=... \\
        .venv/bin/python -m bench.worker_proc --task-queue bench

Connects with ``connection.connect()`` (so the same data converter and payload store as
the benchmark's client), prints ``ready <pid>`` once the worker runs, and leaves with
``os._exit`` on SIGTERM (no graceful shutdown: the benchmark wants it gone at once).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from connection import connect
from worker import build_worker


async def run(task_queue: str) -> None:
    client = await connect()
    worker = build_worker(client, task_queue=task_queue)
    async with worker:
        print(f"ready {os.getpid()}", flush=True)
        await asyncio.Event().wait()  # until a signal ends the process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task-queue", required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    try:
        asyncio.run(run(args.task_queue))
    except BaseException as e:  # report anything, then leave without the SDK's teardown
        print(f"worker_proc: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    main()
