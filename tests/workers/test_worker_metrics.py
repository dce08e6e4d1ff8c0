"""Metrics read back from a real SDK runtime's buffer: store outages, lease takeovers and budget
refusals, each with exactly what it records."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig

from durable_agents.converter import data_converter
from durable_agents.dev_server import EmbeddedServer
from durable_agents.settings import Settings
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.metrics import count_outage, count_takeover
from durable_agents.workflows.outages import STORE_UNAVAILABLE, STORES_DIFFER
from tests.support.workers import running_worker


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


async def test_a_refused_model_call_counts_as_a_budget_refusal_of_its_tenant(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    buffer = MetricBuffer(1000)
    client = await Client.connect(
        server.address,
        data_converter=data_converter(),
        runtime=Runtime(telemetry=TelemetryConfig(metrics=buffer)),
    )
    budgets = tmp_path / "budgets.toml"
    budgets.write_text("[tenants.acme]\ntokens_per_day = 1\n")  # less than any call may cost
    settings = replace(Settings.from_env(), data_dir=tmp_path / "data", budgets_file=budgets)
    async with running_worker(client, tmp_path, settings=settings) as worker:
        reply = await worker.run(conversation(scripted_agent(step("hi"), tools=[]), tenant="acme"))
    assert reply.stop_reason == "budget_exhausted"
    refusals = [
        (u.value, u.attributes["agent"], u.attributes["tenant"], u.attributes["model"])
        for u in buffer.retrieve_updates()
        if u.metric.name == "durable_agents_budget_refusals_total"
    ]
    assert refusals == [(1, "test-agent", "acme", "script")]
