"""The worker's command line (``python worker.py``): checks the agent files, models table, keys and the
data dir before connecting, starts the embedded dev server when no server is named and none
answers, then runs ``build_worker`` until SIGINT/SIGTERM, and has exited within its graceful
shutdown time (``AGENT_SHUTDOWN_GRACE_SECONDS``) and half a second after.

A worker that cannot run does not pretend to: "running" is printed once the worker polls, and any
failure of its own machinery (data dir, stores, lease, the polling itself) ends the process with
one line naming the cause and a non-zero exit, so that a supervisor restarts it or someone looks.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, get_args

from temporalio.common import WorkerDeploymentVersion
from temporalio.worker import Worker

from durable_agents.activities.agent_files import AgentFileError, load_agents
from durable_agents.activities.approver_keys import load_approver_keys
from durable_agents.activities.hooks import default_hooks
from durable_agents.activities.models import load_models
from durable_agents.activities.tools import ToolRegistry, default_registry
from durable_agents.cli import exit_now, settings_or_exit
from durable_agents.connection import (
    address_is_explicit,
    connect,
    connect_config,
    ensure_search_attributes,
    reachable,
)
from durable_agents.converter import data_converter
from durable_agents.dev_server import start_embedded_server
from durable_agents.settings import ROLES, LogFormat, Settings, Trace
from durable_agents.worker.plugin import MAX_CACHED_WORKFLOWS, build_worker
from durable_agents.worker.telemetry import configure_logging, metrics_runtime


async def run(args: argparse.Namespace, settings: Settings, registry: ToolRegistry | None = None) -> int:
    configure_logging(args.log_format)
    stores = settings.stores
    try:
        registry = registry or default_registry()
        models = load_models(settings.models_file, settings.prices_file)  # fail before connecting on
        load_agents(args.agents_dir, registry, default_hooks(), models.max_output_tokens)  # a bad file
        if not stores.shared:  # the stores' files and the leases
            _check_writable(settings.data_dir)
        data_converter(settings)  # and on a bad AGENT_ENCRYPTION_KEY
        load_approver_keys(settings.approver_keys)  # and on a bad AGENT_APPROVER_KEYS file
    except (AgentFileError, ValueError) as e:
        print(f"worker: {e}", file=sys.stderr)
        return 2
    except sqlite3.Error as e:  # a store's file that cannot be opened or created
        print(f"worker: cannot open the stores on this host: {e}", file=sys.stderr)
        return 2
    try:
        await stores.open()
    except RuntimeError as e:
        print(f"worker: {e}", file=sys.stderr)
        return 2
    server = None
    address = connect_config()["target_host"]
    print(stores.describe(), flush=True)
    if warning := stores.several_hosts_warning(address):
        print(warning, file=sys.stderr, flush=True)
    if not reachable(address) and not address_is_explicit():
        print(
            f"No Temporal server at {address}: starting the embedded dev server "
            f"(SQLite in {settings.data_dir}/, Web UI http://localhost:8233).",
            flush=True,
        )
        server = await start_embedded_server(settings)
    runtime = metrics_runtime(args.metrics_port) if args.metrics_port else None
    try:
        client = await connect(settings, runtime=runtime)
    except Exception as e:  # connection errors from the Rust core carry no common type
        print(f"worker: cannot connect to Temporal at {address}: {e}", file=sys.stderr)
        return 2
    try:
        await ensure_search_attributes(client)
    except RuntimeError as e:
        print(f"worker: {e}", file=sys.stderr)
        return 2
    try:
        worker = build_worker(
            client,
            task_queue=args.task_queue,
            registry=registry,
            agents_dir=args.agents_dir,
            role=args.role,
            activities_per_second=args.rate_limit,
            max_cached_workflows=args.max_cached_workflows,
            settings=replace(settings, trace=args.trace),
        )
    except sqlite3.Error as e:
        print(f"worker: cannot open the stores on this host: {e}", file=sys.stderr)
        return 2
    stop = asyncio.Event()
    grace = worker.config(active_config=True).get("graceful_shutdown_timeout") or timedelta(0)
    deadline = _Deadline(grace.total_seconds() + EXIT_MARGIN)
    loop = asyncio.get_running_loop()

    def asked_to_stop(signum: int, frame: object) -> None:
        deadline.start()  # here, not on the loop: a call may be blocking the loop
        loop.call_soon_threadsafe(stop.set)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, asked_to_stop)
    deadline.code = await _run_until_stopped(worker, stop, args, address)
    deadline.start()  # however it stopped: the interpreter's exit waits for the calls' threads
    if server:
        await server.stop()
    return deadline.code


async def _run_until_stopped(
    worker: Worker, stop: asyncio.Event, args: argparse.Namespace, address: str
) -> int:
    """Says "running" once the worker polls; 0 when ``stop`` ended it, 1 with one line when it
    failed (it never started, or stopped on its own: a lease it could not keep, polling failed)."""
    running = asyncio.create_task(worker.run(), name="worker")
    stopped = asyncio.create_task(stop.wait())
    while not (worker.is_running or running.done() or stop.is_set()):  # the SDK has no "polling" event
        await asyncio.wait([running, stopped], timeout=0.05)
    if worker.is_running and not stop.is_set():
        limit = f", at most {args.rate_limit:g} activities/s across the queue" if args.rate_limit else ""
        where = f"task queue '{args.task_queue}' at {address}{limit}"
        print(f"Worker ({args.role}) running on {where}. Ctrl-C to stop.", flush=True)
        if deployment := worker.config().get("deployment_config"):
            print(_versioned(deployment.version), flush=True)
        await asyncio.wait([running, stopped], return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not running.done():  # asked to stop: within the graceful shutdown time
        shutdown = asyncio.create_task(worker.shutdown())
        await asyncio.wait([running])  # not shutdown(): it would wait forever for a worker that never started
        shutdown.cancel()
    if error := running.exception():
        print(f"worker: {_one_line(error)}", file=sys.stderr)
        return 1
    return 0  # it ends without an error only when asked to


EXIT_MARGIN = 0.5
"""Seconds past the graceful shutdown time (``AGENT_SHUTDOWN_GRACE_SECONDS``) by which a stopping
worker has exited, whatever still runs."""


class _Deadline:
    """Once the worker stops, the process ends within the grace and ``EXIT_MARGIN``. A call that
    ignores its cancellation (a tool blocked in synchronous code) would otherwise hold the SDK's
    shutdown, and then the interpreter's exit, which waits for every thread, for as long as it runs;
    a thread of its own ends the process even when such a call blocks the event loop. The call's
    attempt is retried as a dead worker's are (``durable_agents/worker/lost_calls.py``)."""

    def __init__(self, seconds: float) -> None:
        self.code = 0
        """The exit status: 0 (asked to stop) until ``run`` knows better."""
        self._seconds = seconds
        self._timer = threading.Timer(seconds, self._end)
        self._timer.daemon = True

    def start(self) -> None:
        if self._timer.ident is None:  # a second signal changes nothing
            self._timer.start()

    def _end(self) -> None:
        print(
            f"worker: still stopping after {self._seconds:g} s (a call ignores its cancellation);"
            " exiting without it",
            file=sys.stderr,
        )
        exit_now(self.code)


