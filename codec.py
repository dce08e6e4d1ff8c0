"""Payload encryption from the command line (the code is ``durable_agents/codec.py``):

python codec.py new-key                        # a fresh base64 key
python codec.py serve [--port 8081] [--host 127.0.0.1]
"""

import sys

from durable_agents.cli import exit_now
from durable_agents.codec import main
from durable_agents.settings import Settings

if __name__ == "__main__":
    try:
        settings = Settings.from_env()
    except ValueError as e:
        print(f"codec: {e}", file=sys.stderr)
        exit_now(2)
    exit_now(main(settings))
