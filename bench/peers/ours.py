"""ours: this project's worker (``bench/worker_proc.py``: ``build_worker``), as ``bench.run`` runs it.

The agent is bench/agents/bench.toml, started by name (``bench.workload.bench_agent()`` is the same
agent inline); the in-process baseline is ``bench/inprocess_loop.py`` (the same adapter and tool
registry, no Temporal).
"""

from __future__ import annotations

import functools
import os
import tempfile
from datetime import timedelta
from pathlib import Path

import openai
from temporalio.client import Client, WorkflowHandle

from bench.inprocess_loop import run_loop
from bench.workload import bench_agent, check_result
from durable_agents.activities.providers.openai_chat import OpenAIChatModel
from durable_agents.activities.tools import ToolRegistry, default_registry
from durable_agents.client.conversations import start_conversation
from durable_agents.converter import data_converter
from durable_agents.workflows.api import ConversationInput, ConversationResult

WORKER_MODULE = "bench.worker_proc"


async def connect(address: str) -> Client:
    """The data converter the worker uses (pydantic, payload store at ``AGENT_PAYLOAD_STORE``)."""
    return await Client.connect(address, data_converter=data_converter())


AGENT = "bench"


async def start(
    client: Client, workflow_id: str, task_queue: str, prompt: str, agent: str = AGENT
) -> WorkflowHandle:
    """As ``starter.py start --agent bench`` does (the agent file is bench/agents/bench.toml)."""
    return await start_conversation(
        client,
        ConversationInput(prompt=prompt, agent=agent),
        id=workflow_id,
        task_queue=task_queue,
        execution_timeout=timedelta(minutes=15),
    )


@functools.cache
def _loop_parts() -> tuple[OpenAIChatModel, ToolRegistry, Path]:
    workspace = Path(os.environ.get("AGENT_WORKSPACE") or tempfile.mkdtemp(prefix="bench-ws-"))
    return OpenAIChatModel(openai.AsyncOpenAI(max_retries=0)), default_registry(), workspace


async def inprocess(prompt: str) -> str:
    model, registry, workspace = _loop_parts()
    text, _, _ = await run_loop(
        model, registry, bench_agent(), prompt, conversation_id="inprocess", workspace=workspace
    )
    return text


def correct(result: ConversationResult) -> bool:
    return check_result(result)
