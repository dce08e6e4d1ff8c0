"""The metrics of what happens beside conversations' calls: store outages and lease takeovers,
recorded on a real SDK runtime's meter and read back from its buffer."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig

from durable_agents.dev_server import EmbeddedServer
from durable_agents.worker.metrics import count_outage, count_takeover
from durable_agents.workflows.outages import STORE_UNAVAILABLE, STORES_DIFFER


def _recorded(buffer: MetricBuffer) -> list[tuple[str, Any]]:
    return [(update.metric.name, update.value) for update in buffer.retrieve_updates()]


def test_an_outage_counts_once_with_how_long_the_store_was_out_and_a_wrong_worker_not_at_all() -> None:
    buffer = MetricBuffer(100)
    meter = Runtime(telemetry=TelemetryConfig(metrics=buffer)).metric_meter
    outage = ApplicationError(
        "waited", "postgresql://db", "timeout", 1000.0, 900.0, {}, type=STORE_UNAVAILABLE
    )
    count_outage(meter, outage, now=1960.0)
    count_outage(meter, ApplicationError("not mine", type=STORES_DIFFER), now=1960.0)
    count_outage(meter, ApplicationError("another failure", type="ToolError"), now=1960.0)
    assert _recorded(buffer) == [
        ("durable_agents_store_outages_total", 1),
        ("durable_agents_store_outage_seconds", 960.0),
    ]


async def test_a_lease_takeover_counts_on_the_clients_runtime(server: EmbeddedServer) -> None:
    buffer = MetricBuffer(100)
    client = await Client.connect(server.address, runtime=Runtime(telemetry=TelemetryConfig(metrics=buffer)))
    count_takeover(client)
    count_takeover(client)
    takeovers = [update for update in _recorded(buffer) if update[0].startswith("durable_agents_")]
    assert takeovers == [("durable_agents_lease_takeovers_total", 1)] * 2
