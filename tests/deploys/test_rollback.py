"""A rollback: histories written by a newer release met by this one's worker (docs/production.md,
"Rolling back"). The newer release is a scratch copy of this checkout, changed as a next release
would be (its ``RELEASE`` bumped, a field added to a sub-agent's origin and to the carried state),
run as its own ``worker.py`` process. Alone, it writes its new conversations its own way (no
marker: the build id of their first task names its release): this release refuses them in one line
naming that release, and a person's
``approve`` is answered at once. Beside this release's worker (a rolling rollback), it writes them
this release's way (durable_agents/worker/fleet.py): this release carries them on. The newer release's
worker, back, finishes what was refused: nothing is lost."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from durable_agents.dev_server import EmbeddedServer
from durable_agents.settings import Settings
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.worker.versioning import releases_in
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationResult, MessageInput
from durable_agents.workflows.records import ApprovalSignal
from durable_agents.workflows.versioning import RELEASE
from tests.support.cli import starter
from tests.support.conversations import send, wait_for_pending
from tests.support.paths import ROOT
from tests.support.releases import CHAT, SUBAGENT, ReleaseWorker

NEXT = RELEASE + 1
NEXT_RELEASE = {
    "workflows/versioning.py": [(f"\nRELEASE = {RELEASE}\n", f"\nRELEASE = {NEXT}\n")],
    "workflows/subagents.py": [
        ("        call_id=call_id,\n", "        call_id=call_id,\n        priority=7,\n"),
    ],
    "workflows/api.py": [
        ("    parent_workflow_id: str\n", "    parent_workflow_id: str\n    priority: int = 0\n"),
    ],
    "workflows/state.py": [
        (
            "    agent: ResolvedAgent | None = None\n",
            "    agent: ResolvedAgent | None = None\n    note: str = ''\n",
        ),
    ],
    "workflows/agent.py": [
        (
            "        self._s.runs += 1\n",
            "        self._s.runs += 1\n        self._s.note = 'from the next release'\n",
        ),
    ],
}
"""What the next release changes, as (this release's text, the next one's) in each file."""


@pytest.fixture(scope="module")
def next_release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This checkout as its files are now, copied and changed as ``NEXT_RELEASE`` says."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    copy = tmp_path_factory.mktemp("next") / "checkout"
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    for name, changes in NEXT_RELEASE.items():
        text = (copy / name).read_text()
        for old, new in changes:
            assert text.count(old) == 1, (name, old)
            text = text.replace(old, new)
        (copy / name).write_text(text)
    yield copy
    shutil.rmtree(copy)


APPROVAL = conversation(
    scripted_agent(
        step("", ("write_file", {"path": "a.txt", "content": "a"})),
        step("{last_result}"),
        tools=["write_file"],
    )
)
"""A conversation waiting for a person on write_file: nothing in its history is new."""


async def test_a_rollback_carries_on_what_it_can_replay_and_refuses_the_rest_naming_the_release(
    next_release: Path,
    server: EmbeddedServer,
    client: Client,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue, suffix = f"rollback-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:6]
    ids = {name: f"rollback-{name}-{suffix}" for name in ("subagent", "chat", "approval")}
    data = tmp_path / "data"
    child_id = f"{ids['subagent']}/call_1_0"

    newer = ReleaseWorker(next_release, server.address, queue, data)
    try:
        await newer.polling()
        parent = await client.start_workflow(
            AgentWorkflow.run, SUBAGENT, id=ids["subagent"], task_queue=queue
        )
        await wait_for_pending(parent, timeout=30)
        # This release's worker polls too: the newer one writes what it starts now this release's way.
        ours = build_worker(client, task_queue=queue, settings=Settings(data_dir=data))
        polling = asyncio.create_task(ours.run())
        await newer.logged(f"a worker of release {RELEASE} polls task queue {queue}")
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
        assert reply.text == "you said hello"
        approval = await client.start_workflow(
            AgentWorkflow.run, APPROVAL, id=ids["approval"], task_queue=queue
        )
        await wait_for_pending(approval, timeout=30)
        chat = client.get_workflow_handle(ids["chat"])
        while (await chat.describe()).run_id == (await start_chat.workflow_handle()).result_run_id:
            await asyncio.sleep(0.05)  # the chat continues as new, carrying the next release's state
    finally:
        newer.stop()
    assert releases_in((await parent.fetch_history()).events) == {NEXT}
    assert releases_in((await approval.fetch_history()).events) == {RELEASE}

    caplog.set_level(logging.ERROR, logger="durable_agents.worker.versioning")
    refused = (
        f"error: {ids['subagent']} cannot take a decision now: the workers polling task queue {queue}"
        f" cannot load it; its history was written by release {NEXT}: a worker of release {NEXT} or"
        f" later can; nothing was sent (the worker: this run was written by release {NEXT}; this worker"
        f" is release {RELEASE} and cannot replay it)\n"
    )

    async def approve_at_parent() -> None:
        code, out, err = await asyncio.wait_for(
            starter(server, "approve", ids["subagent"], "call_1_0/call_1_0", "--by", "ops"), 30
        )
        assert (code, out, err.startswith(refused), len(err.splitlines())) == (1, "", True, 1), err

    try:
        # Refused: the parent's history names the next release. Approve answers at once, while the
        # parent waits (the decision would start the workflow task that fails)...
        await approve_at_parent()

        # Carried on: what the next release started beside this one (the chat's carried state has a
        # field this release ignores).
        assert await send(chat, "second") == "and then second"
        code, out, err = await starter(server, "approve", ids["approval"], "call_1_0", "--by", "ops")
        assert (code, out) == (0, f"write_file call call_1_0 of {ids['approval']}: approved by ops\n"), err
        assert (await approval.result()).final_text == "Wrote 1 bytes to a.txt."
        parent_run = (await parent.describe()).run_id
        told = [r.getMessage() for r in caplog.records if r.name == "durable_agents.worker.versioning"]
        ours_told = (
            f"conversation {ids['subagent']} (run {parent_run}) cannot be replayed by this worker"
            f" (release {RELEASE}): its history was written by release {NEXT}; workers of release {NEXT}"
            " or later can. Its workflow tasks fail and are retried, nothing lost, until a worker that"
            f" can replay it polls task queue {queue}. Temporal: "
        )
        # Then the SDK's reason as it gave it (its text is not ours to read, only to show).
        assert len(told) == 1 and told[0].startswith(ours_told), told
        assert f"written by release {NEXT}" in told[0].removeprefix(ours_told)

    finally:
        await ours.shutdown()
        await polling

    newer = ReleaseWorker(next_release, server.address, queue, data)
    try:
        await newer.polling()
        # The child, started by the next release alone, waited for it too.
        child = client.get_workflow_handle_for(AgentWorkflow.run, child_id)
        assert releases_in((await child.fetch_history()).events) == {NEXT}
        await child.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_1_0", by="ops"))
        assert (await asyncio.wait_for(child.result(), 30)).final_text == "Wrote 9 bytes to note.txt."
        result: ConversationResult = await asyncio.wait_for(parent.result(), 30)
    finally:
        newer.stop()
    assert result.final_text == "The scribe says: Wrote 9 bytes to note.txt."
