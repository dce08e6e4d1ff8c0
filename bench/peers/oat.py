"""OAT: the OpenAI Agents SDK through Temporal's OpenAI Agents plugin, laid out as its README shows.

The model runs as the plugin's activity (Chat Completions, the fake server's protocol); ``add`` is
a Temporal activity made a tool with ``activity_as_tool``. ``temporalio.contrib.openai_agents``
forwards to ``temporalio.openai_agents`` (the ``temporalio-openai-agents`` package) since
temporalio 1.35; this imports the latter, as its README asks of new code.

    .venv/bin/python -m bench.peers.oat --task-queue Q    # its worker (TEMPORAL_ADDRESS, OPENAI_*)
"""

from __future__ import annotations

import functools
import os
from datetime import timedelta

from openai import AsyncOpenAI
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.openai_agents.workflow import activity_as_tool
from temporalio.worker import Worker

from agents import Agent, OpenAIChatCompletionsModel, OpenAIProvider, Runner, function_tool

WORKER_MODULE = "bench.peers.oat"
MODEL = "bench"


@activity.defn
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@workflow.defn
class OatAgent:
    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = Agent(
            name="bench",
            model=MODEL,
            tools=[activity_as_tool(add, start_to_close_timeout=timedelta(seconds=60))],
        )
        result = await Runner.run(agent, input=prompt)
        return result.final_output


# -- the benchmark's side ----------------------------------------------------------------


async def connect(address: str) -> Client:
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=60)),
        # The fake model speaks Chat Completions; the SDK's default is the Responses API.
        model_provider=OpenAIProvider(openai_client=AsyncOpenAI(max_retries=0), use_responses=False),
    )
    return await Client.connect(address, plugins=[plugin])


async def worker(task_queue: str) -> Worker:
    client = await connect(os.environ["TEMPORAL_ADDRESS"])
    return Worker(client, task_queue=task_queue, workflows=[OatAgent], activities=[add])


async def start(client: Client, workflow_id: str, task_queue: str, prompt: str) -> WorkflowHandle:
    return await client.start_workflow(
        OatAgent.run, prompt, id=workflow_id, task_queue=task_queue, execution_timeout=timedelta(minutes=15)
    )


async def inprocess(prompt: str) -> str:
    """The same agent and tool without Temporal: ``Runner.run`` calls the model and ``add`` itself."""
    agent = Agent(
        name="bench",
        model=OpenAIChatCompletionsModel(model=MODEL, openai_client=_client()),
        tools=[function_tool(add)],
    )
    result = await Runner.run(agent, input=prompt)
    return result.final_output


@functools.cache
def _client() -> AsyncOpenAI:
    return AsyncOpenAI(max_retries=0)


def correct(result: str) -> bool:
    return result == "done"


if __name__ == "__main__":
    from bench.serve import serve

    serve(worker, __doc__.splitlines()[0])
