"""Checked-in histories of real runs must replay on today's workflow code (determinism guard)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from durable_agents.workflows import versioning, wire
from durable_agents.workflows.agent import AgentWorkflow
from tests.support.paths import TESTS

HISTORIES = sorted((TESTS / "histories").glob("*.json"))


def test_histories_are_checked_in() -> None:
    assert [p.stem for p in HISTORIES] == [
        "approval",
        "approval_bound",
        "approval_decisions",
        "cancelled",
        "chat_continued",
        "compaction",
        "compaction_continued",
        "continue_as_new",
        "continued_approval",
        "follow_ups",
        "fork",
        "guardrail_retry",
        "handoff",
        "interrupted",
        "interrupted_streamed",
        "lean_start",
        "limit_final_answer",
        "mcp_time",
        "model_fallback",
        "namespaced_at_most_once",
        "namespaced_canceled",
        "namespaced_client_deadline",
        "namespaced_client_tool",
        "namespaced_client_tool_continued",
        "namespaced_client_waiting",
        "namespaced_client_waiting_continued",
        "namespaced_decisions",
        "namespaced_interrupt_signal",
        "namespaced_judges",
        "namespaced_subagent",
        "namespaced_subagent_canceled",
        "namespaced_subagent_canceled_child",
        "namespaced_subagent_child",
        "namespaced_tenant_budget",
        "streamed",
        "subagent",
        "subagent_budgets",
        "subagent_budgets_child",
        "subagent_child",
        "subagent_decided",
        "subagent_decided_child",
        "tool_errors",
        "typed_answer",
        "update_with_start",
    ]


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays_without_nondeterminism(path: Path) -> None:
    # The id it was recorded under (record_histories.py): a sub-agent's workflow id derives from it.
    history = WorkflowHistory.from_json(f"record-{path.stem}", path.read_text())
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None


def _names(history: WorkflowHistory) -> tuple[set[str], set[str]]:
    """The names its activities, signals, updates and signals to other conversations went by, and
    the patches its run recorded."""
    names, patches = set(), set()
    for e in history.events:
        names.update(_named(e))
        marker = e.marker_recorded_event_attributes
        if marker.marker_name == "core_patch":
            patches.add(json.loads(marker.details["patch-data"].payloads[0].data)["id"])
        elif marker.marker_name == "core_local_activity":
            names.add(json.loads(marker.details["data"].payloads[0].data)["activity_type"])
    return names, patches


def _named(e: HistoryEvent) -> list[str]:
    return [
        name
        for name in (
            e.activity_task_scheduled_event_attributes.activity_type.name,
            e.workflow_execution_signaled_event_attributes.signal_name,
            e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name,
            e.signal_external_workflow_execution_initiated_event_attributes.signal_name,
        )
        if name
    ]


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_each_history_goes_by_the_namespaced_names_throughout(path: Path) -> None:
    """Every history in the support window goes by the namespaced names (the stream's SDK-named
    updates aside, workflows/wire.py; the old names went with release 1): a run of the
    patch-per-branch way records the names' patch, a later one its release's marker alone or no
    marker (workflows/versioning.py)."""
    names, patches = _names(WorkflowHistory.from_json("h", path.read_text()))
    ours = {name for name in names if not name.startswith("__temporal")}
    lean = {versioning.marker(release) for release in range(versioning.FIRST_LEAN, versioning.RELEASE + 1)}
    assert ours and all(name.startswith(wire.NAMESPACE) for name in ours), ours
    assert patches <= lean if patches & lean or not patches else wire.PATCH.id in patches, patches
