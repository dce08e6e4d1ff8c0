"""The standard protocols, from the same server and stream as our own format, read by the real
client libraries from npm run by node: AG-UI (``@ag-ui/client``) and the Vercel AI SDK's UI
message stream (the ``ai`` package, as ``useChat`` reads it). The conversations stream (the demo
agent with ``stream = true``): text and tool-call arguments come as the model writes them."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest

from durable_agents.activities.agent_files import load_agents
from durable_agents.activities.agent_names import DEFAULT_AGENTS_DIR
from durable_agents.activities.hooks import default_hooks
from durable_agents.activities.tools import ToolRegistry
from durable_agents.dev_server import EmbeddedServer
from durable_agents.serve.fanout import TextSoFar
from durable_agents.serve.protocols import AgUi, UiMessages, ag_ui_messages, ui_messages
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    MessageAdded,
    ModelCallFinished,
    ModelCallInterrupted,
    ModelCallStarted,
    TextDelta,
    ToolCallDelta,
    ToolCallFinished,
)
from durable_agents.workflows.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from durable_agents.workflows.records import ApprovalRecord
from tests.support.docs import docs_page
from tests.support.serving import Served, node, npm_clients, serving
from tests.support.workers import Env

pytestmark = pytest.mark.timeout(300)
QUESTION = "what is (12 + 30) * 2?"
WRITTEN = {"path": "answer.txt", "content": "(12 + 30) * 2 = 84\n"}


@pytest.fixture
def worker_agents(registry: ToolRegistry) -> dict[str, AgentSpec]:
    """The shipped agents, and ``demo-streamed``: the demo with its answers streamed, each over a
    second as a model types, not in one burst (a burst of more than ``net.unix.max_dgram_qlen``
    datagrams, 10 by default, outruns a busy reader: the channel then drops the rest, and
    ``model_call_finished`` brings it, out of the streamed order this test asserts)."""
    shipped = load_agents(DEFAULT_AGENTS_DIR, registry, default_hooks())
    demo = shipped["demo"]
    typed = [step.model_copy(update={"delay_seconds": 1.0}) for step in demo.model.script]
    model = demo.model.model_copy(update={"stream": True, "script": typed})
    return shipped | {"demo-streamed": demo.model_copy(update={"name": "demo-streamed", "model": model})}


@pytest.fixture
async def served(server: EmbeddedServer, env: Env, tmp_path: Path) -> AsyncIterator[Served]:
    """The server, starting conversations on the test worker's task queue."""
    options = ("--task-queue", env.task_queue)
    async with serving(server.address, tmp_path / "serve.log", *options, agents=["demo-streamed"]) as found:
        yield found
    assert "Traceback" not in found.log.read_text()


STREAMED = ("TEXT_MESSAGE_CONTENT", "TOOL_CALL_ARGS", "text-delta", "tool-input-delta")
"""The chunks a streamed text or argument text comes in, as many as the model's pieces."""


def _runs(types: list[str]) -> list[str]:
    """The types in order, each run of one streamed kind (``STREAMED``) as one."""
    return [t for i, t in enumerate(types) if not (t in STREAMED and i and types[i - 1] == t)]


def _ag_ui_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """The transcript as AG-UI messages (without their ids), the system prompt aside."""
    found: list[dict[str, Any]] = []
    for m in messages:
        match m:
            case UserMessage(text=text):
                found.append({"role": "user", "content": text})
            case AssistantMessage(text=text, tool_calls=calls):
                message: dict[str, Any] = {"role": "assistant", "content": text}
                if calls:
                    message["toolCalls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                        }
                        for c in calls
                    ]
                found.append(message)
            case ToolResultMessage(call_id=call_id, content=content):
                found.append({"role": "tool", "toolCallId": call_id, "content": content})
    return found


def _results_in_call_order(messages: list[dict]) -> list[dict]:
    """The results of parallel tool calls arrive as the calls finish; the transcript keeps them in
    the order of the calls."""
    ordered: list[dict] = []
    for message in messages:
        run = len(ordered)
        while run and ordered[run - 1].get("role") == "tool" and message.get("role") == "tool":
            run -= 1
        if message.get("role") == "tool" and run < len(ordered):
            tail = sorted([*ordered[run:], message], key=lambda m: m["toolCallId"])
            ordered[run:] = tail
        else:
            ordered.append(message)
    return ordered


