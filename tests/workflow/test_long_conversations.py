"""docs/conversations-and-streams.md "Conversations that live for days" promises: continue-as-new
when Temporal suggests it (between steps, while idle, while waiting for a person), model calls that
carry only the new messages, large payloads in the payload store, and a failing hook counting as a
block."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sqlite3
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from durable_agents.activities.assembly import AgentActivities
from durable_agents.activities.hooks import default_hooks, hook
from durable_agents.activities.tools import default_registry
from durable_agents.client.conversations import start_conversation
from durable_agents.connection import AGENT_PROMPT
from durable_agents.converter import PAYLOAD_THRESHOLD
from durable_agents.settings import Settings
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.activity_io import HookContext, HookDecision, HookInvocation, ModelCallInput
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput, MessageInput
from durable_agents.workflows.config import ApprovalPolicy, HookConfig
from durable_agents.workflows.records import ApprovalSignal, Decision
from durable_agents.workflows.state import ConversationState
from tests.support.conversations import until_queued, until_state, wait_for_pending
from tests.support.history import activity_types, run_histories
from tests.support.servers import HISTORY_LENGTH, HISTORY_SIZE, start_dev_server
from tests.support.workers import Env, running_worker

pytestmark = pytest.mark.timeout(180)

SUGGEST_AFTER_EVENTS = 40
"""History length from which the servers below suggest continue-as-new (Temporal's default: 4096).
A conversation waiting for its first approval has some 30 events."""
SUGGEST_AFTER_BYTES = 30_000
"""History size from which one of them suggests it (default 4 MiB); a model call adds ~3.5 KB here."""


@pytest.fixture(
    params=[
        (HISTORY_LENGTH, SUGGEST_AFTER_EVENTS),
        (HISTORY_SIZE, SUGGEST_AFTER_BYTES),
    ],
    ids=["history-length", "history-size"],
)
async def suggesting(request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    """A dev server of its own that suggests continue-as-new early (by length, or by size)."""
    env = await start_dev_server(request.param)
    yield env.client
    await env.shutdown()


@pytest.fixture
async def suggesting_by_length() -> AsyncIterator[Client]:
    env = await start_dev_server((HISTORY_LENGTH, SUGGEST_AFTER_EVENTS))
    yield env.client
    await env.shutdown()


async def _carried(client: Client, history: WorkflowHistory) -> ConversationState:
    """The state a run handed to the next: its continue-as-new event's input, decoded."""
    attributes = history.events[-1].workflow_execution_continued_as_new_event_attributes
    [carried] = await client.data_converter.decode(attributes.input.payloads, [ConversationInput])
    assert carried.state is not None
    return carried.state


def _scheduled(history: WorkflowHistory) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


async def _new_run(handle: WorkflowHandle, first_run_id: str | None) -> str:
    """Wait until the conversation runs in a run after ``first_run_id``; return that run's id."""
    for _ in range(400):
        if (run_id := (await handle.describe()).run_id) != first_run_id:
            return run_id
        await asyncio.sleep(0.025)
    raise AssertionError("the conversation never continued as new")


async def test_continues_as_new_between_steps_when_temporal_suggests_it(
    suggesting: Client, tmp_path: Path
) -> None:
    client, queue = suggesting, f"suggest-{uuid.uuid4().hex[:8]}"
    agent = scripted_agent(
        *[step(f"step {i}", ("add", {"a": i, "b": 100})) for i in range(1, 11)],
        step("done: {last_result}"),
        max_iterations=12,
    )  # continue_as_new_after unset: only Temporal's suggestion rolls it over
    async with running_worker(client, tmp_path, task_queue=queue) as worker:
        handle = await worker.start(conversation(agent))
        result = await handle.result()
        history = await client.get_workflow_handle_for(AgentWorkflow.run, handle.id).query(
            AgentWorkflow.history
        )

    runs = await run_histories(client, handle.id, handle.first_execution_run_id)
    assert len(runs) == result.runs >= 2
    assert result.final_text == "done: 110"
    assert [c.content for c in result.tool_calls] == [str(i + 100) for i in range(1, 11)]
    # Each model call and each tool call ran in exactly one run: nothing repeated at a hand-over.
    scheduled = [name for run in runs for name in _scheduled(run)]
    assert scheduled.count("durable_agents.call_model") == result.model_calls == 11
    assert scheduled.count("durable_agents.run_tool") == 10
    assert history.messages == result.messages
    # A run rolls over only where nothing is in flight: its last activity finished before.
    for run in runs[:-1]:
        carried = await _carried(client, run)
        assert carried.turn is not None and carried.turn.message_id == "m1"  # mid-turn, between steps


async def test_continues_as_new_while_idle(suggesting_by_length: Client, tmp_path: Path) -> None:
    client, queue = suggesting_by_length, f"idle-{uuid.uuid4().hex[:8]}"
    agent = scripted_agent(step("hello {user}"), step("again {user}"), chat=True)
    async with running_worker(client, tmp_path, task_queue=queue) as worker:
        handle = await start_conversation(
            client, conversation(agent, "one"), id=queue, task_queue=worker.task_queue
        )
        latest = client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
        await until_state(latest, "idle")
        # Decisions for calls nobody asked about are dropped, but each grows the idle run's history
        # until Temporal suggests a new run.
        sent = 0
        while (await latest.describe()).run_id == handle.first_execution_run_id:
            assert sent < 20, "the idle conversation never continued as new"
            await latest.signal(AgentWorkflow.reject, ApprovalSignal(call_id=f"nobody_{sent}"))
            sent += 1
            await asyncio.sleep(0.05)
        await _new_run(latest, handle.first_execution_run_id)
        await until_state(latest, "idle")
        assert (await latest.describe()).typed_search_attributes.get(AGENT_PROMPT) == ["one"]  # carried over
        status = await latest.query(AgentWorkflow.status)
        reply = await latest.execute_update(AgentWorkflow.send_message, MessageInput(text="two"))
        await latest.signal(AgentWorkflow.end)
        result = await latest.result()

    runs = await run_histories(client, handle.id, handle.first_execution_run_id)
    carried = await _carried(client, runs[0])
    assert carried.turn is None and carried.queue == []  # it rolled over with nothing to do
    assert [r.text for r in carried.replies] == ["hello one"]
    assert _scheduled(runs[1]) == ["durable_agents.call_model"]  # the new run did not start anything again
    assert (status.run, status.model_calls) == (2, 1)
    assert (reply.message_id, reply.text) == ("m2", "again two")
    assert [r.text for r in result.replies] == ["hello one", "again two"]
    assert (result.runs, result.closed_by) == (2, "end_signal")


def _timers(history: WorkflowHistory) -> list[tuple[HistoryEvent, HistoryEvent]]:
    """Each timer started in the run, with the workflow task start that set it (its ``workflow.now()``)."""
    found, task_started = [], None
    for event in history.events:
        if event.HasField("workflow_task_started_event_attributes"):
            task_started = event
        elif event.HasField("timer_started_event_attributes"):
            assert task_started is not None
            found.append((event, task_started))
    return found


async def test_continues_as_new_while_waiting_for_a_person_carrying_everything(
    suggesting_by_length: Client, tmp_path: Path
) -> None:
    client, queue = suggesting_by_length, f"waiting-{uuid.uuid4().hex[:8]}"
    agent = scripted_agent(
        step("", ("write_file", {"path": "x.txt", "content": "x"})),
        step("done: {last_result}"),
        *[step("and {user}") for _ in range(8)],
        tools=["write_file"],
        chat=True,
        hooks=HookConfig(pre_tool_use=["protect_dotfiles"]),
        approval=ApprovalPolicy(tool_deadlines={"write_file": 3600.0}),
    )
    async with running_worker(client, tmp_path, task_queue=queue) as worker:
        handle = await worker.start(conversation(agent, "first"))
        first_run = handle.first_execution_run_id
        [requested] = await wait_for_pending(handle)
        # Messages posted while the run waits for a person queue up and grow its history until
        # Temporal suggests a new run, which takes over the wait.
        latest = client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
        sent: list[str] = []
        while (await latest.describe()).run_id == first_run:
            assert len(sent) < 8, "Temporal never suggested continuing as new"
            sent.append(f"message {len(sent) + 2}")
            await latest.signal(AgentWorkflow.post_message, MessageInput(text=sent[-1]))
            await until_queued(latest, len(sent))
        await _new_run(latest, first_run)
        assert await wait_for_pending(latest) == [requested]
        decided = await latest.execute_update(
            AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="alice")
        )
        await latest.signal(AgentWorkflow.end)
        result = await latest.result()

    runs = await run_histories(client, handle.id, first_run)
    carried = await _carried(client, runs[0])
    assert carried.approvals == [requested]  # pending, with its deadline
    assert requested.state == "pending" and requested.deadline == requested.requested_at + timedelta(hours=1)
    assert [m.text for m in carried.queue] == sent
    assert [(h.target, h.hook, h.action) for h in carried.hooks] == [
        ("call_1_0", "protect_dotfiles", "allow")
    ]
    assert carried.turn is not None and [c.id for c in carried.turn.calls] == ["call_1_0"]
    assert "durable_agents.run_tool" not in _scheduled(runs[0])
    # The next run waits for what is left of the deadline, not for a fresh hour: to the millisecond,
    # rounded up, on every Python (3.12 on would round to the nearest, and time out early).
    [(timer, task_started)] = _timers(runs[1])
    left = timer.timer_started_event_attributes.start_to_fire_timeout.ToNanoseconds()
    now = datetime.fromtimestamp(task_started.event_time.ToNanoseconds() / 1e9, UTC)  # as workflow.now()
    assert round(left, -3) == math.ceil((requested.deadline - now) / timedelta(milliseconds=1)) * 1_000_000
    # The decision made in the new run applied to the call the first run asked about; the hook
    # was not asked again, and the queued messages were answered in order after it.
    assert (decided.state, decided.by, decided.via, decided.requested_at) == (
        "approved",
        "alice",
        "update",
        requested.requested_at,
    )
    assert [name for run in runs for name in _scheduled(run)].count("durable_agents.run_hook") == 1
    assert [(c.call_id, c.content) for c in result.tool_calls] == [("call_1_0", "Wrote 1 bytes to x.txt.")]
    assert [r.text for r in result.replies] == ["done: Wrote 1 bytes to x.txt.", *[f"and {m}" for m in sent]]
    assert [(h.target, h.hook, h.action) for h in result.hooks] == [("call_1_0", "protect_dotfiles", "allow")]


