"""NAIVE: the agent loop a user writes from Temporal's samples, with the SDK's defaults.

One ``call_model`` activity calls the openai SDK (Chat Completions) with the whole transcript,
one ``run_tool`` activity runs a tool by name; the workflow loops until a text answer.

    .venv/bin/python -m bench.peers.naive --task-queue Q    # its worker (TEMPORAL_ADDRESS, OPENAI_*)
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from openai import AsyncOpenAI

WORKER_MODULE = "bench.peers.naive"
MODEL = "bench"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]


@dataclass
class ModelInput:
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


@dataclass
class ToolInput:
    name: str
    arguments: str


@functools.cache
def _openai() -> AsyncOpenAI:
    return AsyncOpenAI(max_retries=0)  # Temporal retries the activity


@activity.defn
async def call_model(input: ModelInput) -> dict[str, Any]:
    response = await _openai().chat.completions.create(
        model=input.model, messages=input.messages, tools=input.tools
    )
    return response.choices[0].message.model_dump(exclude_none=True)


def add(a: int, b: int) -> int:
    return a + b


@activity.defn
async def run_tool(input: ToolInput) -> str:
    return str({"add": add}[input.name](**json.loads(input.arguments)))


async def agent_loop(
    prompt: str,
    model: Callable[[ModelInput], Awaitable[dict[str, Any]]],
    tool: Callable[[ToolInput], Awaitable[str]],
) -> str:
    """Call the model, run the tools it asks for, repeat until it answers in text."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    while True:
        message = await model(ModelInput(MODEL, messages, TOOLS))
        messages.append(message)
        if not message.get("tool_calls"):
            return message["content"]
        for call in message["tool_calls"]:
            result = await tool(ToolInput(call["function"]["name"], call["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


@workflow.defn
class NaiveAgent:
    @workflow.run
    async def run(self, prompt: str) -> str:
        timeout = timedelta(seconds=60)
        return await agent_loop(
            prompt,
            lambda input: workflow.execute_activity(call_model, input, start_to_close_timeout=timeout),
            lambda input: workflow.execute_activity(run_tool, input, start_to_close_timeout=timeout),
        )


# -- the benchmark's side ----------------------------------------------------------------


async def connect(address: str) -> Client:
    return await Client.connect(address)


async def worker(task_queue: str) -> Worker:
    client = await connect(os.environ["TEMPORAL_ADDRESS"])
    return Worker(client, task_queue=task_queue, workflows=[NaiveAgent], activities=[call_model, run_tool])


async def start(client: Client, workflow_id: str, task_queue: str, prompt: str) -> WorkflowHandle:
    return await client.start_workflow(
        NaiveAgent.run, prompt, id=workflow_id, task_queue=task_queue, execution_timeout=timedelta(minutes=15)
    )


async def inprocess(prompt: str) -> str:
    """The same loop, the same functions, called directly."""
    return await agent_loop(prompt, call_model, run_tool)


def correct(result: str) -> bool:
    return result == "done"


if __name__ == "__main__":
    from bench.serve import serve

    serve(worker, __doc__.splitlines()[0])
