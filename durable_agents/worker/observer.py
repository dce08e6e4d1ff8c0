"""Spans and metrics of conversations, made on the worker's side: never in workflow code.

``Observer`` is an interceptor ``AgentPlugin`` adds to every worker. A *turn* (a message to its
answer) is one trace, named after the OpenTelemetry GenAI semantic conventions:

- ``invoke_agent {agent}``: the turn, from its message to its answer;
- ``chat {model}``: each model call (a judge's too), under the turn;
- ``execute_tool {tool}``: each tool call, under the turn;
- ``await_approval {tool}``: each wait for a person (or a judge), under the turn;
- a sub-agent's turns, under the turn of its parent that asked it.

Every worker names a turn's trace alike (durable_agents/worker/trace_context.py): this module sends
the turn's context with the conversation's activities and children, and makes the spans of what
workflow code publishes (workflows/telemetry.py: never while it replays): the turn's own span,
when its answer is published, from the start the turn kept (``TurnState.started_at``), and each
approval's wait. The activities' spans and metrics are durable_agents/worker/call_spans.py's; the
metrics' names durable_agents/worker/metrics.py's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import opentelemetry.context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanKind
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.worker import (
    ActivityInboundInterceptor,
    ContinueAsNewInput,
    Interceptor,
    StartActivityInput,
    StartChildWorkflowInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from durable_agents.worker.call_spans import CallSpans, Prices, content
from durable_agents.worker.metrics import counter, gauge, histogram, quietly
from durable_agents.worker.runners import AroundAttempts
from durable_agents.worker.trace_context import (
    HEADER,
    TurnIds,
    conversation_labels,
    parent_context,
    turn_context,
    with_turn,
)
from durable_agents.workflows.events import ApprovalDecided, ApprovalRequested, ReplySent
from durable_agents.workflows.telemetry import OBSERVER, Labels


class Observer(Interceptor):
    """Spans to ``tracer_provider`` (None: no spans, metrics only) and metrics to the worker's runtime.

    ``capture_content`` puts what the model and the tools were sent and answered into the spans
    (``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.tool.call.arguments``,
    ``gen_ai.tool.call.result``); off, no span carries a message's text or a tool's arguments.
    ``prices`` is the worker's models table (``ModelTable.price``): the cost of a call whose
    conversation did not send its price (only a tenant's or user's do, for the ledger)."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        capture_content: bool = False,
        prices: Prices = lambda model: None,
    ) -> None:
        if tracer_provider is not None and not isinstance(tracer_provider.id_generator, TurnIds):
            raise ValueError(
                "Observer: the tracer provider must use TurnIds (durable_agents.worker.telemetry)"
            )
        self._ids = tracer_provider.id_generator if tracer_provider is not None else None
        self._tracer = (tracer_provider or trace.NoOpTracerProvider()).get_tracer("durable_agents")
        self._capture = capture_content
        self._calls = CallSpans(self._tracer, capture_content, prices)
        self._waiting: dict[str, int] = {}
        """Approvals this process saw asked and not yet decided, by agent (a gauge per worker)."""
        self.metrics = True
        """Whether the worker's runtime exports metrics (``AgentPlugin`` says): without them and
        without spans, the workflow sends its calls no labels (84 bytes of history per call)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return AroundAttempts(next, self._calls.run)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        input.unsafe_extern_functions[OBSERVER] = self._observe
        if self._ids is not None:
            return _WorkflowObserver
        return _WorkflowLabels if self.metrics else None

    # -- what workflow code publishes (in its thread, never while replaying) --------------

    def _observe(self, event: Any) -> None:
        handler = self._handlers.get(type(event))
        labels = conversation_labels()
        if handler is not None and labels is not None:
            with quietly(f"the spans and metrics of {type(event).__name__}"):
                handler(self, event, labels)

    def _turn_ended(self, event: ReplySent, labels: Labels) -> None:
        reply = event.reply
        counter(workflow.metric_meter(), "durable_agents_turns_total", "Turns answered, by stop reason").add(
            1, {**_agent(labels), "stop_reason": reply.stop_reason}
        )
        if labels.turn is None:
            return
        turn = turn_context(labels.turn)
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": labels.agent or "",
            "gen_ai.conversation.id": workflow.info().workflow_id,
            "durable_agents.message_id": reply.message_id,
            "durable_agents.stop_reason": reply.stop_reason,
            "durable_agents.iterations": reply.iterations,
            **({"durable_agents.tenant": labels.tenant} if labels.tenant else {}),
            **(
                {"gen_ai.output.messages": content([{"role": "assistant", "content": reply.text}])}
                if self._capture
                else {}
            ),
        }
        parent = parent_context()
        with self._ids.fixed(turn) if self._ids else contextlib.nullcontext():
            span = self._tracer.start_span(
                f"invoke_agent {labels.agent or ''}".strip(),
                context=trace.set_span_in_context(NonRecordingSpan(parent))
                if parent
                else opentelemetry.context.Context(),
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                start_time=_ns(labels.turn_started or workflow.now()),
            )
        span.end(end_time=_ns(workflow.now()))

    def _asked(self, event: ApprovalRequested, labels: Labels) -> None:
        agent = labels.agent or ""
        self._waiting[agent] = self._waiting.get(agent, 0) + 1
        self._show_waiting(agent)

    def _decided(self, event: ApprovalDecided, labels: Labels) -> None:
        record = event.record
        if record.via == "remember" or record.decided_at is None:
            return  # allowed for the conversation: nobody was asked, nothing waited
        agent = labels.agent or ""
        self._waiting[agent] = self._waiting.get(agent, 0) - 1
        self._show_waiting(agent)
        waited = (record.decided_at - record.requested_at).total_seconds()
        histogram(
            workflow.metric_meter(),
            "durable_agents_approval_wait_seconds",
            "Seconds a call waited for its decision, by tool and decision",
        ).record(waited, {**_agent(labels), "tool": record.tool, "decision": record.state})
        attributes = {
            "gen_ai.tool.name": record.tool,
            "gen_ai.tool.call.id": record.call_id,
            "durable_agents.approval.decision": record.state,
            "durable_agents.approval.via": record.via or "",
            "durable_agents.approval.decided_by": record.by or "",
            "durable_agents.approval.approver": record.verdict.approver if record.verdict else "none",
            "durable_agents.approval.wait_seconds": waited,
        }
        context = opentelemetry.context.Context()
        if labels.turn is not None:
            context = trace.set_span_in_context(NonRecordingSpan(turn_context(labels.turn)))
        span = self._tracer.start_span(
            f"await_approval {record.tool}", context=context, attributes=attributes,
            start_time=_ns(record.requested_at),
        )  # fmt: skip
        span.end(end_time=_ns(record.decided_at))

    def _show_waiting(self, agent: str) -> None:
        gauge(workflow.metric_meter(), "durable_agents_approvals_waiting", "Calls waiting for a person").set(
            self._waiting[agent], {"agent": agent}
        )

    _handlers: Mapping[type, Callable[[Observer, Any, Labels], None]] = {
        ReplySent: _turn_ended,
        ApprovalRequested: _asked,
        ApprovalDecided: _decided,
    }


def _agent(labels: Labels) -> dict[str, str]:
    return {"agent": labels.agent or "", "tenant": labels.tenant or ""}


def _ns(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000_000)


def _with_turn(headers: Mapping[str, Payload], trace: bool = True) -> Mapping[str, Payload]:
    """``with_turn``, or the headers as they were if telemetry fails."""
    with quietly("sending the turn's context"):
        return with_turn(headers, trace)
    return headers


class _WorkflowObserver(WorkflowInboundInterceptor):
    """The turn's context and the metrics' labels in the headers of what the workflow starts."""

    trace = True

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_WorkflowOutbound(outbound, self.trace))


class _WorkflowLabels(_WorkflowObserver):
    """No spans on this worker: only the metrics' labels (agent, tenant), a few bytes per call."""

    trace = False


class _WorkflowOutbound(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, trace: bool) -> None:
        super().__init__(next)
        self._trace = trace

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        input.headers = _with_turn(input.headers, self._trace)
        return super().start_activity(input)

    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.ActivityHandle[Any]:
        input.headers = _with_turn(input.headers, self._trace)
        return super().start_local_activity(input)

    async def start_child_workflow(
        self, input: StartChildWorkflowInput
    ) -> workflow.ChildWorkflowHandle[Any, Any]:
        input.headers = _with_turn(input.headers, self._trace)
        return await super().start_child_workflow(input)

    def continue_as_new(self, input: ContinueAsNewInput) -> Any:
        if (carried := workflow.info().headers.get(HEADER)) is not None:  # a sub-agent's parent turn
            input.headers = {**input.headers, HEADER: carried}
        return super().continue_as_new(input)
