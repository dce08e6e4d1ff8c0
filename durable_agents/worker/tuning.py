"""``WorkerTuning``: the options of a whole worker that conversations were measured with. They apply
to every workflow and activity of the worker, so ``AgentPlugin`` sets them only when asked
(``tuning=WorkerTuning()``); ``build_worker``, which builds the whole worker, always does."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from datetime import timedelta

from temporalio.worker import WorkerConfig


@dataclass(frozen=True)
class WorkerTuning:
    """Each field replaces the worker's own option of that name (docs/production.md, "Worker tuning")."""

    sticky_queue_schedule_to_start_timeout: timedelta = timedelta(seconds=5)
    """How long a conversation's next workflow task waits for the worker that has it cached before it
    goes to any worker (a full replay). The SDK's 10 s left a crashed worker's conversations waiting
    9.9 s, 5 s 4.8 s; 1 s turned every queueing delay of a busy worker into a timeout and a replay
    (``bench.run``, docs/benchmarks.md)."""
    max_heartbeat_throttle_interval: timedelta = timedelta(seconds=1)
    """Streamed partial answers reach ``describe`` (and the Web UI) within a second (the SDK: 60 s)."""
    default_heartbeat_throttle_interval: timedelta = timedelta(seconds=1)
    """The same for an activity without a heartbeat timeout (the SDK: 30 s)."""
    graceful_shutdown_timeout: timedelta = timedelta(seconds=5)
    """A stopping worker's running calls may finish this long before they are cancelled and retried
    elsewhere (the SDK: none). Chosen, not measured: a model call usually ends within it."""
    workflow_threads: int | None = 2
    """Threads that run workflow tasks (None: the worker's own executor, or the SDK's pool of one
    thread per cached workflow). Workflow code holds the GIL while it runs: with the SDK's pool a
    busy worker's heartbeats arrived late and model calls were retried, paid twice (``bench.peers``,
    docs/benchmarks.md, "Retries under load")."""

    def apply(self, config: WorkerConfig) -> concurrent.futures.ThreadPoolExecutor | None:
        """Set the options on ``config``; the workflow threads' executor it made, for the caller to
        shut down with the worker (None: it made none)."""
        config["sticky_queue_schedule_to_start_timeout"] = self.sticky_queue_schedule_to_start_timeout
        config["max_heartbeat_throttle_interval"] = self.max_heartbeat_throttle_interval
        config["default_heartbeat_throttle_interval"] = self.default_heartbeat_throttle_interval
        config["graceful_shutdown_timeout"] = self.graceful_shutdown_timeout
        if self.workflow_threads is None or not config.get("workflows"):
            return None
        executor = concurrent.futures.ThreadPoolExecutor(self.workflow_threads, thread_name_prefix="workflow")
        config["workflow_task_executor"] = executor
        return executor
