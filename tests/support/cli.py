"""The command lines an operator runs: ``starter.py`` in-process and as a process of its own."""

from __future__ import annotations

import pytest

from durable_agents import starter_cli as starter
from tests.support.workers import Env


async def starter_cli(env: Env, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``starter.py ARGV`` against the session's server and ``env``'s task queue: (code, stdout, stderr)."""
    code = await starter.run(["--task-queue", env.task_queue, *argv])
    out, err = capsys.readouterr()
    return code, out, err
