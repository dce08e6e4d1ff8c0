"""Our metrics beside the SDK's on a worker's Prometheus endpoint, counted exactly."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

from temporalio.client import Client, WorkflowHandle

from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import ApprovalPolicy, JudgeConfig
from durable_agents.workflows.messages import ModelSettings
from durable_agents.workflows.records import Decision
from tests.support.fake_provider import FakeProvider, Reply
from tests.support.net import free_port
from tests.support.paths import ROOT

_SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus's text format: each sample's name, labels and value."""
    found = []
    for line in text.splitlines():
        if (match := _SAMPLE.match(line)) is not None:
            name, labels, value = match.groups()
            found.append((name, dict(_LABEL.findall(labels or "")), float(value)))
    return found


def _value(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples with ``labels`` (whatever the SDK's own labels say; an empty
    label is no label)."""
    return sum(
        v
        for n, have, v in samples
        if n == name and all(have.get(k, "") == want for k, want in labels.items())
    )


def _scrape(port: int) -> str:
    with contextlib.suppress(OSError):
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return ""


async def _judged(handle: WorkflowHandle) -> None:
    """Until the judge has given its opinion of the waiting call."""
    for _ in range(600):
        approvals = (await handle.query(AgentWorkflow.history)).approvals
        if approvals and approvals[0].judgements:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the judge gave no opinion")


@contextlib.contextmanager
def _worker_process(args: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    """``worker.py ARGS`` with ``env`` (its own environment, not this process's), stopped at the end."""
    proc = subprocess.Popen(
        [sys.executable, "worker.py", *args],
        cwd=ROOT,
        env=os.environ | env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=60)


async def test_metrics_count_tokens_cost_tools_approvals_and_judges_of_a_conversation(
    server: EmbeddedServer, client: Client, tmp_path: Path
) -> None:
    port, queue = free_port(), f"metrics-{uuid.uuid4().hex[:8]}"
    models = tmp_path / "models.toml"
    models.write_text('["script"]\ninput = 100_000\noutput = 200_000\n')  # $2 for each scripted call
    reviewer = JudgeConfig(
        name="reviewer",
        kind="model",
        tools=["add"],
        model=ModelSettings(provider="openai", model="judge-model"),
    )
    agent = scripted_agent(
        step("", ("add", {"a": 2, "b": 3}), ("divide", {"a": 1, "b": 0})),
        step("{last_result}"),
        approval=ApprovalPolicy(require=["add"], judges=[reviewer]),
    )
    with FakeProvider() as judge:  # an OpenAI-compatible server for the model judge
        judge.queue(Reply(answer={"verdict": "escalate", "reason": "a person should see this"}))
        env = {
            "TEMPORAL_ADDRESS": server.address,
            "AGENT_TASK_QUEUE": queue,
            "AGENT_DATA_DIR": str(tmp_path / "data"),
            "AGENT_MODELS": str(models),
            "OPENAI_BASE_URL": f"{judge.url}/v1",
            "OPENAI_API_KEY": "sk-test",
        }
        with _worker_process(["--metrics-port", str(port)], env, tmp_path / "worker.log"):
            handle = await client.start_workflow(
                AgentWorkflow.run,
                conversation(agent),  # its calls' price comes from the worker's models table
                id=f"metered-{uuid.uuid4().hex}",
                task_queue=queue,
            )
            await _judged(handle)  # it escalates: a person decides
            await handle.execute_update(
                AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="alice")
            )
            await handle.result()
            tenants = await client.start_workflow(  # a tenant's call carries its price, for the ledger
                AgentWorkflow.run,
                conversation(scripted_agent(step("hi")), tenant="acme"),
                id=f"metered-{uuid.uuid4().hex}",
                task_queue=queue,
            )
            await tenants.result()
            samples: list[tuple[str, dict[str, str], float]] = []
            deadline = time.monotonic() + 60
            while (  # ours are recorded in the workflow's last task, the SDK's once core completes it
                _value(samples, "durable_agents_turns_total") < 2
                or _value(samples, "temporal_workflow_completed", task_queue=queue) < 2
            ) and time.monotonic() < deadline:
                samples = _samples(_scrape(port))
                time.sleep(0.2)

    call = {"provider": "scripted", "model": "script", "agent": "test-agent", "tenant": ""}
    acme = call | {"tenant": "acme"}
    assert {
        "input tokens": _value(samples, "durable_agents_model_tokens_total", **call, token_type="input"),
        "output tokens": _value(samples, "durable_agents_model_tokens_total", **call, token_type="output"),
        "cost": _value(samples, "durable_agents_model_call_cost_usd_sum", **call),
        "acme's tokens": _value(samples, "durable_agents_model_tokens_total", **acme),
        "acme's cost": _value(samples, "durable_agents_model_call_cost_usd_sum", **acme),
        "model calls": _value(
            samples, "durable_agents_model_call_duration_seconds_count", **call, outcome="ok"
        ),
        "failed model calls": _value(
            samples, "durable_agents_model_call_duration_seconds_count", outcome="error"
        ),
        "add ok": _value(
            samples, "durable_agents_tool_calls_total", tool="add", outcome="ok", agent="test-agent"
        ),
        "divide error": _value(samples, "durable_agents_tool_calls_total", tool="divide", outcome="error"),
        "approvals waiting": _value(samples, "durable_agents_approvals_waiting", agent="test-agent"),
        "approvals decided": _value(
            samples,
            "durable_agents_approval_wait_seconds_count",
            tool="add",
            decision="approved",
            tenant="",
        ),
        "turns": _value(samples, "durable_agents_turns_total", stop_reason="completed", agent="test-agent"),
        "budget refusals": _value(samples, "durable_agents_budget_refusals_total"),
        "judge verdicts": _value(
            samples, "durable_agents_judge_verdicts_total", judge="reviewer", verdict="escalate"
        ),
        "judge tokens": _value(
            samples, "durable_agents_model_tokens_total", provider="openai", model="judge-model"
        ),
    } == {
        "input tokens": 20,
        "output tokens": 10,
        "cost": 4.0,
        "acme's tokens": 15,
        "acme's cost": 2.0,
        "model calls": 2,
        "failed model calls": 0,
        "add ok": 1,
        "divide error": 1,
        "approvals waiting": 0,
        "approvals decided": 1,
        "turns": 2,
        "budget refusals": 0,
        "judge verdicts": 1,
        "judge tokens": 110,  # the fake's usage: 100 in, 10 out
    }
    assert _value(samples, "temporal_workflow_completed", task_queue=queue) == 2  # the SDK's, beside ours
