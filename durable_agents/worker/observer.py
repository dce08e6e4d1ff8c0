"""Spans and metrics of conversations, made on the worker's side: never in workflow code.

``Observer`` is an interceptor ``AgentPlugin`` adds to every worker. A *turn* (a message to its
answer) is one trace, named after the OpenTelemetry GenAI semantic conventions:

- ``invoke_agent {agent}``: the turn, from its message to its answer;
- ``chat {model}``: each model call (a judge's too), under the turn;
- ``execute_tool {tool}``: each tool call, under the turn;
- ``await_approval {tool}``: each wait for a person (or a judge), under the turn;
- a sub-agent's turns, under the turn of its parent that asked it.

The turn's ids are derived from the conversation and the message (``turn_context``), so every
worker and host that takes part, before or after a continue-as-new, names the same trace with
nothing carried: the workflow's activities and children get the turn's context in their headers
(temporalio's ``_tracer-data`` header, W3C trace context and baggage: the agent and the tenant),
and the turn's own span is made when its answer is published, by the worker that publishes it,
from the start the turn kept (``TurnState.started_at``). Spans of workflow code are made only
while it is not replaying (workflows/telemetry.py); activities' spans have their real length.

Metrics go to the worker's runtime (``activity.metric_meter()``, ``workflow.metric_meter()``), so
they sit beside the SDK's on its Prometheus endpoint (``--metrics-port``); their labels are
bounded: provider, model, agent, tenant, tool, judge, outcome, never a conversation.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import opentelemetry.context
from opentelemetry import baggage, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.common import MetricMeter
from temporalio.converter import PayloadConverter
from temporalio.exceptions import ApplicationError
from temporalio.runtime import Runtime
from temporalio.worker import (
    ActivityInboundInterceptor,
    ContinueAsNewInput,
    ExecuteActivityInput,
    Interceptor,
    StartActivityInput,
    StartChildWorkflowInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from durable_agents.workflows import wire
from durable_agents.workflows.activity_io import (
    JudgeAnswer,
    JudgeInput,
    ModelCallInput,
    ToolInvocation,
    ToolOutcome,
)
from durable_agents.workflows.activity_refs import CALL_MODEL, JUDGE, RUN_TOOL
from durable_agents.workflows.config import Price
from durable_agents.workflows.events import ApprovalDecided, ApprovalRequested, ReplySent
from durable_agents.workflows.messages import ModelResponse, Usage
from durable_agents.workflows.outages import StoreOutage
from durable_agents.workflows.telemetry import OBSERVER, Labels
from durable_agents.workflows.tenancy import BUDGET_EXHAUSTED

Prices = Callable[[str], Price | None]
"""A model's price by its name (``ModelTable.price``), None for a model without one."""
HEADER = "_tracer-data"
"""temporalio's tracing header (``temporalio.contrib.opentelemetry``): its spans join ours."""
PROPAGATOR = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
SECONDS_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400]
"""Buckets of the ``*_seconds`` histograms: a model call's fraction of a second to a person's day."""
USD_BUCKETS = [0.0001, 0.001, 0.01, 0.05, 0.1, 0.5, 1, 5]
"""Buckets of ``durable_agents_model_call_cost_usd``: what one call costs."""
HISTOGRAM_BUCKETS = {
    "durable_agents_model_call_duration_seconds": SECONDS_BUCKETS,
    "durable_agents_approval_wait_seconds": SECONDS_BUCKETS,
    "durable_agents_store_outage_seconds": SECONDS_BUCKETS,
    "durable_agents_model_call_cost_usd": USD_BUCKETS,
}
"""Our histograms' buckets, for the runtime's Prometheus exporter (durable_agents/worker/telemetry.py)."""


