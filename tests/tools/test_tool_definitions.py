"""The model activity gets the registry's tools by name (their definitions come from the model
worker's registry, not from history at every call); a model worker whose registry defines them
otherwise refuses the call, and the workflow sends them whole."""

from __future__ import annotations

import json
import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durable_agents.activities.tools import ToolRegistry, default_registry, tool
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.activity_io import ModelCallInput
from tests.support.workers import Env


@tool
async def add(a: float, b: float) -> float:
    """Add two numbers, the other way.

    Args:
        a: The first number.
        b: The second number.
    """
    return b + a


async def _model_inputs(handle: WorkflowHandle) -> list[ModelCallInput]:
    inputs = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name == "durable_agents.call_model":
                [payload] = scheduled.input.payloads
                inputs.append(ModelCallInput.model_validate(json.loads(payload.data)))
    return inputs


async def _failures(handle: WorkflowHandle) -> list[str]:
    return [
        e.activity_task_failed_event_attributes.failure.application_failure_info.type
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]


async def test_registry_tools_go_by_name(env: Env) -> None:
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})), step("{last_result}"), tools=["add", "multiply"]
    )
    handle = await env.start(conversation(agent))

    assert (await handle.result()).final_text == "3"
    inputs = await _model_inputs(handle)
    assert [(i.registry_tools, i.request.tools) for i in inputs] == [(["add", "multiply"], [])] * 2
    assert inputs[0].registry_digest == inputs[1].registry_digest != ""


async def test_a_model_worker_with_other_definitions_gets_them_whole(client: Client, env: Env) -> None:
    models = f"models-{uuid.uuid4().hex[:8]}"
    other = ToolRegistry([add])  # this model worker's `add` says something else
    async with build_worker(client, task_queue=models, role="models", registry=other, agents={}):
        agent = scripted_agent(step("done"), tools=["add"], model_task_queue=models)
        handle = await env.start(conversation(agent))
        result = await handle.result()

    assert result.final_text == "done"
    assert await _failures(handle) == ["ToolDefinitionsDiffer"]
    first, second = await _model_inputs(handle)
    assert (first.registry_tools, first.request.tools) == (["add"], [])
    assert (second.registry_tools, second.stored) == ([], 0)
    assert [t.description for t in second.request.tools] == [default_registry()["add"].definition.description]
