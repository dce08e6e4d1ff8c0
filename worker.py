"""Run a worker: ``python worker.py`` (its options: ``--help``; the code: ``durable_agents/cli/worker.py``).

Connects with Temporal's env config (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, profiles).
When no server is named and none answers at localhost:7233, it starts the
embedded dev server itself and says so.
"""

from durable_agents.cli import exit_now
from durable_agents.cli.worker import main

if __name__ == "__main__":
    exit_now(main())
