"""Worker Deployment Versioning for our workers: the build a worker runs as, and each conversation's
own versioning behavior (its agent's ``versioning``) reported on its workflow tasks.

A worker with ``AGENT_DEPLOYMENT_NAME`` and ``AGENT_BUILD_ID`` joins that Worker Deployment as that
build; Temporal then sends a conversation's workflow tasks to the build its behavior says (README,
"Deploying a new version"). Without them the worker is unversioned, exactly as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import (
    WorkerConfig,
    WorkerDeploymentConfig,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)

from durable_agents.settings import Settings
from workflows.config import Versioning
from workflows.versioning import BEHAVIOR_EXTERN

BEHAVIORS: dict[Versioning, VersioningBehavior] = {
    "pinned": VersioningBehavior.PINNED,
    "auto_upgrade": VersioningBehavior.AUTO_UPGRADE,
}


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """The worker's deployment and build from the settings, ``None`` when it is not versioned.
    Conversations are pinned unless their agent says ``auto_upgrade``."""
    if settings.build_id is None or settings.deployment_name is None:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(settings.deployment_name, settings.build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


def version_config(config: WorkerConfig) -> WorkerConfig:
    """A versioned worker (``deployment_config`` with ``use_worker_versioning``) gets PINNED as its
    default behavior if it names none (``AgentWorkflow``'s ``defn`` names none: it must also run on
    unversioned workers), and runners through which conversations declare their agent's behavior.
    An unversioned worker's config is returned as it is."""
    deployment = config.get("deployment_config")
    if deployment is None or not deployment.use_worker_versioning:
        return config
    if deployment.default_versioning_behavior == VersioningBehavior.UNSPECIFIED:
        config["deployment_config"] = dataclasses.replace(
            deployment, default_versioning_behavior=VersioningBehavior.PINNED
        )
    for option in ("workflow_runner", "unsandboxed_workflow_runner"):
        if (runner := config.get(option)) is not None:
            config[option] = DeclaredBehaviors(runner)  # type: ignore[literal-required]
    return config


class DeclaredBehaviors(WorkflowRunner):
    """Wraps a runner: each conversation gets ``BEHAVIOR_EXTERN`` (workflows/versioning.py), and from
    the activation in which it calls it, every completion carries the behavior it declared."""

    def __init__(self, runner: WorkflowRunner) -> None:
        self._runner = runner

    def prepare_workflow(self, defn: Any) -> None:
        self._runner.prepare_workflow(defn)

    def set_worker_level_failure_exception_types(self, types: Sequence[type[BaseException]]) -> None:
        self._runner.set_worker_level_failure_exception_types(types)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        declared: list[VersioningBehavior] = []

        def declare(versioning: Versioning) -> None:
            declared[:] = [BEHAVIORS[versioning]]

        det = dataclasses.replace(det, extern_functions={**det.extern_functions, BEHAVIOR_EXTERN: declare})
        return _Declaring(self._runner.create_instance(det), lambda: declared[0] if declared else None)


class _Declaring(WorkflowInstance):
    def __init__(self, instance: WorkflowInstance, behavior: Callable[[], VersioningBehavior | None]) -> None:
        self._instance = instance
        self._behavior = behavior

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        completion = self._instance.activate(act)
        if (behavior := self._behavior()) is not None and completion.HasField("successful"):
            completion.successful.versioning_behavior = behavior.value  # type: ignore[assignment]
        return completion

    def get_serialization_context(self, command_info: Any) -> Any:
        return self._instance.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._instance.get_external_store_context(command_info)

    def get_info(self) -> Any:
        return self._instance.get_info()

    def get_thread_id(self) -> int | None:
        return self._instance.get_thread_id()
