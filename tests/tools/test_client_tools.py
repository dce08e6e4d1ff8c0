"""Client tools (workflows/client_tools.py): the conversation asks the client and waits durably for
its result; ``ask_user`` answered through the starter, results of the wrong shape refused, and a
deadline that passes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError

from durable_agents.client.live import follow
from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import AgentOverrides, ConversationInput
from durable_agents.workflows.config import ASK_USER, ClientToolConfig
from durable_agents.workflows.events import ClientToolRequested
from durable_agents.workflows.messages import ToolResultMessage
from durable_agents.workflows.records import ClientResult
from tests.support.cli import starter, starter_cli
from tests.support.processes import WorkerProcess
from tests.support.workers import Env


async def _waiting(handle: WorkflowHandle, *, continued: bool = False) -> None:
    """Until a client tool's call waits (``continued``: in a run after the first)."""
    for _ in range(600):
        later = (await handle.describe()).run_id != handle.first_execution_run_id
        with contextlib.suppress(WorkflowQueryFailedError):  # a new run's first task may not have run
            if (later or not continued) and await handle.query(AgentWorkflow.pending_client_calls):
                return
        await asyncio.sleep(0.05)
    raise AssertionError("no client tool call waits")


async def test_ask_user_is_answered_through_the_starter_after_a_worker_kill_and_a_continue_as_new(
    client: Client, server: EmbeddedServer, worker_process: WorkerProcess
) -> None:
    worker = worker_process
    worker.start()
    # agents/asker.toml, continuing as new after each model call: its question waits in the second run.
    handle = await client.start_workflow(
        AgentWorkflow.run,
        ConversationInput(
            prompt="What's the weather?", agent="asker", overrides=AgentOverrides(continue_as_new_after=1)
        ),
        id=f"asker-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    await _waiting(handle, continued=True)
    worker.kill()
    worker.start()

    code, out, err = await starter(
        server, "--task-queue", worker.task_queue, "answer", handle.id, "call_1_0", "Lisbon"
    )
    assert (code, err) == (0, "")
    assert out.strip() == f"ask_user call call_1_0 of {handle.id}: delivered"
    latest = client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
    result = await latest.result()
    assert result.final_text == "Then the weather in Lisbon it is."
    assert result.runs >= 2
    [call] = result.client_calls
    assert (call.tool, call.arguments, call.state, call.result) == (
        "ask_user",
        {"question": "Which city are you in?"},
        "delivered",
        "Lisbon",
    )
    requested = [e async for _, e in follow(client, handle.id) if isinstance(e, ClientToolRequested)]
    assert [e.call.call_id for e in requested] == ["call_1_0"]  # asked once, across runs and the kill

    code, _, err = await starter(server, "answer", handle.id, "call_1_0", "again")
    assert code == 1 and err.count("\n") == 1, err


CONFIRM = ClientToolConfig(
    name="confirm",
    description="Show the user a form to confirm.",
    result_schema={"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}},
)


async def test_a_result_of_the_wrong_shape_or_for_no_waiting_call_is_refused_with_one_line(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = scripted_agent(step("", ("confirm", {})), step("{last_result}"), tools=[])
    handle = await env.start(conversation(agent, client_tools=[CONFIRM]))
    await _waiting(handle)
    status = await handle.query(AgentWorkflow.status)
    assert (status.state, status.detail) == (
        "waiting_for_client",
        "waiting for the client: confirm (call_1_0)",
    )
    [call] = await handle.query(AgentWorkflow.pending_client_calls)
    assert call.deadline is not None
    for _ in range(100):  # AgentStatus reaches the visibility store a moment later
        _, out, _ = await starter_cli(env, capsys, "pending")
        if f"\n{handle.id} " in out:
            break
        await asyncio.sleep(0.1)
    section = out[out.index("\nWaiting for the client (starter.py answer ID CALL_ID TEXT):\n") :]
    header, *lines = section.strip().splitlines()[1:]
    assert header.split() == ["WORKFLOW", "ID", "CALL", "ID", "TOOL", "AGE", "DEADLINE", "ARGUMENTS"]
    [mine] = [line for line in lines if line.startswith(f"{handle.id} ")]
    assert mine.split()[:3] == [handle.id, "call_1_0", "confirm"]
    assert mine[header.index("DEADLINE") :] == f"{call.deadline:%Y-%m-%d %H:%M:%S}Z  {{}}"

    code, _, err = await starter_cli(env, capsys, "answer", handle.id, "call_1_0", "yes")
    assert code == 1
    assert err == (
        "error: not delivered: the result for confirm does not fit its result schema:"
        " $ must be of type object, not string\n"
    )
    code, _, err = await starter_cli(env, capsys, "answer", handle.id, "call_9_9", "yes")
    assert err == "error: not delivered: no client tool call 'call_9_9' waits (waiting: call_1_0)\n"
    code, _, _ = await starter_cli(env, capsys, "answer", handle.id, "call_1_0", '{"ok": true}', "--json")
    assert code == 0
    assert (await handle.result()).final_text == '{"ok": true}'


async def test_a_long_result_is_cut_as_a_tools_output_and_one_over_max_message_bytes_is_refused(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = scripted_agent(
        step("", ("ask_user", {"question": "Paste the log."})),
        step("{last_result}"),
        tools=[],
        client_tools=[ASK_USER],
        max_tool_output_chars=100,
        max_message_bytes=1000,
    )
    handle = await env.start(conversation(agent))
    await _waiting(handle)
    code, _, err = await starter_cli(env, capsys, "answer", handle.id, "call_1_0", "é" * 501)
    assert (code, err) == (
        1,
        "error: not delivered: the result for ask_user is 1002 bytes; this conversation takes at most 1000\n",
    )
    assert [c.state for c in await handle.query(AgentWorkflow.pending_client_calls)] == ["pending"]

    log = "".join(f"line {n:03}; " for n in range(90))  # 900 characters, 900 bytes
    cut = log[:100] + "\n[output truncated: 900 characters, the first 100 shown]"
    delivered = await handle.execute_update(
        AgentWorkflow.deliver_client_result, ClientResult(call_id="call_1_0", result=log)
    )
    assert (delivered.state, delivered.result) == ("delivered", cut)
    result = await handle.result()
    assert [(c.call_id, c.content, c.is_error) for c in result.tool_calls] == [("call_1_0", cut, False)]
    assert [m.content for m in result.messages if isinstance(m, ToolResultMessage)] == [cut]
    assert [c.result for c in result.client_calls] == [cut]
    assert result.final_text == cut
    # The refused result left nothing in history; the whole log is in its update's input alone (the
    # update's answer, the model's next call and the result hold it cut).
    events = (await handle.fetch_history()).events
    assert [e.event_type for e in events].count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED) == 1
    recorded = b"".join(e.SerializeToString() for e in events)
    assert "é".encode() not in recorded
    assert recorded.count(log.encode()) == 1
    assert json.dumps(cut)[1:-1].encode() in recorded


async def test_a_deadline_that_passes_tells_the_model_the_user_did_not_answer(env: Env) -> None:
    agent = scripted_agent(
        step("", ("ask_user", {"question": "Still there?"})), step("{last_result}"), tools=[]
    )
    agent.client_tools = [ASK_USER.model_copy(update={"deadline": 1.0})]
    result = await (await env.start(conversation(agent))).result()
    assert result.final_text == "The user did not answer: no result for ask_user came before its deadline."
    assert [(c.call_id, c.state) for c in result.client_calls] == [("call_1_0", "timed_out")]


async def test_a_deadline_is_waited_for_to_the_millisecond_rounded_up_on_every_python(env: Env) -> None:
    agent = scripted_agent(
        step("", ("ask_user", {"question": "Still there?"})), step("{last_result}"), tools=[]
    )
    agent.client_tools = [ASK_USER.model_copy(update={"deadline": 0.2505})]
    handle = await env.start(conversation(agent))
    assert [c.state for c in (await handle.result()).client_calls] == ["timed_out"]
    [timer] = [
        e.timer_started_event_attributes.start_to_fire_timeout
        for e in (await handle.fetch_history()).events
        if e.HasField("timer_started_event_attributes")
    ]
    assert round(timer.ToNanoseconds(), -3) == 251_000_000  # not 250.5 ms (3.11), nor 250 ms (3.12 on)


async def test_ask_user_is_asked_and_answered_in_starter_chat(env: Env, server: EmbeddedServer) -> None:
    code, out, err = await starter(
        server, "--task-queue", env.task_queue, "chat", "--agent", "asker",
        stdin="What's the weather?\nPorto\n/quit\n",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert "agent asks> Which city are you in?\n" in out
    assert "agent> Then the weather in Porto it is.\n" in out
