"""Checked-in histories of real runs must replay on today's workflow code (determinism guard)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.support.paths import TESTS
from workflows.agent import AgentWorkflow

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
        "demo",
        "follow_ups",
        "fork",
        "interrupted",
        "interrupted_streamed",
        "lean_start",
        "limit_final_answer",
        "mcp_time",
        "model_fallback",
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