async def test_each_model_call_carries_only_the_messages_recorded_since_the_previous_one(env: Env) -> None:
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})),
        step("", ("multiply", {"a": 3, "b": 4})),
        step("first: {last_result}"),
        step("", ("subtract", {"a": 9, "b": 5})),
        step("second: {last_result} for {user}"),
        system_prompt="You add.",
        chat=True,
        continue_as_new_after=2,
    )
    handle = await env.start(conversation(agent, "start"))
    latest = env.client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
    await until_state(latest, "idle")
    await latest.execute_update(AgentWorkflow.send_message, MessageInput(text="more"))
    await latest.signal(AgentWorkflow.end)
    result = await latest.result()

    runs = await run_histories(env.client, handle.id, handle.first_execution_run_id)
    inputs: list[tuple[str, ModelCallInput]] = []
    for run in runs:
        for event in run.events:
            scheduled = event.activity_task_scheduled_event_attributes
            if (
                event.HasField("activity_task_scheduled_event_attributes")
                and scheduled.activity_type.name == "durable_agents.call_model"
            ):
                [one] = await env.client.data_converter.decode(scheduled.input.payloads, [ModelCallInput])
                inputs.append((run.run_id, one))
    assert len(runs) == result.runs >= 3
    assert len(inputs) == result.model_calls == 5
    # one key throughout: the first run's calls leave it to their run (whose key it is), later runs send it
    assert {(run == handle.first_execution_run_id, i.conversation_key) for run, i in inputs} == {
        (True, ""),
        (False, f"{handle.id}/{handle.first_execution_run_id}"),
    }
    sent: list = []
    for _, one in inputs:
        assert one.stored == len(sent)  # the store already holds everything sent before
        sent += one.request.messages
    assert [len(i.request.messages) for _, i in inputs] == [2, 2, 2, 2, 2]
    assert sent == result.messages[:-1]  # each message went to history once (the last answer: never)


