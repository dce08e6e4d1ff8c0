"""Logs and metrics for the worker: JSON log lines that name the conversation, Prometheus metrics.

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

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

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
    """A runtime serving the SDK's metrics for Prometheus at http://HOST:PORT/metrics."""
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"{host}:{port}")))


def tracing_interceptor(exporter: SpanExporter | str | None) -> TracingInterceptor | None:
    """OpenTelemetry tracing through Temporal's contrib interceptor: one trace per conversation,
    with a span for the workflow and for every model and tool call.

    ``exporter`` is a span exporter, ``"console"`` (spans printed to stderr), ``"otlp"``
    (OTLP over HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT``; needs the
    ``opentelemetry-exporter-otlp-proto-http`` package) or None for no tracing.
    """
    if exporter is None:
        return None
    if exporter == "console":
        exporter = ConsoleSpanExporter()
    elif exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as e:
            raise RuntimeError(
                "--trace otlp needs: pip install opentelemetry-exporter-otlp-proto-http"
            ) from e
        exporter = OTLPSpanExporter()
    assert not isinstance(exporter, str)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return TracingInterceptor(provider.get_tracer("durable-agents"))
