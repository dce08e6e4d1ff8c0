"""Logs, metrics and traces of the worker: JSON log lines that name the conversation, Prometheus
metrics (the SDK's and ours: durable_agents/worker/observer.py), spans to OTLP or the console.

Every log line from workflow and activity code carries the workflow id and run
id (the SDK adds them), and the loop's own lines carry the iteration and the
tool call id. Workflow logging is replay-safe: the SDK drops lines while replaying.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from durable_agents.worker.metrics import HISTOGRAM_BUCKETS
from durable_agents.worker.trace_context import TurnIds

_CONTEXT_FIELDS = ("iteration", "call_id", "message_id", "tool", "model")
_WORKFLOW_FIELDS = {"workflow_id": "workflow_id", "run_id": "run_id", "workflow_type": "workflow_type"}
_ACTIVITY_FIELDS = {
    "workflow_id": "workflow_id",
    "workflow_run_id": "run_id",
    "activity_type": "activity_type",
    "activity_id": "activity_id",
    "attempt": "attempt",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; conversation fields flattened to the top level."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for source, fields in (
            ("temporal_workflow", _WORKFLOW_FIELDS),
            ("temporal_activity", _ACTIVITY_FIELDS),
        ):
            details = getattr(record, source, None) or {}
            line |= {ours: details[theirs] for theirs, ours in fields.items() if theirs in details}
        line |= {name: getattr(record, name) for name in _CONTEXT_FIELDS if hasattr(record, name)}
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    """``json`` for log shippers, ``text`` for people."""
    from temporalio import activity, workflow

    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
        # The ids are fields of their own; no need to repeat them in the message.
        workflow.logger.workflow_info_on_message = False
        activity.logger.activity_info_on_message = False
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def metrics_runtime(port: int, host: str = "0.0.0.0") -> Runtime:
    """A runtime serving the SDK's metrics and ours for Prometheus at http://HOST:PORT/metrics."""
    return Runtime(
        telemetry=TelemetryConfig(
            metrics=PrometheusConfig(
                bind_address=f"{host}:{port}", histogram_bucket_overrides=HISTOGRAM_BUCKETS
            )
        )
    )


def tracer_provider(exporter: SpanExporter | str | None) -> TracerProvider | None:
    """The worker's spans (durable_agents/worker/observer.py), or None for no tracing.

    ``exporter`` is a span exporter, ``"console"`` (spans printed to stderr) or ``"otlp"`` (OTLP
    over HTTP, configured by OpenTelemetry's environment: ``OTEL_EXPORTER_OTLP_ENDPOINT``,
    ``OTEL_EXPORTER_OTLP_HEADERS``, ...). The service is ``OTEL_SERVICE_NAME`` (default
    ``durable-agents``), with ``OTEL_RESOURCE_ATTRIBUTES``.
    """
    if exporter is None:
        return None
    if exporter == "console":
        exporter = ConsoleSpanExporter()
    elif exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    assert not isinstance(exporter, str)
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "durable-agents"}))
    provider = TracerProvider(resource=resource, id_generator=TurnIds())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider
