"""A conversation in flight across an upgrade finds the files an earlier release wrote, in whichever
layout that release kept them (``durable_agents/stores/layouts.py``), all in today's folder afterwards."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle

from durable_agents.settings import Settings
from durable_agents.stores.layouts import WORKSPACE_LAYOUTS, EarlierWorkspaces, workflow_id_folder
from durable_agents.stores.workspaces import folder_name, move_into
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.records import ApprovalSignal
from tests.support.conversations import wait_for_pending

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


def _writes(path: str, content: str, then: tuple[str, dict] | None = None) -> object:
    """Writes ``path`` (a person approves it), then makes ``then``'s call, if any, and answers."""
    steps = [step("", ("write_file", {"path": path, "content": content}))]
    if then is not None:
        steps.append(step("", then, ("list_files", {"path": "."})))
    return scripted_agent(*steps, step("{last_result}"), tools=FILE_TOOLS)


async def test_a_conversation_whose_id_is_another_tenants_folder_name_gets_none_of_its_files(
    client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "workspace"  # AGENT_WORKSPACE set: every layout's folders under one root
    settings = Settings(data_dir=tmp_path / "data", workspace=root)
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    async with build_worker(client, task_queue=task_queue, settings=settings):
        victim = await client.start_workflow(
            AgentWorkflow.run,
            conversation(_writes("answer.txt", "42"), tenant="acme"),
            id=f"victim-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        victims = root / folder_name(f"tenants/acme/{victim.id}/{victim.first_execution_run_id}")
        attacker = await client.start_workflow(
            AgentWorkflow.run,
            conversation(_writes("mine.txt", "mine", ("read_file", {"path": "answer.txt"}))),
            id=victims.name,
            task_queue=task_queue,
        )
        await wait_for_pending(attacker, timeout=60)
        await wait_for_pending(victim, timeout=60)
        await victim.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_1_0", by="t"))
        await victim.result()
        await attacker.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_1_0", by="t"))
        result = await attacker.result()

    assert [(c.content, c.is_error) for c in result.tool_calls] == [
        ("Wrote 4 bytes to mine.txt.", False),
        ("No file 'answer.txt' in the workspace.", True),
        ('["mine.txt"]', False),
    ]
    assert sorted(p.name for p in victims.iterdir()) == ["answer.txt"]


async def test_a_tenants_conversation_leaves_the_first_release_folder_its_scoped_key_flattens_to(
    client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "workspace"
    settings = Settings(data_dir=tmp_path / "data", workspace=root)
    workflow_id = f"notes-{uuid.uuid4().hex[:8]}"
    first_release = root / workflow_id_folder(f"tenants/acme/{workflow_id}/r")
    first_release.mkdir(parents=True)
    (first_release / "keep.txt").write_text("theirs")
    an_hour_ago = time.time() - 3600
    for path in (first_release / "keep.txt", first_release):
        os.utime(path, (an_hour_ago, an_hour_ago))
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    async with build_worker(client, task_queue=task_queue, settings=settings):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            conversation(_writes("mine.txt", "mine", ("read_file", {"path": "keep.txt"})), tenant="acme"),
            id=workflow_id,
            task_queue=task_queue,
        )
        await wait_for_pending(handle, timeout=60)
        await handle.signal(AgentWorkflow.approve, ApprovalSignal(call_id="call_1_0", by="t"))
        result = await handle.result()

    assert [(c.content, c.is_error) for c in result.tool_calls] == [
        ("Wrote 4 bytes to mine.txt.", False),
        ("No file 'keep.txt' in the workspace.", True),
        ('["mine.txt"]', False),
    ]
    assert (first_release / "keep.txt").read_text() == "theirs"


def test_a_folder_by_workflow_id_is_never_offered_when_a_keyed_layout_could_have_named_it(
    tmp_path: Path,
) -> None:
    earlier = EarlierWorkspaces.of(tmp_path, tmp_path / "data")  # AGENT_WORKSPACE: one root

    def offered(workflow_id: str) -> list[tuple[Path, bool]]:
        key = f"{workflow_id}/0194-run"
        return earlier.folders(key, tmp_path / folder_name(key))

    victims = folder_name("tenants/acme/victim-1/0193-run")
    copies = [victims, victims.upper(), "-" + victims.rpartition("-")[2]]
    assert [offered(workflow_id) for workflow_id in copies] == [[], [], []]
    assert offered("victim-1") == [(tmp_path / "victim-1", False)]
