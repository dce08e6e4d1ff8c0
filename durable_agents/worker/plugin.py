"""``AgentPlugin``: our agents in any Temporal worker, in one piece.

    plugin = AgentPlugin()                                      # agents/ and the tools it names
    client = await Client.connect("localhost:7233", plugins=[plugin])
    worker = Worker(client, task_queue="my-queue", workflows=[MyWorkflow], activities=[my_activity])

On the client the plugin sets the data converter (compact pydantic JSON, the payload store, the
encryption codec); every worker of that client then also runs ``AgentWorkflow``
(outside the sandbox: ``tests/workflow/test_determinism.py`` keeps it deterministic) and its activities,
each under its namespaced name and its old one (workflows/wire.py; an old one yields to an
activity of the worker's own of that name), and closes the activities' resources (MCP servers,
provider clients) when the worker stops. The worker's own workflows, and its options, stay as
they are (``tuning=WorkerTuning()`` asks for ours), but for a build id and an identity where it
names none: they name our release for the other workers of the queue (worker/fleet.py).
``build_worker`` is the worker this project runs itself (``worker.py``, the demo, the tests and the
benchmarks), tuned.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from temporalio import activity
from temporalio.client import Client
from temporalio.plugin import SimplePlugin
from temporalio.worker import PatchActivationInput, UnsandboxedWorkflowRunner, Worker, WorkerConfig
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from durable_agents.activities.agent_files import AgentFiles, check_subagents
from durable_agents.activities.approver_keys import load_approver_keys
from durable_agents.activities.assembly import AgentActivities, WorkerRole
from durable_agents.activities.budgets import BudgetsFile
from durable_agents.activities.delta_channel import delta_sender
from durable_agents.activities.hooks import HookRegistry, default_hooks
from durable_agents.activities.models import load_models
from durable_agents.activities.notify import Notifier
from durable_agents.activities.providers import ModelProvider, import_providers
from durable_agents.activities.tools import ToolRegistry, default_registry
from durable_agents.converter import PayloadConverter, data_converter
from durable_agents.settings import DEFAULT_TASK_QUEUE, Settings
from durable_agents.stores.conversations import ConversationStore
from durable_agents.stores.settings import StoreSettings
from durable_agents.worker import telemetry
from durable_agents.worker.fleet import Fleet, built, tagged
from durable_agents.worker.lost_calls import (
    Lease,
    RecordCachedConversations,
    RecordRunningCalls,
    lease_store,
    run_with_lease,
)
from durable_agents.worker.metrics import exports_metrics
from durable_agents.worker.observer import Observer
from durable_agents.worker.runners import EagerUnlessRefused
from durable_agents.worker.tuning import WorkerTuning
from durable_agents.worker.versioning import deployment_config, name_releases, version_config
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.erasure import ErasureWorkflow
from durable_agents.workflows.retention import RetentionWorkflow
from durable_agents.workflows.versioning import WORKFLOW_TYPES
from durable_agents.workflows.wire import OLD_NAMES

logger = logging.getLogger(__name__)

MAX_CACHED_WORKFLOWS = 200
"""Conversations ``build_worker`` keeps in memory between their steps (~145 KiB each while cached);
an evicted one is replayed from history when it next has work. Keep it above the conversations
running at once on the worker: with 400 at once and 200 cached, evictions and replays doubled the
worker's CPU per conversation (``bench.peers --burst 400``). A plain ``Worker`` with the plugin
keeps its own setting."""


class AgentPlugin(SimplePlugin):
    """Data converter, ``AgentWorkflow``, its activities and their lifetime: one assembly.

    ``role`` splits the work across pools: "workflows" (the loop, agent resolution, hooks and
    local tools), "models" (model calls) and "tools" (tool calls), each on its own task queue as
    the agent names them; "all" runs everything. ``agents`` (default: the files in ``agents_dir``,
    read again when they change) are the agents conversations may name. ``settings`` (default:
    ``Settings.from_env()``) say where the state beside Temporal lives, the models table, and
    whether inline agents may name MCP servers the agent files do not (their commands run on this
    host); ``stores``, ``store``, ``workspace_root``, ``models_file``, ``prices_file`` and
    ``allow_inline_mcp`` replace parts of them.
    ``tuning`` (default: none) sets options of the whole worker as measured for conversations.
    The conversations' metrics go to the worker's runtime and their spans to ``tracer_provider``
    (default: as the settings say, ``AGENT_TRACE`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``; made with
    ``durable_agents.worker.telemetry.tracer_provider``): durable_agents/worker/observer.py.

    The plugin owns what it registers: the worker's other workflows run under the worker's own
    runner, and its options stay as they are unless ``tuning`` asks for ours (``WorkerTuning``:
    sticky timeout, heartbeat throttling, a graceful shutdown, two workflow threads). A call refused
    by a worker for its stores is queued when tried again, never handed eagerly back to the worker
    that scheduled it (``EagerUnlessRefused``). On a
    versioned worker (``deployment_config``) conversations are pinned unless they were started as
    ``AgentWorkflowAutoUpgrade`` (workflows/behaviors.py). Raises ``AgentFileError`` naming the file and
    field when an agent file is bad.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        role: WorkerRole = "all",
        registry: ToolRegistry | None = None,
        hooks: HookRegistry | None = None,
        agents: Mapping[str, AgentSpec] | None = None,
        agents_dir: Path | None = None,
        models_file: Path | None = None,
        prices_file: Path | None = None,
        providers: dict[str, ModelProvider] | None = None,
        stores: StoreSettings | None = None,
        store: ConversationStore | None = None,
        workspace_root: Path | None = None,
        allow_inline_mcp: bool | None = None,
        interceptors: Sequence = (),
        tuning: WorkerTuning | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self._tuning = tuning
        registry = registry or default_registry()
        hooks = hooks or default_hooks()
        settings = settings or Settings.from_env()
        models = load_models(models_file or settings.models_file, prices_file or settings.prices_file)
        self._observer = Observer(
            tracer_provider or telemetry.tracer_provider(settings.trace),
            capture_content=settings.capture_content,
            prices=models.price,
        )
        source: dict[str, AgentSpec] | AgentFiles
        if agents is not None:
            source = dict(agents)
            check_subagents(source)
        else:  # read again as they change: a new agent needs no restart
            source = AgentFiles(agents_dir or settings.agents_dir, registry, hooks, models.max_output_tokens)
        agents = source.current() if isinstance(source, AgentFiles) else source
        self._leases = settings.data_dir / "workers"
        self._lease_dead_seconds = settings.lease_dead_seconds
        stores = stores or settings.stores
        self._database_url = stores.database_url
        if allow_inline_mcp is None:
            allow_inline_mcp = settings.allow_inline_mcp
        self._activities = AgentActivities(
            registry,
            source,
            workspace_root=workspace_root,
            providers=providers,
            store=store,
            hooks=hooks,
            models=models,
            allow_inline_mcp=allow_inline_mcp,
            stores=stores,
            approver_keys=load_approver_keys(settings.approver_keys),
            deltas=delta_sender(stores.database_url, settings.delta_dir)
            if role in ("all", "models")
            else None,
            budgets=BudgetsFile(settings.budgets_file) if role in ("all", "models") else None,
            notifier=Notifier(settings.notify_secret.encode() or None, settings.console_url),
            notify_url=settings.notify_url,
        )
        workflows = (
            [AgentWorkflow, ErasureWorkflow, RetentionWorkflow] if role in ("all", "workflows") else []
        )
        # The SDKs of the providers the agents name import while the worker starts polling
        # (~1 s each); the others load on first use, so a worker carries only the SDKs it uses.
        self._providers_to_import = (
            {agent.model.provider for agent in agents.values()} if role in ("all", "models") else set()
        )
        self._executors: list[concurrent.futures.ThreadPoolExecutor] = []
        activities = self._activities.for_role(role)
        self._under_old_names = [fn for fn in activities if _activity_name(fn) in OLD_NAMES.values()]
        super().__init__(
            "durable_agents.AgentPlugin",
            data_converter=lambda _: data_converter(settings, stores.payload_driver()),
            workflows=workflows,
            activities=activities,
            interceptors=list(interceptors),
        )

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        client_converter = config["client"].data_converter  # type: ignore[typeddict-item]
        if not issubclass(client_converter.payload_converter_class, PayloadConverter):
            raise ValueError(
                "AgentPlugin: the worker's client does not use our data converter; connect it with"
                " Client.connect(..., plugins=[AgentPlugin(...)]) (a worker cannot change its client's)"
            )
        config = super().configure_worker(config)
        config["activities"] = self._yielding_old_names(config.get("activities") or [])
        client: Client = config["client"]  # type: ignore[typeddict-item]
        identity = config.get("identity") or client.identity
        if config.get("deployment_config") is None and not config.get("build_id"):
            config["build_id"] = built()  # the other workers read our release in it (fleet.py)
        elif not config.get("identity"):
            identity = tagged(identity)  # a build of the user's: the identity names the release
        config["identity"] = identity
        fleet = Fleet(client, config["task_queue"], identity)  # type: ignore[typeddict-item]
        if (theirs := config.get("patch_activation_callback")) is not None:
            config["patch_activation_callback"] = _ours_activated(theirs)
        self._observer.metrics = exports_metrics(client)
        leases = lease_store(self._database_url, self._leases, client, identity, self._lease_dead_seconds)
        lease = Lease(leases, identity)
        config["interceptors"] = [
            *config.get("interceptors", []),
            RecordRunningCalls(lease),
            fleet,
            EagerUnlessRefused(),
            self._observer,
        ]
        config["workflow_runner"] = RecordCachedConversations(
            config.get("workflow_runner") or SandboxedWorkflowRunner(), lease
        )
        config["unsandboxed_workflow_runner"] = RecordCachedConversations(
            config.get("unsandboxed_workflow_runner") or UnsandboxedWorkflowRunner(), lease
        )
        config = version_config(name_releases(config))
        if self._tuning is not None and (executor := self._tuning.apply(config)) is not None:
            self._executors.append(executor)
        return config

    def _yielding_old_names(self, activities: Sequence[Callable]) -> list[Callable]:
        """The worker's activities, less ours under an old name (workflows/wire.py) that an activity
        of the worker's own has: a worker takes one activity of a name, and the user's keeps it.
        (Conversations started before the namespace then cannot run that activity on this worker;
        no worker could run both before it.)"""
        ours = {id(fn) for fn in self._under_old_names}
        theirs = {_activity_name(fn) for fn in activities if id(fn) not in ours}
        yielded = {id(fn) for fn in activities if id(fn) in ours and _activity_name(fn) in theirs}
        if yielded:
            names = ", ".join(sorted(str(_activity_name(fn)) for fn in activities if id(fn) in yielded))
            logger.warning(
                "this worker's own activities %s keep their names: conversations started before our"
                " activities were named durable_agents.* cannot run theirs on it",
                names,
            )
        return [fn for fn in activities if id(fn) not in yielded]

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """The activities' resources, the worker's lease (``lost_calls``) and the workflow threads the
        plugin made end with the worker; a lease it cannot keep stops it (``LeaseError``)."""
        if self._providers_to_import:
            names, self._providers_to_import = self._providers_to_import, set()
            threading.Thread(target=import_providers, args=(names,), name="import-sdks", daemon=True).start()
        interceptors = worker.config(active_config=True).get("interceptors", [])
        (lease,) = [each.lease for each in interceptors if isinstance(each, RecordRunningCalls)]
        (fleet,) = [each for each in interceptors if isinstance(each, Fleet)]
        watching = asyncio.create_task(fleet.watch())
        try:
            await fleet.refresh()  # before the first workflow task: which way new runs are written
            async with self._activities.lifetime():
                await run_with_lease(lease, worker.client, lambda: next(worker), worker.shutdown)
        finally:
            watching.cancel()
            executor = worker.config(active_config=True).get("workflow_task_executor")
            if executor in self._executors:
                self._executors.remove(executor)  # type: ignore[arg-type]
                executor.shutdown(wait=False)  # type: ignore[union-attr]


def _ours_activated(theirs: Callable[[PatchActivationInput], bool]) -> Callable[[PatchActivationInput], bool]:
    """The user's patch activation callback for their workflows; a conversation records every marker
    it asks for (its release's, workflows/versioning.py: a declined one would be read back wrong)."""

    def callback(input: PatchActivationInput) -> bool:
        return input.workflow_info.workflow_type in WORKFLOW_TYPES.values() or theirs(input)

    return callback


def _activity_name(fn: Callable) -> str | None:
    # The SDK has no public way to read the name ``@activity.defn`` gave a function (a worker's own
    # activity may name itself anything); no SDK issue asks for one yet. Its private definition is
    # read here and nowhere else (tests/project/test_supported_routes.py).
    return activity._Definition.must_from_callable(fn).name


def build_worker(
    client: Client,
    settings: Settings | None = None,
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    activities_per_second: float | None = None,
    max_cached_workflows: int | None = None,
    **plugin: object,
) -> Worker:
    """The worker ``worker.py``, the demo, the tests and the benchmarks run: a ``Worker`` with an
    ``AgentPlugin(settings, **plugin)`` (see there), tuned as measured (``WorkerTuning()`` unless
    ``tuning`` says otherwise). ``activities_per_second`` is a task-queue-wide limit
    that Temporal enforces across every worker of the queue; ``max_cached_workflows`` defaults to the
    settings' (``AGENT_MAX_CACHED_WORKFLOWS``), else ``MAX_CACHED_WORKFLOWS``. With the settings'
    ``deployment_name`` and ``build_id`` the worker is that build of that Worker Deployment."""
    settings = settings or Settings.from_env()
    if max_cached_workflows is None:  # 0 is a setting, not "unset"
        max_cached_workflows = settings.max_cached_workflows
    if max_cached_workflows is None:
        max_cached_workflows = MAX_CACHED_WORKFLOWS
    plugin.setdefault(
        "tuning", WorkerTuning(graceful_shutdown_timeout=timedelta(seconds=settings.shutdown_grace_seconds))
    )
    return Worker(
        client,
        task_queue=task_queue,
        max_cached_workflows=max_cached_workflows,
        max_task_queue_activities_per_second=activities_per_second,
        deployment_config=deployment_config(settings),
        plugins=[AgentPlugin(settings, **plugin)],  # type: ignore[arg-type]
    )
