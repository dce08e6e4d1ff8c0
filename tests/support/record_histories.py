"""Record the checked-in histories that ``test_replay.py`` replays.

Run ``.venv/bin/python -m tests.support.record_histories NAME...`` to record the named shapes
after an intended change to the workflow's decisions (guarded with ``workflow.patched``).
Give new shapes or versions new names and keep the old files: running
conversations started on old code must keep replaying.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.testing import WorkflowEnvironment

from durable_agents.activities.tools import default_registry, tool
from durable_agents.client.live import follow
from durable_agents.connection import SEARCH_ATTRIBUTES
from durable_agents.converter import data_converter
from durable_agents.dev_server import dev_server_flags, start_embedded_server, temporal_cli
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows import wire
from durable_agents.workflows.agent import ROLLING_OVER, AgentWorkflow
from durable_agents.workflows.api import AgentOverrides, ConversationInput, MessageInput
from durable_agents.workflows.config import (
    ASK_USER,
    AgentSpec,
    ApprovalPolicy,
    CallPolicy,
    GuardrailConfig,
    GuardrailsConfig,
    JudgeConfig,
    MCPServerConfig,
    Rule,
)
from durable_agents.workflows.messages import (
    AssistantMessage,
    ModelSettings,
    ScriptedToolCall,
    ScriptStep,
    SystemMessage,
    UserMessage,
)
from durable_agents.workflows.records import ApprovalSignal, ClientResult, Decision, Revocation
from tests.support.paths import TESTS

HISTORIES = TESTS / "histories"

WRITE = ("write_file", {"path": "out.txt", "content": "hi"})


_STALLED: set[str] = set()


@tool(at_most_once=True, call=CallPolicy(timeout_seconds=1, max_attempts=3))
async def stall(n: int) -> str:
    """Outlive the 1 s timeout the first time it is called with 1 (its outcome is unknown).

    Args:
        n: A number.
    """
    if n == 1 and n not in _STALLED:
        _STALLED.add(n)
        await asyncio.sleep(3)
    return f"stalled {n}"


def judged() -> ConversationInput:
    """A rules judge approves notes/a.txt; secrets.txt goes on to a scripted model judge, which
    escalates: a person approves it (DECISIONS)."""
    rules = JudgeConfig(
        name="notes-only",
        kind="rules",
        tools=["write_file"],
        rules=[Rule(argument="path", glob="notes/*.txt")],
    )
    model = JudgeConfig(
        name="reviewer",
        kind="model",
        tools=["write_file"],
        model=ModelSettings(
            provider="scripted",
            model="judge",
            script=[ScriptStep(text='{"verdict": "escalate", "reason": "?"}')],
        ),
    )
    return conversation(
        scripted_agent(
            step(
                "",
                ("write_file", {"path": "notes/a.txt", "content": "a"}),
                ("write_file", {"path": "secrets.txt", "content": "s"}),
            ),
            step("{last_result}"),
            tools=["write_file"],
            approval=ApprovalPolicy(judges=[rules, model]),
        )
    )


def asking(deadline: float = 3600.0) -> ConversationInput:
    """ask_user, continuing as new after each model call: the question waits in the second run."""
    return conversation(
        scripted_agent(
            step("", ("ask_user", {"question": "Which city?"})),
            step("in {last_result}"),
            tools=[],
            client_tools=[ASK_USER.model_copy(update={"deadline": deadline})],
            continue_as_new_after=1 if deadline > 60 else None,
        )
    )


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


def chat_continued() -> ConversationInput:
    """A chat that continues as new after each answer, once idle: its second run waits from carried state."""
    agent = scripted_agent(
        step("you said {user}"), step("and then {user}"), tools=[], chat=True, continue_as_new_after=1
    )
    return ConversationInput(await_first_message=True, agent_spec=agent)


SHAPES: dict[str, ConversationInput] = {
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
    # "cancelled" since it ends Canceled in Temporal ("cancelled-ends-canceled").
    "namespaced_canceled": conversation(scripted_agent(ScriptStep(text="slow", delay_seconds=30))),
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
    # An output guardrail (rules) refuses the first answer and sends it back; the second passes.
    "guardrail_retry": conversation(
        scripted_agent(
            step("Call us at 555-0100."),
            step("Ask at the front desk."),
            tools=[],
            guardrails=GuardrailsConfig(
                output=[
                    GuardrailConfig(
                        name="no_phone_numbers",
                        kind="rules",
                        rules=[Rule(argument="text", excludes=r"\d{3}-\d{4}")],
                        on_fail="retry",
                    )
                ]
            ),
        )
    ),
    # A handoff, approved by a person: the agent "triage" (agents/triage.toml) answers from then on.
    "handoff": conversation(
        scripted_agent(
            step("", ("transfer_to_triage", {"reason": "a support ticket"})),
            tools=[],
            handoffs=["triage"],
            approval=ApprovalPolicy(require=["transfer_to_triage"]),
        ),
        prompt="Checkout fails for every customer",
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
    # Runs after the first one, recorded as the run RECORDED_RUN names.
    # write_file waits for a person; messages posted meanwhile grow the first run's history until the
    # server suggests continuing as new: the second run starts from carried state with the approval
    # pending, and it is approved there.
    "continued_approval": conversation(
        scripted_agent(
            step("", WRITE), step("done: {last_result}"), *[step("and {user}") for _ in range(12)],
            tools=["write_file"],
        )
    ),
    # Answers "hello" in the first run, continues as new while idle; the second run answers "second".
    "chat_continued": chat_continued(),
    # compacting() continuing as new after each model call: the third run summarises the first turn.
    "compaction_continued": compacting().model_copy(
        update={"agent_spec": compacting().agent_spec.model_copy(update={"continue_as_new_after": 1})}  # type: ignore[union-attr]
    ),
    # "interrupted" with a streaming model: the streamed call is cancelled by the newer message.
    "interrupted_streamed": conversation(
        _streaming(scripted_agent(ScriptStep(text="slow", delay_seconds=3, repeat=2), tools=[])),
        interrupt=True,
    ),
    # "subagent" with a token budget: the scribe starts with what is left of it (recorded as
    # subagent_budgets_child too).
    "subagent_budgets": ConversationInput(
        prompt="Save my note.", agent="delegator", overrides=AgentOverrides(token_budget=100_000)
    ),
    # Namespaced names (workflows/wire.py): "approval_decisions" again, its activities scheduled as
    # durable_agents.*, its decisions sent as durable_agents.decide, .revoke, .approve and .reject.
    "namespaced_decisions": conversation(
        scripted_agent(
            step("", WRITE),
            step("", ("write_file", {"path": "b.txt", "content": "b"}), ("add", {"a": 1, "b": 2})),
            step("", ("write_file", {"path": "c.txt", "content": "c"})),
            step("{last_result}"),
            tools=["write_file", "add"],
        ),
        approval=ApprovalPolicy(require=["add"]),
    ),
    # "subagent_decided" with namespaced names: the scribe (recorded as namespaced_subagent_child)
    # reports as durable_agents.subagent_approvals, the decision comes as durable_agents.decide and
    # goes on to the scribe as durable_agents.approve.
    "namespaced_subagent": ConversationInput(prompt="Save my note.", agent="delegator"),
    # agents/delegator.toml cancelled while the scribe's write_file waits: the scribe (recorded as
    # namespaced_subagent_canceled_child) reports its answer and spend, then both end Canceled.
    "namespaced_subagent_canceled": ConversationInput(prompt="Save my note.", agent="delegator"),
    # A conversation of a tenant and user (workflows/tenancy.py): its model calls reserved in the
    # ledger against the tenant's 60 tokens a day (TENANT_BUDGETS), the third refused before it runs:
    # the turn ends with budget_exhausted.
    "namespaced_tenant_budget": ConversationInput(
        prompt="go", tenant="recorded", user="recorder",
        agent_spec=scripted_agent(
            *[step("", ("add", {"a": i, "b": 1})) for i in range(5)], step("done"), max_iterations=10
        ).model_copy(update={"model": ModelSettings(
            provider="scripted", model="script", max_tokens=20,
            script=[*[step("", ("add", {"a": i, "b": 1})) for i in range(5)], step("done")],
        )}),
    ),
    # Judges (workflows/judges.py): see judged().
    "namespaced_judges": judged(),
    # At most once: stall's first attempt times out, its outcome unknown; a person records a result
    # for call_1_0 (decide, "result"); the second call runs.
    "namespaced_at_most_once": conversation(
        scripted_agent(
            step("", ("stall", {"n": 1})), step("", ("stall", {"n": 2})), step("{last_result}"),
            tools=["stall"],
        )
    ),
    # A client tool (ask_user): the first run asks and hands the wait over to the next...
    "namespaced_client_tool": asking(),
    # ...where the answer is delivered (recorded as the second run).
    "namespaced_client_tool_continued": asking(),
    # ask_user's deadline passes: the model reads that the user did not answer.
    "namespaced_client_deadline": asking(deadline=1.0),
    # The same, since a waiting conversation says waiting_for_client (CLIENT_WAIT_PATCH): the first
    # run, and the second where the answer is delivered.
    "namespaced_client_waiting": asking(),
    "namespaced_client_waiting_continued": asking(),
    # The interrupt signal a second into a slow model call of a chat (no ``interrupt = true``): the
    # call is cancelled, the turn answered interrupted; the chat takes the next message, then ends.
    # Priced (scripted-demo): its AgentStatus upserts carry AgentCost.
    "namespaced_interrupt_signal": conversation(
        scripted_agent(ScriptStep(text="slow", delay_seconds=3, repeat=2), tools=[], chat=True)
        .model_copy(update={"model": ModelSettings(
            provider="scripted", model="scripted-demo",
            script=[ScriptStep(text="slow", delay_seconds=3, repeat=2)],
        )}),
    ),
}  # fmt: skip
TENANT_BUDGETS = "[tenants.recorded]\ntokens_per_day = 60\n"
"""The budgets "namespaced_tenant_budget" is recorded with (its ledger in a temporary folder)."""
RECORDED_RUN: dict[str, int] = {
    "continued_approval": 2,
    "chat_continued": 2,
    "compaction_continued": 3,
    "namespaced_client_tool_continued": 2,
    "namespaced_client_waiting_continued": 2,
}
"""Shapes recorded as a later run (1 is the first) than the first."""
SUGGEST_CONTINUE_AS_NEW_AT = 40
"""History events from which the server of ROLLED_OVER_WAITING shapes suggests continue-as-new."""
ROLLED_OVER_WAITING: dict[str, str] = {"continued_approval": "call_1_0"}
"""Shapes whose first run waits for a person on this call until the server suggests a new run."""
SENT_IN_RUN: dict[str, tuple[int, str]] = {"chat_continued": (2, "second")}
"""A send_message sent once this run (1 is the first) runs; then the chat is ended."""
DECISIONS: dict[str, list[tuple[str, str, BaseModel]]] = {
    "approval_decisions": [
        ("call_1_0", wire.DECIDE, Decision(
            call_id="call_1_0", approve=True, by="recorder", remember=True,
            arguments={"path": "out.txt", "content": "edited"},
        )),
        ("call_2_1", wire.REVOKE, Revocation(tool="write_file", by="recorder")),
        ("call_2_1", wire.APPROVE, ApprovalSignal(call_id="call_2_1", by="recorder")),
        ("call_3_0", wire.REJECT, ApprovalSignal(call_id="call_3_0", by="recorder", reason="enough files")),
    ],
    "continued_approval": [("call_1_0", wire.APPROVE, ApprovalSignal(call_id="call_1_0", by="recorder"))],
}  # fmt: skip
"""Sent once the named call waits for a person: updates (decide, revoke) or signals. Histories
recorded before the namespace (workflows/wire.py) got them under the old names."""
DECISIONS["namespaced_decisions"] = DECISIONS["approval_decisions"]
DECISIONS["handoff"] = [("call_1_0", wire.DECIDE, Decision(call_id="call_1_0", approve=True, by="recorder"))]
DECISIONS["namespaced_judges"] = [
    ("call_1_1", wire.DECIDE, Decision(call_id="call_1_1", approve=True, by="recorder")),
]
DECISIONS["namespaced_at_most_once"] = [
    ("call_1_0.unknown", wire.DECIDE, Decision(
        call_id="call_1_0.unknown", approve=True, by="recorder", result="stalled 1, found in the books",
    )),
]  # fmt: skip
CLIENT_RESULTS: dict[str, ClientResult] = {
    "namespaced_client_tool": ClientResult(call_id="call_1_0", result="Lisbon"),
    "namespaced_client_tool_continued": ClientResult(call_id="call_1_0", result="Lisbon"),
    "namespaced_client_waiting": ClientResult(call_id="call_1_0", result="Lisbon"),
    "namespaced_client_waiting_continued": ClientResult(call_id="call_1_0", result="Lisbon"),
}
"""Delivered (deliver_client_result) once the call waits in a run after the first."""
UPDATES = {wire.DECIDE, wire.REVOKE}
START_SIGNALS: dict[str, tuple[str, BaseModel]] = {
    "approval": (wire.APPROVE, ApprovalSignal(call_id="call_1_0", by="recorder")),
    "follow_ups": (wire.POST_MESSAGE, MessageInput(text="second")),
    "compaction": (wire.POST_MESSAGE, MessageInput(text="second")),
    "compaction_continued": (wire.POST_MESSAGE, MessageInput(text="second")),
    "approval_bound": (wire.APPROVE, ApprovalSignal(call_id="call_1_0", by="too-early")),
}
CANCEL_AFTER: dict[str, float] = {"cancelled": 1.0, "namespaced_canceled": 1.0}
CANCEL_WHEN_WAITING = {"namespaced_subagent_canceled"}
"""Shapes cancelled once a call waits for a person (a sub-agent's, at its parent)."""
UPDATE_WITH_START: dict[str, MessageInput] = {
    "update_with_start": MessageInput(text="hello"),
    "chat_continued": MessageInput(text="hello"),
}
MESSAGE_AFTER: dict[str, tuple[float, MessageInput]] = {
    "interrupted": (1.0, MessageInput(text="never mind")),
    "interrupted_streamed": (1.0, MessageInput(text="never mind")),
}
INTERRUPT_AFTER: dict[str, tuple[float, MessageInput]] = {
    "namespaced_interrupt_signal": (1.0, MessageInput(text="next")),
}
"""The interrupt signal after this long, then the message and the end signal."""
FOLLOWED = {"streamed"}
"""Shapes recorded with a subscriber following the event stream."""
DECIDE_THROUGH_PARENT: dict[str, str] = {
    "subagent": "call_1_0/call_1_0",
    "subagent_budgets": "call_1_0/call_1_0",
}
DECIDE_UPDATE_THROUGH_PARENT: dict[str, Decision] = {
    "subagent_decided": Decision(
        call_id="call_1_0/call_1_0", approve=True, by="recorder",
        arguments={"path": "note.txt", "content": "buy oat milk\n"},
    ),
    "namespaced_subagent": Decision(call_id="call_1_0/call_1_0", approve=True, by="recorder"),
}  # fmt: skip


async def record(names: list[str]) -> None:
    """Record the shapes on the embedded server; ROLLED_OVER_WAITING ones on one of their own."""
    if "namespaced_tenant_budget" in names:  # read by the worker as it starts: a fresh ledger, these budgets
        folder = Path(tempfile.mkdtemp())
        (folder / "budgets.toml").write_text(TENANT_BUDGETS)
        os.environ["AGENT_BUDGETS"] = str(folder / "budgets.toml")
        os.environ["AGENT_STORE"] = str(folder / "conversations.db")
    suggesting = [name for name in names if name in ROLLED_OVER_WAITING]
    if plain := [name for name in names if name not in ROLLED_OVER_WAITING]:
        with tempfile.TemporaryDirectory() as tmp:
            server = await start_embedded_server(port=None, ui=False, db_file=Path(tmp) / "t.db")
            try:
                await _record(server.client, Path(tmp), plain)
            finally:
                await server.stop()
    if suggesting:
        with tempfile.TemporaryDirectory() as tmp:
            env = await WorkflowEnvironment.start_local(
                data_converter=data_converter(),
                ip="127.0.0.1",
                ui=False,
                search_attributes=SEARCH_ATTRIBUTES,
                dev_server_existing_path=temporal_cli(),
                dev_server_extra_args=[
                    *dev_server_flags(),
                    "--dynamic-config-value",
                    f"limit.historyCount.suggestContinueAsNew={SUGGEST_CONTINUE_AS_NEW_AT}",
                ],
            )
            try:
                await _record(env.client, Path(tmp), suggesting)
            finally:
                await env.shutdown()


async def _record(client: Client, tmp: Path, names: list[str]) -> None:
    registry = default_registry(stall)
    async with build_worker(
        client, task_queue="record", workspace_root=tmp, allow_inline_mcp=True, registry=registry
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
                await client.execute_update_with_start_workflow(
                    AgentWorkflow.send_message,
                    UPDATE_WITH_START[name],
                    start_workflow_operation=start,
                )
                handle = await start.workflow_handle()
            else:
                handle = await client.start_workflow(
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
            if name in INTERRUPT_AFTER:
                delay, message = INTERRUPT_AFTER[name]
                await asyncio.sleep(delay)
                await handle.signal(AgentWorkflow.interrupt)
                while not await handle.query(AgentWorkflow.replies):
                    await asyncio.sleep(0.05)
                await handle.signal(AgentWorkflow.post_message, message)
                await handle.signal(AgentWorkflow.end)
            if name in FOLLOWED:
                await _follow(client, handle.id)
            if name in ROLLED_OVER_WAITING:
                await _roll_over_waiting(client, handle, ROLLED_OVER_WAITING[name])
            if name in SENT_IN_RUN:
                run, text = SENT_IN_RUN[name]
                await _send_in_run(client, handle, run, MessageInput(text=text))
            if name in CANCEL_AFTER:
                await asyncio.sleep(CANCEL_AFTER[name])
                await handle.cancel(reason="recorded cancellation")
            if name in CANCEL_WHEN_WAITING:
                while not await handle.query(AgentWorkflow.pending_approvals):
                    await asyncio.sleep(0.1)
                await handle.cancel(reason="recorded cancellation")
            for call_id, handler, payload in DECISIONS.get(name, []):
                while call_id not in [p.call_id for p in await handle.query(AgentWorkflow.pending_approvals)]:
                    await asyncio.sleep(0.05)
                if handler in UPDATES:
                    await handle.execute_update(handler, payload)
                else:
                    await handle.signal(handler, payload)
            if name in CLIENT_RESULTS:
                await _deliver_in_a_later_run(client, handle, CLIENT_RESULTS[name])
            if name in DECIDE_THROUGH_PARENT:
                while not await handle.query(AgentWorkflow.pending_approvals):
                    await asyncio.sleep(0.1)
                call_id = DECIDE_THROUGH_PARENT[name]
                await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id=call_id, by="recorder"))
            if name in DECIDE_UPDATE_THROUGH_PARENT:
                while not await handle.query(AgentWorkflow.pending_approvals):
                    await asyncio.sleep(0.1)
                await handle.execute_update(AgentWorkflow.decide, DECIDE_UPDATE_THROUGH_PARENT[name])
            try:
                await handle.result()  # follows continue-as-new to the end
            except WorkflowFailureError:
                if name not in CANCEL_AFTER and name not in CANCEL_WHEN_WAITING:
                    raise  # a cancelled one ends Canceled: no result, its history is what we keep
            run_id = handle.result_run_id
            for _ in range(RECORDED_RUN.get(name, 1) - 1):
                run_id = await _next_run(client, handle.id, run_id)
            history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
            (HISTORIES / f"{name}.json").write_text(history.to_json())
            print(f"wrote {HISTORIES / name}.json")
            for event in history.events:
                if event.HasField("child_workflow_execution_started_event_attributes"):
                    child = event.child_workflow_execution_started_event_attributes.workflow_execution
                    child_history = await client.get_workflow_handle(child.workflow_id).fetch_history()
                    (HISTORIES / f"{name}_child.json").write_text(child_history.to_json())
                    print(f"wrote {HISTORIES / name}_child.json")


async def _next_run(client: Client, workflow_id: str, run_id: str | None) -> str:
    """The run that ``run_id`` continued as."""
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    event = history.events[-1]
    assert event.HasField("workflow_execution_continued_as_new_event_attributes"), "did not continue"
    return event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id


async def _roll_over_waiting(client: Client, handle: WorkflowHandle, call_id: str) -> None:
    """Post messages while the first run waits for ``call_id`` until the server suggests a new run."""
    while call_id not in [p.call_id for p in await handle.query(AgentWorkflow.pending_approvals)]:
        await asyncio.sleep(0.05)
    sent = 0
    while (await client.get_workflow_handle(handle.id).describe()).run_id == handle.result_run_id:
        assert sent < 12, "the server never suggested continuing as new"
        sent += 1
        await handle.signal(AgentWorkflow.post_message, MessageInput(text=f"message {sent + 1}"))
        await asyncio.sleep(0.3)


async def _send_in_run(client: Client, handle: WorkflowHandle, run: int, message: MessageInput) -> None:
    """Send ``message`` once the conversation's ``run``-th run runs, then end the chat."""
    run_id = handle.result_run_id
    for _ in range(run - 1):
        while (await client.get_workflow_handle(handle.id).describe()).run_id == run_id:
            await asyncio.sleep(0.05)
        run_id = await _next_run(client, handle.id, run_id)
    latest = client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
    while True:
        try:
            await latest.execute_update(AgentWorkflow.send_message, message)
            break
        except WorkflowUpdateFailedError as e:
            if getattr(e.cause, "type", None) != ROLLING_OVER:
                raise
            await asyncio.sleep(0.1)
    await latest.signal(AgentWorkflow.end)


async def _deliver_in_a_later_run(client: Client, handle: WorkflowHandle, result: ClientResult) -> None:
    """Deliver ``result`` once a run after the first waits for it."""
    latest = client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
    while True:
        if (await latest.describe()).run_id != handle.result_run_id:
            with contextlib.suppress(Exception):  # the new run's first task may not have run yet
                if await latest.query(AgentWorkflow.pending_client_calls):
                    break
        await asyncio.sleep(0.05)
    await latest.execute_update(AgentWorkflow.deliver_client_result, result)


async def _follow(client: Client, workflow_id: str) -> None:
    """Follow the stream to its end, and check the offsets come in order."""
    offsets = [offset async for offset, _ in follow(client, workflow_id)]
    assert offsets == list(range(len(offsets))), offsets


if __name__ == "__main__":
    unknown = set(sys.argv[1:]) - set(SHAPES)
    if not sys.argv[1:] or unknown:
        print(f"usage: python -m tests.support.record_histories NAME... (shapes: {', '.join(SHAPES)})")
        os._exit(2)
    asyncio.run(record(sys.argv[1:]))
    sys.stdout.flush()
    os._exit(0)
