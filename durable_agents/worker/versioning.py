"""Worker Deployment Versioning for our workers: the build a worker runs as, and the conversation
workflow's types, one per versioning behavior (workflows/behaviors.py).

A worker with ``AGENT_DEPLOYMENT_NAME`` and ``AGENT_BUILD_ID`` joins that Worker Deployment as that
build; Temporal then sends a conversation's workflow tasks to the build its behavior says (docs/production.md,
"Deploying a new version"). Without them the worker is unversioned, exactly as before.

Every worker, versioned or not, names the release that wrote a history it cannot replay
(``NamedReleases``): after a rollback, the SDK alone says only which patch marker it did not expect,
or nothing of the release for a run that records none (its first task's build id names it).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence

from temporalio import workflow
from temporalio.api.history.v1 import HistoryEvent
from temporalio.bridge.proto.workflow_activation import RemoveFromCache, WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import (
    WorkerConfig,
    WorkerDeploymentConfig,
    WorkflowInstanceDetails,
    WorkflowRunner,
)

from durable_agents.settings import Settings
from durable_agents.worker.runners import Activate, Around, WatchingRunner
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.behaviors import (
    AutoUpgradingAgentWorkflow,
    UnversionedAutoUpgradingAgentWorkflow,
)
from durable_agents.workflows.versioning import RELEASE, release_of, unmarked_release

logger = logging.getLogger(__name__)


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """The worker's deployment and build from the settings, ``None`` when it is not versioned.
    Conversations are pinned unless they were started as ``AgentWorkflowAutoUpgrade``."""
    if settings.build_id is None or settings.deployment_name is None:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(settings.deployment_name, settings.build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


def version_config(config: WorkerConfig) -> WorkerConfig:
    """A worker that runs ``AgentWorkflow`` also runs ``AgentWorkflowAutoUpgrade``, declaring
    AUTO_UPGRADE only if the worker is versioned (the server refuses a behavior from another,
    workflows/behaviors.py). A versioned worker (``deployment_config`` with ``use_worker_versioning``)
    gets PINNED as its default behavior if it names none: ``AgentWorkflow``'s ``defn`` names none,
    for it must also run on unversioned workers."""
    deployment = config.get("deployment_config")
    versioned = deployment is not None and deployment.use_worker_versioning
    workflows = list(config.get("workflows") or [])
    if AgentWorkflow in workflows:
        auto_upgrading = AutoUpgradingAgentWorkflow if versioned else UnversionedAutoUpgradingAgentWorkflow
        config["workflows"] = [*workflows, auto_upgrading]
    if deployment and versioned and deployment.default_versioning_behavior == VersioningBehavior.UNSPECIFIED:
        config["deployment_config"] = dataclasses.replace(
            deployment, default_versioning_behavior=VersioningBehavior.PINNED
        )
    return config


def name_releases(config: WorkerConfig) -> WorkerConfig:
    """The worker's runners wrapped in ``NamedReleases``, named as the worker's build if it has one."""
    deployment = config.get("deployment_config")
    build = deployment.version.build_id if deployment and deployment.version else None
    for option in ("workflow_runner", "unsandboxed_workflow_runner"):
        if (runner := config.get(option)) is not None:
            config[option] = NamedReleases(runner, build)  # type: ignore[literal-required]
    return config


class NamedReleases(WatchingRunner):
    """Wraps a runner: when a conversation's history cannot be replayed here (a nondeterminism
    eviction), one line names the release that wrote it (its release's marker, or the build id of its
    first task, workflows/versioning.py) and the releases that can, once per run and worker."""

    _TOLD_AT_MOST = 10_000
    """Runs remembered as told (a failing task is retried, each time from a fresh instance)."""

    def __init__(self, runner: WorkflowRunner, build: str | None = None) -> None:
        super().__init__(runner)
        self._build = build
        self._told: set[str] = set()

    def watch(self, det: WorkflowInstanceDetails) -> tuple[WorkflowInstanceDetails, Around]:
        written: set[int] = set()
        named: set[int] = set()  # by the build id of the run's first task, when it records no marker

        def around(act: WorkflowActivation, activate: Activate) -> WorkflowActivationCompletion:
            for job in act.jobs:
                if job.HasField("notify_has_patch") and (
                    release := release_of(job.notify_has_patch.patch_id)
                ):
                    written.add(release)
                elif job.HasField("initialize_workflow"):
                    named.update(unmarked(act.deployment_version_for_current_task.build_id))
                elif job.HasField("remove_from_cache"):
                    eviction, by = job.remove_from_cache, written or named
                    # or a later release's unmarked run, which the workflow refuses (workflows/versioning.py)
                    later = (
                        eviction.reason == RemoveFromCache.EvictionReason.LANG_FAIL
                        and max(by, default=1) > RELEASE
                    )
                    if eviction.reason == RemoveFromCache.EvictionReason.NONDETERMINISM or later:
                        self._tell(det.info, by, eviction.message)
            return activate(act)

        return det, around

    def _tell(self, info: workflow.Info, written: set[int], message: str) -> None:
        if info.run_id in self._told:
            return
        if len(self._told) >= self._TOLD_AT_MOST:
            self._told.clear()
        self._told.add(info.run_id)
        line = unreplayable(info.workflow_id, info.run_id, info.task_queue, written, self._build, message)
        logger.error(line)


def unreplayable(
    workflow_id: str, run_id: str, task_queue: str, written: set[int], build: str | None, message: str
) -> str:
    """The one line a worker logs for a run whose history it cannot replay, ending with the SDK's
    ``message`` as it gave it (its text is not ours to read)."""
    this = f"release {RELEASE}" + (f", build {build}" if build else "")
    if max(written, default=1) > RELEASE:
        can = f"workers of release {max(written)} or later can"
    else:
        can = f"release {RELEASE} should replay it: a change to the workflow without workflow.patched?"
    return (
        f"conversation {workflow_id} (run {run_id}) cannot be replayed by this worker ({this}): its"
        f" history was {written_by(written)}; {can}. Its workflow tasks fail and are retried, nothing"
        f" lost, until a worker that can replay it polls task queue {task_queue}. Temporal:"
        f" {' '.join(message.split()) or 'no reason given'}"
    )


def cannot_replay(written: set[int], task_queue: str) -> str:
    """For a client: the workers of ``task_queue`` cannot load a run whose history names ``written``."""
    return (
        f"the workers polling task queue {task_queue} cannot load it; its history was"
        f" {written_by(written)}: a worker of release {max(written, default=1)} or later can"
    )


def written_by(written: set[int]) -> str:
    """Who wrote a history, in words, from the releases it names (``releases_in``)."""
    if not written:
        return "written before releases were recorded (release 1)"
    *earlier, last = sorted(written)
    return (
        f"written by release {last}"
        if not earlier
        else f"written by releases {', '.join(map(str, earlier))} and {last}"
    )


def unmarked(build_id: str) -> set[int]:
    """The release a run's first task's ``build_id`` names, if it is one that records no marker."""
    release = unmarked_release(build_id)
    return {release} if release is not None else set()


def releases_in(events: Sequence[HistoryEvent]) -> set[int]:
    """The releases a run's history names (release markers, else the build id of its first
    workflow task): who wrote it, for a client."""
    found = set()
    first_task = next((e for e in events if e.HasField("workflow_task_completed_event_attributes")), None)
    for event in events:
        marker = event.marker_recorded_event_attributes
        if not event.HasField("marker_recorded_event_attributes") or marker.marker_name != "core_patch":
            continue
        data = marker.details["patch-data"].payloads if "patch-data" in marker.details else []
        for payload in data:
            try:
                patch = json.loads(payload.data)
            except ValueError:
                continue
            if isinstance(patch, dict) and (release := release_of(str(patch.get("id", "")))):
                found.add(release)
    if not found and first_task is not None:
        completed = first_task.workflow_task_completed_event_attributes
        found = unmarked(completed.worker_version.build_id or completed.deployment_version.build_id)
    return found
