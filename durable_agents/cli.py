"""What every command-line entry point shares."""

from __future__ import annotations

import os
import sys


def exit_now(code: int) -> None:
    """Leave with ``code`` at once: a process that used temporalio can crash at interpreter exit."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
