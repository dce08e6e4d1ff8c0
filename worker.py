"""Run a worker: ``python worker.py``.

Connects with Temporal's env config (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, profiles).
When no server is named and none answers at localhost:7233, it starts the
embedded dev server itself and says so.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import importlib.util
import os
import py_compile
import signal
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker

from activities.agent import AgentActivities, ModelProvider, WorkerRole, import_providers
from activities.agents import DEFAULT_AGENTS_DIR, DEFAULT_PRICES, AgentFileError, load_agents, load_prices
from activities.hooks import HookRegistry, default_hooks
from activities.state import StoreSettings
from activities.store import ConversationStore
from activities.tools import ToolRegistry, default_registry
from connection import (
    TASK_QUEUE,
    address_is_explicit,
    connect,
    connect_config,
    data_converter,
    ensure_search_attributes,
    reachable,
    start_embedded_server,
)
from telemetry import configure_logging, metrics_runtime, tracing_interceptor
from workflows.agent import AgentWorkflow

MAX_CACHED_WORKFLOWS = 200
"""Conversations a worker keeps in memory between their steps. One parked for approval costs
~150 KiB while cached; an evicted one is replayed from history when it next has work. Keep it
above the number of conversations running at once (each eviction costs a replay)."""


WORKFLOW_THREADS = 2
"""Threads that run workflow tasks. Workflow code holds the GIL while it runs, so more threads only
take turns with the event loop that runs the activities: with one per cached conversation (the
SDK's default), a busy worker's heartbeats arrived late and model calls were retried (paid twice)."""
STICKY_SECONDS = 5.0
"""How long a conversation's next workflow task waits for the worker that has it cached before it
goes to any worker (a full replay). 1 s turned every queueing delay of a busy worker into a timeout
and a replay; after a crash, conversations the dead worker had cached move within this time."""


def build_worker(
    client: Client,
    *,
    task_queue: str = TASK_QUEUE,
    registry: ToolRegistry | None = None,
    agents_dir: Path = DEFAULT_AGENTS_DIR,
    workspace_root: Path | None = None,
    providers: dict[str, ModelProvider] | None = None,
    store: ConversationStore | None = None,
    hooks: HookRegistry | None = None,
    prices_file: Path = DEFAULT_PRICES,
    role: WorkerRole = "all",
    activities_per_second: float | None = None,
    allow_inline_mcp: bool | None = None,
    max_cached_workflows: int = MAX_CACHED_WORKFLOWS,
    stores: StoreSettings | None = None,
) -> Worker:
    """The one worker setup used by ``worker.py``, the demo and the tests.

    ``role`` splits the work across pools: "workflows" (the loop, agent resolution,
    hooks), "models" (model calls) and "tools" (tool calls), each on its own task
    queue as the agent names them; "all" runs everything. ``activities_per_second``
    is a task-queue-wide limit that Temporal enforces across every worker of the queue.
    ``allow_inline_mcp`` (default: ``AGENT_ALLOW_INLINE_MCP=1``) lets inline agents name MCP
    servers the worker's agent files do not: commands run on this host, so it is off by default.
    ``stores`` (default: from the environment) says where the state beside Temporal lives;
    ``store`` and ``workspace_root`` replace parts of it.

    Raises ``AgentFileError`` naming the file and field when an agent file is bad.
    """
    registry = registry or default_registry()
    hooks = hooks or default_hooks()
    agents = load_agents(agents_dir, registry, hooks)
    activities = AgentActivities(
        registry,
        agents,
        workspace_root=workspace_root,
        providers=providers,
        store=store,
        hooks=hooks,
        prices=load_prices(prices_file),
        allow_inline_mcp=(
            os.environ.get("AGENT_ALLOW_INLINE_MCP") == "1" if allow_inline_mcp is None else allow_inline_mcp
        ),
        stores=stores,
    )
    workflows = [AgentWorkflow] if role in ("all", "workflows") else []
    _compile_bytecode(workflows)
    if role in ("all", "models"):
        # The SDKs of the providers the agent files name import while the worker starts polling
        # (~1 s each); the others load on first use, so a worker carries only the SDKs it uses.
        used = {agent.model.provider for agent in agents.values()}
        threading.Thread(target=import_providers, args=(used,), name="import-providers", daemon=True).start()
    executor = concurrent.futures.ThreadPoolExecutor(WORKFLOW_THREADS, thread_name_prefix="workflow-task")

    @contextlib.asynccontextmanager
    async def lifetime() -> AsyncIterator[None]:
        """Wraps the worker's run: its activities' resources, and its workflow threads, end with it."""
        try:
            async with activities.lifetime():
                yield
        finally:
            executor.shutdown(wait=False)

    return Worker(
        client,
        task_queue=task_queue,
        workflows=workflows,
        workflow_task_executor=executor,
        max_cached_workflows=max_cached_workflows,
        activities=activities.for_role(role),
        max_task_queue_activities_per_second=activities_per_second,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=STICKY_SECONDS),
        graceful_shutdown_timeout=timedelta(seconds=5),
        # Streamed partial answers reach `describe` (and `starter.py watch`) within a second.
        max_heartbeat_throttle_interval=timedelta(seconds=1),
        default_heartbeat_throttle_interval=timedelta(seconds=1),
        # MCP servers this worker started stop with it, and provider clients close.
        plugins=[SimplePlugin("agent-activities", run_context=lifetime)],
    )


def _compile_bytecode(workflows: Sequence[type]) -> None:
    """Write the bytecode of the workflows' modules, even under PYTHONDONTWRITEBYTECODE.

    The sandbox imports a workflow's module afresh for every conversation it loads (a start,
    a replay after eviction): without bytecode that compiles the source each time (~40 ms).
    """
    for module in {cls.__module__ for cls in workflows}:
        source = getattr(importlib.util.find_spec(module), "origin", None) or ""
        if source.endswith(".py"):
            # A read-only tree keeps compiling each time (a Docker image compiles at build).
            with contextlib.suppress(OSError, py_compile.PyCompileError):
                py_compile.compile(source, cfile=importlib.util.cache_from_source(source), doraise=True)


async def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_format)
    try:
        registry = default_registry()
        load_agents(args.agents_dir, registry, default_hooks())  # fail before connecting on a bad file
        load_prices(DEFAULT_PRICES)
        stores = StoreSettings.from_env()  # and on a bad AGENT_DATABASE_URL
        data_converter()  # and on a bad AGENT_ENCRYPTION_KEY
    except (AgentFileError, ValueError) as e:
        print(f"worker: {e}", file=sys.stderr)
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
            f"(SQLite in data/, Web UI http://localhost:8233).",
            flush=True,
        )
        server = await start_embedded_server()
    runtime = metrics_runtime(args.metrics_port) if args.metrics_port else None
    tracing = tracing_interceptor(args.trace)
    try:
        client = await connect(runtime, [tracing] if tracing else [])
    except Exception as e:  # connection errors from the Rust core carry no common type
        print(f"worker: cannot connect to Temporal at {address}: {e}", file=sys.stderr)
        return 2
    try:
        await ensure_search_attributes(client)
    except RuntimeError as e:
        print(f"worker: {e}", file=sys.stderr)
        return 2
    worker = build_worker(
        client,
        task_queue=args.task_queue,
        registry=registry,
        agents_dir=args.agents_dir,
        role=args.role,
        activities_per_second=args.rate_limit,
        max_cached_workflows=args.max_cached_workflows,
        stores=stores,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        limit = f", at most {args.rate_limit:g} activities/s across the queue" if args.rate_limit else ""
        where = f"task queue '{args.task_queue}' at {address}{limit}"
        print(f"Worker ({args.role}) running on {where}. Ctrl-C to stop.", flush=True)
        await stop.wait()
    if server:
        await server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the durable agent worker.")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--agents-dir", type=Path, default=DEFAULT_AGENTS_DIR)
    parser.add_argument(
        "--role",
        choices=["all", "workflows", "models", "tools"],
        default="all",
        help="run everything, or one pool: the loop itself, model calls, or tool calls",
    )
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=os.environ.get("AGENT_LOG_FORMAT", "text"),
        help="json: one object per line with workflow id, run id, iteration and tool call id",
    )
    parser.add_argument(
        "--metrics-port", type=int, help="serve Temporal SDK metrics for Prometheus on this port"
    )
    parser.add_argument(
        "--rate-limit", type=float, help="activities per second for the whole task queue (e.g. a model pool)"
    )
    parser.add_argument(
        "--max-cached-workflows",
        type=int,
        default=int(os.environ.get("AGENT_MAX_CACHED_WORKFLOWS", MAX_CACHED_WORKFLOWS)),
        help=f"conversations kept in memory between steps (default {MAX_CACHED_WORKFLOWS});"
        " others are replayed from history when they next have work",
    )
    parser.add_argument(
        "--trace",
        choices=["console", "otlp"],
        default=os.environ.get("AGENT_TRACE") or None,
        help="OpenTelemetry tracing: spans to stderr, or OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT",
    )
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the SDK can crash at interpreter exit; leave explicitly
