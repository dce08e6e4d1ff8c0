"""The activities the workflow calls: one definition of each name (its identity in history: never
change it) with its input and output types. The workflow calls them by these; the activities are
declared with ``@CALL_MODEL.defn``, and registered again under their old names
(``under_old_name``, workflows/wire.py); the starter and the benchmarks read ``.name``."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio import activity, workflow
from temporalio.exceptions import ActivityError, CancelledError, FailureError

from durable_agents.workflows import tenancy, versioning, wire
from durable_agents.workflows.activity_io import (
    AgentRef,
    HookDecision,
    HookInvocation,
    JudgeAnswer,
    JudgeInput,
    ModelCallInput,
    Notification,
    ResolvedAgent,
    ToolInvocation,
    ToolOutcome,
    ToolSpec,
    brief,
    run_key,
)
from durable_agents.workflows.config import MCPServerConfig
from durable_agents.workflows.messages import ModelResponse
from durable_agents.workflows.outages import OutageWatcher, wait_out_outages
from durable_agents.workflows.records import Verdict
from durable_agents.workflows.signatures import SignedDecision

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ActivityRef:
    name: str
    """Namespaced (workflows/wire.py): what a run from before the rule schedules is ``old_name``."""
    input: type
    output: Any
    """The result type the workflow decodes (a type or an alias such as ``list[ToolSpec]``)."""

    def defn(self, fn: F) -> F:
        """``activity.defn`` under this name: ``@CALL_MODEL.defn``."""
        return activity.defn(name=self.name)(fn)

    @property
    def old_name(self) -> str:
        """The name runs from before the namespace schedule it by (workflows/wire.py)."""
        return wire.OLD_NAMES[self.name]

    def under_old_name(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The activity ``fn`` (declared with ``defn``) again, as an activity named ``old_name``: a
        worker registers both, for conversations started before the namespace."""

        @functools.wraps(fn, updated=())  # its signature and type hints, not its definition
        async def again(*args: Any) -> Any:
            return await fn(*args)

        return activity.defn(name=self.old_name)(again)

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
                    self.name,
                    arg.with_kept(kept) if kept else arg,
                    result_type=self.output,
                    **options,
                ),
                outages,
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError) and workflow.cancellation_reason() is not None:
                raise asyncio.CancelledError(workflow.cancellation_reason()) from err
            raise


RESOLVE_AGENT = ActivityRef(wire.RESOLVE_AGENT, AgentRef, ResolvedAgent)
LIST_MCP_TOOLS = ActivityRef(wire.LIST_MCP_TOOLS, MCPServerConfig, list[ToolSpec])
CALL_MODEL = ActivityRef(wire.CALL_MODEL, ModelCallInput, ModelResponse)
RUN_TOOL = ActivityRef(wire.RUN_TOOL, ToolInvocation, ToolOutcome)
RUN_HOOK = ActivityRef(wire.RUN_HOOK, HookInvocation, HookDecision)
VERIFY_DECISION = ActivityRef(wire.VERIFY_DECISION, SignedDecision, Verdict)
JUDGE = ActivityRef(wire.JUDGE, JudgeInput, JudgeAnswer)
"""A model judge's opinion of a waiting call (workflows/judges.py); new with the namespace: no old name."""
NOTIFY = ActivityRef(wire.NOTIFY, Notification, type(None))
"""Tell the agent's webhook that a call waits (workflows/notifications.py); no old name."""


def conversation_key() -> str:
    """In workflow code: what the activities key a conversation's stored data by. Stable across
    continue-as-new, and distinct from an earlier conversation that used the same id; scoped by the
    conversation's tenant, when it has one (workflows/tenancy.py)."""
    info = workflow.info()
    return tenancy.scoped_key(
        run_key(info.workflow_id, info.first_execution_run_id), tenancy.current().tenant
    )


LEAN_CALLS_PATCH = versioning.patch("lean-calls", added=3)


def call_key() -> str:
    """In workflow code: the conversation key as a call carries it. Empty where the activity takes it
    from its own run (``activity_io.implied``; a tool call its idempotency key too): in a lean run
    (``stores_of``), a conversation's first run without a tenant, whose key is that run's."""
    key = conversation_key()
    info = workflow.info()
    implied = key == run_key(info.workflow_id, info.run_id)
    return "" if implied and versioning.since(LEAN_CALLS_PATCH) else key


def stores_of(agent: ResolvedAgent) -> str:
    """In workflow code: the conversation's store identity as its calls carry it, ``brief`` in a lean
    run. Lean calls keep 0.6 KB out of the history of a conversation of five calls; a run is lean
    unless a worker of a release before it may run its calls, which reads each field whole."""
    return brief(agent.stores) if agent.stores and versioning.since(LEAN_CALLS_PATCH) else agent.stores


def failure_text(err: ActivityError) -> str:
    """What the activity itself said (its own error, or the timeout), not the SDK error beneath it."""
    cause = err.cause
    return cause.message if isinstance(cause, FailureError) else str(cause or err)
