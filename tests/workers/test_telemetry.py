"""JSON log lines that name the conversation, and Prometheus metrics from the worker."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from temporalio import activity, workflow

from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.telemetry import JsonFormatter
from tests.support.net import free_port
from tests.support.paths import ROOT
from tests.support.workers import Env


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def json_lines() -> Iterator[list[dict]]:
    handler = _Lines()
    loggers = [logging.getLogger("temporalio.workflow"), logging.getLogger("temporalio.activity")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    yield handler.lines
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(handler)
        logger.setLevel(level)


async def test_log_lines_carry_workflow_run_iteration_and_call_id(env: Env, json_lines: list[dict]) -> None:
    agent = scripted_agent(step("", ("add", {"a": 2, "b": 3})), step("{last_result}"))
    handle = await env.start(conversation(agent))
    await handle.result()
    ours = [line for line in json_lines if line.get("workflow_id") == handle.id]

    def first(logger: str, message: str) -> dict:
        return next(line for line in ours if line["logger"] == logger and line["message"].startswith(message))

    workflow_tool = first("temporalio.workflow", "running tool add")
    assert {k: workflow_tool[k] for k in ("run_id", "iteration", "call_id", "tool")} == {
        "run_id": handle.result_run_id,
        "iteration": 1,
        "call_id": "call_1_0",
        "tool": "add",
    }
    activity_tool = first("temporalio.activity", "running tool add")
    assert {k: activity_tool[k] for k in ("run_id", "activity_type", "iteration", "call_id")} == {
        "run_id": handle.result_run_id,
        "activity_type": "durable_agents.run_tool",
        "iteration": 1,
        "call_id": "call_1_0",
    }
    calls = [
        line["iteration"]
        for line in ours
        if line["logger"] == "temporalio.workflow" and "calling model" in line["message"]
    ]
    assert calls == [1, 2]


def test_worker_serves_temporal_metrics_for_prometheus(server: EmbeddedServer) -> None:
    port, queue = free_port(), f"metrics-{uuid.uuid4().hex}"
    env = os.environ | {"TEMPORAL_ADDRESS": server.address, "AGENT_TASK_QUEUE": queue}
    proc = subprocess.Popen(
        [sys.executable, "worker.py", "--metrics-port", str(port), "--log-format", "json"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        body = ""
        for _ in range(200):  # until the worker polls (its start-up, more on a loaded machine)
            with contextlib.suppress(OSError):
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            if f'task_queue="{queue}"' in body:
                break
            time.sleep(0.3)
        assert "# TYPE temporal_" in body
        assert f'task_queue="{queue}"' in body
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_json_formatter_keeps_ids_out_of_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workflow.logger, "workflow_info_on_message", False)
    monkeypatch.setattr(activity.logger, "activity_info_on_message", False)
    record = logging.LogRecord("temporalio.workflow", logging.INFO, __file__, 1, "hello %s", ("there",), None)
    record.temporal_workflow = {"workflow_id": "w-1", "run_id": "r-1", "workflow_type": "AgentWorkflow"}
    record.iteration = 3
    line = json.loads(JsonFormatter().format(record))
    assert {k: line[k] for k in ("message", "workflow_id", "run_id", "workflow_type", "iteration")} == {
        "message": "hello there",
        "workflow_id": "w-1",
        "run_id": "r-1",
        "workflow_type": "AgentWorkflow",
        "iteration": 3,
    }
