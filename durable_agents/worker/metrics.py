"""Our metrics: their names, their histograms' buckets, and the instruments of the worker's runtime
they are recorded by (``activity.metric_meter()``, ``workflow.metric_meter()``, the client's
runtime), so that they sit beside the SDK's on its Prometheus endpoint (``--metrics-port``).
Labels are bounded: provider, model, agent, tenant, tool, judge, outcome, never a conversation.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from temporalio.client import Client
from temporalio.common import MetricMeter
from temporalio.exceptions import ApplicationError
from temporalio.runtime import Runtime

from durable_agents.workflows.config import Price
from durable_agents.workflows.messages import Usage
from durable_agents.workflows.outages import StoreOutage

logger = logging.getLogger(__name__)

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


@contextmanager
def quietly(what: str) -> Iterator[None]:
    """Telemetry never fails a call or a conversation: an error of its own is logged, and that is all."""
    try:
        yield
    except Exception:
        logger.exception("telemetry: %s failed", what)


def counter(meter: MetricMeter, name: str, description: str) -> Any:
    """Name a counter ``*_total``: the runtime's exporter adds no suffix."""
    return meter.create_counter(name, description)


def histogram(meter: MetricMeter, name: str, description: str) -> Any:
    """Seconds (``*_seconds``) or US dollars; its buckets are in ``HISTOGRAM_BUCKETS``."""
    return meter.create_histogram_float(name, description, "s" if name.endswith("_seconds") else "USD")


def gauge(meter: MetricMeter, name: str, description: str) -> Any:
    return meter.create_gauge(name, description)


def count_spend(meter: MetricMeter, labels: dict[str, str], usage: Usage, price: Price | None) -> None:
    """A call's tokens, and its cost when its model has a price."""
    tokens = counter(meter, "durable_agents_model_tokens_total", "Tokens of model calls, by token type")
    tokens.add(usage.input_tokens, {**labels, "token_type": "input"})
    tokens.add(usage.output_tokens, {**labels, "token_type": "output"})
    if price is not None:
        histogram(
            meter, "durable_agents_model_call_cost_usd", "US dollars of each model call (_sum: spend)"
        ).record(price.cost(usage), labels)


def count_outage(meter: MetricMeter, err: ApplicationError, now: float) -> None:
    """An activity that gave up waiting for its store (``err``): one outage, and how long it had
    waited by ``now`` (seconds since the epoch)."""
    outage = StoreOutage.of(err)
    if outage is None or outage.wrong_worker:
        return
    counter(meter, "durable_agents_store_outages_total", "Activities that gave up waiting for a store").add(1)
    if outage.since:
        histogram(
            meter, "durable_agents_store_outage_seconds", "Seconds an activity waited for its store"
        ).record(max(0.0, now - outage.since))


def exports_metrics(client: Client) -> bool:
    """Whether the client's runtime (which its workers share) has a metrics exporter or buffer."""
    runtime = client.service_client.config.runtime or Runtime.default()
    return runtime.metric_meter is not MetricMeter.noop


def count_takeover(client: Client) -> None:
    """A dead worker's lease taken over (durable_agents/worker/lost_calls.py), on the client's runtime."""
    runtime = client.service_client.config.runtime or Runtime.default()
    counter(
        runtime.metric_meter, "durable_agents_lease_takeovers_total", "Dead workers' leases taken over"
    ).add(1)
