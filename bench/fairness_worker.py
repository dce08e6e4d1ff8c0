"""The worker process of ``bench.fairness``: the agent worker with few task slots, so a burst backlogs
the server's queues (the benchmark's subject), in a process of its own (the benchmark's clients do
not share its CPU time or event loop).

    TEMPORAL_ADDRESS=127.0.0.1:PORT FAIR_SLOTS=4 [AGENT_MAX_CACHED_WORKFLOWS=0] \\
    [FAIR_STICKY_SECONDS=5] .venv/bin/python -m bench.fairness_worker --task-queue fair
"""

from __future__ import annotations

import os
from datetime import timedelta

from temporalio.worker import Worker

from bench.serve import serve
from durable_agents.connection import connect
from durable_agents.settings import Settings
from durable_agents.worker.plugin import MAX_CACHED_WORKFLOWS, AgentPlugin
from durable_agents.worker.tuning import WorkerTuning


async def worker(task_queue: str) -> Worker:
    settings = Settings.from_env()
    slots = int(os.environ.get("FAIR_SLOTS", "4"))
    cached = settings.max_cached_workflows
    tuning = WorkerTuning()
    if sticky := os.environ.get("FAIR_STICKY_SECONDS"):
        tuning = WorkerTuning(sticky_queue_schedule_to_start_timeout=timedelta(seconds=float(sticky)))
    return Worker(
        await connect(settings),
        task_queue=task_queue,
        max_concurrent_activities=slots,
        max_concurrent_workflow_tasks=max(2, slots),
        max_concurrent_local_activities=slots,
        max_cached_workflows=MAX_CACHED_WORKFLOWS if cached is None else cached,
        plugins=[AgentPlugin(settings, agents={}, tuning=tuning)],
    )


if __name__ == "__main__":
    serve(worker, __doc__.splitlines()[0])
