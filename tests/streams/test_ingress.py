"""How messages come in: update-with-start for stateless frontends (one call sends to a conversation,
starting it if need be), and interrupting a turn (a newer message cancels the running model call)."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import WorkflowAlreadyStartedError

from durable_agents.activities.agent_files import load_agent_file
from durable_agents.activities.tools import ToolRegistry, default_registry, tool
from durable_agents.cli import starter
from durable_agents.client.conversations import conversation_result, send_or_start
from durable_agents.connection import AGENT_PROMPT
from durable_agents.dev_server import EmbeddedServer, temporal_cli
from durable_agents.serve.app import ServeOptions, app
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import AGENT_NAME, AGENT_STATUS, AgentOverrides, ConversationInput
from durable_agents.workflows.config import AgentSpec, ApprovalPolicy
from durable_agents.workflows.messages import (
    AssistantMessage,
    ModelResponse,
    ModelSettings,
    ScriptStep,
    ToolResultMessage,
    UserMessage,
)
from tests.support.cli import starter_cli
from tests.support.conversations import until_state, wait_for_pending
from tests.support.fake_provider import FakeProvider, openai_completion, openai_stream
from tests.support.history import activity_types, event_types
from tests.support.workers import Env, running_worker

ECHO = scripted_agent(ScriptStep(text="You said: {user}", repeat=100), tools=[])


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _runs(client: Client, workflow_id: str) -> list[str]:
    """Every run of the id, once the visibility store (eventually consistent) lists the latest run."""
    latest = (await client.get_workflow_handle(workflow_id).describe()).run_id
    for _ in range(600):
        runs = [wf.run_id async for wf in client.list_workflows(f'WorkflowId = "{workflow_id}"')]
        if latest in runs:
            return runs
        await asyncio.sleep(0.1)
    raise AssertionError(f"visibility never listed run {latest} of {workflow_id}")


def _said(messages: list) -> list[tuple[str, str]]:
    return [(type(m).__name__, m.text) for m in messages if isinstance(m, UserMessage | AssistantMessage)]


class TestUpdateWithStart:
    @pytest.fixture
    async def worker(self, client: Client, tmp_path: Path) -> AsyncIterator[str]:
        """A worker whose agent files are one echo agent, named "echo"."""
        task_queue = f"tq-{uuid.uuid4().hex[:10]}"
        echo = ECHO.model_copy(update={"name": "echo"})
        async with build_worker(
            client, task_queue=task_queue, agents={"echo": echo}, workspace_root=tmp_path
        ):
            yield task_queue

    async def test_a_new_id_starts_the_conversation_with_the_message_as_its_prompt_once(
        self, client: Client, worker: str
    ) -> None:
        workflow_id = _id("uws")
        reply = await send_or_start(client, workflow_id, "hello", agent="echo", task_queue=worker)

        assert (reply.message_id, reply.text, reply.stop_reason) == ("m1", "You said: hello", "completed")
        handle = client.get_workflow_handle(workflow_id)
        history = await handle.query(AgentWorkflow.history)
        assert _said(history.messages) == [("UserMessage", "hello"), ("AssistantMessage", "You said: hello")]
        described = await handle.describe()
        assert described.typed_search_attributes.get(AGENT_NAME) == "echo"
        assert await described.static_summary() == "echo: hello"
        status = await handle.query(AgentWorkflow.status)
        assert (status.state, status.queued_messages) == ("idle", 0)  # a chat: open for the next message
        start = await handle.fetch_history()
        attrs = start.events[0].workflow_execution_started_event_attributes
        started_with = {AGENT_NAME.name, AGENT_STATUS.name, AGENT_PROMPT.name}
        assert attrs.search_attributes.indexed_fields.keys() == started_with
        assert described.typed_search_attributes.get(AGENT_PROMPT) == ["hello"]  # the first message: a prompt

    async def test_an_existing_id_gets_the_message_appended_without_a_second_start(
        self, client: Client, worker: str
    ) -> None:
        workflow_id = _id("uws")
        await send_or_start(client, workflow_id, "one", agent="echo", task_queue=worker)
        reply = await send_or_start(client, workflow_id, "two", agent="echo", task_queue=worker)

        assert (reply.message_id, reply.text) == ("m2", "You said: two")
        handle = client.get_workflow_handle(workflow_id)
        history = await handle.query(AgentWorkflow.history)
        assert _said(history.messages) == [
            ("UserMessage", "one"),
            ("AssistantMessage", "You said: one"),
            ("UserMessage", "two"),
            ("AssistantMessage", "You said: two"),
        ]
        assert len(await _runs(client, workflow_id)) == 1
        started = [
            e
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
        ]
        assert len(started) == 1

    async def test_an_inline_agent_and_overrides_start_a_conversation_that_closes_after_its_answer(
        self, client: Client, worker: str
    ) -> None:
        workflow_id = _id("uws")
        reply = await send_or_start(
            client, workflow_id, "hi", agent=ECHO, overrides=AgentOverrides(chat=False), task_queue=worker
        )
        result = await client.get_workflow_handle_for(AgentWorkflow.run, workflow_id).result()

        assert reply.text == "You said: hi"
        assert (result.closed_by, [r.message_id for r in result.replies]) == ("answered", ["m1"])

    async def test_a_message_refused_while_the_conversation_continues_as_new_is_sent_to_the_next_run(
        self, client: Client, tmp_path: Path
    ) -> None:
        """serve's chat sends a message again when the conversation refuses it for its continue-as-new:
        the SDK hands that refusal back as an answered update, not as an error of the start."""
        agent = scripted_agent(
            step("Adding.", ("add", {"a": 1, "b": 2})),
            ScriptStep(text="You said: {user}", repeat=10),
            tools=["add"],
            chat=True,
            approval=ApprovalPolicy(require=["add"]),
            continue_as_new_after=1,  # wanted once the first model call is made, held by the open turn
        ).model_copy(update={"name": "rolling"})
        task_queue, workflow_id = f"tq-{uuid.uuid4().hex[:10]}", _id("uws")

        def said(id: str, text: str) -> dict:
            message = {"id": id, "role": "user", "parts": [{"type": "text", "text": text}]}
            return {"id": workflow_id, "trigger": "submit-message", "messages": [message]}

        serving = app(client, options=ServeOptions(task_queue, agents=lambda: {"rolling": "pinned"}))
        served = httpx2.ASGITransport(app=serving)
        async with (
            build_worker(client, task_queue=task_queue, agents={"rolling": agent}, workspace_root=tmp_path),
            httpx2.AsyncClient(transport=served, base_url="http://127.0.0.1") as http,
        ):
            first = asyncio.create_task(http.post("/agents/rolling/chat", json=said("u1", "one")))
            handle = client.get_workflow_handle(workflow_id)
            while not [w async for w in client.list_workflows(f'WorkflowId = "{workflow_id}"')]:
                await asyncio.sleep(0.05)  # the chat has started it
            [pending] = await wait_for_pending(handle, timeout=60)
            second = asyncio.create_task(http.post("/agents/rolling/chat", json=said("u2", "two")))
            await asyncio.sleep(0.5)  # refused at least once: the turn of "one" holds the run open
            await handle.execute_update(AgentWorkflow.decide, {"call_id": pending.call_id, "approve": True})
            answered = (await asyncio.wait_for(second, 120)).text
            await asyncio.wait_for(first, 120)

        chunks = [json.loads(line[6:]) for line in answered.splitlines() if line.startswith("data: {")]
        assert [c for c in chunks if c["type"] == "error"] == []  # not "...continuing as new; send again"
        assert [c["delta"] for c in chunks if c["type"] == "text-delta"] == ["You said: one", "You said: two"]

    async def test_a_closed_conversation_is_not_started_again(self, client: Client, worker: str) -> None:
        workflow_id = _id("uws")
        await send_or_start(
            client, workflow_id, "hi", agent="echo", overrides=AgentOverrides(chat=False), task_queue=worker
        )
        await client.get_workflow_handle(workflow_id).result()
        with pytest.raises(WorkflowAlreadyStartedError):
            await send_or_start(client, workflow_id, "again", agent="echo", task_queue=worker)
        assert len(await _runs(client, workflow_id)) == 1

    async def test_the_starter_sends_or_starts_with_agent(
        self, client: Client, worker: str, server: EmbeddedServer, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:  # fmt: skip
        monkeypatch.setenv("TEMPORAL_ADDRESS", server.address)
        workflow_id = _id("uws-cli")

        async def cli(*argv: str) -> tuple[int, str, str]:
            code = await starter.run(["--task-queue", worker, *argv])
            return code, *capsys.readouterr()

        assert await cli("send", workflow_id, "hello") == (
            1,
            "",
            f"error: {workflow_id}: workflow not found for ID: {workflow_id}\n",
        )
        assert await cli("send", workflow_id, "hello", "--agent", "echo") == (0, "You said: hello\n", "")
        assert await cli("send", workflow_id, "again", "--agent", "echo") == (0, "You said: again\n", "")
        assert await cli("send", workflow_id, "plain") == (0, "You said: plain\n", "")
        history = await client.get_workflow_handle(workflow_id).query(AgentWorkflow.history)
        assert [m.text for m in history.messages if isinstance(m, UserMessage)] == ["hello", "again", "plain"]
        assert len(await _runs(client, workflow_id)) == 1

        assert await cli("send", _id("uws-cli"), "hello", "--agent", "nosuch") == (
            1,
            "",
            "error: conversation failed: unknown agent 'nosuch'; this worker knows: echo\n",
        )
        await client.get_workflow_handle(workflow_id).signal(AgentWorkflow.end)
        await client.get_workflow_handle(workflow_id).result()
        assert await cli("send", workflow_id, "late", "--agent", "echo") == (
            1,
            "",
            f"error: {workflow_id} has closed; send to a new id\n",
        )

    async def test_the_temporal_cli_sends_or_starts_with_execute_update_with_start(
        self, client: Client, worker: str, server: EmbeddedServer
    ) -> None:
        workflow_id = _id("uws-temporal")

        async def send(text: str) -> subprocess.CompletedProcess[str]:
            command = [
                temporal_cli(), "workflow", "execute-update-with-start", "--address", server.address,
                "--output", "json",
                "--update-name", "send_message", "--update-input", json.dumps({"text": text}),
                "--workflow-id", workflow_id, "--type", "AgentWorkflow", "--task-queue", worker,
                "--id-conflict-policy", "UseExisting", "--id-reuse-policy", "RejectDuplicate",
                "--input", '{"agent": "echo", "await_first_message": true, "chat": true}',
                "--search-attribute", 'AgentName="echo"', "--search-attribute", 'AgentStatus="running"',
            ]  # fmt: skip
            run = subprocess.run
            return await asyncio.to_thread(run, command, capture_output=True, text=True, timeout=30)

        first, second = await send("one"), await send("two")

        assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
        one, two = json.loads(first.stdout), json.loads(second.stdout)
        assert [r["updateResult"]["text"] for r in (one, two)] == ["You said: one", "You said: two"]
        assert one["runId"] == two["runId"]
        history = await client.get_workflow_handle(workflow_id).query(AgentWorkflow.history)
        assert [m.text for m in history.messages if isinstance(m, UserMessage)] == ["one", "two"]
        assert len(await _runs(client, workflow_id)) == 1

    async def test_a_start_without_a_prompt_waits_for_its_first_message(
        self, client: Client, worker: str
    ) -> None:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            ConversationInput(agent="echo", await_first_message=True),
            id=_id("empty"),
            task_queue=worker,
        )
        while (await handle.query(AgentWorkflow.status)).state != "idle":
            await asyncio.sleep(0.05)
        await handle.signal(AgentWorkflow.post_message, {"text": "first"})
        result = await handle.result()  # echo is no chat: it closes once the first message is answered

        assert [(r.message_id, r.text) for r in result.replies] == [("m1", "You said: first")]


def test_a_start_input_has_a_prompt_or_awaits_the_first_message_not_both() -> None:
    with pytest.raises(ValueError, match=r"prompt\n  Field required \(or await_first_message: true\)"):
        ConversationInput(agent="echo")
    with pytest.raises(ValueError, match="give a prompt or await_first_message, not both"):
        ConversationInput(agent="echo", prompt="hi", await_first_message=True)


def test_interrupt_is_an_agent_file_setting(tmp_path: Path) -> None:
    path = tmp_path / "quick.toml"
    path.write_text('interrupt = true\n[model]\nprovider = "scripted"\nmodel = "s"\n')
    assert load_agent_file(path, default_registry()).interrupt is True


async def test_a_new_message_cancels_a_slow_model_call_and_is_answered(env: Env, fake: FakeProvider) -> None:
    fake.queue(
        openai_stream(openai_completion("a very long essay " * 20), delay=0.5),
        openai_stream(openai_completion("Short answer, about dogs.")),
    )
    agent = AgentSpec(
        name="interruptible",
        model=ModelSettings(provider="openai", model="gpt-4o-mini", stream=True),
        chat=True,
        interrupt=True,
    )
    handle = await env.start(conversation(agent, prompt="write an essay about cats"))
    while not fake.received:
        await asyncio.sleep(0.05)
    reply = await handle.execute_update(AgentWorkflow.send_message, {"text": "no, just a line about dogs"})

    assert (reply.message_id, reply.text, reply.stop_reason) == (
        "m2",
        "Short answer, about dogs.",
        "completed",
    )
    first, second = fake.received
    await asyncio.to_thread(first.ended.wait)
    assert first.disconnected, "the provider sent its whole answer: the call ran on"
    # The restarted call sees both messages, and nothing of the cancelled answer.
    assert [(m["role"], m["content"]) for m in second.body["messages"]] == [
        ("user", "write an essay about cats"),
        ("user", "no, just a line about dogs"),
    ]
    replies = await handle.query(AgentWorkflow.replies)
    assert [(r.message_id, r.stop_reason, r.text) for r in replies] == [
        ("m1", "interrupted", "[no answer: interrupted by a newer message]"),
        ("m2", "completed", "Short answer, about dogs."),
    ]
    events = await event_types(handle)
    assert events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED) == 1
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events
    status = await handle.query(AgentWorkflow.status)
    assert (status.model_calls, status.state) == (1, "idle")


class TestInterruptDuringTools:
    @pytest.fixture
    def gate(self) -> asyncio.Event:
        return asyncio.Event()

    @pytest.fixture
    def registry(self, gate: asyncio.Event) -> ToolRegistry:
        @tool
        async def wait_for_gate() -> str:
            """Wait until the test opens the gate."""
            await gate.wait()
            return "through"

        return default_registry(wait_for_gate)

    async def test_a_running_tool_finishes_and_its_result_is_kept(
        self, env: Env, gate: asyncio.Event
    ) -> None:
        agent = scripted_agent(
            step("Waiting.", ("wait_for_gate", {})),
            ScriptStep(text="You said: {user}", repeat=10),
            tools=["wait_for_gate"],
            chat=True,
        )
        handle = await env.start(conversation(agent, overrides=AgentOverrides(interrupt=True)))
        await _until_running(handle, "durable_agents.run_tool")
        update = asyncio.create_task(handle.execute_update(AgentWorkflow.send_message, {"text": "hurry up"}))
        while (await handle.query(AgentWorkflow.status)).queued_messages == 0:
            await asyncio.sleep(0.05)
        gate.set()
        reply = await update

        assert reply.text == "You said: hurry up"
        history = await handle.query(AgentWorkflow.history)
        assert [(c.name, c.content, c.is_error) for c in history.tool_calls] == [
            ("wait_for_gate", "through", False)
        ]
        assert [
            (type(m).__name__, getattr(m, "text", None) or getattr(m, "content", ""))
            for m in history.messages
        ] == [
            ("UserMessage", "go"),
            ("AssistantMessage", "Waiting."),
            ("ToolResultMessage", "through"),
            ("UserMessage", "hurry up"),
            ("AssistantMessage", "You said: hurry up"),
        ]
        replies = await handle.query(AgentWorkflow.replies)
        assert [(r.message_id, r.stop_reason, r.text) for r in replies] == [
            ("m1", "interrupted", "Waiting."),
            ("m2", "completed", "You said: hurry up"),
        ]
        assert await activity_types(handle) == [
            "durable_agents.resolve_agent",
            "durable_agents.call_model",
            "durable_agents.run_tool",
            "durable_agents.call_model",
        ]
        assert not any(isinstance(m, ToolResultMessage) and m.is_error for m in history.messages)


async def _until_running(handle: WorkflowHandle, activity: str) -> None:
    while not any(
        p.activity_type.name == activity for p in (await handle.describe()).raw_description.pending_activities
    ):
        await asyncio.sleep(0.05)


async def test_a_pending_approval_stays_pending_until_decided_then_the_new_message_is_answered(
    env: Env,
) -> None:
    agent = scripted_agent(
        step("Adding.", ("add", {"a": 1, "b": 2})),
        ScriptStep(text="You said: {user}", repeat=10),
        tools=["add"],
        chat=True,
        interrupt=True,
        approval=ApprovalPolicy(require=["add"]),
    )
    handle = await env.start(conversation(agent))
    [pending] = await wait_for_pending(handle)
    await handle.signal(AgentWorkflow.post_message, {"text": "also this"})
    while (await handle.query(AgentWorkflow.status)).queued_messages == 0:
        await asyncio.sleep(0.05)

    assert [r.call_id for r in await handle.query(AgentWorkflow.pending_approvals)] == [pending.call_id]
    await handle.execute_update(AgentWorkflow.decide, {"call_id": pending.call_id, "approve": True})
    while len(replies := await handle.query(AgentWorkflow.replies)) < 2:
        await asyncio.sleep(0.05)

    assert [(r.message_id, r.stop_reason, r.text) for r in replies] == [
        ("m1", "interrupted", "Adding."),
        ("m2", "completed", "You said: also this"),
    ]
    history = await handle.query(AgentWorkflow.history)
    assert [(c.name, c.content) for c in history.tool_calls] == [("add", "3")]
    assert [a.state for a in history.approvals] == ["approved"]


async def test_cancelling_the_conversation_during_an_interruptible_model_call_aborts_it(env: Env) -> None:
    agent = scripted_agent(ScriptStep(text="slow", delay_seconds=60), tools=[], interrupt=True)
    handle = await env.start(conversation(agent))
    await _until_running(handle, "durable_agents.call_model")
    await handle.cancel(reason="enough")
    result = await conversation_result(env.client, handle)

    assert (result.closed_by, result.detail) == ("cancelled", "cancelled: enough")
    assert [(r.message_id, r.stop_reason) for r in result.replies] == [("m1", "cancelled")]
    events = await event_types(handle)
    assert events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED) == 1
    assert events[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED


class _FailsWhenCancelled:
    """A model provider whose request, once cancelled, fails instead of ending as cancelled (as an
    SDK that turns an aborted request into its own error would)."""

    name = "scripted"

    def __init__(self) -> None:
        self.calling = asyncio.Event()

    async def complete(self, request: object, timeout: float, on_text: object = None) -> None:
        self.calling.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("connection reset while cancelling") from None

    async def aclose(self) -> None:
        pass


async def test_a_cancelled_interruptible_call_that_fails_leaves_no_unretrieved_task_exception(
    client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider = _FailsWhenCancelled()
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    agent = scripted_agent(step("never said"), tools=[], interrupt=True)
    async with running_worker(
        client, tmp_path, task_queue=task_queue, providers={"scripted": provider}
    ) as worker:
        handle = await worker.start(conversation(agent), workflow_id=_id("stubborn"))
        await provider.calling.wait()
        await handle.cancel(reason="enough")
        result = await conversation_result(client, handle)
        gc.collect()  # a task nobody awaited says so when it is collected

    assert (result.closed_by, result.detail) == ("cancelled", "cancelled: enough")
    events = await event_types(handle)
    assert events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED) == 1
    assert [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()] == []


class _FailsWhenCancelledThenAnswers(_FailsWhenCancelled):
    """The first request fails when cancelled; later ones answer."""

    async def complete(self, request: object, timeout: float, on_text: object = None) -> ModelResponse:
        if self.calling.is_set():
            return ModelResponse(message=AssistantMessage(text="Short."))
        return await super().complete(request, timeout, on_text)  # type: ignore[func-returns-value]


async def test_an_interrupted_call_that_fails_instead_of_cancelling_still_counts_as_interrupted(
    client: Client, tmp_path: Path
) -> None:
    provider = _FailsWhenCancelledThenAnswers()
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    agent = scripted_agent(step("never said"), tools=[], interrupt=True, chat=True)
    async with running_worker(
        client, tmp_path, task_queue=task_queue, providers={"scripted": provider}
    ) as worker:
        handle = await worker.start(conversation(agent), workflow_id=_id("stubborn"))
        await provider.calling.wait()
        reply = await handle.execute_update(AgentWorkflow.send_message, {"text": "just a line"})
        replies = await handle.query(AgentWorkflow.replies)
        await handle.signal(AgentWorkflow.end)
        result = await handle.result()

    assert (reply.text, reply.stop_reason) == ("Short.", "completed")
    assert [(r.message_id, r.stop_reason) for r in replies] == [("m1", "interrupted"), ("m2", "completed")]
    assert result.closed_by == "end_signal"
    events = await event_types(handle)
    assert events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED) == 1
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events


async def test_the_interrupt_signal_ends_the_running_turn_and_the_chat_takes_the_next_message(
    env: Env, fake: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.queue(
        openai_stream(openai_completion("a very long essay " * 20), delay=0.5),
        openai_stream(openai_completion("Short answer, about dogs.")),
    )
    # Without ``interrupt = true``: only the signal interrupts (``starter.py interrupt``).
    agent = AgentSpec(
        name="chatty", model=ModelSettings(provider="openai", model="gpt-4o-mini", stream=True), chat=True
    )
    handle = await env.start(conversation(agent, prompt="write an essay about cats"))
    while not fake.received:
        await asyncio.sleep(0.05)
    code, out, _ = await starter_cli(env, capsys, "interrupt", handle.id)
    said = (
        f"{handle.id}: its model call is cancelled and the turn answered 'interrupted' (a chat stays open).\n"
    )
    assert (code, out) == (0, said)
    await until_state(handle, "idle")
    [first] = fake.received
    await asyncio.to_thread(first.ended.wait)
    assert first.disconnected, "the provider sent its whole answer: the call ran on"
    assert [(r.message_id, r.stop_reason, r.text) for r in await handle.query(AgentWorkflow.replies)] == [
        ("m1", "interrupted", "[no answer: interrupted by the interrupt signal]"),
    ]

    reply = await handle.execute_update(AgentWorkflow.send_message, {"text": "just a line about dogs"})
    assert (reply.message_id, reply.stop_reason) == ("m2", "completed")
    assert reply.text == "Short answer, about dogs."
    events = await event_types(handle)
    assert events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED) == 1
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events
    # Nothing running: nothing to interrupt, and the chat goes on.
    await handle.signal(AgentWorkflow.interrupt)
    assert (await handle.query(AgentWorkflow.status)).state == "idle"
    await handle.signal(AgentWorkflow.end)
    assert (await handle.result()).closed_by == "end_signal"
