"""Benchmark of the fleet-wide rate limit: model calls per second through a task queue limited to
3 a second and served by two model worker processes (``worker.py --role models --rate-limit 3``).

    .venv/bin/python -m bench.rate_limit [--conversations 20] [--limit 3]

``tests/workflow/test_queues.py`` checks that the workers' limit reaches Temporal (its effective rate limit
for the queue); this measures what gets through, which a test must not assert (a loaded machine
slows it). Everything runs locally: an embedded dev server (its log goes to server.log in a temp
dir), the fake model of ``bench/fake_model.py`` in a thread (3 model calls per conversation), and
three ``worker.py`` processes (the loop and tools on one queue, model calls on the limited one),
killed at the end. Prints JSON: model requests per second as the fake provider received them,
from the first to the last, and the most it received within any one second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.fake_model import FakeModelServer
from bench.processes import bench_dev_server
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.messages import ModelSettings

ROOT = Path(__file__).resolve().parent.parent


def _worker(tmp: Path, env: dict[str, str], name: str, *options: str) -> tuple[subprocess.Popen, Path]:
    log = tmp / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "worker.py", *options], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    return process, log


async def _ready(process: subprocess.Popen, log: Path) -> None:
    for _ in range(1200):
        if "Worker (" in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            raise RuntimeError(f"{log.name}: worker exited:\n{log.read_text(errors='replace')}")
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{log.name}: worker not ready after 60 s")


class _TimedFake(FakeModelServer):
    """The fake model, noting when each request came in: the rate as the provider sees it."""

    def __init__(self) -> None:
        super().__init__(0)
        self.arrivals: list[float] = []

    def counted(self) -> None:
        super().counted()
        self.arrivals.append(time.monotonic())  # list.append is atomic under the GIL


async def measure(conversations: int, limit: float) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="agent-bench-rate-"))
    os.environ["AGENT_PAYLOAD_STORE"] = str(tmp / "payloads.db")  # read by data_converter()
    fake = _TimedFake()
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    server = await bench_dev_server(tmp)
    loop, models = f"rate-loop-{uuid.uuid4().hex[:8]}", f"rate-models-{uuid.uuid4().hex[:8]}"
    env = os.environ | {
        "TEMPORAL_ADDRESS": server.address,
        "OPENAI_BASE_URL": f"{fake.url}/v1",
        "OPENAI_API_KEY": "x",
        "AGENT_STORE": str(tmp / "conversations.db"),
        "AGENT_IDEMPOTENCY_STORE": str(tmp / "idempotency.db"),
        "AGENT_WORKSPACE": str(tmp / "workspace"),
    }
    limited = ("--role", "models", "--task-queue", models, "--rate-limit", f"{limit:g}")
    workers = [
        _worker(tmp, env, "loop", "--task-queue", loop),
        _worker(tmp, env, "models-1", *limited),
        _worker(tmp, env, "models-2", *limited),
    ]
    try:
        for process, log in workers:
            await _ready(process, log)
        agent = AgentSpec(
            name="bench",
            model=ModelSettings(provider="openai", model="bench"),
            tools=["add"],
            model_task_queue=models,
        )
        handles = [
            await server.client.start_workflow(
                AgentWorkflow.run,
                ConversationInput(prompt="What is 1 + 2?", agent_spec=agent),
                id=f"rate-{i}-{uuid.uuid4().hex[:8]}",
                task_queue=loop,
            )
            for i in range(conversations)
        ]
        results = await asyncio.gather(*(h.result() for h in handles))
        wrong = sum(r.final_text != "done" or r.model_calls != 3 for r in results)
    finally:
        for process, _ in workers:
            process.kill()
            process.wait()
        await server.stop()
        fake.shutdown()
    arrivals = sorted(fake.arrivals)
    return {
        "limit_per_second": limit,
        "model_workers": 2,
        "conversations": conversations,
        "wrong_results": wrong,
        "model_requests": len(arrivals),
        "requests_per_second": round((len(arrivals) - 1) / (arrivals[-1] - arrivals[0]), 2),
        "most_requests_in_one_second": max(sum(t <= u < t + 1 for u in arrivals) for t in arrivals),
        "seconds": round(arrivals[-1] - arrivals[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--limit", type=float, default=3.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.conversations, args.limit)), indent=2))


if __name__ == "__main__":
    main()
