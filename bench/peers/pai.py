"""PAI: pydantic-ai's Temporal durability, laid out as its documentation shows.

An ``Agent`` with the ``TemporalDurability`` capability (``TemporalAgent``, the older wrapper, is
deprecated since pydantic-ai 2.6x), listed on a ``PydanticAIWorkflow``; ``PydanticAIPlugin`` on
the client registers its model and tool activities. The model is ``openai-chat:bench``, built on
the worker from ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``.

    .venv/bin/python -m bench.peers.pai --task-queue Q    # its worker (TEMPORAL_ADDRESS, OPENAI_*)
"""

from __future__ import annotations

import os
from datetime import timedelta

from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin, PydanticAIWorkflow, TemporalDurability
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

WORKER_MODULE = "bench.peers.pai"

agent = Agent("openai-chat:bench", name="bench", capabilities=[TemporalDurability()])


@agent.tool_plain
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@workflow.defn
class PaiAgent(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (agent,)

    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await agent.run(prompt)
        return result.output


# -- the benchmark's side ----------------------------------------------------------------


async def connect(address: str) -> Client:
    return await Client.connect(address, plugins=[PydanticAIPlugin()])


async def worker(task_queue: str) -> Worker:
    client = await connect(os.environ["TEMPORAL_ADDRESS"])
    return Worker(client, task_queue=task_queue, workflows=[PaiAgent])


async def start(client: Client, workflow_id: str, task_queue: str, prompt: str) -> WorkflowHandle:
    return await client.start_workflow(
        PaiAgent.run, prompt, id=workflow_id, task_queue=task_queue, execution_timeout=timedelta(minutes=15)
    )


async def inprocess(prompt: str) -> str:
    """The same agent outside a workflow: the capability steps aside and the run is a plain one."""
    result = await agent.run(prompt)
    return result.output


def correct(result: str) -> bool:
    return result == "done"


if __name__ == "__main__":
    from bench.serve import serve

    serve(worker, __doc__.splitlines()[0])
