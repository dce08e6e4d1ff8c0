"""A worker whose own machinery fails says so in one line and exits, instead of printing "running"
and never polling: ``python worker.py`` against a data dir on a full file system (a small tmpfs).

The processes get generous timeouts; what is asserted is that they exit, their exit codes and
their lines, never how fast.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from tests.support.disks import fill
from tests.support.paths import ROOT

NO_SPACE = os.strerror(errno.ENOSPC)
EXIT_TIMEOUT = 60
"""Seconds a test waits for a worker to exit before it fails (the worker takes a few)."""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A file system of its own (1 MiB: room for the worker's SQLite files), unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def _worker(server: EmbeddedServer, data_dir: Path, task_queue: str) -> subprocess.Popen[str]:
    """``python worker.py`` with every local file under ``data_dir`` (none of the session's paths)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")} | {
        "TEMPORAL_ADDRESS": server.address,
        "AGENT_DATA_DIR": str(data_dir),
        "AGENT_TASK_QUEUE": task_queue,
    }
    return subprocess.Popen(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _until_running(process: subprocess.Popen[str]) -> list[str]:
    """Its stdout lines up to the "running" one, or to its end if it exits first."""
    lines = []
    for line in process.stdout:  # type: ignore[union-attr]
        lines.append(line)
        if " running on " in line:
            break
    return lines


def _errors(process: subprocess.Popen[str]) -> list[str]:
    """Its stderr lines that are not the SDK's log records (which say which worker stopped)."""
    return [line for line in process.stderr.read().splitlines() if line.startswith("worker:")]  # type: ignore[union-attr]


def test_a_worker_whose_data_dir_is_full_exits_with_one_line_naming_it(
    server: EmbeddedServer, small_disk: Path
) -> None:
    fill(small_disk)
    process = _worker(server, small_disk, f"full-{uuid.uuid4().hex}")
    out, err = process.communicate(timeout=EXIT_TIMEOUT)

    assert process.returncode == 2
    assert err.splitlines() == [f"worker: cannot write to the data dir {small_disk}: {NO_SPACE}"]
    assert " running on " not in out


@pytest.mark.parametrize(
    ("fill_first", "code"), [(True, 2), (False, 0)], ids=["full-from-the-start", "filled-while-it-runs"]
)
def test_a_worker_sent_sigterm_while_its_data_dir_fails_is_gone(
    server: EmbeddedServer, small_disk: Path, fill_first: bool, code: int
) -> None:
    if fill_first:
        fill(small_disk)
    process = _worker(server, small_disk, f"sigterm-{uuid.uuid4().hex}")
    try:
        _until_running(process)
        if not fill_first:
            fill(small_disk)
        process.terminate()  # nothing if it has exited already
        process.wait(timeout=EXIT_TIMEOUT)
    finally:
        process.kill()

    assert process.returncode == code


async def test_a_worker_that_cannot_write_its_lease_stops_with_one_line_naming_it(
    server: EmbeddedServer, client: Client, small_disk: Path
) -> None:
    """The disk fills while the worker runs; its first call cannot be added to its lease: the worker
    stops (its calls would otherwise wait for their timeouts after a crash, unannounced)."""
    task_queue = f"lease-{uuid.uuid4().hex}"
    process = _worker(server, small_disk, task_queue)
    try:
        assert " running on " in _until_running(process)[-1]
        fill(small_disk)
        await client.start_workflow(
            AgentWorkflow.run,
            conversation(scripted_agent(step("hello"))),
            id=f"lease-{uuid.uuid4().hex}",
            task_queue=task_queue,
        )
        await asyncio.to_thread(process.wait, EXIT_TIMEOUT)
    finally:
        process.kill()

    assert process.returncode == 1
    [line] = _errors(process)
    assert line.startswith(f"worker: cannot write the lease {small_disk}/workers/")
    assert line.endswith(f": {NO_SPACE}")


async def test_a_worker_sent_sigterm_while_a_tool_is_stuck_in_synchronous_code_has_exited_after_its_grace(
    server: EmbeddedServer, client: Client, tmp_path: Path
) -> None:
    """A tool blocks for two minutes in code that never hears a cancellation: the worker gives it its
    grace (1 s here), then exits all the same, as asked (0), by the time the grace and 3 s are past."""
    grace = 1
    task_queue = f"stuck-{uuid.uuid4().hex}"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")} | {
        "TEMPORAL_ADDRESS": server.address,
        "AGENT_DATA_DIR": str(tmp_path / "data"),
        "AGENT_TASK_QUEUE": task_queue,
        "AGENT_SHUTDOWN_GRACE_SECONDS": str(grace),
        "STUCK_MARK": str(tmp_path / "stuck"),
    }
    with (tmp_path / "worker.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.stuck_worker"],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    try:
        assert " running on " in _until_running(process)[-1]
        await client.start_workflow(
            AgentWorkflow.run,
            conversation(
                scripted_agent(step("", ("stuck", {"seconds": 120})), step("done"), tools=["stuck"])
            ),
            id=f"stuck-{uuid.uuid4().hex}",
            task_queue=task_queue,
        )
        deadline = time.monotonic() + EXIT_TIMEOUT
        while not (tmp_path / "stuck").exists():
            assert time.monotonic() < deadline, "the tool never started"
            await asyncio.sleep(0.05)
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, grace + 3)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker was still running {grace + 3} s after SIGTERM")
    finally:
        process.kill()

    assert process.returncode == 0
    errors = [
        line for line in (tmp_path / "worker.log").read_text().splitlines() if line.startswith("worker:")
    ]
    assert errors == [
        "worker: still stopping after 1.5 s (a call ignores its cancellation); exiting without it"
    ]


def test_a_store_file_that_cannot_be_opened_stops_the_worker_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "payloads.db").mkdir()  # a folder where the payload store's file should be
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")} | {
        "AGENT_DATA_DIR": str(tmp_path),
        "AGENT_PAYLOAD_STORE": str(tmp_path / "payloads.db"),
    }
    done = subprocess.run(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=EXIT_TIMEOUT,
    )
    assert (done.returncode, done.stderr) == (
        2,
        "worker: cannot open the stores on this host: unable to open database file\n",
    )


def test_a_temporal_server_that_does_not_answer_stops_the_worker_with_one_line(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")} | {
        "AGENT_DATA_DIR": str(tmp_path),
        "TEMPORAL_ADDRESS": "127.0.0.1:9",  # nothing listens
    }
    done = subprocess.run(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=EXIT_TIMEOUT,
    )
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("worker: cannot connect to Temporal at 127.0.0.1:9: ")