async def test_ag_ui_client_runs_a_conversation_through_a_tool_call_and_an_approval(
    env: Env, served: Served
) -> None:
    clients = npm_clients()
    thread = f"agui-{uuid.uuid4().hex[:8]}"

    url = f"{served.url}/agents/demo-streamed/ag-ui"

    out = json.loads(await node(clients, "ag_ui_run.mjs", url, thread, QUESTION))

    assert out["interrupts"] == [{"id": "call_3_0", "reason": "tool_approval", "toolCallId": "call_3_0"}]
    events = [e for e in out["events"] if e != "STATE_SNAPSHOT"]
    text = ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]  # streamed; it ends with the model call
    call = ["TOOL_CALL_START", "TOOL_CALL_ARGS"]  # started by its first delta; ends with the model call
    assert _runs(events) == [
        "RUN_STARTED",
        *text, *call, *call, "TEXT_MESSAGE_END", "TOOL_CALL_END", "TOOL_CALL_END",  # add, list_files
        "TOOL_CALL_RESULT", "TOOL_CALL_RESULT",
        *text, *call, "TEXT_MESSAGE_END", "TOOL_CALL_END", "TOOL_CALL_RESULT",  # multiply
        *text, *call, "TEXT_MESSAGE_END", "TOOL_CALL_END",  # write_file waits: an interrupt
        "CUSTOM:approval_requested", "RUN_FINISHED",
        "RUN_STARTED", "CUSTOM:approval_decided", "TOOL_CALL_RESULT",  # resumed with the approval
        *text, "TEXT_MESSAGE_END", "RUN_FINISHED",
    ]  # fmt: skip
    assert events.count("TOOL_CALL_ARGS") > events.count("TOOL_CALL_START")  # arguments in pieces
    assert "STATE_SNAPSHOT" in out["events"] and set(out["state"]) == {"state", "detail"}
    history = await env.client.get_workflow_handle(thread).query(AgentWorkflow.history)
    received = [{k: v for k, v in m.items() if k != "id"} for m in out["messages"]]
    assert _results_in_call_order(received) == _ag_ui_messages(history.messages)
    assert out["result"]["text"] == history.messages[-1].text
    assert [(a.call_id, a.state, a.by) for a in history.approvals] == [("call_3_0", "approved", "ag-ui")]


def _ui_parts(messages: list[Message]) -> list[dict[str, Any]]:
    """The assistant's side of the transcript as UI message parts: text, and each tool call with its
    result (a tool the client does not define is a ``dynamic-tool``)."""
    results = {m.call_id: m for m in messages if isinstance(m, ToolResultMessage)}
    parts: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, AssistantMessage):
            if m.text:
                parts.append({"type": "text", "text": m.text, "state": "done"})
            for call in m.tool_calls:
                parts.append(
                    {
                        "type": "dynamic-tool",
                        "toolName": call.name,
                        "toolCallId": call.id,
                        "state": "output-available",
                        "input": call.arguments,
                        "output": results[call.id].content,
                    }
                )
    return parts


async def test_an_ag_ui_page_that_reconnects_mid_run_gets_the_snapshots_first_then_the_rest(
    env: Env, served: Served
) -> None:
    clients = npm_clients()
    thread, url = f"agui-again-{uuid.uuid4().hex[:8]}", f"{served.url}/agents/demo-streamed/ag-ui"

    out = json.loads(await node(clients, "ag_ui_reconnect.mjs", url, thread, QUESTION))

    events = out["events"]
    assert events[:3] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
    assert "TEXT_MESSAGE_START" in events and events[-2:] == ["CUSTOM:approval_requested", "RUN_FINISHED"]
    assert set(out["state"]) == {"state", "detail"}
    history = await env.client.get_workflow_handle(thread).query(AgentWorkflow.history)
    received = [{k: v for k, v in m.items() if k != "id"} for m in out["messages"]]
    assert _results_in_call_order(received) == _ag_ui_messages(history.messages)  # up to the approval
    assert out["interrupts"] == ["call_3_0"]
    assert out["later"] == out["messages"] and out["waiting"] == ["call_3_0"]  # all of it from the snapshot


