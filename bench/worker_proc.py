"""One benchmark worker process: ``durable_agents.worker.plugin.build_worker``, until SIGTERM or SIGKILL.

    TEMPORAL_ADDRESS=127.0.0.1:PORT OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 OPENAI_API_KEY=x \\
    AGENT_STORE=... AGENT_PAYLOAD_STORE=... AGENT_WORKSPACE=... [AGENT_MAX_CACHED_WORKFLOWS=N] \\
        .venv/bin/python -m bench.worker_proc --task-queue bench

Connects with ``connection.connect()`` (so the same data converter and payload store as
the benchmark's client), prints ``ready <pid>`` once the worker runs, and leaves with
``os._exit`` on SIGTERM (no graceful shutdown: the benchmark wants it gone at once).
"""

from __future__ import annotations

from pathlib import Path

from temporalio.worker import Worker

from bench.serve import serve
from durable_agents.connection import connect
from durable_agents.settings import Settings
from durable_agents.worker.plugin import build_worker

AGENTS_DIR = Path(__file__).parent / "agents"
"""The agents ``bench.peers`` starts by name (bench.toml)."""


async def ours(task_queue: str) -> Worker:
    settings = Settings.from_env()
    return build_worker(
        await connect(settings),
        settings,
        task_queue=task_queue,
        agents_dir=AGENTS_DIR,
    )


if __name__ == "__main__":
    serve(ours, __doc__.splitlines()[0])