def _payload_row(key: str) -> Payload:
    with sqlite3.connect(os.environ["AGENT_PAYLOAD_STORE"]) as db:
        [(data,)] = db.execute("SELECT data FROM payloads WHERE key = ?", (key,)).fetchall()
    return Payload.FromString(data)


def _reference_key(payload: Payload) -> str:
    """The payload store key a history payload refers to; AssertionError when it holds the data inline."""
    assert dict(payload.metadata) == {
        "encoding": b"json/protobuf",
        "messageType": b"temporal.api.sdk.v1.ExternalStorageReference",
    }
    reference = json.loads(payload.data)
    assert reference["driverName"] == "agent-sqlite"
    assert len(payload.external_payloads) == 1
    return reference["claimData"]["key"]


async def test_payloads_from_128_kib_go_to_the_payload_store_and_history_holds_a_reference(env: Env) -> None:
    big = "B" * (PAYLOAD_THRESHOLD + 4096)
    small = "s" * (PAYLOAD_THRESHOLD - 8192)
    agent = scripted_agent(step("got it"))
    handles = [await env.start(conversation(agent, prompt)) for prompt in (big, small)]
    results = [await h.result() for h in handles]
    assert [r.final_text for r in results] == ["got it", "got it"]

    big_history, small_history = [await h.fetch_history() for h in handles]
    started = big_history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    assert big.encode() not in started.SerializeToString()
    assert started.external_payloads[0].size_bytes >= PAYLOAD_THRESHOLD
    stored = _payload_row(_reference_key(started))
    assert json.loads(stored.data)["prompt"] == big
    # The model call's input (the prompt as a new message) and the result are references too.
    model_input = next(
        e.activity_task_scheduled_event_attributes.input.payloads[0]
        for e in big_history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "durable_agents.call_model"
    )
    assert json.loads(_payload_row(_reference_key(model_input)).data)["request"]["messages"][0]["text"] == big
    completed = big_history.events[-1].workflow_execution_completed_event_attributes.result.payloads[0]
    assert json.loads(_payload_row(_reference_key(completed)).data)["messages"][0]["text"] == big
    # Below the threshold, the payload stays in history.
    inline = small_history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    assert inline.metadata["encoding"] == b"json/plain"
    assert json.loads(inline.data)["prompt"] == small


