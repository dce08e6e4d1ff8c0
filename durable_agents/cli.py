"""What every command-line entry point shares."""

from __future__ import annotations

import os
import sys

from durable_agents.settings import Settings


def exit_now(code: int) -> None:
    """Leave with ``code`` at once: a process that used temporalio can crash at interpreter exit."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def settings_or_exit(program: str) -> Settings:
    """The environment's settings; a value they cannot use ends ``program`` with one line (exit 2)."""
    try:
        return Settings.from_env()
    except ValueError as e:
        print(f"{program}: {e}", file=sys.stderr)
        raise SystemExit(2) from None
