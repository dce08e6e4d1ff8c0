"""What the Temporal Web UI shows of a conversation that waits: its current details (markdown, read
with the metadata query as the Web UI does, here through the real ``temporal`` CLI) name each waiting
call, its tool, its arguments (cut) and the command that decides it (issue 44, finding 7)."""

from __future__ import annotations

import json

from temporalio.client import WorkflowHandle

from durable_agents.dev_server import EmbeddedServer
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.records import ApprovalRecord, ClientCall, Decision
from durable_agents.workflows.waiting import details, waiting_line
from tests.support.cli import temporal
from tests.support.conversations import wait_for_pending
from tests.support.workers import Env


async def _current_details(server: EmbeddedServer, handle: WorkflowHandle) -> str:
    shown = await temporal(server, "workflow", "metadata", "-w", handle.id, "--output", "json")
    assert shown.returncode == 0, shown.stderr
    [metadata] = json.loads(shown.stdout)["queryResult"]
    return metadata["currentDetails"]


async def test_a_waiting_conversation_names_the_call_its_arguments_and_the_command_in_the_web_ui(
    server: EmbeddedServer, env: Env
) -> None:
    handle = await env.start(ConversationInput(prompt="What is (12 + 30) * 2? Save it.", agent="demo"))
    [waiting] = await wait_for_pending(handle)
    digest = waiting.arguments_digest

    assert await _current_details(server, handle) == (
        "awaiting approval: write_file (call_3_0)\n"
        "\n"
        "- Waiting for a person: write_file call call_3_0"
        ' `{"path": "answer.txt", "content": "(12 + 30) * 2 = 84\\n"}`'
        f" (digest {digest}); decide with: `python starter.py approve {handle.id} call_3_0 --digest {digest}`"
        f" (or `python starter.py reject {handle.id} call_3_0`)"
    )

    await handle.execute_update(AgentWorkflow.decide, Decision(call_id="call_3_0", approve=True, by="ann"))
    await handle.result()
    assert await _current_details(server, handle) == "finished: answered"


def test_arguments_are_cut_and_cannot_leave_their_code_span() -> None:
    call = ClientCall.model_validate(
        {"call_id": "call_1_0", "tool": "ask_user", "arguments": {"q": "`" + "a" * 100}, "requested_at": 0}
    )

    assert waiting_line("chat-1", call, markdown=True) == (
        f'Waiting for the client: ask_user call call_1_0 `{{"q": "\\u0060{"a" * 71}…`;'
        " answer it with: `python starter.py answer chat-1 call_1_0 TEXT`"
    )
    assert waiting_line("chat-1", call) == (
        f'Waiting for the client: ask_user call call_1_0 {{"q": "`{"a" * 71}…;'
        " answer it with: python starter.py answer chat-1 call_1_0 TEXT"
    )


def test_the_details_name_five_waiting_calls_and_count_the_rest() -> None:
    calls = [
        ApprovalRecord.model_validate(
            {
                "call_id": f"call_1_{i}",
                "tool": "write_file",
                "arguments": {},
                "arguments_digest": "d",
                "requested_at": 0,
            }
        )
        for i in range(7)
    ]
    shown = details("awaiting approval: ...", "c", calls).splitlines()

    assert shown[0:2] == ["awaiting approval: ...", ""]
    assert [line.split()[7] for line in shown[2:7]] == [f"call_1_{i}" for i in range(5)]
    assert shown[7:] == ["- and 2 more: `python starter.py pending`"]
    assert details("idle", "c", []) == "idle"
