"""A conversation in flight across an upgrade finds the files an earlier release wrote, in whichever
layout that release kept them (``stores/layouts.py``), all in today's folder afterwards."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle

from durable_agents.plugin import build_worker
from durable_agents.settings import Settings
from durable_agents.testing import conversation, scripted_agent, step
from stores.layouts import WORKSPACE_LAYOUTS, workflow_id_folder
from stores.workspaces import folder_name, move_into
from tests.support.conversations import wait_for_pending
from workflows.agent import AgentWorkflow
from workflows.records import ApprovalSignal

FILE_TOOLS = ["write_file", "read_file", "list_files"]
EARLIER = WORKSPACE_LAYOUTS[:-1]


def _agent() -> object:
    """Writes new.txt (a person approves it), then reads keep.txt and lists the workspace."""
    return scripted_agent(
        step("", ("write_file", {"path": "new.txt", "content": "new"})),
        step("", ("read_file", {"path": "keep.txt"}), ("list_files", {"path": "."})),
        step("{last_result}"),
        tools=FILE_TOOLS,
    )


async def _until_approved(handle: WorkflowHandle, before_approval: object) -> list[tuple[str, bool]]:
    await wait_for_pending(handle)
    before_approval()  # type: ignore[operator]
    await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_1_0", by="t"))
    result = await handle.result()
    return [(c.content, c.is_error) for c in result.tool_calls]


@pytest.mark.parametrize("layout", EARLIER, ids=[layout.name for layout in EARLIER])
async def test_a_conversation_in_flight_finds_the_files_an_earlier_release_wrote(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: object
) -> None:
    # The defaults of every release: AGENT_WORKSPACE unset, the worker started in tmp_path.
    monkeypatch.chdir(tmp_path)
    settings = Settings(data_dir=tmp_path / "data")
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    async with build_worker(client, task_queue=task_queue, settings=settings):
        handle = await client.start_workflow(
            AgentWorkflow.run, conversation(_agent()), id=f"up-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
        key = f"{handle.id}/{handle.first_execution_run_id}"
        earlier = layout.root(None, settings.data_dir) / layout.folder(key)  # type: ignore[attr-defined]

        def written_by_the_earlier_worker() -> None:
            earlier.mkdir(parents=True)
            (earlier / "keep.txt").write_text("kept")

        calls = await _until_approved(handle, written_by_the_earlier_worker)

    current = tmp_path / "data" / "workspace" / folder_name(key)
    assert calls == [
        ("Wrote 3 bytes to new.txt.", False),
        ("kept", False),
        ('["keep.txt", "new.txt"]', False),
    ]
    assert sorted(p.name for p in current.iterdir()) == ["keep.txt", "new.txt"]
    assert not earlier.exists()  # nothing left behind: no split


async def test_a_new_conversation_reusing_an_id_leaves_the_first_release_folder_of_a_finished_one(
    client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "workspace"
    settings = Settings(data_dir=tmp_path / "data", workspace=root)
    workflow_id = f"reused-{uuid.uuid4().hex[:8]}"
    finished = root / workflow_id_folder(f"{workflow_id}/r")
    finished.mkdir(parents=True)
    (finished / "keep.txt").write_text("theirs")
    an_hour_ago = time.time() - 3600
    for path in (finished / "keep.txt", finished):
        os.utime(path, (an_hour_ago, an_hour_ago))
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    async with build_worker(client, task_queue=task_queue, settings=settings):
        handle = await client.start_workflow(
            AgentWorkflow.run, conversation(_agent()), id=workflow_id, task_queue=task_queue
        )
        calls = await _until_approved(handle, lambda: None)

    assert calls == [
        ("Wrote 3 bytes to new.txt.", False),
        ("No file 'keep.txt' in the workspace.", True),
        ('["new.txt"]', False),
    ]
    assert (finished / "keep.txt").read_text() == "theirs"


def test_moving_in_merges_folders_and_keeps_the_newer_of_two_files(tmp_path: Path) -> None:
    source, target = tmp_path / "old", tmp_path / "new"
    (source / "notes").mkdir(parents=True)
    (source / "notes" / "a.txt").write_text("old a")
    (source / "b.txt").write_text("newer b")
    (target / "notes").mkdir(parents=True)
    (target / "notes" / "a.txt").write_text("new a")
    (target / "b.txt").write_text("older b")
    os.utime(target / "b.txt", (time.time() - 60, time.time() - 60))

    move_into(source, target)

    assert not source.exists()
    assert (target / "notes" / "a.txt").read_text() == "new a"
    assert (target / "b.txt").read_text() == "newer b"


def test_the_layouts_name_the_first_release_folder_by_workflow_id_and_later_ones_by_key() -> None:
    key = "alice/notes 1/0193-run"
    assert [layout.folder(key) for layout in WORKSPACE_LAYOUTS] == [
        "alice_notes_1",
        folder_name(key),
        folder_name(key),
    ]
    assert [layout.root(None, Path("d")) for layout in WORKSPACE_LAYOUTS] == [
        Path("workspace").resolve(),
        Path("workspace").resolve(),
        Path("d/workspace").resolve(),
    ]