class TurnIds(IdGenerator):
    """Random ids, but for a span made inside ``fixed``: a turn's own span, whose ids its calls'
    spans, made earlier and elsewhere, already name as their parent."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._fixed: contextvars.ContextVar[SpanContext | None] = contextvars.ContextVar("turn", default=None)

    @contextmanager
    def fixed(self, context: SpanContext) -> Iterator[None]:
        token = self._fixed.set(context)
        try:
            yield
        finally:
            self._fixed.reset(token)

    def generate_span_id(self) -> int:
        fixed = self._fixed.get()
        return fixed.span_id if fixed else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        fixed = self._fixed.get()
        return fixed.trace_id if fixed else self._random.generate_trace_id()


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
        self._prices = prices
        self._waiting: dict[str, int] = {}
        """Approvals this process saw asked and not yet decided, by agent (a gauge per worker)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityObserver(next, self)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        input.unsafe_extern_functions[OBSERVER] = self._observe
        return _WorkflowObserver

    # -- what workflow code publishes (in its thread, never while replaying) --------------

    def _observe(self, event: Any) -> None:
        handler = self._handlers.get(type(event))
        labels = _labels()
        if handler is not None and labels is not None:
            handler(self, event, labels)

    def _turn_ended(self, event: ReplySent, labels: Labels) -> None:
        reply = event.reply
        _counter(workflow.metric_meter(), "durable_agents_turns_total", "Turns answered, by stop reason").add(
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
                {"gen_ai.output.messages": _json([{"role": "assistant", "content": reply.text}])}
                if self._capture
                else {}
            ),
        }
        parent = _parent_context()
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
        _histogram(
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
        _gauge(workflow.metric_meter(), "durable_agents_approvals_waiting", "Calls waiting for a person").set(
            self._waiting[agent], {"agent": agent}
        )

    _handlers: Mapping[type, Callable[[Observer, Any, Labels], None]] = {
        ReplySent: _turn_ended,
        ApprovalRequested: _asked,
        ApprovalDecided: _decided,
    }

    # -- activities ---------------------------------------------------------------

    async def run_activity(self, next: Callable[[], Awaitable[Any]], input: ExecuteActivityInput) -> Any:
        """An activity under the context its headers carry, in a span of its kind if it has one."""
        token = opentelemetry.context.attach(_header_context(input.headers))
        try:
            info = activity.info()
            kind = _KINDS.get(_NAMESPACED.get(info.activity_type, info.activity_type))
            arg = input.args[0] if input.args else None
            try:
                if kind is None or not isinstance(arg, kind.input):  # not ours (a user's own of an old name)
                    return await next()
                return await self._traced(kind, next, arg, info.attempt)
            except ApplicationError as err:
                _count_outage(err)
                raise
        finally:
            opentelemetry.context.detach(token)

    async def _traced(self, kind: _Kind, next: Callable[[], Awaitable[Any]], arg: Any, attempt: int) -> Any:
        started = time.monotonic()
        with self._tracer.start_as_current_span(
            kind.span_name(arg),
            kind=SpanKind.CLIENT,
            attributes={**kind.started(arg, self._capture), "durable_agents.attempt": attempt},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            price = kind.price(arg, self._prices)
            try:
                result = await next()
            except BaseException as err:
                span.set_status(Status(StatusCode.ERROR, str(err)[:500]))
                span.set_attribute("error.type", _error_type(err))
                kind.count(_Call(arg, None, err, time.monotonic() - started, price))
                raise
            call = _Call(arg, result, None, time.monotonic() - started, price)
            attributes = kind.finished(call, self._capture)
            span.set_attributes(attributes)
            if attributes.get("durable_agents.tool.outcome") == "error":
                span.set_status(Status(StatusCode.ERROR, "the tool answered with an error"))
            kind.count(call)
            return result


# -- the kinds of activities that have spans -----------------------------------------


@dataclass(frozen=True)
class _Call:
    """One finished attempt of an activity, for its metrics."""

    input: Any
    result: Any
    error: BaseException | None
    seconds: float
    price: Price | None
    """The called model's price, if the call has a model with one."""


@dataclass(frozen=True)
class _Kind:
    """How an activity shows: its span's name and attributes, and what it counts."""

    input: type
    span_name: Callable[[Any], str]
    started: Callable[[Any, bool], dict[str, Any]]
    """Attributes known before it runs (``True``: contents are captured)."""
    finished: Callable[[_Call, bool], dict[str, Any]]
    """Attributes of its result."""
    count: Callable[[_Call], None]
    price: Callable[[Any, Prices], Price | None] = lambda input, prices: None


def _chat_started(input: ModelCallInput, capture: bool) -> dict[str, Any]:
    settings = input.request.settings
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": settings.provider,
        "gen_ai.request.model": settings.model,
        "gen_ai.request.max_tokens": settings.max_tokens,
        "gen_ai.conversation.id": activity.info().workflow_id or "",
        **({"gen_ai.input.messages": _json(input.request.messages)} if capture else {}),
    }


def _chat_finished(call: _Call, capture: bool) -> dict[str, Any]:
    result: ModelResponse = call.result
    return {
        **_usage(result.model or call.input.request.settings.model, result.usage, call.price),
        "gen_ai.response.finish_reasons": [result.finish_reason],
        **({"gen_ai.output.messages": _json([result.message])} if capture else {}),
    }


def _count_chat(call: _Call) -> None:
    input: ModelCallInput = call.input
    settings = input.request.settings
    labels = {"provider": settings.provider, "model": settings.model, **_baggage()}
    meter = activity.metric_meter()
    outcome = "ok" if call.error is None else "error"
    _histogram(
        meter, "durable_agents_model_call_duration_seconds", "Seconds a model call's attempt took, by outcome"
    ).record(call.seconds, {**labels, "outcome": outcome})
    if isinstance(call.error, ApplicationError) and call.error.type == BUDGET_EXHAUSTED:
        _counter(meter, "durable_agents_budget_refusals_total", "Model calls the ledger refused").add(
            1, labels
        )
    if call.result is not None:
        _count_spend(meter, labels, call.result.usage, call.price)


def _tool_started(input: ToolInvocation, capture: bool) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": input.name,
        "gen_ai.tool.call.id": input.call_id,
        "gen_ai.tool.type": "extension" if input.mcp else "function",
        "gen_ai.conversation.id": input.conversation_id,
        **({"durable_agents.mcp_server": input.mcp.name} if input.mcp else {}),
        **({"gen_ai.tool.call.arguments": _json(input.arguments)} if capture else {}),
    }


