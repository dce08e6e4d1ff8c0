"""Start and inspect conversations: ``python starter.py start "prompt" --agent demo --wait``
(the commands are in ``durable_agents/starter_cli.py``)."""

from durable_agents.cli import exit_now
from durable_agents.starter_cli import main

if __name__ == "__main__":
    exit_now(main())
