"""Start and inspect conversations: ``python starter.py start "prompt" --agent demo --wait``
(the commands are in ``durable_agents/cli/starter.py``)."""

from durable_agents.cli import exit_now
from durable_agents.cli.starter import main

if __name__ == "__main__":
    exit_now(main())
