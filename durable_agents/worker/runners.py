"""Workflow runners that watch each conversation's activations: the one delegation to the SDK's
runner and instance that the lease (cached conversations), the release markers, the declared
and eager execution each need, written once. Only ``AgentWorkflow`` (and its types per versioning
behavior, workflows/behaviors.py) is watched: any other workflow of the worker gets the runner it
wraps, untouched."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner

from durable_agents.workflows.agent import AgentWorkflow

Activate = Callable[[WorkflowActivation], WorkflowActivationCompletion]
Around = Callable[[WorkflowActivation, Activate], WorkflowActivationCompletion]
"""What a watcher does around one activation: it calls ``activate`` and returns its completion."""


class WatchingRunner(WorkflowRunner):
    """The runner it wraps does the work; ``watch`` says, for each conversation that enters the
    cache, what its instance does around every activation (and may change its details). A workflow
    of another type goes straight to the wrapped runner: the plugin owns only what it registers."""

    def __init__(self, runner: WorkflowRunner) -> None:
        self._runner = runner

    def watch(self, det: WorkflowInstanceDetails) -> tuple[WorkflowInstanceDetails, Around]:
        raise NotImplementedError

    def prepare_workflow(self, defn: Any) -> None:
        self._runner.prepare_workflow(defn)

    def set_worker_level_failure_exception_types(self, types: Sequence[type[BaseException]]) -> None:
        self._runner.set_worker_level_failure_exception_types(types)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        if not issubclass(det.defn.cls, AgentWorkflow):
            return self._runner.create_instance(det)
        det, around = self.watch(det)
        return _Watched(self._runner.create_instance(det), around)


class NoEagerActivities(WatchingRunner):
    """Wraps a runner: a conversation's activities are never executed eagerly. A call refused by one
    worker (its stores are not the conversation's, durable_agents/stores/errors.py) must be able to go
    to another,
    and an eager one goes back to the worker that scheduled it. Measured: eager execution saved
    nothing (a waiting poller gets an activity task within 0.1 ms, docs/benchmarks.md)."""

    def watch(self, det: WorkflowInstanceDetails) -> tuple[WorkflowInstanceDetails, Around]:
        return dataclasses.replace(det, disable_eager_activity_execution=True), _through


def _through(act: WorkflowActivation, activate: Activate) -> WorkflowActivationCompletion:
    return activate(act)


class _Watched(WorkflowInstance):
    def __init__(self, instance: WorkflowInstance, around: Around) -> None:
        self._instance = instance
        self._around = around

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        return self._around(act, self._instance.activate)

    def get_serialization_context(self, command_info: Any) -> Any:
        return self._instance.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._instance.get_external_store_context(command_info)

    def get_info(self) -> Any:
        return self._instance.get_info()

    def get_thread_id(self) -> int | None:
        return self._instance.get_thread_id()
