"""Sub-agents: agents an agent may delegate to, each offered to its model as the tool ``ask_<name>``.

A call runs the agent as a child conversation (an AgentWorkflow with its own history and Web UI
page, id ``<parent id>/<call id>``, AgentParent set to the parent's id). Its final answer is the
call's result, its usage and cost count against the parent's budgets, and its failure is a tool
error for the parent's model. Cancelling the parent cancels it.

The parent shows its children's approvals: a child signals ``durable_agents.subagent_approvals``
to its parent each time the approvals it waits for change (its own and its children's), one report after the
other. The parent lists them under its own call (the child's ``call_1_0`` answering the parent's
``call_2_0`` is ``call_2_0/call_1_0``), counts them in its status and AgentStatus, and forwards a
decision sent to it for one of them to the child, as a signal bound to the arguments digest the
parent showed. A report is taken only from the child the parent started: its workflow id, and the
key the parent drew for it and gave it in its start input (anyone may send a signal; a report
with made-up arguments must not reach a person deciding at the parent). Each report carries the
JSON schema of the tools of the calls that wait, so an edit decided at the parent is checked as
the child will check it. ``decide`` at the parent answers once the child reports the decision, or
after the decision's ``wait_seconds`` with why not. Its event stream shows them too: an
``approval_requested`` when one starts to wait, an ``approval_decided`` when it is decided, or when
the child closes with it still waiting (cancelled, as the child's own record is).

A sub-agent's conversation answers one task: it never waits for a next message, whatever its agent
file says of ``chat``. An answer it gave at a limit (or after a cancellation) is a tool error that
names its stop reason. A child cancelled (with its parent, or on its own) ends Canceled in Temporal,
which keeps no result: its last report carries its answer and spend instead (``SubagentAnswer``),
and the parent takes them as it took a cancelled child's result before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError
from temporalio import workflow
from temporalio.exceptions import ApplicationError, CancelledError, ChildWorkflowError, FailureError
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

from durable_agents.workflows import tenancy, versioning, wire
from durable_agents.workflows.activity_io import ResolvedAgent, ToolOutcome, ToolSpec
from durable_agents.workflows.api import (
    AgentOverrides,
    ClosedBy,
    ConversationInput,
    ConversationResult,
    SubagentOrigin,
    start_search_attributes,
)
from durable_agents.workflows.approvals import Approvals
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.costs import conversation_cost
from durable_agents.workflows.decisions import Cancelled
from durable_agents.workflows.events import ApprovalDecided, ApprovalRequested, ConversationEvents
from durable_agents.workflows.inputs import first_error
from durable_agents.workflows.messages import ToolCall, ToolDefinition, Usage
from durable_agents.workflows.records import ApprovalRecord, ApprovalSignal, Decision, StopReason
from durable_agents.workflows.state import ConversationState

T = TypeVar("T", int, float)

REPORT_SIGNAL = "subagent_approvals"
"""What logs and errors call a report; its signal is ``wire.SUBAGENT_APPROVALS``."""
REPORT_KEY_PATCH = versioning.patch("subagent-report-key", added=2)
"""A child gets a key to sign its reports with, and the parent takes no report without it; children
started before it are taken at their word, as they were."""
DECIDE_BOUND_PATCH = versioning.patch("subagent-decide-bound", added=2)
"""``decide`` for a sub-agent's call waits ``wait_seconds`` at most (a timer); before, without end."""
STOPS_AS_ERRORS_PATCH = versioning.patch("subagent-stop-reason-errors", added=1)
"""A child's answer with a stop reason other than ``completed`` is a tool error naming the reason;
before it, only a cancelled child's was an error, and it said nothing more than the child's text."""
_TASK_PARAMETERS = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "What the agent should do, in full."}},
    "required": ["task"],
    "additionalProperties": False,
}


def tool_name(agent: str) -> str:
    return f"ask_{agent}"


def subagent_tool(spec: AgentSpec) -> ToolSpec:
    """What a delegating agent's model is told of ``spec``: a tool that takes one task."""
    return ToolSpec(
        definition=ToolDefinition(
            name=tool_name(spec.name),
            description=spec.description or f"Hand a task to the {spec.name} agent; returns its answer.",
            parameters=_TASK_PARAMETERS,
        ),
        subagent=spec.name,
    )


