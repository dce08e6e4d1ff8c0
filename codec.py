"""Payload encryption from the command line (the code is ``durable_agents/cli/codec.py``):

python codec.py new-key                        # a fresh base64 key
python codec.py serve [--port 8081] [--host 127.0.0.1]
"""

from durable_agents.cli import exit_now, settings_or_exit
from durable_agents.cli.codec import main

if __name__ == "__main__":
    exit_now(main(settings_or_exit("codec")))
