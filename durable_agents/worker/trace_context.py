"""A turn's trace context: derived, not carried, and sent with the conversation's activities.

A turn's trace and span ids are derived from the conversation and its message (``turn_context``),
so every worker and host that takes part, before or after a continue-as-new, names the same trace
with nothing carried. The workflow's activities and children get the turn's context in their
headers (temporalio's ``_tracer-data`` header: W3C trace context, and the agent and tenant as
baggage); a sub-agent's turns are in the trace of its parent's turn, under its span.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import opentelemetry.context
from opentelemetry import baggage, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadConverter

from durable_agents.workflows.telemetry import Labels

HEADER = "_tracer-data"
"""temporalio's tracing header (``temporalio.contrib.opentelemetry``): its spans join ours."""
PROPAGATOR = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])


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


def turn_context(message_id: str) -> SpanContext:
    """In workflow code: the span context of the current conversation's turn that answers
    ``message_id``: the same on every worker, in every run of the conversation. A sub-agent's
    turns are in the trace of its parent's turn."""
    info = workflow.info()
    digest = hashlib.sha256(
        f"{info.workflow_id}/{info.first_execution_run_id}/{message_id}".encode()
    ).digest()
    parent = parent_context()
    trace_id = parent.trace_id if parent else int.from_bytes(digest[:16]) or 1
    return SpanContext(
        trace_id,
        int.from_bytes(digest[16:24]) or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def parent_context() -> SpanContext | None:
    """A sub-agent's parent's turn, as the parent's start of it carried it (kept across continue-as-new)."""
    info = workflow.info()
    if info.parent is None:
        return None
    parent = trace.get_current_span(header_context(info.headers)).get_span_context()
    return parent if parent.is_valid else None


def conversation_labels() -> Labels | None:
    """In workflow code: the running conversation's labels (None in a workflow not ours)."""
    labels = getattr(workflow.instance(), "telemetry", None)
    return labels if isinstance(labels, Labels) else None


def header_context(headers: Mapping[str, Payload]) -> opentelemetry.context.Context:
    """The trace context and baggage ``headers`` carry (an empty context if none)."""
    payload = headers.get(HEADER)
    if payload is None:
        return opentelemetry.context.Context()
    (carrier,) = PayloadConverter.default.from_payloads([payload])
    return PROPAGATOR.extract(carrier if isinstance(carrier, dict) else {})


def with_turn(headers: Mapping[str, Payload], spans: bool = True) -> Mapping[str, Payload]:
    """``headers`` and the current turn's context (``spans``: a worker that exports them), with the
    agent and tenant as baggage."""
    labels = conversation_labels()
    if labels is None:
        return headers
    context = opentelemetry.context.Context()
    if spans and labels.turn is not None:
        context = trace.set_span_in_context(NonRecordingSpan(turn_context(labels.turn)), context)
    for key, value in (("agent", labels.agent), ("tenant", labels.tenant)):
        if value:
            context = baggage.set_baggage(f"durable_agents.{key}", value, context)
    carrier: dict[str, str] = {}
    PROPAGATOR.inject(carrier, context)
    return {**headers, HEADER: PayloadConverter.default.to_payloads([carrier])[0]} if carrier else headers


def call_labels() -> dict[str, str]:
    """The agent and tenant the workflow sent with the activity (``with_turn``)."""
    return {key: str(baggage.get_baggage(f"durable_agents.{key}") or "") for key in ("agent", "tenant")}
