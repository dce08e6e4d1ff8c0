"""The command lines an operator runs: ``starter.py`` (in-process, and as a process of its own) and
the real ``temporal`` CLI against the test server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import pytest
from temporalio.client import WorkflowHandle

from durable_agents.cli import starter as starter_module
from durable_agents.dev_server import EmbeddedServer, temporal_cli
from tests.support.paths import ROOT
from tests.support.workers import Env


async def starter_cli(env: Env, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``starter.py ARGV`` against the session's server and ``env``'s task queue: (code, stdout, stderr)."""
    code = await starter_module.run(["--task-queue", env.task_queue, *argv])
    out, err = capsys.readouterr()
    return code, out, err


async def starter(
    server: EmbeddedServer, *argv: str, stdin: str | None = None, **env: str | None
) -> tuple[int, str, str]:
    """Run ``python starter.py ARGV`` against the test server: exit code, stdout, stderr.

    ``env`` adds variables to the environment, or removes those given as None.
    """
    environ = {k: v for k, v in os.environ.items() if k != "AGENT_UI_URL"} | {
        "TEMPORAL_ADDRESS": server.address
    }
    for key, value in env.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "starter.py", *argv],
        cwd=ROOT,
        env=environ,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


async def temporal(server: EmbeddedServer | str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``temporal ARGV`` against the test server (or the server at an address), in a thread: a worker
    in this process may have to answer it."""
    address = server if isinstance(server, str) else server.address
    command = [temporal_cli(), *argv, "--address", address]
    return await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60)


async def temporal_decide(
    server: EmbeddedServer, handle: WorkflowHandle, decision: dict
) -> subprocess.CompletedProcess[str]:
    """The ``decide`` update as an operator sends it: ``temporal workflow update execute``."""
    return await temporal(
        server, "workflow", "update", "execute", "--workflow-id", handle.id, "--name", "decide",
        "--input", json.dumps(decision), "--output", "json",
    )  # fmt: skip


async def temporal_signal(server: EmbeddedServer, handle: WorkflowHandle, name: str, body: dict) -> None:
    """``temporal workflow signal``, which must be accepted."""
    sent = await temporal(
        server, "workflow", "signal", "-w", handle.id, "--name", name, "--input", json.dumps(body)
    )
    assert sent.returncode == 0, sent.stderr


async def temporal_revoke(
    server: EmbeddedServer, handle: WorkflowHandle, body: dict
) -> subprocess.CompletedProcess[str]:
    """The ``revoke`` update as an operator sends it: ``temporal workflow update execute``."""
    return await temporal(
        server, "workflow", "update", "execute", "--workflow-id", handle.id, "--name", "revoke",
        "--input", json.dumps(body), "--output", "json",
    )  # fmt: skip


def refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The worker's one-line reason for a refused update, out of the temporal CLI's line."""
    assert done.returncode == 1, done.stdout
    [line] = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    refused = re.fullmatch(
        r"Error: unable to update workflow: (.*) \(type: ValueError, retryable: true\)", line
    )
    assert refused, line
    return refused[1]