def _tool_finished(call: _Call, capture: bool) -> dict[str, Any]:
    result: ToolOutcome = call.result
    return {
        "durable_agents.tool.outcome": "error" if result.is_error else "ok",
        **({"gen_ai.tool.call.result": result.content} if capture else {}),
    }


def _count_tool(call: _Call) -> None:
    outcome = "failed" if call.result is None else "error" if call.result.is_error else "ok"
    _counter(
        activity.metric_meter(), "durable_agents_tool_calls_total", "Tool calls' attempts, by outcome"
    ).add(1, {**_baggage(), "tool": call.input.name, "outcome": outcome})


def _judge_started(input: JudgeInput, capture: bool) -> dict[str, Any]:
    model = input.judge.model
    return {
        "gen_ai.operation.name": "chat",
        "durable_agents.judge.name": input.judge.name,
        "gen_ai.tool.name": input.tool,
        **({"gen_ai.provider.name": model.provider, "gen_ai.request.model": model.model} if model else {}),
        **({"gen_ai.tool.call.arguments": _json(input.arguments)} if capture else {}),
    }


def _judge_finished(call: _Call, capture: bool) -> dict[str, Any]:
    result: JudgeAnswer = call.result
    return {
        **_usage(result.model, result.usage, call.price),
        "durable_agents.judge.verdict": result.verdict,
        **({"durable_agents.judge.reason": result.reason} if capture else {}),
    }


def _count_judge(call: _Call) -> None:
    input: JudgeInput = call.input
    meter = activity.metric_meter()
    verdict = "error" if call.result is None else call.result.verdict
    _counter(meter, "durable_agents_judge_verdicts_total", "Model judges' verdicts").add(
        1, {**_baggage(), "judge": input.judge.name, "verdict": verdict}
    )
    if call.result is not None and input.judge.model is not None:
        labels = {"provider": input.judge.model.provider, "model": input.judge.model.model, **_baggage()}
        _count_spend(meter, labels, call.result.usage, call.price)


_KINDS: dict[str, _Kind] = {
    CALL_MODEL.name: _Kind(
        CALL_MODEL.input,
        lambda input: f"chat {input.request.settings.model}",
        _chat_started,
        _chat_finished,
        _count_chat,
        lambda input, prices: input.price or prices(input.request.settings.model),
    ),
    RUN_TOOL.name: _Kind(
        RUN_TOOL.input, lambda input: f"execute_tool {input.name}", _tool_started, _tool_finished, _count_tool
    ),
    JUDGE.name: _Kind(
        JUDGE.input,
        lambda input: f"chat {input.judge.model.model if input.judge.model else input.judge.name}",
        _judge_started,
        _judge_finished,
        _count_judge,
        lambda input, prices: input.price or (prices(input.judge.model.model) if input.judge.model else None),
    ),
}
"""By the activity's name; ``_NAMESPACED`` leads its old name here too."""
_NAMESPACED = {old: name for name, old in wire.OLD_NAMES.items()}


def _usage(model: str, usage: Usage, price: Price | None) -> dict[str, Any]:
    return {
        **({"gen_ai.response.model": model} if model else {}),
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        **({"durable_agents.cost_usd": price.cost(usage)} if price else {}),
    }


def _count_spend(meter: MetricMeter, labels: dict[str, str], usage: Usage, price: Price | None) -> None:
    """A call's tokens, and its cost when its model has a price."""
    tokens = _counter(meter, "durable_agents_model_tokens_total", "Tokens of model calls, by token type")
    tokens.add(usage.input_tokens, {**labels, "token_type": "input"})
    tokens.add(usage.output_tokens, {**labels, "token_type": "output"})
    if price is not None:
        _histogram(
            meter, "durable_agents_model_call_cost_usd", "US dollars of each model call (_sum: spend)"
        ).record(price.cost(usage), labels)


def _count_outage(err: ApplicationError) -> None:
    """An activity that gave up waiting for its store: one outage, and how long it had waited."""
    outage = StoreOutage.of(err)
    if outage is None or outage.wrong_worker:
        return
    meter = activity.metric_meter()
    _counter(meter, "durable_agents_store_outages_total", "Activities that gave up waiting for a store").add(
        1
    )
    if outage.since:
        _histogram(
            meter, "durable_agents_store_outage_seconds", "Seconds an activity waited for its store"
        ).record(max(0.0, time.time() - outage.since))


