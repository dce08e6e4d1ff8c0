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

from durable_agents.dev_server import start_embedded_server
from durable_agents.plugin import build_worker
from durable_agents.testing import conversation, scripted_agent, step
from workflows.agent import AgentWorkflow
from workflows.api import ConversationInput, MessageInput
from workflows.config import ApprovalPolicy, MCPServerConfig
from workflows.messages import ScriptStep
from workflows.records import ApprovalSignal

HISTORIES = Path(__file__).parent / "histories"

WRITE = ("write_file", {"path": "out.txt", "content": "hi"})


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
    "compaction": compacting(),
}
START_SIGNALS: dict[str, tuple[str, BaseModel]] = {
    "approval": ("approve", ApprovalSignal(call_id="call_1_0", by="recorder")),
    "follow_ups": ("post_message", MessageInput(text="second")),
    "compaction": ("post_message", MessageInput(text="second")),
    "approval_bound": ("approve", ApprovalSignal(call_id="call_1_0", by="too-early")),
}
CANCEL_AFTER: dict[str, float] = {"cancelled": 1.0}


async def record(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = await start_embedded_server(port=None, ui=False, db_file=Path(tmp) / "t.db")
        try:
            async with build_worker(
                server.client, task_queue="record", workspace_root=Path(tmp), allow_inline_mcp=True
            ):
                for name in names:
                    signal, payload = START_SIGNALS.get(name, (None, None))
                    handle = await server.client.start_workflow(
                        AgentWorkflow.run,
                        SHAPES[name],
                        id=f"record-{name}",
                        task_queue="record",
                        start_signal=signal,
                        start_signal_args=[payload] if payload else [],
                    )
                    if name in CANCEL_AFTER:
                        await asyncio.sleep(CANCEL_AFTER[name])
                        await handle.cancel(reason="recorded cancellation")
                    await handle.result()  # follows continue-as-new to the end
                    first_run = server.client.get_workflow_handle(handle.id, run_id=handle.result_run_id)
                    history = await first_run.fetch_history()
                    (HISTORIES / f"{name}.json").write_text(history.to_json())
                    print(f"wrote {HISTORIES / name}.json")
        finally:
            await server.stop()


if __name__ == "__main__":
    unknown = set(sys.argv[1:]) - set(SHAPES)
    if not sys.argv[1:] or unknown:
        print(f"usage: python -m tests.record_histories NAME... (shapes: {', '.join(SHAPES)})")
        os._exit(2)
    asyncio.run(record(sys.argv[1:]))
    sys.stdout.flush()
    os._exit(0)
