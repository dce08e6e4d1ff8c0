"""Workflow runners that watch each conversation's activations: the one delegation to the SDK's
runner and instance that the lease (cached conversations), the release markers and the declared
versioning behaviours each need, written once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner

Activate = Callable[[WorkflowActivation], WorkflowActivationCompletion]
Around = Callable[[WorkflowActivation, Activate], WorkflowActivationCompletion]
"""What a watcher does around one activation: it calls ``activate`` and returns its completion."""


class WatchingRunner(WorkflowRunner):
    """The runner it wraps does the work; ``watch`` says, for each conversation that enters the
    cache, what its instance does around every activation (and may change its details)."""

    def __init__(self, runner: WorkflowRunner) -> None:
        self._runner = runner

    def watch(self, det: WorkflowInstanceDetails) -> tuple[WorkflowInstanceDetails, Around]:
        raise NotImplementedError

    def prepare_workflow(self, defn: Any) -> None:
        self._runner.prepare_workflow(defn)

    def set_worker_level_failure_exception_types(self, types: Sequence[type[BaseException]]) -> None:
        self._runner.set_worker_level_failure_exception_types(types)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        det, around = self.watch(det)
        return _Watched(self._runner.create_instance(det), around)


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
