"""The replay guard (tests/workflow/test_replay.py) sees every path a conversation can be on: an unguarded
change to any one of them, made in a scratch copy of the workflow code, fails the replay of the
checked-in history of that path, and of no other (so no other history would have caught it)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from durable_agents.workflows import agent as agent_module
from tests.support.paths import TESTS

HISTORIES = sorted((TESTS / "histories").glob("*.json"))
NONDETERMINISM = "TMPRL1100"


@dataclass(frozen=True)
class Change:
    """``anchor`` in ``module`` (it must occur once) gets ``added`` right before it."""

    module: str
    anchor: str
    added: str
    caught_by: set[str]
    """The histories whose replay must fail."""


SLEEP = "await workflow.sleep(1)"
INTERRUPTED = (
    '                        self._finish_turn("interrupted", note=self._interrupt_note())\n'
    "                elif self._s.queue:\n"
)
CHANGES = {
    "a continued run": Change(
        "durable_agents.workflows.agent",
        "            self._board.name_agent(agent.spec.name, agent.spec.max_iterations)\n",
        f"            if input.state is not None:\n                {SLEEP}\n",
        {
            "chat_continued",
            "compaction_continued",
            "continued_approval",
            "namespaced_client_tool_continued",
            "namespaced_client_waiting_continued",
        },
    ),
    "a pending approval carried across": Change(
        "durable_agents.workflows.agent",
        "        remaining = None if record.deadline is None else time_left(record.deadline, workflow.now())"
        "\n",
        f"        if any(a.call_id == record.call_id for a in self._s.approvals):\n            {SLEEP}\n",
        {"continued_approval"},
    ),
    "a chat continued while waiting": Change(
        "durable_agents.workflows.agent",
        '        self._board.set("idle", "waiting for the next message")\n',
        f"        if self._s.runs > 1:\n            {SLEEP}\n",
        {"chat_continued"},
    ),
    "a sub-agent started with budgets": Change(
        "durable_agents.workflows.agent",
        "        resolved.tools = offered(resolved.tools, input.subagent)\n",
        f"        if input.subagent and input.subagent.token_budget is not None:\n            {SLEEP}\n",
        {"subagent_budgets_child"},
    ),
    "compaction after a continue-as-new": Change(
        "durable_agents.workflows.model_calls",
        "        replaces = cut - view_start(s.messages)\n",
        f"        if s.runs > 1:\n            {SLEEP}\n",
        {"compaction_continued"},
    ),
    "an interrupted streamed call": Change(
        "durable_agents.workflows.agent",
        INTERRUPTED,
        f"                        if agent.spec.model.stream:\n                            {SLEEP}\n",
        {"interrupted_streamed"},
    ),
    "a turn the interrupt signal ended": Change(
        "durable_agents.workflows.agent",
        INTERRUPTED,
        f"                        if self._s.turn.interrupt:\n                            {SLEEP}\n",
        {"namespaced_interrupt_signal"},
    ),
    "a model judge's opinion": Change(
        "durable_agents.workflows.judges",
        "                opinion = await self._opinion(agent, judge, tool, record)\n",
        f"                if judge.kind == 'model':\n                    {SLEEP}\n",
        {"namespaced_judges"},
    ),
    "an at-most-once call whose outcome is unknown": Change(
        "durable_agents.workflows.at_most_once",
        "            record = approvals.request_outcome(call, deadline, workflow.now())\n",
        f"            {SLEEP}\n",
        {"namespaced_at_most_once"},
    ),
    "a client tool's call carried across": Change(
        "durable_agents.workflows.client_tools",
        "        record = waiting\n",
        f"        if workflow.info().continued_run_id is not None:\n            {SLEEP}\n",
        {"namespaced_client_tool_continued", "namespaced_client_waiting_continued"},
    ),
    "a fork": Change(
        "durable_agents.workflows.agent",
        "            self._board.name_agent(agent.spec.name, agent.spec.max_iterations)\n",
        f"            if input.history:\n                {SLEEP}\n",
        {"fork"},
    ),
    "a conversation that ends Canceled": Change(
        "durable_agents.workflows.agent",
        "            raise  # Canceled: the history query (on the closed run too) keeps the transcript\n",
        f"            {SLEEP}\n",
        {
            "cancelled",
            "namespaced_canceled",
            "namespaced_subagent_canceled",
            "namespaced_subagent_canceled_child",
        },
    ),
    "a sub-agent's last report as it ends cancelled": Change(
        "durable_agents.workflows.subagents",
        "        report = self._next([], {}, cancelled=SubagentAnswer.of(result))\n",
        f"        {SLEEP}\n",
        {"namespaced_subagent_canceled_child"},
    ),
    "a parent that takes a Canceled sub-agent's answer": Change(
        "durable_agents.workflows.subagents",
        "            answer = self._cancelled.get(call.id) or _UNREPORTED",
        f"            {SLEEP}\n",
        {"namespaced_subagent_canceled"},
    ),
    "a turn refused by the ledger": Change(
        "durable_agents.workflows.agent",
        '                self._finish_turn("budget_exhausted", note=refused.text)\n',
        f"                {SLEEP}\n",
        {"namespaced_tenant_budget"},
    ),
    "an answer an output guardrail sent back": Change(
        "durable_agents.workflows.agent",
        "            turn.guardrail_retries += 1\n",
        f"            {SLEEP}\n",
        {"guardrail_retry"},
    ),
    "a handoff to another agent": Change(
        "durable_agents.workflows.agent",
        "        self._s.agent = target\n",
        f"        {SLEEP}\n",
        {"handoff"},
    ),
}


def _load(name: str, source: str, folder: Path) -> ModuleType:
    """``source`` as a module of its own (a scratch copy: the real module stays as it is)."""
    path = folder / f"{name.replace('.', '_')}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"scratch_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # where pydantic looks up the names its models' annotations use
    spec.loader.exec_module(module)
    return module


def changed_workflow(change: Change, folder: Path) -> type:
    """``AgentWorkflow`` from a scratch copy of the workflow code with ``change`` made."""
    real = importlib.import_module(change.module)
    source = Path(real.__file__ or "").read_text()
    assert source.count(change.anchor) == 1, f"the anchor is not once in {change.module}: {change.anchor!r}"
    changed = _load(change.module, source.replace(change.anchor, change.added + change.anchor), folder)
    if change.module == "durable_agents.workflows.agent":
        return changed.AgentWorkflow
    agent = _load("durable_agents.workflows.agent", Path(agent_module.__file__ or "").read_text(), folder)
    for name, value in vars(agent).items():  # the agent module uses the changed module's classes
        if getattr(value, "__module__", None) == change.module and hasattr(changed, name):
            setattr(agent, name, getattr(changed, name))
    return agent.AgentWorkflow


async def failing_histories(workflow_class: type) -> dict[str, str]:
    """The checked-in histories whose replay on ``workflow_class`` fails, with the failure."""
    histories = {p.stem: WorkflowHistory.from_json(f"record-{p.stem}", p.read_text()) for p in HISTORIES}

    async def each() -> AsyncIterator[WorkflowHistory]:
        for history in histories.values():
            yield history

    replayer = Replayer(workflows=[workflow_class], data_converter=pydantic_data_converter)
    results = await replayer.replay_workflows(each(), raise_on_replay_failure=False)
    names = {history.run_id: name for name, history in histories.items()}
    return {names[run_id]: str(failure) for run_id, failure in results.replay_failures.items()}


async def test_the_unchanged_workflow_code_replays_every_history(tmp_path: Path) -> None:
    change = CHANGES["a fork"]
    unchanged = Change(change.module, change.anchor, "", set())
    assert await failing_histories(changed_workflow(unchanged, tmp_path)) == {}


@pytest.mark.parametrize("path", CHANGES)
async def test_an_unguarded_change_on_each_path_fails_the_replay_of_its_history(
    path: str, tmp_path: Path
) -> None:
    change = CHANGES[path]
    failures = await failing_histories(changed_workflow(change, tmp_path))

    assert set(failures) == change.caught_by
    assert all(NONDETERMINISM in failure for failure in failures.values()), failures