def _versioned(version: WorkerDeploymentVersion) -> str:
    """Until a build is made current, Temporal sends new conversations to unversioned workers only."""
    return (
        f"Build {version.build_id} of Worker Deployment {version.deployment_name}: it takes new"
        " conversations once current (temporal worker deployment set-current-version"
        f" --deployment-name {version.deployment_name} --build-id {version.build_id})."
    )


def _one_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _check_writable(folder: Path) -> None:
    """A data dir the worker cannot write to (read-only, full) fails at start, not at the first
    conversation; ``ValueError`` in one line naming it."""
    probe = folder / f".probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            probe.write_bytes(b"probe")
        finally:
            probe.unlink(missing_ok=True)
    except OSError as e:
        raise ValueError(f"cannot write to the data dir {folder}: {e.strerror}") from e


_FROM_SETTINGS: dict[str, dict[str, Any]] = {
    "task_queue": {},
    "agents_dir": {"type": Path, "help": "the folder of agent files (read again when they change)"},
    "role": {
        "choices": ROLES,
        "help": "run everything, or one pool: the loop itself, model calls, or tool calls",
    },
    "log_format": {
        "choices": get_args(LogFormat),
        "help": "json: one object per line with workflow id, run id, iteration and tool call id",
    },
    "rate_limit": {
        "type": float,
        "help": "activities per second for the whole task queue (e.g. a model pool)",
    },
    "max_cached_workflows": {
        "type": int,
        "help": f"conversations kept in memory between steps (default {MAX_CACHED_WORKFLOWS});"
        " others are replayed from history when they next have work",
    },
    "trace": {
        "choices": get_args(Trace),
        "help": "OpenTelemetry tracing: spans to stderr, or OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT"
        " (the default when it is set)",
    },
}
"""Options whose default is the setting of the same name (``AGENT_*``, durable_agents/settings.py)."""


def main(argv: Sequence[str] | None = None, registry: ToolRegistry | None = None) -> int:
    """``worker.py``: with ``registry``, a worker of your own tools (default: ``default_registry()``)."""
    parser = argparse.ArgumentParser(description="Run the durable agent worker.")
    settings = settings_or_exit("worker")
    for name, options in _FROM_SETTINGS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", default=getattr(settings, name), **options)
    parser.add_argument(
        "--metrics-port", type=int, help="serve the SDK's metrics and ours for Prometheus on this port"
    )
    return asyncio.run(run(parser.parse_args(argv), settings, registry))
