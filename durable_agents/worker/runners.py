"""Workflow runners that watch each conversation's activations: the one delegation to the SDK's
runner and instance that the lease (cached conversations) and the release markers each need,
written once. Only ``AgentWorkflow`` (and its types per versioning behavior, workflows/behaviors.py)
is watched: any other workflow of the worker gets the runner it wraps, untouched. Likewise
``AroundAttempts``, the one delegation to the SDK's activity interceptor chain. And
``EagerUnlessRefused``: which activity starts are not eager."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from temporalio import activity, workflow
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
    WorkflowRunner,
)

from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.outages import NOT_EAGER

Activate = Callable[[WorkflowActivation], WorkflowActivationCompletion]
Around = Callable[[WorkflowActivation, Activate], WorkflowActivationCompletion]
"""What a watcher does around one activation: it calls ``activate`` and returns its completion."""
Attempt = Callable[[], Awaitable[Any]]
AroundAttempt = Callable[[ExecuteActivityInput, Attempt], Awaitable[Any]]
"""What an activity interceptor does around one attempt: it awaits ``attempt()`` and returns its result."""


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


class AroundAttempts(ActivityInboundInterceptor):
    """Each activity attempt through ``around`` (the lease's record of running calls, the calls'
    spans, the eager starts' lateness)."""

    def __init__(self, next: ActivityInboundInterceptor, around: AroundAttempt) -> None:
        super().__init__(next)
        self._around = around

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        return await self._around(input, lambda: super(AroundAttempts, self).execute_activity(input))


class EagerUnlessRefused(Interceptor):
    """A conversation's activity on its own task queue starts eagerly (the server hands it to this
    worker in the answer to the workflow task, as the SDK does by default), except

    - when it is tried again after a worker refused it for its stores (``StoresDiffer``,
      durable_agents/stores/errors.py): that try is queued, for a worker whose stores are the conversation's
      (``workflows.outages.NOT_EAGER``);
    - while this worker takes its attempts up late (the latest one ran more than ``BEHIND`` after
      the server started it): the worker's event loop is behind, and an attempt started eagerly
      waits in it with its heartbeat timeout running, where a queued one would wait at the server.

    An eager start spares the server a transfer task and a match per call: queued, a call waited
    1-8 ms for a poller (docs/benchmarks.md, "Release 3"). A worker's own
    ``disable_eager_activity_execution`` still turns it off for every workflow."""

    BEHIND = 0.25
    """Seconds: an attempt taken up later than this after its start turns eager starts off, one
    taken up sooner turns them on again. Promptly, an attempt runs within milliseconds; in a burst
    at load average 13 on 2 cores, eager attempts waited up to 6 s and their calls were retried at
    the 3 s heartbeat timeout (``bench.peers``). Clocks apart by more than this between worker and
    server leave eager starts off (the behaviour of the releases before)."""

    def __init__(self) -> None:
        self.late = 0.0
        """How long the latest attempt this worker took up had been started (server's clock)."""
        gate = self

        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(_Queued(outbound, gate))

        self._inbound = Inbound

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return self._inbound

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return AroundAttempts(next, self._taken_up)

    async def _taken_up(self, input: ExecuteActivityInput, attempt: Attempt) -> Any:
        info = activity.info()
        if not info.is_local:  # a local one runs in its workflow task: never started eagerly
            self.late = time.time() - info.started_time.timestamp()
        return await attempt()

    @property
    def eager(self) -> bool:
        return self.late <= self.BEHIND


class _Queued(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, gate: EagerUnlessRefused) -> None:
        super().__init__(next)
        self._gate = gate

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        if NOT_EAGER.get() or not self._gate.eager:
            input = dataclasses.replace(input, disable_eager_execution=True)
        return super().start_activity(input)


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
