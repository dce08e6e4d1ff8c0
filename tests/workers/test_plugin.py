"""``AgentPlugin`` in a worker of the user's own (docs/composition.md), beside an unrelated workflow."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import Priority
from temporalio.exceptions import ActivityError
from temporalio.worker import StartActivityInput, Worker, WorkflowOutboundInterceptor
from temporalio.workflow import ActivityCancellationType

from durable_agents.activities.tools import default_registry
from durable_agents.dev_server import EmbeddedServer
from durable_agents.stores.errors import stores_differ
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.fleet import tagged
from durable_agents.worker.lost_calls import RecordRunningCalls
from durable_agents.worker.plugin import AgentPlugin
from durable_agents.worker.runners import EagerUnlessRefused, _Queued
from durable_agents.worker.versioning import releases_in
from durable_agents.workflows import outages
from durable_agents.workflows.activity_refs import (
    CALL_MODEL,
    JUDGE,
    LIST_MCP_TOOLS,
    NOTIFY,
    RESOLVE_AGENT,
    RUN_HOOK,
    RUN_TOOL,
    VERIFY_DECISION,
)
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.erasure import (
    CANCEL_CONVERSATION,
    ERASE_CONVERSATION,
    FIND_CONVERSATIONS,
    FORGET_SPENDER,
)
from durable_agents.workflows.records import ApprovalSignal
from durable_agents.workflows.retention import RETENTION_BATCH
from durable_agents.workflows.versioning import RELEASE
from tests.support.conversations import wait_for_pending
from tests.support.greeting import Greeting, Reviewed, call_model, greet
from tests.support.history import activity_types
from tests.support.workers import running_worker

OURS = ["AgentWorkflow", "ErasureWorkflow", "RetentionWorkflow"]
"""The workflows the plugin adds to a worker."""


async def test_a_plain_worker_runs_a_conversation_beside_an_unrelated_workflow(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    # As docs/composition.md shows: the plugin on the client, then a Worker like any other.
    plugin = AgentPlugin(workspace_root=tmp_path)
    client = await Client.connect(server.address, plugins=[plugin])
    task_queue = f"tq-plugin-{uuid.uuid4().hex[:8]}"
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[Greeting],
        activities=[greet],
        max_cached_workflows=1000,
    )
    agent = scripted_agent(step("", ("add", {"a": 2, "b": 3})), step("5"), tools=["add"])
    async with worker:
        conversation_handle = await client.start_workflow(
            AgentWorkflow.run, conversation(agent), id=f"plugin-{uuid.uuid4().hex}", task_queue=task_queue
        )
        greeting = await client.execute_workflow(
            Greeting.run, "Ada", id=f"greeting-{uuid.uuid4().hex}", task_queue=task_queue
        )
        result = await conversation_handle.result()

    assert greeting == "hello, Ada"
    assert (result.final_text, [c.content for c in result.tool_calls]) == ("5", ["5"])
    assert await activity_types(conversation_handle) == [
        "durable_agents.resolve_agent",
        "durable_agents.call_model",
        "durable_agents.run_tool",
        "durable_agents.call_model",
    ]
    # The plugin keeps the worker's options, the SDK's defaults included (it once took a 1,000, the
    # SDK's default too, for "not set" and made it 200; and a 10 s sticky timeout 5 s).
    active = worker.config(active_config=True)
    assert (active["max_cached_workflows"], active["sticky_queue_schedule_to_start_timeout"]) == (
        1000,
        timedelta(seconds=10),
    )
    assert [w.__name__ for w in active["workflows"]] == [
        "Greeting",
        "AgentWorkflow",
        "ErasureWorkflow",
        "RetentionWorkflow",
        "UnversionedAutoUpgradingAgentWorkflow",
    ]


async def test_the_plugin_keeps_the_users_worker_options_and_runs_the_users_workflows_unwrapped(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """Every option the plugin once tuned when it equalled the SDK's default, given explicitly, some at
    the SDK's default and some not: the worker keeps them all. The user's workflow is left to the
    SDK's runner: the lease (durable_agents/worker/lost_calls.py) names the conversation only."""
    client = await Client.connect(server.address, plugins=[AgentPlugin(workspace_root=tmp_path)])
    task_queue = f"tq-own-options-{uuid.uuid4().hex[:8]}"
    executor = concurrent.futures.ThreadPoolExecutor(3)
    asked = {
        "sticky_queue_schedule_to_start_timeout": timedelta(seconds=10),  # the SDK's default
        "max_heartbeat_throttle_interval": timedelta(seconds=60),  # the SDK's default
        "default_heartbeat_throttle_interval": timedelta(seconds=7),
        "graceful_shutdown_timeout": timedelta(0),  # the SDK's default
        "disable_eager_activity_execution": False,  # the SDK's default
        "workflow_task_executor": executor,
        "build_id": "their-build-7",
    }
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[Reviewed],
        activities=[call_model],
        patch_activation_callback=lambda _: False,  # theirs declines every patch: not ours
        **asked,
    )
    write = ("write_file", {"path": "a.txt", "content": "a"})
    agent = scripted_agent(step("", write), step("{last_result}"), tools=["write_file"])
    try:
        async with worker:
            reviewed = await client.start_workflow(
                Reviewed.run, "hi", id=f"reviewed-{uuid.uuid4().hex}", task_queue=task_queue
            )
            conversation_handle = await client.start_workflow(
                AgentWorkflow.run,
                conversation(agent),
                id=f"options-{uuid.uuid4().hex}",
                task_queue=task_queue,
            )
            await wait_for_pending(conversation_handle, timeout=60)
            await until_started(reviewed)
            active = worker.config(active_config=True)
            [lease] = [each.lease for each in active["interceptors"] if isinstance(each, RecordRunningCalls)]
            eager = [each for each in active["interceptors"] if isinstance(each, EagerUnlessRefused)]
            cached = json.loads(lease.record())["workflows"]
            await reviewed.terminate()
            await conversation_handle.terminate()
    finally:
        executor.shutdown(wait=False)

    assert {option: active[option] for option in asked} == asked  # type: ignore[literal-required]
    assert active["identity"] == tagged(client.identity)  # their build id: the identity names the release
    # ... and the conversation records its release's marker, which their build id cannot say, though
    # their patch activation callback declines every patch of their workflows
    events = (await conversation_handle.fetch_history()).events
    markers = [e for e in events if e.marker_recorded_event_attributes.marker_name == "core_patch"]
    assert (len(markers), releases_in(events)) == (1, {RELEASE})
    assert cached == [[conversation_handle.id, conversation_handle.result_run_id]]
    assert len(eager) == 1  # which acts only on a call refused for its stores (the test below)


