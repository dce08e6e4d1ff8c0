"""An upgrade loses nothing: the worker of the previous release (the commit in tests/upgrade/BASE,
checked out as a git worktree and run as its own process) parks conversations on every path the
replay guard covers; it stops, as in a deploy, and this release's worker finishes them. Their
files, transcripts, approvals and usage come out as if one worker had run them throughout.

This release's client does all the talking, as in a rolling deploy: to the previous release's
worker, and then to this release's, under the names both know (workflows/wire.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.testing import WorkflowEnvironment

from durable_agents.settings import Settings
from durable_agents.stores.workspaces import folder_name
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows import wire
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput, ConversationResult, MessageInput
from durable_agents.workflows.messages import (
    AssistantMessage,
    ScriptStep,
    SummaryMessage,
    SystemMessage,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from durable_agents.workflows.records import ApprovalSignal, Decision
from tests.support.conversations import send, wait_for_pending
from tests.support.paths import ROOT, TESTS
from tests.support.releases import CHAT, SUBAGENT, ReleaseWorker
from tests.support.servers import HISTORY_LENGTH, start_dev_server

BASE = TESTS / "upgrade" / "BASE"
"""The commit of the previous release; the release process bumps it (docs/production.md, "Upgrading")."""
SUGGEST_AT = 40
"""History events from which this test's server suggests continue-as-new: a run waiting for a
person rolls over within the test, as it would after Temporal's 4096."""


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def _pins(lock: str) -> dict[str, str]:
    """``name==version`` lines of a requirements.lock, by lower-case name."""
    return {
        name.lower(): version
        for name, _, version in (line.partition("==") for line in lock.splitlines())
        if version and not name.startswith("#")
    }