@hook("user_prompt_submit")
def moderation_down(text: str, ctx: HookContext) -> HookDecision | None:
    """A moderation hook whose service is down."""
    raise ConnectionError("moderation service unreachable")


@hook("pre_tool_use")
def guard(tool: str, arguments: dict, ctx: HookContext) -> HookDecision | None:
    """Allows everything (when its activity gets to run)."""
    return None


async def test_a_hook_that_raises_blocks_the_message(client: Client, tmp_path: Path) -> None:
    agent = scripted_agent(step("never said"), hooks=HookConfig(user_prompt_submit=["moderation_down"]))
    async with running_worker(client, tmp_path, hooks=default_hooks(moderation_down)) as worker:
        handle = await worker.start(conversation(agent, "hello"))
        result = await handle.result()
    reason = "hook moderation_down failed: ConnectionError: moderation service unreachable"
    assert (result.final_text, result.stop_reason) == (
        f"Message blocked by hook moderation_down: {reason}",
        "blocked_by_hook",
    )
    assert [(h.event, h.action, h.reason) for h in result.hooks] == [("user_prompt_submit", "block", reason)]
    assert "durable_agents.call_model" not in await activity_types(handle)


async def test_a_hook_whose_activity_fails_blocks_the_call(client: Client, tmp_path: Path) -> None:
    """The hook activity itself fails (here: every attempt, non-retryably): the call is blocked."""

    @activity.defn(name="durable_agents.run_hook")
    async def failing_run_hook(invocation: HookInvocation) -> HookDecision:
        raise ApplicationError("hook worker lost its configuration", non_retryable=True)

    queue = f"hooks-{uuid.uuid4().hex[:8]}"
    registry = default_registry()
    stores = Settings.from_env().stores
    real = AgentActivities(registry, {}, workspace_root=tmp_path, hooks=default_hooks(guard), stores=stores)
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})), step("{last_result}"), hooks=HookConfig(pre_tool_use=["guard"])
    )
    async with Worker(
        client,
        task_queue=queue,
        workflows=[AgentWorkflow],
        activities=[real.resolve_agent, real.call_model, real.run_tool, failing_run_hook],
    ):
        handle = await client.start_workflow(
            AgentWorkflow.run, conversation(agent), id=f"hooks-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        result = await handle.result()
    reason = "hook guard failed: hook worker lost its configuration"
    assert result.final_text == f"Blocked by hook guard: {reason}"
    assert [(h.event, h.target, h.action, h.reason) for h in result.hooks] == [
        ("pre_tool_use", "call_1_0", "block", reason)
    ]
    assert "durable_agents.run_tool" not in await activity_types(handle)