async def until_started(handle: WorkflowHandle) -> None:
    """Until the workflow's first workflow task has completed (it is in the worker's cache)."""
    for _ in range(1200):
        events = [e.event_type async for e in handle.fetch_history_events()]
        if EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED in events:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{handle.id} never completed a workflow task")


async def test_a_worker_whose_client_lacks_the_plugin_is_refused_in_one_line(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    client = await Client.connect(server.address)  # the SDK's default converter
    with pytest.raises(ValueError) as refused:
        Worker(
            client,
            task_queue="tq-refused",
            workflows=[Greeting],
            plugins=[AgentPlugin(workspace_root=tmp_path)],
        )
    assert str(refused.value) == (
        "AgentPlugin: the worker's client does not use our data converter; connect it with"
        " Client.connect(..., plugins=[AgentPlugin(...)]) (a worker cannot change its client's)"
    )


def test_activity_names_are_namespaced_and_the_worker_registers_each_under_it_and_its_old_one(
    tmp_path: Path,
) -> None:
    # The names are in every history ever recorded: a rename would strand running conversations.
    # So the old ones stay registered (workflows/wire.py): runs from before the namespace use them.
    refs = [RESOLVE_AGENT, LIST_MCP_TOOLS, CALL_MODEL, RUN_TOOL, RUN_HOOK, VERIFY_DECISION]
    old = ["resolve_agent", "list_mcp_tools", "call_model", "run_tool", "run_hook", "verify_decision"]
    assert [r.name for r in refs] == [f"durable_agents.{name}" for name in old]
    assert [r.old_name for r in refs] == old
    registered = AgentPlugin(workspace_root=tmp_path).activities  # what SimplePlugin hands to workers
    names = [activity._Definition.must_from_callable(fn).name for fn in registered]  # type: ignore[union-attr]
    erasure = [
        FIND_CONVERSATIONS,
        CANCEL_CONVERSATION,
        ERASE_CONVERSATION,
        FORGET_SPENDER,
        RETENTION_BATCH,
    ]  # new: no old names; judge and notify came with the namespace too
    assert sorted(names) == sorted(
        [r.name for r in refs] + old + [JUDGE.name, NOTIFY.name] + [r.name for r in erasure]
    )


async def test_a_users_own_call_model_activity_and_approve_signal_beside_the_plugin(
    server: EmbeddedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The user's worker has an activity ``call_model`` and a workflow with a signal ``approve``:
    once the names of our own too (a worker refused two activities named ``call_model``). Ours is
    ``durable_agents.call_model`` now; its old name, kept for conversations from before, yields."""
    client = await Client.connect(server.address, plugins=[AgentPlugin(workspace_root=tmp_path)])
    task_queue = f"tq-own-names-{uuid.uuid4().hex[:8]}"
    worker = Worker(client, task_queue=task_queue, workflows=[Reviewed], activities=[call_model])
    write = ("write_file", {"path": "a.txt", "content": "a"})
    agent = scripted_agent(step("", write), step("{last_result}"), tools=["write_file"])
    async with worker:
        reviewed = await client.start_workflow(
            Reviewed.run, "hi", id=f"reviewed-{uuid.uuid4().hex}", task_queue=task_queue
        )
        conversation_handle = await client.start_workflow(
            AgentWorkflow.run, conversation(agent), id=f"own-names-{uuid.uuid4().hex}", task_queue=task_queue
        )
        [pending] = await wait_for_pending(conversation_handle)
        await reviewed.signal(Reviewed.approve)
        await conversation_handle.signal(
            AgentWorkflow.approve, ApprovalSignal(call_id=pending.call_id, by="alice")
        )
        assert await reviewed.result() == "the user's model says: hi"
        result = await conversation_handle.result()

    assert result.final_text == "Wrote 1 bytes to a.txt."
    assert await activity_types(conversation_handle) == [
        "durable_agents.resolve_agent",
        "durable_agents.call_model",
        "durable_agents.verify_decision",
        "durable_agents.run_tool",
        "durable_agents.call_model",
    ]
    active = worker.config(active_config=True)
    assert [w.__name__ for w in active["workflows"]] == [
        "Reviewed",
        "AgentWorkflow",
        "ErasureWorkflow",
        "RetentionWorkflow",
        "UnversionedAutoUpgradingAgentWorkflow",
    ]
    registered = active["activities"]
    names = [activity._Definition.must_from_callable(fn).name for fn in registered]  # type: ignore[union-attr]
    # The user's call_model; ours, namespaced; and our other old names, for conversations from before.
    assert [names.count(n) for n in ("call_model", "durable_agents.call_model", "run_tool")] == [1, 1, 1]
    assert [r.message for r in caplog.records if r.name == "durable_agents.worker.plugin"] == [
        "this worker's own activities call_model keep their names: conversations started before our"
        " activities were named durable_agents.* cannot run theirs on it"
    ]


SCRIPTED = 'tools = []\n[model]\nprovider = "scripted"\nmodel = "script"\n[[model.script]]\ntext = "{text}"\n'


async def test_an_agent_file_added_to_a_running_worker_runs_and_a_broken_edit_keeps_the_last_good_one(
    client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Agent files are read again when they change: no restart for a new agent, and an edit that
    breaks one is refused in the log while the last good set goes on (docs/agents-and-tools.md)."""
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "first.toml").write_text(SCRIPTED.format(text="First."))
    async with running_worker(client, tmp_path / "work", agents_dir=agents) as env:
        (agents / "chatty.toml").write_text(SCRIPTED.format(text="Hello from chatty."))
        added = await env.run(ConversationInput(prompt="hi", agent="chatty"))
        broken = SCRIPTED.format(text="Broken.").replace("tools = []", 'tools = ["no_such_tool"]')
        (agents / "chatty.toml").write_text(broken)
        kept = await env.run(ConversationInput(prompt="hi again", agent="chatty"))

    assert (added.final_text, kept.final_text) == ("Hello from chatty.", "Hello from chatty.")
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"{agents / 'chatty.toml'}: field 'tools': unknown tool(s) no_such_tool; the worker has:"
        f" {', '.join(default_registry().names)}; keeping the agents read before: chatty, first"
    ]


