"""``worker.py``'s command line with one more tool, ``stuck``, which blocks in synchronous code and
never hears a cancellation: how a worker stops when a call will not.

TEMPORAL_ADDRESS=... AGENT_TASK_QUEUE=... STUCK_MARK=started.txt python -m tests.support.stuck_worker
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from durable_agents.activities.tools import default_registry, tool
from durable_agents.cli import exit_now
from durable_agents.cli.worker import main


@tool
def stuck(seconds: float) -> str:
    """Work without a pause for a while.

    Args:
        seconds: How long.
    """
    Path(os.environ["STUCK_MARK"]).touch()
    time.sleep(seconds)
    return f"worked {seconds:g}s"


if __name__ == "__main__":
    exit_now(main([], registry=default_registry(stuck)))
