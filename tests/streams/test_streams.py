"""The conversation's live event stream: exact events, resumed at an offset across continue-as-new
and a SIGKILLed worker, served as Server-Sent Events, and a retried streamed model call repeating
no text for a client that follows the dedupe rule (workflows/events.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agents.client.live import follow
from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import AgentSpec, CallPolicy
from durable_agents.workflows.events import (
    Event,
    ModelCallFinished,
    ModelCallStarted,
    StateChanged,
    StreamedText,
    TextDelta,
)
from durable_agents.workflows.messages import ModelSettings, ScriptStep
from tests.support.cli import starter
from tests.support.fake_provider import (
    FakeProvider,
    broken_off,
    openai_completion,
    openai_error_event,
    openai_stream,
)
from tests.support.history import event_types
from tests.support.processes import WorkerProcess
from tests.support.serving import read_sse, serving
from tests.support.workers import Env

pytestmark = pytest.mark.timeout(240)
ANSWER = "The sum is 3, which I checked twice and wrote down with great care for you."


async def _all(client: Client, workflow_id: str, from_offset: int = 0) -> list[tuple[int, Event]]:
    return [item async for item in follow(client, workflow_id, from_offset)]


def _shown(events: list[Event]) -> tuple[str, list[str]]:
    """What a client following the dedupe rule shows of the streamed text, and how it updated."""
    text, hows = StreamedText(), []
    shown = ""
    for event in events:
        if isinstance(event, TextDelta) and (update := text.add(event)) is not None:
            hows.append(update[0])
            shown = shown + update[1] if update[0] == "append" else update[1]
    return shown, hows


async def test_events_in_order_and_none_in_history_without_a_subscriber(env: Env) -> None:
    agent = scripted_agent(step("", ("add", {"a": 1, "b": 2})), step("The sum is {last_result}."))
    handle = await env.start(conversation(agent, prompt="1 + 2?"))
    await handle.result()
    # Nobody followed, the model did not stream: the stream added nothing to history.
    kinds = set(await event_types(handle))
    assert kinds.isdisjoint(
        {
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
        }
    )

    events = await _all(env.client, handle.id)  # read from the closed run

    assert [offset for offset, _ in events] == list(range(len(events)))
    assert [e.model_dump(exclude={"record": {"requested_at"}}) for _, e in events] == [
        {"type": "state", "state": "starting", "detail": "resolving the agent"},
        {"type": "message", "role": "user", "text": "1 + 2?", "message_id": "m1"},
        {"type": "state", "state": "calling_model", "detail": "calling model scripted:script, iteration 1"},
        {
            "type": "model_call_started",
            "model_call": 1,
            "model": "scripted:script",
            "iteration": 1,
            "tools": True,
        },
        {
            "type": "model_call_finished",
            "model_call": 1,
            "text": "",
            "tool_calls": [
                {
                    "id": "call_1_0",
                    "name": "add",
                    "arguments": {"a": 1, "b": 2},
                    "arguments_error": None,
                    "raw_arguments": None,
                }
            ],
            "usage": {"input_tokens": 10, "output_tokens": 5},
            "finish_reason": "tool_calls",
        },
        {"type": "state", "state": "running_tools", "detail": "running tools: add"},
        {"type": "tool_call_started", "call_id": "call_1_0", "tool": "add", "arguments": {"a": 1, "b": 2}},
        {
            "type": "tool_call_finished",
            "call_id": "call_1_0",
            "tool": "add",
            "content": "3",
            "is_error": False,
        },
        {"type": "state", "state": "calling_model", "detail": "calling model scripted:script, iteration 2"},
        {
            "type": "model_call_started",
            "model_call": 2,
            "model": "scripted:script",
            "iteration": 2,
            "tools": True,
        },
        {
            "type": "model_call_finished",
            "model_call": 2,
            "text": "The sum is 3.",
            "tool_calls": [],
            "usage": {"input_tokens": 10, "output_tokens": 5},
            "finish_reason": "stop",
        },
        {
            "type": "reply",
            "reply": {
                "message_id": "m1",
                "text": "The sum is 3.",
                "stop_reason": "completed",
                "iterations": 2,
                "truncated": False,
                "output": None,
                "model": None,
            },
        },
        {"type": "state", "state": "calling_model", "detail": "answered m1: completed"},
        {"type": "state", "state": "completed", "detail": "finished: answered"},
        {"type": "end", "outcome": "completed", "detail": "finished: answered"},
    ]


async def test_a_continue_as_new_carries_only_the_newest_events(env: Env) -> None:
    def agent(carried: int) -> AgentSpec:
        return scripted_agent(
            step("", ("add", {"a": 1, "b": 2})),
            step("", ("add", {"a": 3, "b": 4})),
            step("The sum is {last_result}."),
            continue_as_new_after=1,
            carried_events=carried,
        )

    whole = await env.start(conversation(agent(500), prompt="sums"))
    kept = await env.start(conversation(agent(3), prompt="sums"))
    assert (await whole.result()).runs == (await kept.result()).runs == 4
    everything = await _all(env.client, whole.id)
    tail = await _all(env.client, kept.id)  # the closed last run: what it carried, then its own

    assert [offset for offset, _ in everything] == list(range(len(everything)))
    # The last run carried the three newest events (16-18: the answer, then its state) and
    # published two more: the same offsets and events as the conversation that carried them all.
    assert [offset for offset, _ in tail] == [16, 17, 18, 19, 20]
    assert tail == everything[16:]


async def test_a_call_made_after_a_continue_as_new_names_the_iteration_of_its_turn(env: Env) -> None:
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})),
        step("The sum is {last_result}."),
        max_iterations=1,  # the second call is the final answer's, in the second run
        continue_as_new_after=1,  # a run after each model call, and the last one that closes
    )
    agent.model.fallback = ["scripted:backup"]  # so each model call's tries are recorded
    handle = await env.start(conversation(agent))
    result = await handle.result()

    assert (result.runs, result.stop_reason, result.final_text) == (
        3,
        "max_iterations_reached",
        "The sum is 3.",
    )
    assert [(a.model_call, a.iteration) for a in result.model_attempts] == [(1, 1), (2, 1)]
    events = [e for _, e in await _all(env.client, handle.id)]
    assert [(e.model_call, e.iteration, e.tools) for e in events if isinstance(e, ModelCallStarted)] == [
        (1, 1, True),
        (2, 1, False),
    ]
    assert [e.detail for e in events if isinstance(e, StateChanged) and e.detail.startswith("calling")] == [
        "calling model scripted:script, iteration 1",
        "calling model scripted:script, iteration 1",
    ]


async def test_resume_at_an_offset_gets_exactly_the_missing_events_across_continue_as_new_and_a_kill(
    client: Client, worker_process: WorkerProcess
) -> None:
    worker = worker_process
    worker.start()
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})),
        ScriptStep(text=ANSWER, delay_seconds=4),
        continue_as_new_after=1,  # a new run after each model call
        model_call=CallPolicy(heartbeat_seconds=1, initial_retry_seconds=0.1),
    )
    agent.model.stream = True
    handle = await client.start_workflow(
        AgentWorkflow.run,
        conversation(agent),
        id=f"streams-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    before: list[tuple[int, Event]] = []
    async for offset, event in follow(client, handle.id):  # until the slow answer streams
        before.append((offset, event))
        if isinstance(event, TextDelta):
            break  # the subscriber goes away here
    worker.kill()  # mid-answer: the model call is retried on the next worker
    worker.start()

    after = await _all(client, handle.id, before[-1][0] + 1)
    result = await handle.result()
    everything = await _all(client, handle.id)

    assert before + after == everything
    assert [offset for offset, _ in everything] == list(range(len(everything)))
    assert (result.runs, result.final_text) == (3, ANSWER)
    deltas = [e for _, e in everything if isinstance(e, TextDelta)]
    assert {d.attempt for d in deltas} == {1, 2}  # streamed before the kill, and again after it
    shown, hows = _shown([e for _, e in everything])
    assert ANSWER.startswith(shown) and "restart" not in hows  # nothing repeated
    [finished] = [e for _, e in everything if isinstance(e, ModelCallFinished) and e.model_call == 2]
    assert finished.text == ANSWER


async def test_a_retried_streamed_model_call_repeats_no_text(
    server: EmbeddedServer, env: Env, fake: FakeProvider
) -> None:
    answer = openai_completion(ANSWER)
    # The first attempt breaks off mid-answer; the retry streams the same answer from the start.
    fake.queue(
        broken_off(openai_stream(answer, delay=0.25), openai_error_event("server_error", "oops"), after=10),
        openai_stream(answer, delay=0.1),
    )
    spec = AgentSpec(
        name="streamer",
        model=ModelSettings(provider="openai", model="gpt-4o-mini", stream=True),
        model_call=CallPolicy(initial_retry_seconds=0.1),
    )
    handle = await env.start(conversation(spec))
    events = [e for _, e in await _all(env.client, handle.id)]

    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert {d.attempt for d in deltas} == {1, 2}
    first = "".join(d.text for d in deltas if d.attempt == 1)
    assert first and ANSWER.startswith(first)
    shown, hows = _shown(events)
    assert ANSWER.startswith(shown) and len(shown) > len(first)
    assert set(hows) == {"append"}

    # `watch` follows the same rule: the text once, the retry going on where the first attempt
    # broke off (which it says), nothing replaced.
    code, out, err = await starter(server, "watch", handle.id)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    typed = [line for line in lines if line.startswith("agent (typing")]
    assert all(line.startswith("agent (typing)> ") for line in typed)
    assert "".join(line.removeprefix("agent (typing)> ") for line in typed) == shown
    assert lines[lines.index(typed[0]) + 1].startswith("[model call 1, attempt 1 broke off: ")
    assert lines[lines.index(typed[-1]) + 1] == f"[assistant] {ANSWER}"


@pytest.fixture
async def sse_url(server: EmbeddedServer, tmp_path: Path) -> AsyncIterator[str]:
    """``python starter.py serve --port N`` in a process of its own: its URL."""
    async with serving(server.address, tmp_path / "serve.log") as served:
        yield served.url


async def test_sse_endpoint_resumes_after_last_event_id_and_ends_with_the_conversation(
    env: Env, sse_url: str
) -> None:
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})), ScriptStep(text="The sum is {last_result}.", delay_seconds=2)
    )
    handle = await env.start(conversation(agent))
    url = f"{sse_url}/conversations/{handle.id}/events"
    async with httpx2.AsyncClient() as http:
        first = await read_sse(http, url, stop_after=3)  # then the connection drops
        rest = await read_sse(http, url, headers={"Last-Event-ID": first[-1][0]})
        everything = await read_sse(http, f"{url}?from=0")
        tail = await read_sse(http, f"{url}?from=5")
        bad = await http.get(f"{url}?from=soon")
        unknown = await http.get(f"{sse_url}/conversations/no-such-conversation/events")

    assert first + rest == everything
    assert [int(i) for i, _, _ in everything] == list(range(len(everything)))
    assert tail == everything[5:]
    assert everything[-1][:2] == (str(len(everything) - 1), "end")
    assert everything[-1][2] == '{"type":"end","outcome":"completed","detail":"finished: answered"}'
    assert (bad.status_code, bad.text) == (400, "from must be an event offset (0, 1, 2, ...), not 'soon'\n")
    assert unknown.status_code == 404