async def test_a_call_is_queued_when_tried_again_after_a_refusal_for_its_stores_or_while_the_worker_is_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A conversation's activities start eagerly, on the worker that scheduled them; one refused there
    for its stores (``StoresDiffer``) goes to the queue when tried again, where a worker with the
    conversation's stores can take it (an eager one would come back to the refusing worker); and so
    does every call while the worker takes its attempts up late."""
    refusal = ActivityError(
        "refused", scheduled_event_id=5, started_event_id=6, identity="b", activity_type=RUN_TOOL.name,
        activity_id="2", retry_state=None,
    )  # fmt: skip
    refusal.__cause__ = stores_differ("sqlite-b", "sqlite-a")
    started: list[StartActivityInput] = []

    class Scheduled(WorkflowOutboundInterceptor):
        def __init__(self) -> None:  # the end of the chain: records what it is asked to schedule
            pass

        def start_activity(self, input: StartActivityInput) -> Any:
            started.append(input)

    gate = EagerUnlessRefused()

    async def call(kept: dict[str, str]) -> str:
        _Queued(Scheduled(), gate).start_activity(START)
        if len(started) == 1:
            raise refusal
        return "ran"

    async def no_pause(*args: Any, **kwargs: Any) -> None:
        pass

    monkeypatch.setattr(outages.workflow, "sleep", no_pause)
    assert await outages.wait_out_outages(call, None) == "ran"
    assert [each.disable_eager_execution for each in started] == [False, True]
    assert not outages.NOT_EAGER.get()  # only that call's tries

    # A worker that takes its attempts up late queues them: they wait at the server, not in it.
    started.clear()
    for late in (0.01, EagerUnlessRefused.BEHIND + 0.01, 0.01):
        gate.late = late
        _Queued(Scheduled(), gate).start_activity(START)
    assert [each.disable_eager_execution for each in started] == [False, True, False]


START = StartActivityInput(
    activity=RUN_TOOL.name,
    args=[],
    activity_id=None,
    task_queue=None,
    schedule_to_close_timeout=None,
    schedule_to_start_timeout=None,
    start_to_close_timeout=timedelta(seconds=30),
    heartbeat_timeout=None,
    retry_policy=None,
    cancellation_type=ActivityCancellationType.TRY_CANCEL,
    headers={},
    disable_eager_execution=False,
    versioning_intent=None,
    summary=None,
    priority=Priority(),
    arg_types=None,
    ret_type=None,
)