async def test_the_ai_package_reads_the_ui_message_stream_into_the_transcript(
    env: Env, served: Served
) -> None:
    clients = npm_clients()
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    api, decisions = f"{served.url}/agents/demo-streamed/chat", f"{served.url}/conversations/{chat}/decisions"

    out = json.loads(await node(clients, "ui_chat.mjs", api, chat, QUESTION, decisions))
    first, message = out["first"], out["message"]

    history = await env.client.get_workflow_handle(chat).query(AgentWorkflow.history)
    assert message["role"] == "assistant" and message["id"] == first["id"] == f"{chat}-m1-reply"
    shown = [p for p in message["parts"] if p["type"] in ("text", "dynamic-tool")]
    expected = _ui_parts(history.messages)
    [written] = [p for p in expected if p.get("toolCallId") == "call_3_0"]
    written["approval"] = {"id": "call_3_0"}  # write_file: asked through the AI SDK's approval
    assert shown == expected
    [waiting] = [p for p in first["parts"] if p.get("toolCallId") == "call_3_0"]
    assert (waiting["state"], waiting["approval"]) == ("approval-requested", {"id": "call_3_0"})
    assert [p["type"] for p in message["parts"]].count("step-start") == 4  # one per model call
    [approval] = [p for p in message["parts"] if p["type"] == "data-approval"]
    decided = (approval["id"], approval["data"]["state"], approval["data"]["by"])
    assert decided == ("call_3_0", "approved", "ui")
    asked, rest = ([c for c in chunks if c != "data-state"] for chunks in out["chunks"])
    text = ["text-start", "text-delta"]  # streamed; it ends with the model call
    call = ["tool-input-start", "tool-input-delta"]  # started by its first delta
    until_approval = [
        "start",
        "start-step", *text, *call, *call,  # add, list_files
        "text-end", "tool-input-available", "tool-input-available", "finish-step",
        "tool-output-available", "tool-output-available",
        "start-step", *text, *call, "text-end", "tool-input-available", "finish-step",  # multiply
        "tool-output-available",
        "start-step", *text, *call, "text-end", "tool-input-available", "finish-step",  # write_file
        "tool-approval-request", "data-approval",
    ]  # fmt: skip
    assert _runs(asked) == [*until_approval, "finish"]
    assert asked.count("tool-input-delta") > asked.count("tool-input-start")  # arguments in pieces
    text, call = ["text-start", "text-end"], ["tool-input-start", "tool-input-available"]
    assert [t for t in rest if t not in STREAMED] == [  # the log's text and arguments, whole
        "start",
        "start-step", *text, *call, *call, "finish-step", "tool-output-available", "tool-output-available",
        "start-step", *text, *call, "finish-step", "tool-output-available",
        "start-step", *text, *call, "finish-step", "tool-approval-request", "data-approval",
        "data-approval", "tool-output-available",  # approved, written
        "start-step", *text, "finish-step",
        "finish",
    ]  # fmt: skip
    assert out["after"] is None  # nothing runs now: 204


ASKED = {"question": "Which city are you in?"}
"""What agents/asker.toml's model asks the user, with its client tool ``ask_user``."""
REFUSED = "not delivered: client tool call 'call_1_0' is delivered: nothing waits for its result"


