"""Worker and embedded-server settings that the benchmarks showed matter (bench/, docs/benchmarks.md)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

from durable_agents.activities.providers import PROVIDERS, provider_class
from durable_agents.dev_server import EmbeddedServer, dev_server_flags
from durable_agents.settings import Settings
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker import plugin
from durable_agents.worker.tuning import WorkerTuning
from durable_agents.workflows.agent import AgentWorkflow
from tests.support.conversations import wait_for_pending
from tests.support.greeting import Greeting
from tests.support.net import free_port
from tests.support.paths import ROOT


def test_the_embedded_server_uses_wal_and_no_per_commit_sync() -> None:
    assert dev_server_flags() == [
        "--dynamic-config-value", "history.transferProcessorMaxPollRPS=10000",
        "--sqlite-pragma", "journal_mode=wal",
        "--sqlite-pragma", "synchronous=normal",
    ]  # fmt: skip


async def test_workers_cache_200_conversations_unless_told(client: Client, tmp_path: Path) -> None:
    default = plugin.build_worker(client, task_queue="cache-default", workspace_root=tmp_path)
    assert default.config()["max_cached_workflows"] == 200
    small = plugin.build_worker(
        client, task_queue="cache-small", workspace_root=tmp_path, max_cached_workflows=50
    )
    assert small.config()["max_cached_workflows"] == 50
    # AGENT_MAX_CACHED_WORKFLOWS, through the settings; 1,000 (the SDK's default too) and 0 stay.
    for asked in (1000, 0):
        settings = Settings.from_env({"AGENT_MAX_CACHED_WORKFLOWS": str(asked)})
        told = plugin.build_worker(client, settings, task_queue=f"cache-{asked}", workspace_root=tmp_path)
        assert told.config(active_config=True)["max_cached_workflows"] == asked


async def test_workers_give_running_calls_the_shutdown_grace_of_the_settings(
    client: Client, tmp_path: Path
) -> None:
    default = plugin.build_worker(client, task_queue="grace-default", workspace_root=tmp_path)
    assert default.config(active_config=True)["graceful_shutdown_timeout"] == timedelta(seconds=5)
    settings = Settings.from_env({"AGENT_SHUTDOWN_GRACE_SECONDS": "2.5"})
    told = plugin.build_worker(client, settings, task_queue="grace-told", workspace_root=tmp_path)
    assert told.config(active_config=True)["graceful_shutdown_timeout"] == timedelta(seconds=2.5)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("-1", "AGENT_SHUTDOWN_GRACE_SECONDS must be 0 or more seconds, not -1"),
        ("soon", "AGENT_SHUTDOWN_GRACE_SECONDS must be a number, not 'soon'"),
    ],
)
def test_a_shutdown_grace_that_is_no_number_of_seconds_is_refused_naming_the_variable(
    value: str, error: str
) -> None:
    with pytest.raises(ValueError) as refused:
        Settings.from_env({"AGENT_SHUTDOWN_GRACE_SECONDS": value})
    assert str(refused.value) == error


async def test_build_worker_and_the_tuning_option_set_the_measured_options(
    server: EmbeddedServer, client: Client, tmp_path: Path
) -> None:
    """``build_worker`` tunes the whole worker it builds; a worker of the user's own gets the same only
    with ``AgentPlugin(tuning=...)`` (docs/production.md, "Worker tuning")."""
    tuned = {
        "sticky_queue_schedule_to_start_timeout": timedelta(seconds=5),
        "max_heartbeat_throttle_interval": timedelta(seconds=1),
        "default_heartbeat_throttle_interval": timedelta(seconds=1),
        "graceful_shutdown_timeout": timedelta(seconds=5),
    }
    built = plugin.build_worker(client, task_queue="tuned-built", workspace_root=tmp_path)
    asked = WorkerTuning(graceful_shutdown_timeout=timedelta(seconds=30), workflow_threads=None)
    with_plugin = await Client.connect(
        server.address, plugins=[plugin.AgentPlugin(workspace_root=tmp_path, tuning=asked)]
    )
    own = Worker(
        with_plugin,
        task_queue="tuned-own",
        workflows=[Greeting],
        graceful_shutdown_timeout=timedelta(seconds=1),
    )
    for worker, expected, threads in (
        (built, tuned, 2),
        (own, tuned | {"graceful_shutdown_timeout": timedelta(seconds=30)}, None),
    ):
        config = worker.config(active_config=True)
        assert {option: config[option] for option in expected} == expected  # type: ignore[literal-required]
        executor = config.get("workflow_task_executor")
        assert (executor._max_workers if executor else None) == threads  # type: ignore[attr-defined]


def test_the_agent_workflow_runs_outside_the_sandbox_and_others_inside() -> None:
    """The sandbox would import workflows/agent.py afresh for every conversation
    (tests/workflow/test_determinism.py holds its code deterministic instead); a user's own workflows
    in the same worker keep it."""
    assert workflow._Definition.must_from_class(AgentWorkflow).sandboxed is False
    assert workflow._Definition.must_from_class(Greeting).sandboxed is True


@pytest.mark.parametrize(
    ("flags", "cached", "evicted"),
    [([], 1, 2), (["--max-cached-workflows", "2"], 2, 1)],
    ids=["from-the-environment", "the-flag-wins"],
)
async def test_the_worker_cli_reads_the_cache_size_from_the_environment(
    server: EmbeddedServer, flags: list[str], cached: int, evicted: int
) -> None:
    """``python worker.py`` with AGENT_MAX_CACHED_WORKFLOWS=1: three conversations parked for
    approval, and its sticky cache (from its own metrics) holds what the setting says."""
    queue, port = f"cache-{uuid.uuid4().hex}", free_port()
    environment = {
        "TEMPORAL_ADDRESS": server.address,
        "AGENT_TASK_QUEUE": queue,
        "AGENT_MAX_CACHED_WORKFLOWS": "1",
    }
    process = subprocess.Popen(
        [sys.executable, "worker.py", "--metrics-port", str(port), *flags],
        cwd=ROOT,
        env=os.environ | environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        agent = scripted_agent(
            step("", ("write_file", {"path": "a.txt", "content": "a"})), tools=["write_file"]
        )
        for _ in range(3):  # one after the other: each parked before the next one arrives
            handle = await server.client.start_workflow(
                AgentWorkflow.run, conversation(agent), id=f"cache-{uuid.uuid4().hex}", task_queue=queue
            )
            await wait_for_pending(handle, timeout=60)
        metrics = await asyncio.to_thread(_metrics, port)
    finally:
        process.terminate()
        process.wait(timeout=30)
    evictions = metrics.get("temporal_sticky_cache_total_forced_eviction", 0)  # absent until one happens
    assert (metrics["temporal_sticky_cache_size"], evictions) == (cached, evicted)


def _metrics(port: int) -> dict[str, float]:
    """The worker's Prometheus metrics without labels (each of ours has one task queue)."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split("{", 1)[0].split(" ")[0], line.rsplit(" ", 1)[1]
            values[name] = float(value)
    return values


def test_provider_sdks_are_not_imported_before_the_worker_polls() -> None:
    # A replacement worker should poll within its start-up; the SDKs load in a thread meanwhile.
    code = "import sys, worker; print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_every_provider_name_imports_its_adapter() -> None:
    assert {name: provider_class(name).__name__ for name in PROVIDERS} == {
        "openai": "OpenAIChatModel",
        "anthropic": "AnthropicMessagesModel",
        "openai_responses": "OpenAIResponsesModel",
        "scripted": "ScriptedModel",
    }
