"""Traces of conversations: one per turn, named after the OpenTelemetry GenAI conventions, whole
across continue-as-new, worker processes and sub-agents, without contents unless asked; and
checked in a real trace viewer, Arize Phoenix, as a user would run it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client

from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.observer import Observer, TurnIds
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import ApprovalPolicy
from durable_agents.workflows.records import Decision
from tests.support.conversations import delegating, send, wait_for_pending
from tests.support.workers import running_worker

PROMPT = "the secret prompt"
PHOENIX = Path(
    os.environ.get("DURABLE_AGENTS_PHOENIX_VENV", Path.home() / ".cache/durable-agents-phoenix/venv")
)


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=TurnIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _tree(spans: list[ReadableSpan], root: ReadableSpan) -> list[str]:
    """The names of ``root``'s children, in the order they started."""
    children = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
    return [s.name for s in sorted(children, key=lambda s: s.start_time or 0)]


def _no_text(attributes: list[dict[str, Any]], text: str) -> bool:
    return not any(text in json.dumps(list(a.values()), default=str) for a in attributes)


async def test_each_turn_is_one_trace_of_model_calls_approval_and_tool_across_continue_as_new(
    client: Client, tmp_path: Path, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    agent = scripted_agent(
        step("", ("add", {"a": 2, "b": 3})),
        step("{last_result}"),
        step("bye"),
        approval=ApprovalPolicy(require=["add"]),
        chat=True,
        continue_as_new_after=1,  # the first turn spans three runs
    )
    async with running_worker(client, tmp_path, observer=Observer(provider)) as worker:
        handle = await worker.start(conversation(agent, prompt=PROMPT))
        await wait_for_pending(handle)
        await handle.execute_update(
            AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="alice")
        )
        assert await send(handle, "thanks") == "bye"
        await handle.signal(AgentWorkflow.end)
        await handle.result()
    finished = list(exporter.get_finished_spans())

    turns = [s for s in finished if s.name == "invoke_agent test-agent"]
    assert [(t.parent, t.attributes["durable_agents.stop_reason"]) for t in turns] == [
        (None, "completed"),
        (None, "completed"),
    ]
    first, second = turns
    assert first.context.trace_id != second.context.trace_id
    assert {s.context.trace_id for s in finished} == {first.context.trace_id, second.context.trace_id}
    assert _tree(finished, first) == ["chat script", "await_approval add", "execute_tool add", "chat script"]
    assert _tree(finished, second) == ["chat script"]
    chat = next(s for s in finished if s.name == "chat script")
    assert {k: chat.attributes[k] for k in chat.attributes if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "script",
        "gen_ai.request.max_tokens": 1024,
        "gen_ai.conversation.id": handle.id,
        "gen_ai.response.model": "script",
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    approval = next(s for s in finished if s.name == "await_approval add")
    assert {k: approval.attributes[k] for k in approval.attributes if not k.endswith("wait_seconds")} == {
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "call_1_0",
        "durable_agents.approval.decision": "approved",
        "durable_agents.approval.via": "update",
        "durable_agents.approval.decided_by": "alice",
        "durable_agents.approval.approver": "self-declared",
    }
    tool = next(s for s in finished if s.name == "execute_tool add")
    assert (tool.attributes["gen_ai.tool.call.id"], tool.attributes["durable_agents.tool.outcome"]) == (
        "call_1_0",
        "ok",
    )
    assert _no_text([dict(s.attributes or {}) for s in finished], PROMPT)


async def test_contents_go_into_spans_only_when_capture_is_on(
    client: Client, tmp_path: Path, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    agent = scripted_agent(step("", ("add", {"a": 2, "b": 3})), step("{last_result}"))
    async with running_worker(client, tmp_path, observer=Observer(provider, capture_content=True)) as worker:
        await (await worker.start(conversation(agent, prompt=PROMPT))).result()
    finished = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)
    turn, first_call, tool, second_call = (dict(s.attributes or {}) for s in finished)
    # each model call's span holds what it sent new: the prompt, then the tool's result
    assert [m["kind"] for m in json.loads(first_call["gen_ai.input.messages"])] == ["user"]
    assert json.loads(first_call["gen_ai.input.messages"])[0]["text"] == PROMPT
    assert (tool["gen_ai.tool.call.arguments"], tool["gen_ai.tool.call.result"]) == ('{"a":2,"b":3}', "5")
    assert [m["kind"] for m in json.loads(second_call["gen_ai.input.messages"])] == [
        "assistant",
        "tool_result",
    ]
    assert json.loads(turn["gen_ai.output.messages"]) == [{"role": "assistant", "content": "5"}]


async def test_a_sub_agents_turn_is_a_child_of_the_parents_turn(
    client: Client, tmp_path: Path, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    async with running_worker(client, tmp_path, observer=Observer(provider)) as worker:
        parent, child = await delegating(worker)
        [pending] = await wait_for_pending(child)
        await child.execute_update(
            AgentWorkflow.decide, Decision(call_id=pending.call_id, approve=True, by="bob")
        )
        await parent.result()
    finished = list(exporter.get_finished_spans())
    [parents_turn] = [s for s in finished if s.name == "invoke_agent delegator"]
    [childs_turn] = [s for s in finished if s.name == "invoke_agent scribe"]
    assert parents_turn.parent is None
    assert childs_turn.parent is not None and childs_turn.parent.span_id == parents_turn.context.span_id
    assert {s.context.trace_id for s in finished} == {parents_turn.context.trace_id}
    assert childs_turn.attributes["gen_ai.conversation.id"] == child.id
