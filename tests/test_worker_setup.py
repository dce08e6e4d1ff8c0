"""Worker and embedded-server settings that the benchmarks showed matter (bench/, README Benchmarks)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from temporalio.client import Client

import worker
from activities.agent import PROVIDERS, provider_class
from connection import dev_server_flags
from workflows.agent import AgentWorkflow

ROOT = Path(__file__).resolve().parent.parent


def test_the_embedded_server_uses_wal_and_no_per_commit_sync() -> None:
    assert dev_server_flags() == [
        "--dynamic-config-value", "history.transferProcessorMaxPollRPS=10000",
        "--sqlite-pragma", "journal_mode=wal",
        "--sqlite-pragma", "synchronous=normal",
    ]  # fmt: skip


async def test_workers_cache_200_conversations_unless_told(client: Client, tmp_path: Path) -> None:
    default = worker.build_worker(client, task_queue="cache-default", workspace_root=tmp_path)
    assert default.config()["max_cached_workflows"] == 200
    small = worker.build_worker(
        client, task_queue="cache-small", workspace_root=tmp_path, max_cached_workflows=50
    )
    assert small.config()["max_cached_workflows"] == 50


def test_workflow_bytecode_is_written_even_when_python_is_told_not_to() -> None:
    source = importlib.util.find_spec(AgentWorkflow.__module__).origin
    cached = Path(importlib.util.cache_from_source(source))
    cached.unlink(missing_ok=True)
    worker._compile_bytecode([AgentWorkflow])
    # A valid cache entry: the header records the source's mtime and size, as the import system checks.
    header = cached.read_bytes()[:16]
    assert header[:4] == importlib.util.MAGIC_NUMBER
    stat = os.stat(source)
    assert int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
    assert int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF


def test_the_worker_cli_reads_the_cache_size_from_the_environment(monkeypatch) -> None:
    seen = {}

    async def fake_run(args) -> int:
        seen["max_cached_workflows"] = args.max_cached_workflows
        return 0

    monkeypatch.setattr(worker, "run", fake_run)
    monkeypatch.setenv("AGENT_MAX_CACHED_WORKFLOWS", "75")
    assert worker.main([]) == 0
    assert seen == {"max_cached_workflows": 75}
    assert worker.main(["--max-cached-workflows", "20"]) == 0
    assert seen == {"max_cached_workflows": 20}


def test_provider_sdks_are_not_imported_before_the_worker_polls() -> None:
    # A replacement worker should poll within its start-up; the SDKs load in a thread meanwhile.
    code = "import sys, worker; print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_every_provider_name_imports_its_adapter() -> None:
    assert {name: provider_class(name).__name__ for name in PROVIDERS} == {
        "openai": "OpenAIChatModel",
        "anthropic": "AnthropicMessagesModel",
        "scripted": "ScriptedModel",
    }
