"""Each conversation (workflow id + first run id) has a workspace of its own, kept across its runs."""

from __future__ import annotations

import asyncio
import uuid

from durable_agents.stores.workspaces import folder_name
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import MessageInput
from durable_agents.workflows.config import ApprovalPolicy
from tests.support.conversations import workspace_of
from tests.support.workers import Env

FILE_TOOLS = ["write_file", "read_file", "list_files"]
AUTO = ApprovalPolicy(auto=["write_file"])


def _writer() -> object:
    return scripted_agent(
        step("", ("write_file", {"path": "n.txt", "content": "mine"})),
        step("{last_result}"),
        tools=FILE_TOOLS,
    )


def _reader() -> object:
    return scripted_agent(
        step("", ("read_file", {"path": "n.txt"}), ("list_files", {"path": "."})),
        step("{last_result}"),
        tools=FILE_TOOLS,
    )


async def test_ids_that_clean_up_alike_do_not_share_files(env: Env) -> None:
    suffix = uuid.uuid4().hex[:6]
    writer = await env.start(conversation(_writer(), approval=AUTO), workflow_id=f"alice_notes{suffix}")
    assert (await writer.result()).final_text == "Wrote 4 bytes to n.txt."
    reader = await env.start(conversation(_reader(), approval=AUTO), workflow_id=f"alice/notes{suffix}")
    result = await reader.result()

    assert [(c.content, c.is_error) for c in result.tool_calls] == [
        ("No file 'n.txt' in the workspace.", True),
        ("[]", False),
    ]
    assert (workspace_of(env.workspace, writer) / "n.txt").read_text() == "mine"
    assert workspace_of(env.workspace, reader) != workspace_of(env.workspace, writer)


async def test_a_new_conversation_reusing_a_finished_id_does_not_inherit_its_files(env: Env) -> None:
    workflow_id = f"reused-{uuid.uuid4().hex[:6]}"
    first = await env.start(conversation(_writer(), approval=AUTO), workflow_id=workflow_id)
    await first.result()
    second = await env.start(conversation(_reader(), approval=AUTO), workflow_id=workflow_id)
    result = await second.result()

    assert second.first_execution_run_id != first.first_execution_run_id
    assert [(c.content, c.is_error) for c in result.tool_calls] == [
        ("No file 'n.txt' in the workspace.", True),
        ("[]", False),
    ]


async def test_a_conversation_keeps_its_files_across_turns_and_continue_as_new(env: Env) -> None:
    agent = scripted_agent(
        step("", ("write_file", {"path": "notes/kept.txt", "content": "kept"})),
        step("written"),
        step("", ("read_file", {"path": "notes/kept.txt"}), ("list_files", {"path": "notes"})),
        step("{last_result}"),
        tools=FILE_TOOLS,
        chat=True,
        continue_as_new_after=2,
    )
    handle = await env.start(conversation(agent, approval=AUTO))
    first_run = handle.result_run_id
    for _ in range(200):  # two model calls: the run continues as new before the next turn
        if (await env.client.get_workflow_handle(handle.id).describe()).run_id != first_run:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the conversation never continued as new")
    latest = env.client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
    reply = await latest.execute_update(AgentWorkflow.send_message, MessageInput(text="read it back"))
    await latest.signal(AgentWorkflow.end)
    result = await latest.result()

    assert reply.text == 'kept, ["kept.txt"]'
    assert [c.content for c in result.tool_calls] == [
        "Wrote 4 bytes to notes/kept.txt.",
        "kept",
        '["kept.txt"]',
    ]
    assert result.runs >= 2
    assert (workspace_of(env.workspace, handle) / "notes" / "kept.txt").read_text() == "kept"


def test_folder_names_are_safe_and_distinct_even_where_case_is_ignored() -> None:
    keys = [
        "alice_notes/r1",
        "alice/notes/r1",
        "Alice_notes/r1",
        "alice_notes/r2",
        "../x/r1",
        "x" * 300 + "/r1",
    ]
    names = [folder_name(key) for key in keys]

    assert len({name.lower() for name in names}) == len(keys)
    assert names[0].startswith("alice_notes-") and names[1].startswith("alice_notes-")
    assert all(name[0] != "." and "/" not in name and len(name) <= 57 for name in names)