def _baggage() -> dict[str, str]:
    """The agent and tenant the workflow sent with the activity (``_with_turn``)."""
    return {key: str(baggage.get_baggage(f"durable_agents.{key}") or "") for key in ("agent", "tenant")}


def _agent(labels: Labels) -> dict[str, str]:
    return {"agent": labels.agent or "", "tenant": labels.tenant or ""}


def _counter(meter: MetricMeter, name: str, description: str) -> Any:
    return meter.create_counter(name, description)


def _histogram(meter: MetricMeter, name: str, description: str) -> Any:
    return meter.create_histogram_float(name, description, "s" if name.endswith("_seconds") else "USD")


def _gauge(meter: MetricMeter, name: str, description: str) -> Any:
    return meter.create_gauge(name, description)


def _json(value: Any) -> str:
    return json.dumps(value, default=lambda v: v.model_dump(mode="json"), separators=(",", ":"))


def _ns(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000_000)


def _error_type(err: BaseException) -> str:
    return getattr(err, "type", None) or type(err).__name__


def turn_context(message_id: str) -> SpanContext:
    """In workflow code: the span context of the current conversation's turn that answers
    ``message_id``: the same on every worker, in every run of the conversation. A sub-agent's
    turns are in the trace of its parent's turn."""
    info = workflow.info()
    digest = hashlib.sha256(
        f"{info.workflow_id}/{info.first_execution_run_id}/{message_id}".encode()
    ).digest()
    parent = _parent_context()
    trace_id = parent.trace_id if parent else int.from_bytes(digest[:16]) or 1
    return SpanContext(
        trace_id,
        int.from_bytes(digest[16:24]) or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def _parent_context() -> SpanContext | None:
    """A sub-agent's parent's turn, as the parent's start of it carried it (kept across continue-as-new)."""
    info = workflow.info()
    if info.parent is None:
        return None
    parent = trace.get_current_span(_header_context(info.headers)).get_span_context()
    return parent if parent.is_valid else None


def _labels() -> Labels | None:
    labels = getattr(workflow.instance(), "telemetry", None)
    return labels if isinstance(labels, Labels) else None


def _header_context(headers: Mapping[str, Payload]) -> opentelemetry.context.Context:
    payload = headers.get(HEADER)
    if payload is None:
        return opentelemetry.context.Context()
    (carrier,) = PayloadConverter.default.from_payloads([payload])
    return PROPAGATOR.extract(carrier if isinstance(carrier, dict) else {})


def _with_turn(headers: Mapping[str, Payload]) -> Mapping[str, Payload]:
    """``headers`` and the current turn's context, with the agent and tenant as baggage."""
    labels = _labels()
    if labels is None:
        return headers
    context = opentelemetry.context.Context()
    if labels.turn is not None:
        context = trace.set_span_in_context(NonRecordingSpan(turn_context(labels.turn)), context)
    for key, value in (("agent", labels.agent), ("tenant", labels.tenant)):
        if value:
            context = baggage.set_baggage(f"durable_agents.{key}", value, context)
    carrier: dict[str, str] = {}
    PROPAGATOR.inject(carrier, context)
    return {**headers, HEADER: PayloadConverter.default.to_payloads([carrier])[0]} if carrier else headers


class _WorkflowObserver(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_WorkflowOutbound(outbound))


class _WorkflowOutbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        input.headers = _with_turn(input.headers)
        return super().start_activity(input)

    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.ActivityHandle[Any]:
        input.headers = _with_turn(input.headers)
        return super().start_local_activity(input)

    async def start_child_workflow(
        self, input: StartChildWorkflowInput
    ) -> workflow.ChildWorkflowHandle[Any, Any]:
        input.headers = _with_turn(input.headers)
        return await super().start_child_workflow(input)

    def continue_as_new(self, input: ContinueAsNewInput) -> Any:
        if (carried := workflow.info().headers.get(HEADER)) is not None:  # a sub-agent's parent turn
            input.headers = {**input.headers, HEADER: carried}
        return super().continue_as_new(input)


class _ActivityObserver(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, observer: Observer) -> None:
        super().__init__(next)
        self._observer = observer

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        return await self._observer.run_activity(
            lambda: super(_ActivityObserver, self).execute_activity(input), input
        )


def count_takeover(client: Client) -> None:
    """A dead worker's lease taken over (durable_agents/worker/lost_calls.py), on the client's runtime."""
    runtime = client.service_client.config.runtime or Runtime.default()
    _counter(
        runtime.metric_meter, "durable_agents_lease_takeovers_total", "Dead workers' leases taken over"
    ).add(1)