async def _posted(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``data:`` chunks of a run's response (a frontend's request, by hand)."""
    async with httpx2.AsyncClient(timeout=30) as http:
        response = await http.post(url, json=body)
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


async def test_ag_ui_frontend_runs_a_client_tool_and_the_next_run_delivers_its_result(
    env: Env, served: Served
) -> None:
    clients = npm_clients()
    thread, url = f"agui-tool-{uuid.uuid4().hex[:8]}", f"{served.url}/agents/asker/ag-ui"

    question = "What's the weather?"
    out = json.loads(await node(clients, "ag_ui_client_tool.mjs", url, thread, question, "Lisbon"))

    assert out["asked"] == [{"id": "call_1_0", "arguments": ASKED}]
    assert [e for e in out["events"] if e != "STATE_SNAPSHOT"] == [
        "RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END",
        "CUSTOM:client_tool_requested", "RUN_FINISHED",  # the frontend runs ask_user
        "RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED",
    ]  # fmt: skip
    answered = [m for m in out["messages"] if m["role"] == "tool"]
    assert [(m["toolCallId"], m["content"]) for m in answered] == [("call_1_0", "Lisbon")]  # once
    assert out["result"]["text"] == "Then the weather in Lisbon it is."
    assert await env.client.get_workflow_handle(thread).query(AgentWorkflow.pending_client_calls) == []

    again = [{"id": "u1", "role": "user", "content": "hi"}, {**answered[0], "content": "Porto"}]
    chunks = await _posted(url, {"threadId": thread, "runId": "r3", "messages": again})
    assert chunks == [
        {"type": "RUN_STARTED", "threadId": thread, "runId": "r3"},
        {
            "type": "RUN_ERROR",
            "message": REFUSED,
        },
    ]


async def test_use_chat_runs_a_client_tool_with_add_tool_output_and_the_next_request_delivers_it(
    env: Env, served: Served
) -> None:
    clients = npm_clients()
    chat, api = f"chat-tool-{uuid.uuid4().hex[:8]}", f"{served.url}/agents/asker/chat"

    out = json.loads(await node(clients, "ui_client_tool.mjs", api, chat, "What's the weather?", "Porto"))

    assert out["asked"] == [{"toolCallId": "call_1_0", "toolName": "ask_user", "input": ASKED}]
    user, assistant = out["messages"]
    assert [p for p in assistant["parts"] if p["type"] != "step-start"] == [
        {
            "type": "dynamic-tool",
            "toolName": "ask_user",
            "toolCallId": "call_1_0",
            "state": "output-available",
            "input": ASKED,
            "output": "Porto",
        },
        {"type": "text", "text": "Then the weather in Porto it is.", "state": "done"},
    ]
    assert await env.client.get_workflow_handle(chat).query(AgentWorkflow.pending_client_calls) == []

    again = {"id": chat, "trigger": "submit-message", "messages": [user, assistant]}
    chunks = await _posted(api, again)
    assert chunks == [
        {"type": "start", "messageId": assistant["id"]},
        {
            "type": "error",
            "errorText": REFUSED,
        },
    ]


PAGE = "conversations-and-streams"
"""The docs page whose frontend examples run here."""


def _docs_examples() -> dict[str, str]:
    """The ``// example: NAME`` code blocks of docs/conversations-and-streams.md, by name."""
    blocks = re.findall(r"```js\n// example: (\w[\w-]*)[^\n]*\n(.*?)```", docs_page(PAGE), re.DOTALL)
    return dict(blocks)


async def test_the_docs_examples_run(env: Env, served: Served) -> None:
    clients = npm_clients()
    examples = _docs_examples()
    assert sorted(examples) == ["ag-ui", "eventsource", "usechat"]
    ids = {"support-4711": f"docs-{uuid.uuid4().hex[:8]}", "support-4712": f"docs-{uuid.uuid4().hex[:8]}"}

    def runnable(code: str) -> str:
        for old, new in [("http://127.0.0.1:8765", served.url), *ids.items()]:
            code = code.replace(old, new)
        return code

    answer = "(12 + 30) * 2 = 84. I saved it to answer.txt in this conversation's workspace."
    outputs = {}
    for name, prelude in [
        ("ag-ui", ""),
        ("eventsource", 'import { EventSource } from "eventsource";\n'),
        ("usechat", ""),
    ]:
        (clients / f"docs-{name}.mjs").write_text(prelude + runnable(examples[name]))
        outputs[name] = await node(clients, f"docs-{name}.mjs")
    curl = re.search(
        r"^curl -N http://127.0.0.1:8765/conversations/support-4711/events$", docs_page(PAGE), re.MULTILINE
    )
    assert curl is not None
    reading = await asyncio.create_subprocess_exec(
        *runnable(curl.group(0)).split(), stdout=asyncio.subprocess.PIPE
    )
    assert reading.stdout is not None
    events = []
    async for line in reading.stdout:  # until the reply: the chat stays open
        if line.startswith(b"event: "):
            events.append(line[7:].decode().strip())
            if events[-1] == "reply":
                break
    reading.kill()
    await reading.wait()

    assert outputs["ag-ui"] == f"waits: approve write_file({json.dumps(WRITTEN)})?\nreply: {answer}\n"
    assert outputs["eventsource"] == f"reply: {answer}\n"
    assert outputs["usechat"] == f"reply: {answer}\n"
    assert events[0] == "state" and events.count("approval_decided") == 1


def _call_delta(start: int, text: str, *, attempt: int = 1, call_id: str = "call_a") -> ToolCallDelta:
    return ToolCallDelta(
        model_call=1, attempt=attempt, index=0, call_id=call_id, name="add", start=start, text=text
    )


def _finished(call_id: str = "call_a") -> ModelCallFinished:
    call = ToolCall(id=call_id, name="add", arguments={"a": 1, "b": 2})
    return ModelCallFinished(model_call=1, text="", tool_calls=[call], finish_reason="tool_calls")


def _translated(events: list[Event]) -> tuple[list[dict], list[dict]]:
    ag_ui, ui = AgUi("t", "r"), UiMessages("m")
    return [c for e in events for c in ag_ui.translate(e)], [c for e in events for c in ui.translate(e)]


