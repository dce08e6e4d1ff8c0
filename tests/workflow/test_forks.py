"""Forks: a new conversation from the first N messages of another, linked to it by AgentForkOf."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid

import pytest
from pydantic import ValidationError

from durable_agents.cli import starter
from durable_agents.dev_server import EmbeddedServer, temporal_cli
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import AGENT_FORK_OF, ConversationInput, MessageInput
from durable_agents.workflows.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.support.cli import starter_cli
from tests.support.conversations import wait_for_pending
from tests.support.workers import Env


async def _origin(env: Env) -> str:
    """A finished conversation of 7 messages: system, first, tool call, result, answer, second, answer."""
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})),
        step("{last_result}"),
        step("you said {user}"),
        system_prompt="Hi.",
    )
    origin_id = f"origin-{uuid.uuid4().hex[:8]}"
    handle = await env.client.start_workflow(
        AgentWorkflow.run,
        conversation(agent, "first"),
        id=origin_id,
        task_queue=env.task_queue,
        start_signal="post_message",
        start_signal_args=[MessageInput(text="second")],
    )
    assert len((await handle.result()).messages) == 7
    return origin_id


async def test_a_fork_starts_from_the_first_n_messages_and_names_its_origin(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    origin_id = await _origin(env)
    origin = await env.client.get_workflow_handle_for(AgentWorkflow.run, origin_id).result()
    fork_id = f"{origin_id}-again"

    code, out, err = await starter_cli(env, capsys, "fork", origin_id, "--at", "6", "--id", fork_id, "--wait")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"Started {fork_id} (fork of {origin_id} at message 6)",
        f"Web UI: http://localhost:8233/namespaces/default/workflows/{fork_id}",
        "you said second",
        "-- stop reason: completed; iterations: 1; model calls: 1; tool calls: 0; tokens: 10 in / 5 out",
    ]
    fork = await env.client.get_workflow_handle_for(AgentWorkflow.run, fork_id).result()
    assert fork.messages[:6] == origin.messages[:6]
    assert fork.messages[6:] == [AssistantMessage(text="you said second")]
    assert (fork.model_calls, fork.usage.total_tokens) == (1, 15)  # a fresh budget

    described = await env.client.get_workflow_handle(fork_id).describe()
    assert described.typed_search_attributes.get(AGENT_FORK_OF) == origin_id
    query = f'AgentForkOf = "{origin_id}"'
    for _ in range(100):  # the visibility store catches up in moments
        found = [wf.id async for wf in env.client.list_workflows(query)]
        if found:
            break
        await asyncio.sleep(0.1)
    assert found == [fork_id]


async def test_a_fork_with_a_new_prompt_asks_it_after_message_n(env: Env) -> None:
    origin_id = await _origin(env)
    code = await starter.run(
        [
            "--task-queue",
            env.task_queue,
            "fork",
            origin_id,
            "--at",
            "5",
            "--prompt",
            "third",
            "--id",
            f"{origin_id}-b",
        ]
    )
    assert code == 0
    fork = await env.client.get_workflow_handle_for(AgentWorkflow.run, f"{origin_id}-b").result()
    origin = await env.client.get_workflow_handle_for(AgentWorkflow.run, origin_id).result()
    assert fork.messages[:5] == origin.messages[:5]
    assert fork.messages[5:] == [UserMessage(text="third"), AssistantMessage(text="you said third")]


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["--at", "3"],
            "message 3 asks for tool call call_1_0 (add) and its result would be cut off",
        ),
        (
            ["--at", "5"],
            "message 5 is not a user message (assistant); fork at a user message to ask it"
            " again, or give a new prompt",
        ),
        (
            ["--at", "6", "--prompt", "new"],
            "message 6 is a user message; fork there without a prompt to ask it again,"
            " or at 5 to ask yours instead",
        ),
        (["--at", "0"], "it has 7 messages; give 1 to 7"),
        (["--at", "8"], "it has 7 messages; give 1 to 7"),
    ],
)
async def test_a_fork_that_would_split_the_transcript_is_refused_in_one_line(
    env: Env, capsys: pytest.CaptureFixture[str], argv: list[str], error: str
) -> None:
    origin_id = await _origin(env)
    at = argv[1]
    code, out, err = await starter_cli(env, capsys, "fork", origin_id, *argv)
    assert (code, out, err) == (1, "", f"error: cannot fork {origin_id} at {at}: {error}\n")


def test_a_start_history_must_be_well_formed() -> None:
    call = AssistantMessage(tool_calls=[ToolCall(id="c1", name="add")])
    with pytest.raises(ValidationError) as info:
        ConversationInput(prompt="go", agent="demo", history=[UserMessage(text="x"), call])
    assert info.value.errors()[0]["msg"] == (
        "Value error, history: tool call(s) c1 of the last message have no result"
    )
    result = ToolResultMessage(call_id="c9", name="add", content="3")
    with pytest.raises(ValidationError) as info:
        ConversationInput(prompt="go", agent="demo", history=[UserMessage(text="x"), call, result])
    assert info.value.errors()[0]["msg"] == (
        "Value error, history: message 3: result of tool call c9, which nothing before asks for"
    )


async def test_a_conversation_started_with_the_temporal_cli_from_a_history(
    env: Env, server: EmbeddedServer
) -> None:
    """The temporal CLI line of docs/conversations-and-streams.md "Forks": a history, AgentForkOf,
    and the agent's own system prompt left out."""
    workflow_id = f"cli-fork-{uuid.uuid4().hex[:8]}"
    start = {
        "prompt": "What is 2 + 2?",
        "agent": "demo",
        "history": [{"kind": "system", "text": "Be brief."}],
    }
    command = [
        temporal_cli(), "workflow", "start", "--address", server.address, "--type", "AgentWorkflow",
        "--task-queue", env.task_queue, "--workflow-id", workflow_id,
        "--search-attribute", 'AgentForkOf="agent-demo-1a2b3c4d"', "--input", json.dumps(start),
    ]  # fmt: skip
    completed = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=30)
    assert completed.returncode == 0, completed.stderr

    handle = env.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
    await wait_for_pending(handle)  # the demo's write_file call
    history = await handle.query(AgentWorkflow.history)
    assert history.messages[:2] == [SystemMessage(text="Be brief."), UserMessage(text="What is 2 + 2?")]
    described = await handle.describe()
    assert described.typed_search_attributes.get(AGENT_FORK_OF) == "agent-demo-1a2b3c4d"
    await handle.terminate()