@pytest.fixture(scope="module")
def base_checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A git worktree of BASE, removed afterwards; the test is skipped when git history lacks it."""
    commit = BASE.read_text().split()[0]
    try:
        found = _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    except FileNotFoundError:
        pytest.skip("the upgrade test needs git, to check out the previous release (tests/upgrade/BASE)")
    if found.returncode != 0:
        pytest.skip(
            f"git history lacks the previous release {commit} (tests/upgrade/BASE): a shallow clone or "
            "no .git; `git fetch --unshallow` gives it"
        )
    earlier, now = (
        _pins(_git("show", f"{commit}:requirements.lock").stdout),
        _pins((ROOT / "requirements.lock").read_text()),
    )
    differ = sorted(
        f"{name} {version} (now {now.get(name, 'none')})"
        for name, version in earlier.items()
        if now.get(name) != version
    )
    if differ:  # packages added since are no matter: the previous release never imports them
        pytest.skip(f"the previous release {commit} pins other versions of {', '.join(differ)}")
    path = tmp_path_factory.mktemp("base") / "checkout"
    added = _git("worktree", "add", "--detach", "--quiet", str(path), commit)
    assert added.returncode == 0, added.stderr
    try:
        yield path
    finally:
        _git("worktree", "remove", "--force", str(path))


@pytest.fixture
async def server() -> AsyncIterator[WorkflowEnvironment]:
    env = await start_dev_server((HISTORY_LENGTH, SUGGEST_AT))
    yield env
    await env.shutdown()


def _write(path: str, content: str) -> tuple[str, dict[str, str]]:
    return ("write_file", {"path": path, "content": content})


CONTINUED = conversation(
    scripted_agent(
        step("", _write("a.txt", "a")),
        step("done: {last_result}"),
        *[step("and {user}") for _ in range(12)],
        tools=["write_file"],
    ),
    "first",
)
"""Waits for a person on write_file until the server suggests a new run: the approval is carried."""


def _compacting() -> ConversationInput:
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})),
        ScriptStep(text="{last_result}", input_tokens=500),
        step("you said {user}"),
        chat=True,
        continue_as_new_after=1,
    )
    agent.model.context_window = 100
    return conversation(agent)


COMPACTING = _compacting()
"""Its third run waits for a second message, which the model can take only after a summary."""


def _interrupting() -> ConversationInput:
    agent = scripted_agent(
        ScriptStep(text="a slow streamed answer", delay_seconds=10), step("now: {user}"), tools=[]
    )
    agent.model.stream = True
    return conversation(agent, interrupt=True)


INTERRUPTED = _interrupting()
"""Its streamed model call runs when the previous worker stops; a newer message interrupts it."""
FORK = ConversationInput(
    prompt="Save it.",
    agent_spec=scripted_agent(
        step("3"), step("", _write("f.txt", "3")), step("{last_result}"), tools=["write_file"]
    ),
    history=[SystemMessage(text="Be brief."), UserMessage(text="What is 1 + 2?"), AssistantMessage(text="3")],
)
"""A fork of an earlier conversation, waiting for a person on write_file."""


async def _until(condition: object, what: str) -> None:
    for _ in range(600):
        if await condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never {what}")


async def _run_id(client: Client, workflow_id: str) -> str | None:
    return (await client.get_workflow_handle(workflow_id).describe()).run_id


async def _state(handle: WorkflowHandle) -> str:
    return (await handle.query(AgentWorkflow.status)).state


async def _park(client: Client, queue: str, ids: dict[str, str]) -> dict[str, object]:
    """Start each conversation on the previous release's worker and wait until it is parked."""
    seen: dict[str, object] = {}

    async def start(name: str, input: ConversationInput) -> WorkflowHandle:
        handle = await client.start_workflow(AgentWorkflow.run, input, id=ids[name], task_queue=queue)
        return client.get_workflow_handle_for(
            AgentWorkflow.run, handle.id, first_execution_run_id=handle.result_run_id
        )

    continued = await start("continued", CONTINUED)
    await wait_for_pending(continued, timeout=30)
    first_run = await _run_id(client, continued.id)
    sent: list[str] = []
    while await _run_id(client, continued.id) == first_run:
        assert len(sent) < 12, "the server never suggested continuing as new"
        sent.append(f"message {len(sent) + 2}")
        await continued.signal(AgentWorkflow.post_message, MessageInput(text=sent[-1]))
        count = len(sent)

        async def queued(count: int = count) -> bool:
            return (await continued.query(AgentWorkflow.status)).queued_messages == count

        await _until(queued, f"{count} queued messages")
    await wait_for_pending(continued, timeout=30)  # the second run waits for the carried approval
    seen["sent"] = sent

    start_chat = WithStartWorkflowOperation(
        AgentWorkflow.run,
        CHAT,
        id=ids["chat"],
        task_queue=queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    reply = await client.execute_update_with_start_workflow(
        AgentWorkflow.send_message, MessageInput(text="hello"), start_workflow_operation=start_chat
    )
    seen["chat_first"] = reply.text
    chat = await start_chat.workflow_handle()
    chat_first_run = chat.result_run_id

    async def chat_rolled_over() -> bool:
        return await _run_id(client, chat.id) != chat_first_run and await _state(chat) == "idle"

    await _until(chat_rolled_over, "a second chat run waiting")

    parent = await start("subagent", SUBAGENT)
    await wait_for_pending(parent, timeout=30)

    compacting = await start("compaction", COMPACTING)

    async def compacting_idle() -> bool:
        return await _state(compacting) == "idle"

    await _until(compacting_idle, "the compacting chat waiting in a later run")

    fork = await start("fork", FORK)
    await wait_for_pending(fork, timeout=30)

    interrupted = await start("interrupted", INTERRUPTED)

    async def streaming() -> bool:
        pending = (
            await client.get_workflow_handle(interrupted.id).describe()
        ).raw_description.pending_activities
        return any(
            a.activity_type.name == wire.CALL_MODEL and a.HasField("last_started_time") for a in pending
        )

    await _until(streaming, "the streamed model call running")
    return seen


async def _finish(client: Client, ids: dict[str, str]) -> dict[str, object]:
    """This release's worker takes each conversation on from where it was parked."""
    latest = {name: client.get_workflow_handle_for(AgentWorkflow.run, id) for name, id in ids.items()}
    done: dict[str, object] = {}
    await latest["interrupted"].signal(AgentWorkflow.post_message, MessageInput(text="never mind"))

    decided = await latest["continued"].execute_update(
        AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="upgrader")
    )
    done["decided"] = decided
    done["chat_second"] = await send(latest["chat"], "second")
    await latest["chat"].signal(AgentWorkflow.end)
    await latest["subagent"].signal(
        AgentWorkflow.approve, ApprovalSignal(call_id="call_1_0/call_1_0", by="upgrader")
    )
    done["compaction_second"] = await send(latest["compaction"], "second")
    await latest["compaction"].signal(AgentWorkflow.end)
    await latest["fork"].signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_2_0", by="upgrader"))
    for name, handle in latest.items():
        done[name] = await asyncio.wait_for(handle.result(), 60)
    child = client.get_workflow_handle_for(AgentWorkflow.run, f"{ids['subagent']}/call_1_0")
    done["child"] = await child.result()
    done["child_run"] = (await child.describe()).run_id
    return done


