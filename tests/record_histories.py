"""Record the checked-in histories that ``test_replay.py`` replays.

Run ``.venv/bin/python -m tests.record_histories NAME...`` to record the named shapes
after an intended change to the workflow's decisions (guarded with ``workflow.patched``).
Give new shapes or versions new names and keep the old files: running
conversations started on old code must keep replaying.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from durable_agents.dev_server import start_embedded_server
from durable_agents.live import follow
from durable_agents.plugin import build_worker
from durable_agents.testing import conversation, scripted_agent, step
from workflows.agent import AgentWorkflow
from workflows.api import ConversationInput, MessageInput
from workflows.config import AgentSpec, ApprovalPolicy, MCPServerConfig
from workflows.messages import (
    AssistantMessage,
    ModelSettings,
    ScriptedToolCall,
    ScriptStep,
    SystemMessage,
    UserMessage,
)
from workflows.records import ApprovalSignal, Decision, Revocation

HISTORIES = Path(__file__).parent / "histories"

WRITE = ("write_file", {"path": "out.txt", "content": "hi"})


def _streaming(agent: AgentSpec) -> AgentSpec:
    agent.model.stream = True
    return agent


def compacting() -> ConversationInput:
    """The first answer reports 505 tokens of a 100-token window: before the second message's model
    call, the first turn is summarised ("context-compaction")."""
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})),
        ScriptStep(text="{last_result}", input_tokens=500),
        step("you said {user}"),
    )
    agent.model.context_window = 100
    return conversation(agent)


SHAPES: dict[str, ConversationInput] = {
    "demo": ConversationInput(prompt="What is (12 + 30) * 2? Save the answer to answer.txt.", agent="demo"),
    "limit_final_answer": conversation(
        scripted_agent(*[step(f"step {i}", ("add", {"a": i, "b": 1})) for i in range(1, 5)]),
        max_iterations=2,
    ),
    "tool_errors": conversation(
        scripted_agent(
            step("", ("divide", {"a": 1, "b": 0}), ("nope", {}), ("add", {"a": "x", "b": 1})),
            step("{last_result}"),
        )
    ),
    # call_1_0 is approved by a signal sent with the start; call_1_1 times out after 1 s.
    "approval": conversation(
        scripted_agent(
            step("", WRITE, WRITE, ("add", {"a": 1, "b": 2})),
            step("{last_result}"),
            tools=["write_file", "add"],
        ),
        approval=ApprovalPolicy(tool_deadlines={"write_file": 1.0}),
    ),
    # A second message arrives with the start and is answered after the first.
    "follow_ups": conversation(
        scripted_agent(step("", ("add", {"a": 1, "b": 2})), step("{last_result}"), step("you said {user}"))
    ),
    # Tools from mcp-server-time over stdio (its tool list is recorded by list_mcp_tools).
    "mcp_time": conversation(
        scripted_agent(
            step(
                "",
                ("clock_convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "UTC"}),
            ),
            step("{last_result}"),
            tools=[],
            mcp_servers=[
                MCPServerConfig(
                    name="time", command="mcp-server-time", args=["--local-timezone", "UTC"], prefix="clock"
                )
            ],
        )
    ),
    # An approve signal for call_1_0 arrives with the start, before the call exists: it is dropped
    # (decisions bind to pending calls), and the call times out after 1 s.
    "approval_bound": conversation(
        scripted_agent(step("", WRITE), step("{last_result}"), tools=["write_file"]),
        approval=ApprovalPolicy(tool_deadlines={"write_file": 1.0}),
    ),
    # Cancelled a second into a slow model call, which hears it and stops.
    "cancelled": conversation(scripted_agent(ScriptStep(text="slow", delay_seconds=30))),
    # The agent resolved by a local activity, AgentName and AgentStatus in one upsert ("agent-lean-start").
    "lean_start": conversation(scripted_agent(step("", ("add", {"a": 1, "b": 2})), step("{last_result}"))),
    # The first run ends by continuing as new after one model call.
    "continue_as_new": conversation(
        scripted_agent(step("", ("add", {"a": 1, "b": 2})), step("{last_result}"), continue_as_new_after=1)
    ),
    # call_1_0 approved (decide) with edited arguments and "remember"; call_2_0, the same tool, runs
    # without asking while add (call_2_1) waits; write_file is revoked, add approved, and call_3_0 of
    # write_file waits again and is rejected.
    "approval_decisions": conversation(
        scripted_agent(
            step("", WRITE),
            step("", ("write_file", {"path": "b.txt", "content": "b"}), ("add", {"a": 1, "b": 2})),
            step("", ("write_file", {"path": "c.txt", "content": "c"})),
            step("{last_result}"),
            tools=["write_file", "add"],
        ),
        approval=ApprovalPolicy(require=["add"]),
    ),
    # A typed answer (output_schema): the first answer lacks a field and goes back; the second fits.
    "typed_answer": conversation(
        scripted_agent(
            step('{"city": "Paris"}'),
            step('{"city": "Paris", "celsius": 21.5}'),
            tools=[],
            output_schema={
                "type": "object",
                "required": ["city", "celsius"],
                "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
            },
        )
    ),
    # Model fallback: the model "broken" fails the first call for good, "backup" answers it; "broken"
    # answers the second.
    "model_fallback": conversation(
        AgentSpec(
            name="test-agent",
            model=ModelSettings(
                provider="scripted",
                model="broken",
                fallback=["scripted:backup"],
                script=[
                    ScriptStep(
                        tool_calls=[ScriptedToolCall(name="add", arguments={"a": 1, "b": 2})],
                        fails_on=["broken"],
                    ),
                    ScriptStep(text="{last_result}"),
                ],
            ),
            tools=["add"],
        )
    ),
    # Started without a prompt by update-with-start, whose send_message carries the first message.
    "update_with_start": ConversationInput(
        await_first_message=True, agent_spec=scripted_agent(step("you said {user}"), tools=[])
    ),
    # A message arrives a second into a slow model call of an interrupting agent: the call is
    # cancelled, the first message answered as interrupted, and the model called again for both.
    "interrupted": conversation(
        scripted_agent(ScriptStep(text="slow", delay_seconds=3, repeat=2), tools=[]), interrupt=True
    ),
    # Followed on its event stream while it runs (poll updates); the first model call streams its
    # text (text delta signals from the model activity); the run hands its pollers over to the next.
    "streamed": conversation(
        _streaming(
            scripted_agent(
                step(
                    "Let me add these two numbers for you, carefully.", ("add", {"a": 1, "b": 2})
                ).model_copy(update={"delay_seconds": 2}),
                step("The sum is {last_result}."),
                continue_as_new_after=1,
            )
        )
    ),
    # agents/delegator.toml: its scribe runs as a child conversation (recorded as subagent_child) whose
    # write_file waits for approval, shown at the parent and approved there (DECIDE_THROUGH_PARENT).
    "subagent": ConversationInput(prompt="Save my note.", agent="delegator"),
    # The same, with the scribe's reports signed by the key its parent gave it ("subagent-report-key")
    # and carrying write_file's schema, and its call approved at the parent by decide with edited
    # arguments (recorded as subagent_decided_child too).
    "subagent_decided": ConversationInput(prompt="Save my note.", agent="delegator"),
    "compaction": compacting(),
    # A fork: it starts from an earlier conversation's first messages (system prompt included, so the
    # agent's own is not added) and asks a new question.
    "fork": ConversationInput(
        prompt="and 3 + 4?",
        agent_spec=scripted_agent(step("", ("add", {"a": 3, "b": 4})), step("{last_result}")),
        history=[
            SystemMessage(text="Be brief."),
            UserMessage(text="What is 1 + 2?"),
            AssistantMessage(text="3"),
        ],
    ),
}
DECISIONS: dict[str, list[tuple[str, str, BaseModel]]] = {
    "approval_decisions": [
        ("call_1_0", "decide", Decision(
            call_id="call_1_0", approve=True, by="recorder", remember=True,
            arguments={"path": "out.txt", "content": "edited"},
        )),
        ("call_2_1", "revoke", Revocation(tool="write_file", by="recorder")),
        ("call_2_1", "approve", ApprovalSignal(call_id="call_2_1", by="recorder")),
        ("call_3_0", "reject", ApprovalSignal(call_id="call_3_0", by="recorder", reason="enough files")),
    ],
}  # fmt: skip
"""Sent once the named call waits for a person: updates (decide, revoke) or signals."""
UPDATES = {"decide", "revoke"}
START_SIGNALS: dict[str, tuple[str, BaseModel]] = {
    "approval": ("approve", ApprovalSignal(call_id="call_1_0", by="recorder")),
    "follow_ups": ("post_message", MessageInput(text="second")),
    "compaction": ("post_message", MessageInput(text="second")),
    "approval_bound": ("approve", ApprovalSignal(call_id="call_1_0", by="too-early")),
}
CANCEL_AFTER: dict[str, float] = {"cancelled": 1.0}
UPDATE_WITH_START: dict[str, MessageInput] = {"update_with_start": MessageInput(text="hello")}
MESSAGE_AFTER: dict[str, tuple[float, MessageInput]] = {"interrupted": (1.0, MessageInput(text="never mind"))}
FOLLOWED = {"streamed"}
"""Shapes recorded with a subscriber following the event stream."""
DECIDE_THROUGH_PARENT: dict[str, str] = {"subagent": "call_1_0/call_1_0"}
DECIDE_UPDATE_THROUGH_PARENT: dict[str, Decision] = {
    "subagent_decided": Decision(
        call_id="call_1_0/call_1_0", approve=True, by="recorder",
        arguments={"path": "note.txt", "content": "buy oat milk\n"},
    )
}  # fmt: skip


async def record(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = await start_embedded_server(port=None, ui=False, db_file=Path(tmp) / "t.db")
        try:
            async with build_worker(
                server.client, task_queue="record", workspace_root=Path(tmp), allow_inline_mcp=True
            ):
                for name in names:
                    signal, payload = START_SIGNALS.get(name, (None, None))
                    if name in UPDATE_WITH_START:
                        start = WithStartWorkflowOperation(
                            AgentWorkflow.run,
                            SHAPES[name],
                            id=f"record-{name}",
                            task_queue="record",
                            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                        )
                        await server.client.execute_update_with_start_workflow(
                            AgentWorkflow.send_message,
                            UPDATE_WITH_START[name],
                            start_workflow_operation=start,
                        )
                        handle = await start.workflow_handle()
                    else:
                        handle = await server.client.start_workflow(
                            AgentWorkflow.run,
                            SHAPES[name],
                            id=f"record-{name}",
                            task_queue="record",
                            start_signal=signal,
                            start_signal_args=[payload] if payload else [],
                        )
                    if name in MESSAGE_AFTER:
                        delay, message = MESSAGE_AFTER[name]
                        await asyncio.sleep(delay)
                        await handle.signal(AgentWorkflow.post_message, message)
                    if name in FOLLOWED:
                        await _follow(server.client, handle.id)
                    if name in CANCEL_AFTER:
                        await asyncio.sleep(CANCEL_AFTER[name])
                        await handle.cancel(reason="recorded cancellation")
                    for call_id, handler, payload in DECISIONS.get(name, []):
                        while call_id not in [
                            p.call_id for p in await handle.query(AgentWorkflow.pending_approvals)
                        ]:
                            await asyncio.sleep(0.05)
                        if handler in UPDATES:
                            await handle.execute_update(handler, payload)
                        else:
                            await handle.signal(handler, payload)
                    if name in DECIDE_THROUGH_PARENT:
                        while not await handle.query(AgentWorkflow.pending_approvals):
                            await asyncio.sleep(0.1)
                        call_id = DECIDE_THROUGH_PARENT[name]
                        await handle.signal(
                            AgentWorkflow.approve, ApprovalSignal(call_id=call_id, by="recorder")
                        )
                    if name in DECIDE_UPDATE_THROUGH_PARENT:
                        while not await handle.query(AgentWorkflow.pending_approvals):
                            await asyncio.sleep(0.1)
                        await handle.execute_update(AgentWorkflow.decide, DECIDE_UPDATE_THROUGH_PARENT[name])
                    await handle.result()  # follows continue-as-new to the end
                    first_run = server.client.get_workflow_handle(handle.id, run_id=handle.result_run_id)
                    history = await first_run.fetch_history()
                    (HISTORIES / f"{name}.json").write_text(history.to_json())
                    print(f"wrote {HISTORIES / name}.json")
                    for event in history.events:
                        if event.HasField("child_workflow_execution_started_event_attributes"):
                            child = event.child_workflow_execution_started_event_attributes.workflow_execution
                            child_history = await server.client.get_workflow_handle(
                                child.workflow_id
                            ).fetch_history()
                            (HISTORIES / f"{name}_child.json").write_text(child_history.to_json())
                            print(f"wrote {HISTORIES / name}_child.json")
        finally:
            await server.stop()


async def _follow(client: Client, workflow_id: str) -> None:
    """Follow the stream to its end, and check the offsets come in order."""
    offsets = [offset async for offset, _ in follow(client, workflow_id)]
    assert offsets == list(range(len(offsets))), offsets


if __name__ == "__main__":
    unknown = set(sys.argv[1:]) - set(SHAPES)
    if not sys.argv[1:] or unknown:
        print(f"usage: python -m tests.record_histories NAME... (shapes: {', '.join(SHAPES)})")
        os._exit(2)
    asyncio.run(record(sys.argv[1:]))
    sys.stdout.flush()
    os._exit(0)