def test_a_streamed_tool_call_starts_on_its_first_delta_and_gets_each_piece_of_its_arguments_once() -> None:
    ag_ui, ui = _translated(
        [
            ModelCallStarted(model_call=1, model="m", iteration=1),
            _call_delta(0, ""),  # the id and name come first
            _call_delta(0, '{"a": 1'),
            _call_delta(0, '{"a": 1'),  # sent again from the start (a reader came): nothing new
            _call_delta(7, ', "b": 2}'),
            _finished(),
            _call_delta(16, " "),  # late: the call is over
        ]
    )
    assert ag_ui == [
        {
            "type": "TOOL_CALL_START",
            "toolCallId": "call_a",
            "toolCallName": "add",
            "parentMessageId": "t-m-1",
        },
        {"type": "TOOL_CALL_ARGS", "toolCallId": "call_a", "delta": '{"a": 1'},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "call_a", "delta": ', "b": 2}'},
        {"type": "TOOL_CALL_END", "toolCallId": "call_a"},
    ]
    assert ui == [
        {"type": "start-step"},
        {"type": "tool-input-start", "toolCallId": "call_a", "toolName": "add", "dynamic": True},
        {"type": "tool-input-delta", "toolCallId": "call_a", "inputTextDelta": '{"a": 1'},
        {"type": "tool-input-delta", "toolCallId": "call_a", "inputTextDelta": ', "b": 2}'},
        {
            "type": "tool-input-available",
            "toolCallId": "call_a",
            "toolName": "add",
            "input": {"a": 1, "b": 2},
            "dynamic": True,
        },
        {"type": "finish-step"},
    ]


def test_a_tool_call_gets_at_the_end_what_its_deltas_lacked_and_whole_if_its_start_never_came() -> None:
    lacking, _ = _translated([_call_delta(0, '{"a": 1'), _finished()])
    assert [c.get("delta") for c in lacking if c["type"] == "TOOL_CALL_ARGS"] == ['{"a": 1', ', "b": 2}']
    compact, _ = _translated([_call_delta(0, '{"a":1,"b":2}'), _finished()])  # the model's spacing
    assert [c["type"] for c in compact] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    missed, ui = _translated([_call_delta(7, ', "b": 2}'), _finished()])  # its start never reached the run
    assert missed == [
        {
            "type": "TOOL_CALL_START",
            "toolCallId": "call_a",
            "toolCallName": "add",
            "parentMessageId": "t-m-1",
        },
        {"type": "TOOL_CALL_ARGS", "toolCallId": "call_a", "delta": '{"a": 1, "b": 2}'},
        {"type": "TOOL_CALL_END", "toolCallId": "call_a"},
    ]
    assert [c["type"] for c in ui] == [
        "tool-input-start", "tool-input-delta", "tool-input-available", "finish-step"
    ]  # fmt: skip


def test_a_tool_call_a_retry_replaced_ends_as_replaced_and_an_interrupted_ones_ends() -> None:
    broke = ModelCallInterrupted(model_call=1, reason="attempt_failed", attempt=1, detail="oops")
    ag_ui, ui = _translated(
        [
            _call_delta(0, '{"a"'),
            broke,
            _call_delta(0, '{"a": 1', attempt=2, call_id="call_b"),
            _finished("call_b"),
        ]
    )
    assert [(c["type"], c.get("toolCallId") or c.get("name")) for c in ag_ui] == [
        ("TOOL_CALL_START", "call_a"),
        ("TOOL_CALL_ARGS", "call_a"),
        ("CUSTOM", "model_call_interrupted"),
        ("TOOL_CALL_END", "call_a"),
        ("CUSTOM", "tool_call_replaced"),
        ("TOOL_CALL_START", "call_b"),
        ("TOOL_CALL_ARGS", "call_b"),
        ("TOOL_CALL_ARGS", "call_b"),
        ("TOOL_CALL_END", "call_b"),
    ]
    [replaced] = [c for c in ui if c["type"] == "tool-input-error"]
    assert replaced == {
        "type": "tool-input-error",
        "toolCallId": "call_a",
        "toolName": "add",
        "input": '{"a"',
        "errorText": "not called: a retry of the model call replaced it",
        "dynamic": True,
    }

    over = ModelCallInterrupted(model_call=1, reason="interrupted", detail="a newer message arrived")
    ag_ui, ui = _translated([_call_delta(0, '{"a"'), over, _call_delta(4, ": 1")])
    assert [c["type"] for c in ag_ui] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "CUSTOM"]
    assert [c["type"] for c in ui] == [
        "start-step", "tool-input-start", "tool-input-delta", "tool-input-error",
        "data-model-call-interrupted", "finish-step",
    ]  # fmt: skip


