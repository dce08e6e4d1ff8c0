"""Tools that must run at most once: never retried once an attempt may have started its effect.

A call of such a tool (``@tool(at_most_once=True)``, or ``at_most_once = ["pay"]`` in an agent file)
runs as one activity attempt at a time (Temporal retries nothing). An attempt that failed before the
tool's function ran says so (``ToolNotStarted``, activities/tool_activity.py) and is tried again, up
to the tool's ``max_attempts``. Any other end without a result (the worker lost, a timeout, an
attempt cancelled, an error raised from the tool) leaves the outcome unknown: the effect may have
happened. The call then waits for a person, through the approval channel (``decide``, ``approve``,
``reject``; ``pending`` lists it as ``<call id>.unknown``): approve runs it again, approve with a
``result`` records that as its result, reject fails it. The model reads what was decided.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from durable_agents.workflows.activity_io import ToolOutcome, ToolSpec
from durable_agents.workflows.activity_refs import failure_text
from durable_agents.workflows.approvals import Approvals
from durable_agents.workflows.decisions import Answer, Refuse, RunTool, decided
from durable_agents.workflows.events import ApprovalRequested, ConversationEvents
from durable_agents.workflows.messages import ToolCall
from durable_agents.workflows.records import ApprovalRecord

NOT_STARTED = "ToolNotStarted"
"""The error type of an attempt refused before the tool's function ran: safe to try again."""


def not_started(err: ActivityError) -> bool:
    return isinstance(err.cause, ApplicationError) and err.cause.type == NOT_STARTED


async def run_at_most_once(
    tool: ToolSpec,
    call: ToolCall,
    attempt: Callable[[], Awaitable[ToolOutcome]],
    approvals: Approvals,
    events: ConversationEvents,
    deadline: timedelta | None,
    wait_for_decision: Callable[[ApprovalRecord], Awaitable[bool]],
) -> ToolOutcome:
    """The call's outcome: from an attempt that ended, or as a person decided about one that did not."""
    refused = 0
    while True:
        try:
            return await attempt()
        except ActivityError as err:
            if not_started(err) and refused + 1 < max(tool.call.max_attempts, 1):
                refused += 1
                await workflow.sleep(timedelta(seconds=tool.call.initial_retry_seconds))
                continue
            workflow.logger.warning("tool %s: outcome unknown: %s", call.name, failure_text(err))
            record = approvals.request_outcome(call, deadline, workflow.now())
            record.reason = failure_text(err)  # what the person sees of why
            events.publish(ApprovalRequested(record=record))
            await wait_for_decision(record)
        kind = decided(record)
        step = kind.then(call) if kind is not None else Refuse(f"Tool call '{call.name}': outcome unknown")
        match step:
            case RunTool():
                refused = 0
                continue
            case Answer(content=content):
                return ToolOutcome(content=content)
            case Refuse(content=content):
                return ToolOutcome(content=content, is_error=True)
