"""The activities the workflow calls: one definition of each name (its identity in history: never
change it) with its input and output types. The workflow calls them by these; the activities are
declared with ``@CALL_MODEL.defn``; the starter and the benchmarks read ``.name``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio import activity, workflow
from temporalio.exceptions import ActivityError, CancelledError, FailureError

from workflows.activity_io import (
    AgentRef,
    HookDecision,
    HookInvocation,
    ModelCallInput,
    ResolvedAgent,
    ToolInvocation,
    ToolOutcome,
    ToolSpec,
)
from workflows.config import MCPServerConfig
from workflows.messages import ModelResponse
from workflows.outages import OutageWatcher, wait_out_outages
from workflows.records import Verdict
from workflows.signatures import SignedDecision

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ActivityRef:
    name: str
    input: type
    output: Any
    """The result type the workflow decodes (a type or an alias such as ``list[ToolSpec]``)."""

    def defn(self, fn: F) -> F:
        """``activity.defn`` under this name: ``@CALL_MODEL.defn``."""
        return activity.defn(name=self.name)(fn)

    async def execute(
        self, arg: Any, *, local: bool = False, outages: OutageWatcher | None = None, **options: Any
    ) -> Any:
        """In workflow code: ``workflow.execute_activity`` (or ``execute_local_activity``) of this
        activity, tried again while its store is out (``outages`` is told), where a call cancelled
        with the conversation raises ``asyncio.CancelledError``: the conversation's cancellation,
        not a failed call."""
        execute = workflow.execute_local_activity if local else workflow.execute_activity
        try:
            return await wait_out_outages(
                lambda kept: execute(
                    self.name, arg.with_kept(kept) if kept else arg, result_type=self.output, **options
                ),
                outages,
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError) and workflow.cancellation_reason() is not None:
                raise asyncio.CancelledError(workflow.cancellation_reason()) from err
            raise


RESOLVE_AGENT = ActivityRef("resolve_agent", AgentRef, ResolvedAgent)
LIST_MCP_TOOLS = ActivityRef("list_mcp_tools", MCPServerConfig, list[ToolSpec])
CALL_MODEL = ActivityRef("call_model", ModelCallInput, ModelResponse)
RUN_TOOL = ActivityRef("run_tool", ToolInvocation, ToolOutcome)
RUN_HOOK = ActivityRef("run_hook", HookInvocation, HookDecision)
VERIFY_DECISION = ActivityRef("verify_decision", SignedDecision, Verdict)


def conversation_key() -> str:
    """In workflow code: what the activities key a conversation's stored data by. Stable across
    continue-as-new, and distinct from an earlier conversation that used the same id."""
    info = workflow.info()
    return f"{info.workflow_id}/{info.first_execution_run_id}"


def failure_text(err: ActivityError) -> str:
    """What the activity itself said (its own error, or the timeout), not the SDK error beneath it."""
    cause = err.cause
    return cause.message if isinstance(cause, FailureError) else str(cause or err)