async def test_conversations_parked_by_the_previous_release_finish_on_this_one(
    base_checkout: Path, server: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = server.client
    queue = f"upgrade-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "data"
    suffix = uuid.uuid4().hex[:6]
    ids = {
        name: f"upgrade-{name}-{suffix}"
        for name in ("continued", "chat", "subagent", "compaction", "fork", "interrupted")
    }
    previous = ReleaseWorker(base_checkout, client.service_client.config.target_host, queue, data)
    try:
        await previous.polling()
        parked = await _park(client, queue, ids)
    finally:
        previous.stop()
    async with build_worker(client, task_queue=queue, settings=Settings(data_dir=data)):
        done = await _finish(client, ids)

    first_runs = {}
    for workflow_id in [*ids.values(), f"{ids['subagent']}/call_1_0"]:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        first_runs[workflow_id] = started.first_execution_run_id
        workers = await _workers(client, workflow_id, first_runs[workflow_id])
        assert workers[0] == previous.pid and workers[-1] == os.getpid(), (workflow_id, workers)

    def result(name: str) -> ConversationResult:
        value = done[name]
        assert isinstance(value, ConversationResult)
        return value

    def files(workflow_id: str) -> dict[str, str]:
        folder = data / "workspace" / folder_name(f"{workflow_id}/{first_runs[workflow_id]}")
        return {p.name: p.read_text() for p in folder.iterdir()}

    def said(r: ConversationResult) -> list[tuple[str, str]]:
        return [(m.kind, m.content if isinstance(m, ToolResultMessage) else m.text) for m in r.messages]

    def approvals(r: ConversationResult) -> list[tuple[str, str, str | None]]:
        return [(a.call_id, a.state, a.by) for a in r.approvals]

    continued = result("continued")
    sent = parked["sent"]
    assert isinstance(sent, list) and sent
    assert [r.text for r in continued.replies] == [
        "done: Wrote 1 bytes to a.txt.",
        *[f"and {m}" for m in sent],
    ]
    assert [(c.call_id, c.content) for c in continued.tool_calls] == [("call_1_0", "Wrote 1 bytes to a.txt.")]
    assert approvals(continued) == [("call_1_0", "approved", "upgrader")]
    assert files(ids["continued"]) == {"a.txt": "a"}
    calls = 2 + len(sent)
    assert continued.usage == Usage(input_tokens=10 * calls, output_tokens=5 * calls)
    assert continued.runs >= 2

    chat = result("chat")
    assert (parked["chat_first"], done["chat_second"]) == ("you said hello", "and then second")
    assert said(chat) == [
        ("user", "hello"),
        ("assistant", "you said hello"),
        ("user", "second"),
        ("assistant", "and then second"),
    ]
    assert (chat.usage, chat.runs, chat.closed_by) == (
        Usage(input_tokens=20, output_tokens=10),
        3,
        "end_signal",
    )

    parent, child = result("subagent"), result("child")
    assert parent.final_text == "The scribe says: Wrote 9 bytes to note.txt."
    assert approvals(child) == [("call_1_0", "approved", "upgrader")]
    assert files(f"{ids['subagent']}/call_1_0") == {"note.txt": "buy milk\n"}
    assert child.usage == Usage(input_tokens=20, output_tokens=10)
    assert parent.usage == Usage(input_tokens=20, output_tokens=10) + child.usage  # its own two calls

    compaction = result("compaction")
    assert done["compaction_second"] == "you said second"
    [summary] = [m for m in compaction.messages if isinstance(m, SummaryMessage)]
    assert summary.text.startswith("(scripted summary of 2 model turns) The user said: go")
    assert (compaction.usage, compaction.runs) == (Usage(input_tokens=530, output_tokens=20), 4)

    fork = result("fork")
    assert said(fork) == [
        ("system", "Be brief."),
        ("user", "What is 1 + 2?"),
        ("assistant", "3"),
        ("user", "Save it."),
        ("assistant", ""),
        ("tool_result", "Wrote 1 bytes to f.txt."),
        ("assistant", "Wrote 1 bytes to f.txt."),
    ]
    assert approvals(fork) == [("call_2_0", "approved", "upgrader")]
    assert files(ids["fork"]) == {"f.txt": "3"}

    interrupted = result("interrupted")
    assert [(r.text, r.stop_reason) for r in interrupted.replies] == [
        ("[no answer: interrupted by a newer message]", "interrupted"),
        ("a slow streamed answer", "completed"),  # the script's first step again: nothing answered it
    ]
    assert (interrupted.usage, interrupted.model_calls) == (Usage(input_tokens=10, output_tokens=5), 1)

    # What went on the wire: the names both releases know, sent by this release's client, their
    # child or their parent alike.
    child_id = f"{ids['subagent']}/call_1_0"
    assert await _signals(client, ids["continued"], first_runs[ids["continued"]]) == [
        wire.POST_MESSAGE
    ] * len(sent)
    assert await _signals(client, ids["subagent"], first_runs[ids["subagent"]]) == [
        wire.SUBAGENT_APPROVALS,
        wire.APPROVE,
        wire.SUBAGENT_APPROVALS,
    ]
    assert await _signals(client, child_id, first_runs[child_id]) == [wire.APPROVE]


async def _signals(client: Client, workflow_id: str, run_id: str | None = None) -> list[str]:
    """The names of the signals a run (default: the latest) received, in order."""
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    return [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history.events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]


async def _workers(client: Client, workflow_id: str, first_run: str) -> list[int]:
    """The process ids of the workers that completed the conversation's workflow tasks, run by run."""
    pids: list[int] = []
    run_id: str | None = first_run
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        run_id = None
        for event in history.events:
            if event.HasField("workflow_task_completed_event_attributes"):
                pids.append(int(event.workflow_task_completed_event_attributes.identity.partition("@")[0]))
            if event.HasField("workflow_execution_continued_as_new_event_attributes"):
                run_id = event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return pids