def offered(tools: list[ToolSpec], origin: SubagentOrigin | None) -> list[ToolSpec]:
    """The agent's tools, without the sub-agent tools for a conversation at the depth limit."""
    if origin is None or origin.depth < origin.max_depth:
        return tools
    return [tool for tool in tools if tool.subagent is None]


class SubagentAnswer(BaseModel):
    """What the parent takes of a child's end: from its result, or, for a child that ended Canceled
    (no result), from its last report."""

    final_text: str
    stop_reason: StopReason
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    closed_by: ClosedBy = "cancelled"

    @classmethod
    def of(cls, result: ConversationResult) -> SubagentAnswer:
        return cls.model_validate(result, from_attributes=True)


class ApprovalReport(BaseModel):
    """Input of the ``subagent_approvals`` signal: what a child waits for, and what was decided since
    its previous report, for the parent's call ``call_id``. Our own code sends it: fields it does not
    know (from newer code) are ignored."""

    call_id: str
    run: int
    seq: int
    approvals: list[ApprovalRecord]
    workflow_id: str = ""
    """The reporting child's workflow id."""
    key: str = ""
    """The child's ``SubagentOrigin.report_key``."""
    schemas: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """The JSON schema of each waiting call's tool, by the call's id: edits decided at the parent
    are checked against it."""
    cancelled: SubagentAnswer | None = None
    """In the last report of a child that ends cancelled: its answer and spend."""


class Reporter:
    """A child's reports to its parent; each is sent once the previous one went, so they arrive in order."""

    def __init__(self, origin: SubagentOrigin, run: int) -> None:
        self._origin, self._run = origin, run
        self._seq = 0
        self._told: set[str] = set()
        """Call ids the parent last heard were pending."""
        self._sending: asyncio.Task[None] | None = None

    def report(
        self,
        own: list[ApprovalRecord],
        schema_of: Callable[[str], dict[str, Any] | None],
        delegations: Delegations,
    ) -> None:
        """Tell the parent of our own approvals and our sub-agents', if what waits has changed.
        ``schema_of``: our tools' JSON schemas, by name."""
        approvals = own + delegations.approvals
        pending = {r.call_id for r in approvals if r.state == "pending"}
        if pending == self._told:
            return
        changed = [r.model_copy(deep=True) for r in approvals if r.call_id in pending | self._told]
        schemas = {r.call_id: schema_of(r.tool) for r in own if r.call_id in pending}
        schemas |= {call_id: s for call_id, s in delegations.schemas.items() if call_id in pending}
        self._told = pending
        report = self._next(changed, {call_id: s for call_id, s in schemas.items() if s is not None})
        self._sending = asyncio.create_task(_after(self._sending, self._send(report)))

    async def cancelled(self, result: ConversationResult) -> None:
        """The last report of a child that ends cancelled: its answer and spend, which its Canceled run
        cannot return. Sent before it closes, so the parent has it when it hears of the close."""
        report = self._next([], {}, cancelled=SubagentAnswer.of(result))
        self._sending = asyncio.create_task(_after(self._sending, self._send(report)))
        await self._sending

    def _next(
        self,
        approvals: list[ApprovalRecord],
        schemas: dict[str, dict[str, Any]],
        cancelled: SubagentAnswer | None = None,
    ) -> ApprovalReport:
        self._seq += 1
        return ApprovalReport(
            call_id=self._origin.call_id,
            run=self._run,
            seq=self._seq,
            approvals=approvals,
            workflow_id=workflow.info().workflow_id,
            key=self._origin.report_key or "",
            schemas=schemas,
            cancelled=cancelled,
        )

    async def _send(self, report: ApprovalReport) -> None:
        parent = workflow.get_external_workflow_handle(self._origin.parent_workflow_id)
        try:
            await parent.signal(wire.SUBAGENT_APPROVALS, report)
        except FailureError as err:  # the parent has closed: nobody is left to tell
            workflow.logger.warning("cannot report approvals to %s: %s", self._origin.parent_workflow_id, err)


