"""The standard protocols, from the same server and stream as our own format, read by the real
client libraries from npm run by node: AG-UI (``@ag-ui/client``) and the Vercel AI SDK's UI
message stream (the ``ai`` package, as ``useChat`` reads it)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from durable_agents.dev_server import EmbeddedServer
from tests.conftest import Env
from tests.serving import Served, node, npm_clients, serving
from workflows.agent import AgentWorkflow
from workflows.messages import AssistantMessage, Message, ToolResultMessage, UserMessage

pytestmark = pytest.mark.timeout(300)
QUESTION = "what is (12 + 30) * 2?"
REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
WRITTEN = {"path": "answer.txt", "content": "(12 + 30) * 2 = 84\n"}


@pytest.fixture
async def served(server: EmbeddedServer, env: Env, tmp_path: Path) -> AsyncIterator[Served]:
    """The server, starting conversations on the test worker's task queue."""
    async with serving(server.address, tmp_path / "serve.log", "--task-queue", env.task_queue) as found:
        yield found
    assert "Traceback" not in found.log.read_text()


TEXT = ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]
TOOL = ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]


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

    url = f"{served.url}/agents/demo/ag-ui"

    out = json.loads(await node(clients, "ag_ui_run.mjs", url, thread, QUESTION))

    assert out["interrupts"] == [{"id": "call_3_0", "reason": "tool_approval", "toolCallId": "call_3_0"}]
    assert [e for e in out["events"] if e != "STATE_SNAPSHOT"] == [
        "RUN_STARTED",
        *TEXT, *TOOL, *TOOL, "TOOL_CALL_RESULT", "TOOL_CALL_RESULT",  # add, list_files
        *TEXT, *TOOL, "TOOL_CALL_RESULT",  # multiply
        *TEXT, *TOOL, "CUSTOM:approval_requested", "RUN_FINISHED",  # write_file waits: an interrupt
        "RUN_STARTED", "CUSTOM:approval_decided", "TOOL_CALL_RESULT",  # resumed with the approval
        *TEXT, "RUN_FINISHED",
    ]  # fmt: skip
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


async def test_the_ai_package_reads_the_ui_message_stream_into_the_transcript(
    env: Env, served: Served
) -> None:
    clients = npm_clients()
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    api, decisions = f"{served.url}/agents/demo/chat", f"{served.url}/conversations/{chat}/decisions"

    message = json.loads(await node(clients, "ui_chat.mjs", api, chat, QUESTION, decisions))

    history = await env.client.get_workflow_handle(chat).query(AgentWorkflow.history)
    assert message["role"] == "assistant"
    shown = [p for p in message["parts"] if p["type"] in ("text", "dynamic-tool")]
    assert shown == _ui_parts(history.messages)
    assert [p["type"] for p in message["parts"]].count("step-start") == 4  # one per model call
    [approval] = [p for p in message["parts"] if p["type"] == "data-approval"]
    decided = (approval["id"], approval["data"]["state"], approval["data"]["by"])
    assert decided == ("call_3_0", "approved", "ui")


def _readme_examples() -> dict[str, str]:
    """The README's ``// example: NAME`` code blocks, by name."""
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```js\n// example: (\w[\w-]*)[^\n]*\n(.*?)```", readme, re.DOTALL)
    return dict(blocks)


async def test_the_readme_examples_run(env: Env, served: Served) -> None:
    clients = npm_clients()
    examples = _readme_examples()
    assert sorted(examples) == ["ag-ui", "eventsource", "usechat"]
    ids = {"support-4711": f"readme-{uuid.uuid4().hex[:8]}", "support-4712": f"readme-{uuid.uuid4().hex[:8]}"}

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
        (clients / f"readme-{name}.mjs").write_text(prelude + runnable(examples[name]))
        outputs[name] = await node(clients, f"readme-{name}.mjs")
    curl = re.search(
        r"^curl -N http://127.0.0.1:8765/conversations/support-4711/events$", README, re.MULTILINE
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
