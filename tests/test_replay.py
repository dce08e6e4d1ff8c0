"""Checked-in histories of real runs must replay on today's workflow code (determinism guard)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.agent import AgentWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_histories_are_checked_in() -> None:
    assert [p.stem for p in HISTORIES] == [
        "approval",
        "approval_bound",
        "cancelled",
        "compaction",
        "continue_as_new",
        "demo",
        "follow_ups",
        "lean_start",
        "limit_final_answer",
        "mcp_time",
        "tool_errors",
    ]


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays_without_nondeterminism(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