class Delegations:
    """The sub-agent conversations this one waits for, and their approvals as they last reported them."""

    def __init__(self, events: ConversationEvents) -> None:
        self._events = events
        self._children: dict[str, ChildWorkflowHandle] = {}
        self._approvals: dict[str, dict[str, ApprovalRecord]] = {}
        """By our call id, then by the approval's call id under it (``call_2_0/call_1_0``)."""
        self._heard: dict[str, tuple[int, int]] = {}
        self._senders: dict[str, tuple[str, str] | None] = {}
        """By our call id: the (workflow id, key) its reports must carry; None for a child started
        before reports had a key (``REPORT_KEY_PATCH``)."""
        self._schemas: dict[str, dict[str, dict[str, Any]]] = {}
        """As ``_approvals``: the JSON schema of each waiting call's tool, as the child reported it."""
        self._cancelled: dict[str, SubagentAnswer] = {}
        """By our call id: the answer a child reported as it ended cancelled."""
        self._forwarding: asyncio.Task[None] | None = None

    @property
    def approvals(self) -> list[ApprovalRecord]:
        return [record for records in self._approvals.values() for record in records.values()]

    @property
    def pending(self) -> list[ApprovalRecord]:
        return [record for record in self.approvals if record.state == "pending"]

    @property
    def schemas(self) -> dict[str, dict[str, Any]]:
        """The JSON schemas of the waiting calls' tools, by the calls' ids (``call_2_0/call_1_0``)."""
        return {call_id: s for schemas in self._schemas.values() for call_id, s in schemas.items()}

    def on_report(self, report: ApprovalReport) -> bool:
        """Takes a child's report; False (and a log line) for one that is not from the child we
        started for its call, or a stale one."""
        records = self._approvals.get(report.call_id)
        if records is None:  # its child has closed (its last report may come after), or never was
            workflow.logger.info("%s dropped: no sub-agent answers call %r", REPORT_SIGNAL, report.call_id)
            return False
        if (sender := self._senders.get(report.call_id)) and (report.workflow_id, report.key) != sender:
            workflow.logger.warning(
                "%s dropped: not from %s, the sub-agent started for call %r (workflow id %r)",
                REPORT_SIGNAL,
                sender[0],
                report.call_id,
                report.workflow_id,
            )
            return False
        if (report.run, report.seq) <= self._heard.get(report.call_id, (0, 0)):
            workflow.logger.info("%s dropped: stale (run %d, seq %d)", REPORT_SIGNAL, report.run, report.seq)
            return False
        self._heard[report.call_id] = (report.run, report.seq)
        if report.cancelled is not None:
            self._cancelled[report.call_id] = report.cancelled
        schemas = self._schemas.setdefault(report.call_id, {})
        for record in report.approvals:
            call_id = f"{report.call_id}/{record.call_id}"
            schemas.pop(call_id, None)
            if record.state == "pending" and (schema := report.schemas.get(record.call_id)) is not None:
                schemas[call_id] = schema
            before = records.get(call_id)
            records[call_id] = record = record.model_copy(update={"call_id": call_id})
            was_pending = before is not None and before.state == "pending"
            if record.state == "pending" and not was_pending:
                self._events.publish(ApprovalRequested(record=record))
            elif record.state != "pending" and was_pending:
                self._events.publish(ApprovalDecided(record=record))
        return True

    def _closed(self, call_id: str) -> None:
        """The child of our call ``call_id`` closed: what it last reported as waiting waits no more."""
        self._schemas.pop(call_id, None)
        self._senders.pop(call_id, None)
        for record in self._approvals.pop(call_id, {}).values():
            if record.state == "pending":
                closed = record.model_copy()
                Cancelled("the sub-agent's conversation closed").close(closed, workflow.now())
                self._events.publish(ApprovalDecided(record=closed))

    def routes(self, call_id: str) -> bool:
        """Is ``call_id`` an approval of a running sub-agent (``<our call>/<its call>``)?"""
        ours, under, _ = call_id.partition("/")
        return bool(under) and ours in self._children

    def check(self, decision: Decision, now: datetime) -> ApprovalRecord:
        """As ``Approvals.check``, against what the sub-agent reported (an edit: against the schema it
        reported for the call's tool)."""
        ours = decision.call_id.partition("/")[0]
        schema = self._schemas.get(ours, {}).get(decision.call_id)  # the tool of the one record checked
        records = list(self._approvals[ours].values())
        return Approvals(records, schema_of=lambda _: schema).check(decision, now)

    def forward(self, signal: ApprovalSignal, approve: bool) -> None:
        """A decision signalled to this conversation for a sub-agent's call: on to the sub-agent."""
        self._forwarding = asyncio.create_task(_after(self._forwarding, self._signal(signal, approve)))

    async def decide(self, decision: Decision, now: datetime) -> ApprovalRecord:
        """The ``decide`` update for a sub-agent's call: answers once the sub-agent reports the
        decision, or after ``wait_seconds`` with why not (it refused it, or has not got to it)."""
        self.check(decision, now)
        ours = decision.call_id.partition("/")[0]
        await self._signal(decision, decision.approve)

        def reported() -> ApprovalRecord | None:
            return self._approvals.get(ours, {}).get(decision.call_id)

        versioning.retired(DECIDE_BOUND_PATCH)
        bound = timedelta(seconds=decision.wait_seconds)
        try:
            await workflow.wait_condition(
                lambda: (r := reported()) is None or r.state != "pending",
                timeout=bound,
                timeout_summary=f"sub-agent to take the decision on {decision.call_id}",
            )
        except TimeoutError:
            raise ApplicationError(
                f"the sub-agent has not taken the decision on {decision.call_id!r} within"
                f" {decision.wait_seconds:g} s: it refused it (its log says why) or has not got to it yet;"
                " see pending_approvals",
                type="DecisionNotTaken",
            ) from None
        if (record := reported()) is None:
            raise ApplicationError(
                f"the sub-agent's conversation closed before it reported the decision on"
                f" {decision.call_id!r}",
                type="SubagentClosed",
            )
        return record

    async def _signal(self, decision: ApprovalSignal, approve: bool) -> None:
        """The decision on to the child, for its own call id; without a digest of its own, bound to
        the one we showed, so the child takes it only for the arguments a person here could see."""
        ours, _, theirs = decision.call_id.partition("/")
        if (child := self._children.get(ours)) is None:
            return
        shown = self._approvals.get(ours, {}).get(decision.call_id)
        forwarded = ApprovalSignal.model_validate(
            decision.model_dump(include=set(ApprovalSignal.model_fields))
            | {
                "call_id": theirs,
                "arguments_digest": decision.arguments_digest or (shown.arguments_digest if shown else None),
            }
        )
        name = "approve" if approve else "reject"
        try:
            await child.signal(wire.APPROVE if approve else wire.REJECT, forwarded)
        except FailureError as err:  # it closed meanwhile
            workflow.logger.warning("%s of %s not forwarded to %s: %s", name, decision.call_id, child.id, err)

    async def run(
        self, tool: ToolSpec, call: ToolCall, origin: SubagentOrigin, state: ConversationState
    ) -> ToolOutcome:
        """Run the sub-agent's conversation for ``call``; its usage and cost go into ``state``."""
        name = tool.subagent
        assert name is not None
        task = call.arguments.get("task")
        if not isinstance(task, str) or not task.strip():
            return _invalid(call, "'task' must be a non-empty string")
        versioning.retired(REPORT_KEY_PATCH)
        key = str(workflow.uuid4())
        try:
            # One task, one answer: a chat agent too closes once it answered, rather than idle.
            input = ConversationInput(
                prompt=task,
                agent=name,
                subagent=origin.model_copy(update={"report_key": key}),
                overrides=AgentOverrides(chat=False),
                **owner_fields(),
            )
        except ValidationError as e:
            return _invalid(call, first_error(e))
        child_id = f"{origin.parent_workflow_id}/{call.id}"
        self._senders[call.id] = (child_id, key) if key else None
        self._approvals[call.id] = {}
        evicted = False
        try:
            child = await workflow.start_child_workflow(
                "AgentWorkflow",
                input,
                id=child_id,
                result_type=ConversationResult,
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                search_attributes=start_search_attributes(
                    name, parent=origin.parent_workflow_id, **owner_fields()
                ),
                static_summary=f"sub-agent {name} for {origin.parent_workflow_id} ({call.id})",
            )
            self._children[call.id] = child
            answer = SubagentAnswer.of(await child)
        except ChildWorkflowError as err:
            if not isinstance(err.cause, CancelledError):
                cause = err.cause.message if isinstance(err.cause, FailureError) else str(err)
                failed = f"Sub-agent '{name}' failed: {cause}"
                return ToolOutcome(content=failed, is_error=True, subagent_workflow_id=child_id)
            answer = self._cancelled.get(call.id) or _UNREPORTED  # Canceled: as its last report said
        except FailureError as err:  # not started: its id is taken by a running conversation
            return ToolOutcome(content=f"Sub-agent '{name}' could not start: {err}", is_error=True)
        except GeneratorExit:  # the worker evicts this run (terminated, or out of its cache): no
            evicted = True  # workflow call may run now, and a replay does this part again anyway
            raise
        finally:
            if not evicted:
                self._children.pop(call.id, None)
                self._closed(call.id)
                self._heard.pop(call.id, None)
                self._cancelled.pop(call.id, None)
        state.usage += answer.usage
        state.subagent_usage += answer.usage
        if answer.cost is not None:
            state.subagent_cost = (state.subagent_cost or 0.0) + answer.cost
        if workflow.cancellation_reason() is not None:  # the child closed as cancelled, with us
            raise asyncio.CancelledError(workflow.cancellation_reason())
        if answer.stop_reason != "completed":
            versioning.retired(STOPS_AS_ERRORS_PATCH)
            return ToolOutcome(
                content=f"Sub-agent '{name}' stopped: {answer.stop_reason}: {answer.final_text}",
                is_error=True,
                subagent_workflow_id=child_id,
            )
        return ToolOutcome(
            content=answer.final_text, is_error=answer.closed_by == "cancelled", subagent_workflow_id=child_id
        )