def _turn() -> list[Event]:
    """A turn as the log keeps it: the user's message, a model call that asks for write_file, its
    approval, the tool's result and the answer's call (its text streamed: a delta in the log)."""
    call = ToolCall(id="call_1_0", name="write_file", arguments=WRITTEN)
    asked = ApprovalRecord(
        call_id="call_1_0", tool="write_file", arguments=WRITTEN, requested_at=datetime(2026, 1, 1)
    )
    return [
        MessageAdded(role="system", text="be careful"),
        MessageAdded(role="user", text="save it", message_id="m1"),
        ModelCallStarted(model_call=1, model="m", iteration=1),
        ModelCallFinished(model_call=1, text="Saving.", tool_calls=[call]),
        ApprovalRequested(record=asked),
        ApprovalDecided(record=asked.model_copy(update={"state": "approved", "by": "ann"})),
        ToolCallFinished(call_id="call_1_0", tool="write_file", content="Wrote 19 bytes."),
        ModelCallStarted(model_call=2, model="m", iteration=2),
        TextDelta(model_call=2, attempt=1, start=0, text="Saved"),
    ]


def test_a_chat_s_events_fold_into_the_ui_messages_a_reloaded_page_shows() -> None:
    [user, reply] = ui_messages("c", _turn())

    assert user == {"id": "c-m1", "role": "user", "parts": [{"type": "text", "text": "save it"}]}
    assert reply["id"] == "c-m1-reply" and reply["role"] == "assistant"
    [approval] = [p for p in reply["parts"] if p["type"] == "data-approval"]
    assert (approval["id"], approval["data"]["state"], approval["data"]["by"]) == (
        "call_1_0",
        "approved",
        "ann",
    )
    assert [p for p in reply["parts"] if p["type"] != "data-approval"] == [
        {"type": "step-start"},
        {"type": "text", "text": "Saving.", "state": "done"},
        {
            "type": "dynamic-tool",
            "toolName": "write_file",
            "toolCallId": "call_1_0",
            "state": "output-available",
            "input": WRITTEN,
            "approval": {"id": "call_1_0"},
            "output": "Wrote 19 bytes.",
        },
        {"type": "step-start"},
        {"type": "text", "text": "Saved", "state": "streaming"},  # the running call's text so far
    ]


def test_a_thread_s_events_fold_into_the_ag_ui_messages_of_its_snapshot() -> None:
    assert ag_ui_messages("t", _turn()) == [
        {"id": "t-m1", "role": "user", "content": "save it"},
        {
            "id": "t-m-1",
            "role": "assistant",
            "content": "Saving.",
            "toolCalls": [
                {
                    "id": "call_1_0",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": json.dumps(WRITTEN)},
                }
            ],
        },
        {"id": "call_1_0-result", "role": "tool", "toolCallId": "call_1_0", "content": "Wrote 19 bytes."},
        {"id": "t-m-2", "role": "assistant", "content": "Saved"},
    ]


def _delta(start: int, text: str, *, call: int = 1, attempt: int = 1) -> TextDelta:
    return TextDelta(model_call=call, attempt=attempt, start=start, text=text)


def test_the_text_so_far_is_the_newest_call_s_latest_attempt_and_unknown_once_a_delta_was_missed() -> None:
    so_far = TextSoFar(conversations=2)
    for key, delta in [("a", _delta(0, "Here ")), ("a", _delta(5, "is")), ("a", _delta(5, "was"))]:
        so_far.add(key, delta)
    assert [d.text for d in so_far.of("a")] == ["Here was"]  # a repeated batch replaces itself
    so_far.add("a", _delta(0, "Hi", attempt=2))
    so_far.add("a", _delta(8, " late", attempt=1))  # the attempt a retry replaced
    assert so_far.of("a") == [_delta(0, "Hi", attempt=2)]
    so_far.add("b", _delta(3, "missed its start"))
    assert so_far.of("b") == []
    so_far.add("b", _delta(0, "A new call", call=2))
    assert so_far.of("b") == [_delta(0, "A new call", call=2)]
    so_far.add("c", _delta(0, "the third"))
    assert so_far.of("a") == [] and [d.text for d in so_far.of("c")] == ["the third"]  # two kept