_UNREPORTED = SubagentAnswer(
    final_text="[no answer: the sub-agent's conversation was cancelled before it reported one]",
    stop_reason="cancelled",
)
"""A Canceled child whose last report did not reach us (its parent was not open to take it)."""


def child_origin(
    mine: SubagentOrigin | None, call_id: str, agent: ResolvedAgent, state: ConversationState
) -> SubagentOrigin:
    """What a child started for our call ``call_id`` is told of where it comes from, and what is
    left of our budgets (the child stops there: its spend counts against them)."""
    spec, spent = agent.spec, conversation_cost(agent, state)
    return SubagentOrigin(
        parent_workflow_id=workflow.info().workflow_id,
        call_id=call_id,
        depth=mine.depth + 1 if mine else 1,
        max_depth=mine.max_depth if mine else spec.max_depth,
        token_budget=None
        if spec.token_budget is None
        else max(spec.token_budget - state.usage.total_tokens, 0),
        cost_budget=None if spec.cost_budget is None else max(spec.cost_budget - (spent or 0.0), 0.0),
    )


def within_budget(spec: AgentSpec, origin: SubagentOrigin | None) -> AgentSpec:
    """A sub-agent's settings with its budgets capped by what its parent had left."""
    if origin is None:
        return spec
    return spec.model_copy(
        update={
            "token_budget": _smaller(spec.token_budget, origin.token_budget),
            "cost_budget": _smaller(spec.cost_budget, origin.cost_budget),
        }
    )


def _smaller(own: T | None, cap: T | None) -> T | None:
    return own if cap is None else cap if own is None else min(own, cap)


def _invalid(call: ToolCall, why: str) -> ToolOutcome:
    return ToolOutcome(content=f"Invalid arguments for '{call.name}': {why}", is_error=True)


async def _after(previous: asyncio.Task[None] | None, signal: Coroutine[Any, Any, None]) -> None:
    """``signal`` once ``previous`` is done: signals to one workflow go out in the order they were made."""
    if previous is not None:
        await previous
    await signal


def owner_fields() -> dict[str, str]:
    """The delegating conversation's tenant and user, for its sub-agent (none when it has none)."""
    owner = tenancy.current()
    return {k: v for k, v in (("tenant", owner.tenant), ("user", owner.user)) if v is not None}
