"""The agent loop: call the model, run the tools it asks for, feed results back, repeat.

A conversation answers its queued user messages one at a time. Answering one is
a *turn*: model calls and tool calls until the model answers in text or a limit
applies. All progress lives in ``ConversationState``, so the workflow can
continue as new at any safe point (between steps, or while it only waits for a
person) and pick up exactly where it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from durable_agents.workflows import telemetry, tenancy, versioning, wire
from durable_agents.workflows.activity_io import (
    AgentRef,
    HookContext,
    HookDecision,
    HookInvocation,
    ResolvedAgent,
    ToolInvocation,
    ToolOutcome,
    ToolSpec,
)
from durable_agents.workflows.activity_refs import (
    LIST_MCP_TOOLS,
    RESOLVE_AGENT,
    RUN_HOOK,
    RUN_TOOL,
    VERIFY_DECISION,
    call_key,
    failure_text,
    stores_of,
)
from durable_agents.workflows.answers import correction, parse_answer
from durable_agents.workflows.api import (
    ClosedBy,
    ConversationHistory,
    ConversationInput,
    ConversationResult,
    ConversationStatus,
    MessageInput,
)
from durable_agents.workflows.approvals import Approvals, time_left
from durable_agents.workflows.at_most_once import run_at_most_once
from durable_agents.workflows.client_tools import ClientCalls, client_tool_specs
from durable_agents.workflows.config import DEFAULT_MAX_MESSAGE_BYTES, AgentSpec, ApprovalPolicy, HookEvent
from durable_agents.workflows.costs import conversation_cost, cost_by_model
from durable_agents.workflows.decisions import Refuse, asks, decided, oversize
from durable_agents.workflows.events import (
    ApprovalDecided,
    ApprovalRequested,
    ConversationEvents,
    Ended,
    HandedOff,
    HookDecided,
    MessageAdded,
    ReplySent,
    ToolCallFinished,
    ToolCallStarted,
)
from durable_agents.workflows.fallback import models_used
from durable_agents.workflows.guardrails import Guardrails, ended_note, retry_note
from durable_agents.workflows.handoffs import taking_over
from durable_agents.workflows.inputs import one_input
from durable_agents.workflows.interrupts import SIGNALLED, Interrupted
from durable_agents.workflows.judges import Judges
from durable_agents.workflows.messages import (
    AssistantMessage,
    Image,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from durable_agents.workflows.model_calls import ModelCalls
from durable_agents.workflows.notifications import Notifications
from durable_agents.workflows.records import (
    ApprovalRecord,
    ApprovalSignal,
    ClientCall,
    ClientResult,
    Decision,
    HandoffRecord,
    HookRecord,
    Reply,
    Revocation,
    StopReason,
    ToolAllowance,
    ToolCallRecord,
    Verdict,
)
from durable_agents.workflows.signatures import SignedDecision
from durable_agents.workflows.state import ConversationState, QueuedMessage, TurnState
from durable_agents.workflows.status import StatusBoard
from durable_agents.workflows.subagents import (
    REPORT_SIGNAL,
    ApprovalReport,
    Delegations,
    Reporter,
    child_origin,
    offered,
    within_budget,
)
from durable_agents.workflows.tenancy import BudgetRefused

LEAN_START_PATCH = versioning.patch("agent-lean-start", added=1)
"""The agent is resolved by a local activity, and AgentName and AgentStatus are set in one upsert
(none when the start already set them): a workflow task and seven events less per conversation.
Runs that started before it keep the resolve activity and one upsert each."""
BIND_APPROVALS_PATCH = versioning.patch("approvals-bind-to-pending-calls", added=1)
CARRIED_BY_CALLER_PATCH = versioning.patch("refuse-carried-input-from-callers", added=2)
"""A start that sets what only the conversation carries (``state``) or its parent gives
(``subagent``) fails at once; conversations started so before it go on as they did."""
OPERATOR_INPUT_PATCH = versioning.patch("operator-input-known-fields-and-bounds", added=2)
"""Signals with fields their payload does not know, or texts past the agent's bounds, are dropped;
conversations that took such a signal before keep it (replay decides the same)."""
VERIFIED_DECISIONS_PATCH = versioning.patch("decisions-verified-by-the-worker", added=2)
"""Every decision a person sends (``decide``, the ``approve``/``reject`` signals) goes through the
worker's ``verify_decision`` local activity before it takes, and its verdict is recorded: a
signature by the approver's key with ``AGENT_APPROVER_KEYS``, self-declared without. Conversations
that took decisions before it go on without (replay decides the same)."""
CLIENT_WAIT_PATCH = versioning.patch("client-wait-status", added=2)
"""A conversation that waits for a client tool's result says ``waiting_for_client`` (also in
AgentStatus); conversations that waited before it said ``running_tools`` (replay upserts nothing new)."""
CANCELED_PATCH = versioning.patch("cancelled-ends-canceled", added=3)
"""A cancelled conversation ends Canceled in Temporal (its Web UI, ``ExecutionStatus``, a parent's
child result), after closing as before (transcript kept, approvals cancelled, AgentStatus
``cancelled``, ``Ended`` on its stream); a sub-agent first reports its answer and spend to its
parent, which a Canceled run cannot return. Asked only by runs that end cancelled; those that did
before it completed with their result (replay decides the same). Retired once no conversation of
release 2 is left (docs/production.md, "Upgrading")."""
ROLLING_OVER = "ContinuingAsNew"
_START_EXAMPLE = '{"prompt": "...", "agent": "demo"}'
_DECISION_EXAMPLE = '{"call_id": "call_1_0", "by": "alice", "reason": "..."}'
_DECIDE_EXAMPLE = '{"call_id": "call_1_0", "approve": true, "by": "alice"}'
_REVOKE_EXAMPLE = '{"tool": "write_file", "by": "alice"}'
_RESULT_EXAMPLE = '{"call_id": "call_1_0", "result": "..."}'
P = TypeVar("P")
S = TypeVar("S", ApprovalSignal, Decision, Revocation)


@workflow.defn(
    name="AgentWorkflow",
    # Outside the sandbox: it would import this module afresh for every conversation it loads (11 ms
    # of worker CPU and ~200 KiB per conversation, measured), and every module this one uses passes
    # through it anyway. Determinism is held by tests instead: tests/workflow/test_determinism.py refuses
    # clocks, randomness and I/O in workflows/, tests/workflow/test_replay.py replays recorded histories.
    sandboxed=False,
    # Inputs are checked by the handlers themselves; a validation error anywhere else in
    # workflow code fails the conversation too, instead of retrying its task forever.
    failure_exception_types=[ValidationError],
)
@wire.serve_old_names  # and each handler under its name from before the namespace
class AgentWorkflow:
    # Handlers take ``*args`` and check their input themselves (workflows/inputs.py): no input, null
    # or a wrong shape is refused or dropped with a reason, never a failed workflow task.
    @workflow.init
    def __init__(self, *args: Any) -> None:
        self.release = versioning.begin()
        """The release whose way this run follows (workflows/versioning.py)."""
        self._input_error = ""
        info = workflow.info()
        try:
            # A continued run's input, or a sub-agent's, is our own code's: it may come from newer code.
            own = info.continued_run_id is not None or info.parent is not None
            input = one_input(ConversationInput, args, "the start input", _START_EXAMPLE, strict=not own)
            forged = _set_by_caller(input, info)
            if forged:
                versioning.retired(CARRIED_BY_CALLER_PATCH, self.release)
                raise ValueError(f"the start input: {forged}")
        except ValueError as e:
            self._input_error = str(e)
            input = ConversationInput.model_construct(state=None)
        self._input = input
        self._s = input.state or ConversationState()
        self._approvals = Approvals(
            self._s.approvals,
            self._s.allowances,
            schema_of=self._schema_of,
            conversation=info.first_execution_run_id,
        )
        self._events = ConversationEvents(self._s.stream)  # the stream's handlers are registered here
        self._s.stream = None  # the stream holds it now; the next run gets it back from the stream
        self._board = StatusBoard(
            self._s,
            pending_approvals=len(self._approvals.pending),
            events=self._events,
            waiting=lambda: [*self._approvals.pending, *self._subagents.pending, *self._client_calls.pending],
        )
        self._answering = 0
        """Updates (send_message, refresh_tools) still waiting: a continue-as-new waits for them."""
        self._models = ModelCalls(
            self._s, self._board, self._events, call_ids_in_use=lambda: self._approvals.records
        )
        self._tools_in_flight = 0
        self._closed_by: ClosedBy = "answered"
        self._closing = False
        self._subagents = Delegations(self._events)
        self._judges = Judges(
            self._s,
            self._events,
            lambda: self._approvals.records,
            self._waiting_update,
            lambda: self._board.show(usage=self._s.usage),
        )
        self._client_calls = ClientCalls(self._s.client_calls, self._events)
        self._notifications = Notifications()
        self._guardrails = Guardrails(self._s, self._events)
        self._reporter = Reporter(input.subagent, self._s.runs) if input.subagent else None
        if input.state is None and not self._input_error:
            self._s.messages = list(input.history)
            if input.prompt is not None:
                self._enqueue(input.prompt, input.images)

    @workflow.run
    async def run(self, *args: Any) -> ConversationResult:
        wire.choose()  # where a run of the patch-per-branch way asked which names it uses
        if self._input_error:
            raise ApplicationError(self._input_error, type="InvalidInput", non_retryable=True)
        input = self._input
        try:
            versioning.retired(LEAN_START_PATCH)
            self._board.begin()
            if self._s.agent is None:
                self._s.agent = await self._resolve(input)
            agent = self._s.agent
            versioning.check(agent.spec)
            self._board.show(
                model_calls=self._s.model_calls, usage=self._s.usage, cost=conversation_cost(agent, self._s)
            )
            self._board.name_agent(agent.spec.name, agent.spec.max_iterations)
            while True:
                agent = self._s.agent  # another after a handoff (workflows/handoffs.py)
                if self._continue_as_new_due():
                    await self._continue_as_new(input)
                if self._s.turn is not None:
                    try:
                        await self._step(agent)
                    except Interrupted:  # a newer message cancelled the model call: its turn is next
                        self._finish_turn("interrupted", note=self._interrupt_note())
                elif self._s.queue:
                    await self._start_turn(agent)
                elif not await self._wait_for_message(agent):
                    self._closing = True
                    self._events.release()
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    return self._result()
        except asyncio.CancelledError:
            if workflow.cancellation_reason() is None:
                raise  # not a cancellation of the conversation (say, an evicted run)
            result = self._cancelled(workflow.cancellation_reason() or "no reason given")
            self._events.release()
            await workflow.wait_condition(workflow.all_handlers_finished)
            if not versioning.since(CANCELED_PATCH):
                return result
            if self._reporter is not None:
                await self._reporter.cancelled(result)
            raise  # Canceled: the history query (on the closed run too) keeps the transcript
        except Exception as err:
            self._board.set("failed", f"failed: {err}")
            self._events.publish(Ended(outcome="failed", detail=self._board.view.detail))
            raise

    @property
    def tenancy(self) -> tenancy.Tenancy:
        """Whose conversation this is (workflows/tenancy.py reads it)."""
        return tenancy.Tenancy(getattr(self._input, "tenant", None), getattr(self._input, "user", None))

    @property
    def telemetry(self) -> telemetry.Labels:
        """What the worker's spans and metrics label this conversation with (workflows/telemetry.py)."""
        turn = self._s.turn
        return telemetry.Labels(
            agent=self._s.agent.spec.name if self._s.agent else None,
            tenant=self.tenancy.tenant,
            turn=turn.message_id if turn else None,
            turn_started=turn.started_at if turn else None,
        )

    # -- inspection ---------------------------------------------------------------

    @workflow.query(
        name=wire.HISTORY, description="the transcript, tool calls, approvals, hooks and model attempts"
    )
    def history(self) -> ConversationHistory:
        return ConversationHistory(
            messages=self._s.messages,
            tool_calls=self._s.tool_calls,
            approvals=list(self._approvals.records.values()),
            hooks=self._s.hooks,
            guardrails=self._s.guardrails,
            handoffs=self._s.handoffs,
            allowances=self._approvals.allowances,
            model_attempts=self._s.model_attempts,
            client_calls=self._s.client_calls,
            usage_by_model=self._s.usage_by_model,
            cost_by_model=cost_by_model(self._s.agent, self._s.usage_by_model) if self._s.agent else {},
        )

    @workflow.query(
        name=wire.STATUS, description="state, iteration, usage, cost and what waits (starter.py status)"
    )
    def status(self) -> ConversationStatus:
        return self._board.view

    @workflow.query(
        name=wire.PENDING_APPROVALS,
        description="the calls that wait for a person, with their arguments (starter.py pending)",
    )
    def pending_approvals(self) -> list[ApprovalRecord]:
        return self._approvals.pending + self._subagents.pending

    @workflow.query(name=wire.REPLIES, description="the reply to each message")
    def replies(self) -> list[Reply]:
        return self._s.replies

    @workflow.query(
        name=wire.PENDING_CLIENT_CALLS, description="the calls of client tools that wait for their result"
    )
    def pending_client_calls(self) -> list[ClientCall]:
        return self._client_calls.pending

    # -- client tools (workflows/client_tools.py) ---------------------------------------

    @workflow.update(
        name=wire.DELIVER_CLIENT_RESULT,
        description="{call_id, result}: the result of a client tool (starter.py answer)",
    )
    def deliver_client_result(self, *args: Any) -> ClientCall:
        """``{"call_id": "...", "result": ...}``: a client tool's result, checked against its schema
        and cut to ``max_tool_output_chars`` as any tool's output."""
        result = one_input(ClientResult, args, "deliver_client_result", _RESULT_EXAMPLE, strict=False)
        try:  # checked by the validator; never a failed workflow task
            call = self._client_calls.check(result, workflow.now())
        except ValueError as e:
            raise ApplicationError(str(e), type="ResultRefused", non_retryable=True) from None
        assert self._s.agent is not None  # a client tool's call waits only once the agent is resolved
        return self._client_calls.deliver(
            call, result, workflow.now(), self._s.agent.spec.max_tool_output_chars
        )

    @deliver_client_result.validator
    def _check_client_result(self, *args: Any) -> None:
        """Refused here, a result over ``max_message_bytes`` leaves nothing in history."""
        result = one_input(ClientResult, args, "deliver_client_result", _RESULT_EXAMPLE)
        self._client_calls.check(result, workflow.now(), max_bytes=self._max_message_bytes())

    # -- user messages ------------------------------------------------------------

    @workflow.update(
        name=wire.SEND_MESSAGE, description="{text}: a message, answered with its reply (starter.py send)"
    )
    async def send_message(self, *args: Any) -> Reply:
        """Queue a user message (``{"text": "..."}``) and answer with the reply once its turn is done."""
        with self._waiting_update():
            sent = self._message(args, "send_message", strict=False)
            message_id = self._enqueue(sent.text, sent.images)
            await workflow.wait_condition(lambda: any(r.message_id == message_id for r in self._s.replies))
            return next(r for r in self._s.replies if r.message_id == message_id)

    @contextmanager
    def _waiting_update(self) -> Iterator[None]:
        self._answering += 1
        try:
            yield
        finally:
            self._answering -= 1

    @send_message.validator
    def _check_message(self, *args: Any) -> None:
        self._message(args, "send_message")
        if self._rollover_wanted():
            # A waiting update would hold the run open; the sender retries on the next run.
            raise ApplicationError("the conversation is continuing as new; send again", type=ROLLING_OVER)

    @workflow.signal(name=wire.POST_MESSAGE, description="{text}: a message, its reply not waited for")
    def post_message(self, *args: Any) -> None:
        """Fire-and-forget version of ``send_message``."""
        try:
            message = self._signalled(lambda strict: self._message(args, "post_message", strict=strict))
        except ValueError as e:
            workflow.logger.warning("post_message dropped: %s", e)
            return
        self._enqueue(message.text, message.images)

    def _message(self, args: tuple[Any, ...], what: str, *, strict: bool = True) -> MessageInput:
        """A follow-up message this conversation can take; ``ValueError`` saying why not.
        ``strict=False``: unknown fields ignored (see ``_person``)."""
        message = one_input(MessageInput, args, what, '{"text": "..."}', strict=strict)
        if self._s.ended or self._closing:
            raise ValueError("the conversation has been ended; start a new one")
        size = len(message.text.encode())
        limit = self._max_message_bytes()
        if size > limit and self._s.messages_received:  # a first message is a prompt, and as large
            raise ValueError(f"{what}: the message is {size} bytes; this conversation takes at most {limit}")
        return message

    def _max_message_bytes(self) -> int:
        """What a client may send at once: a follow-up message, a client tool's result."""
        spec = self._s.agent.spec if self._s.agent else self._input.agent_spec  # named: not resolved yet
        return spec.max_message_bytes if spec else DEFAULT_MAX_MESSAGE_BYTES

    @workflow.signal(
        name=wire.END, description="close once the queued messages are answered (starter.py end)"
    )
    def end(self, *args: Any) -> None:
        """Close the conversation once the queued messages are answered (any input is ignored)."""
        self._s.ended = True

    @workflow.signal(name=wire.INTERRUPT, description="end the running turn (starter.py interrupt)")
    def interrupt(self, *args: Any) -> None:
        """End the running turn (any input is ignored): its model call is cancelled (or, between
        calls, no next one is made) and it is answered ``interrupted``; a chat stays open for the
        next message. Without a running turn, nothing to interrupt: dropped."""
        turn = self._s.turn
        if turn is None or self._closing:
            workflow.logger.info("interrupt signal: no turn is running")
            return
        turn.interrupt = True

    def _interrupt_note(self) -> str | None:
        """Why an interrupted turn ended, when the signal ended it (a newer message says itself)."""
        return SIGNALLED if self._s.turn is not None and self._s.turn.interrupt else None

    def _enqueue(self, text: str, images: list[Image] | None = None) -> str:
        self._s.messages_received += 1
        message_id = f"m{self._s.messages_received}"
        self._s.queue.append(QueuedMessage(id=message_id, text=text, images=images or []))
        self._board.show(queued_messages=len(self._s.queue))
        return message_id

    # -- decisions from people ----------------------------------------------------

    # Signal handlers run as tasks, sync or async: one that awaits nothing (conversations from before
    # VERIFIED_DECISIONS_PATCH) acts at the same point as when these were plain functions.
    @workflow.signal(
        name=wire.APPROVE,
        description="{call_id, by}: approve a waiting call (the decide update says whether it took)",
    )
    async def approve(self, *args: Any) -> None:
        """``{"call_id": "...", "by": "...", "reason": "...", "arguments_digest": "..."}``, and optionally
        ``"arguments": {...}`` (run with these instead), ``"remember": true`` (allow the tool from now
        on), ``"signature": "..."`` (by the approver's key)."""
        await self._on_signal(args, approve=True)

    @workflow.signal(
        name=wire.REJECT,
        description="{call_id, by}: reject a waiting call (the decide update says whether it took)",
    )
    async def reject(self, *args: Any) -> None:
        await self._on_signal(args, approve=False)

    async def _on_signal(self, args: tuple[Any, ...], *, approve: bool) -> None:
        name = "approve" if approve else "reject"
        try:
            signal = self._signalled(
                lambda strict: self._person(ApprovalSignal, args, name, _DECISION_EXAMPLE, strict=strict)
            )
        except ValueError as e:
            workflow.logger.warning("%s signal dropped: %s", name, e)
            return
        if self._forwarded(signal.call_id):
            self._subagents.forward(signal, approve)
            return
        if late := self._approvals.too_late(signal, approve, workflow.now()):
            workflow.logger.warning(
                "%s signal too late: %s was decided by judge %s", name, late.call_id, late.by
            )
            return
        if signal.call_id not in self._approvals.records:
            versioning.retired(BIND_APPROVALS_PATCH)
        verdict = None
        if self._takes(signal, approve):
            versioning.retired(VERIFIED_DECISIONS_PATCH)
            verdict = await self._verify(Decision(approve=approve, **signal.model_dump()))
            if not verdict.valid:
                workflow.logger.warning("%s signal refused: %s", name, verdict.reason)
                return
        were_pending = self._approvals.pending
        outcome = self._approvals.on_signal(signal, approve, workflow.now(), verdict=verdict)
        self._events.approvals_decided(were_pending)
        workflow.logger.info("%s signal: %s", name, outcome)

    def _takes(self, signal: ApprovalSignal, approve: bool) -> bool:
        """Would the decision take now (before its signature is checked)? One that would not is
        dropped with its reason, unverified."""
        try:
            self._approvals.check(Decision(approve=approve, **signal.model_dump()), workflow.now())
        except ValueError:
            return False
        return True

    async def _verify(self, decision: Decision, record: ApprovalRecord | None = None) -> Verdict:
        """The worker's verdict on who made ``decision`` (``verify_decision``, a local activity: the
        keys stay on the worker). ``record``: the call it decides, when not one of ours (a sub-agent's)."""
        record = record or self._approvals.records[decision.call_id]
        info = workflow.info()
        conversation = record.conversation or info.first_execution_run_id  # asked before records kept it
        signed = SignedDecision.of(info.workflow_id, conversation, record.arguments_digest, decision)
        with self._waiting_update():  # no continue-as-new while a decision is being checked
            try:
                return await VERIFY_DECISION.execute(
                    signed,
                    local=True,
                    start_to_close_timeout=timedelta(seconds=10),
                    retry_policy=RetryPolicy(maximum_attempts=3),
                    summary=f"verify decision on {decision.call_id} by {decision.by}",
                )
            except ActivityError as err:
                return Verdict(approver="refused", reason=f"cannot verify it: {failure_text(err)}")

    @workflow.update(
        name=wire.DECIDE,
        description="{call_id, approve, by}: decide a waiting call (starter.py approve, reject)",
    )
    async def decide(self, *args: Any) -> ApprovalRecord:
        """``{"call_id": "...", "approve": true, ...}``: answers with the record once the decision took."""
        decision = self._person(Decision, args, "decide", _DECIDE_EXAMPLE, strict=False)
        self._refuse_if_too_late(decision)
        versioning.retired(VERIFIED_DECISIONS_PATCH)
        if self._forwarded(decision.call_id):
            # the sub-agent verifies it too; here, to answer why not at once
            self._must_hold(await self._verify(decision, self._subagents.check(decision, workflow.now())))
            return await self._subagents.decide(decision, workflow.now())
        verdict = self._must_hold(await self._verify(decision))
        try:  # the call may have been decided, or passed its deadline, meanwhile
            record = self._approvals.decide(decision, workflow.now(), verdict)
        except ValueError as e:
            self._refuse_if_too_late(decision)
            raise ApplicationError(str(e), type="DecisionRefused", non_retryable=True) from None
        self._events.publish(ApprovalDecided(record=record))
        return record

    def _refuse_if_too_late(self, decision: Decision) -> None:
        """A judge decided the call first: the decision is kept in the record as too late, and refused."""
        if late := self._approvals.too_late(decision, decision.approve, workflow.now()):
            self._events.publish(ApprovalDecided(record=late))
            raise ApplicationError(
                f"call {late.call_id!r} was already {late.state} by judge {late.by}: your decision came"
                " too late (kept in the record)",
                type="DecisionRefused",
                non_retryable=True,
            )

    @staticmethod
    def _must_hold(verdict: Verdict) -> Verdict:
        """The verdict of a decision that may take; the update's failure for one that may not."""
        if not verdict.valid:
            raise ApplicationError(verdict.reason, type="DecisionRefused", non_retryable=True)
        return verdict

    @decide.validator
    def _check_decision(self, *args: Any) -> None:
        decision = self._person(Decision, args, "decide", _DECIDE_EXAMPLE)
        if self._forwarded(decision.call_id):
            self._subagents.check(decision, workflow.now())
        elif (record := self._approvals.records.get(decision.call_id)) is None or record.via != "judge":
            self._approvals.check(decision, workflow.now())
        # else taken, to be kept as too late: a judge decided the call first

    def _forwarded(self, call_id: str) -> bool:
        """A decision for a sub-agent's call goes on to its conversation."""
        return call_id not in self._approvals.records and self._subagents.routes(call_id)

    @workflow.signal(
        name=wire.SUBAGENT_APPROVALS, description="the approvals of a sub-agent, as it reports them"
    )
    def subagent_approvals(self, *args: Any) -> None:
        """A sub-agent's approvals, as it reports them (workflows/subagents.py)."""
        try:
            report = one_input(ApprovalReport, args, REPORT_SIGNAL, '{"call_id": "call_1_0", ...}')
        except ValueError as e:
            workflow.logger.warning("%s dropped: %s", REPORT_SIGNAL, e)
            return
        if self._subagents.on_report(report):
            self._refresh_approval_state()

    @workflow.update(
        name=wire.REVOKE,
        description="{tool, by}: a tool allowed for the conversation waits for a person again",
    )
    def revoke(self, *args: Any) -> ToolAllowance:
        """``{"tool": "write_file", "by": "alice"}``: the tool's later calls wait for a person again."""
        revocation = self._person(Revocation, args, "revoke", _REVOKE_EXAMPLE, strict=False)
        return self._approvals.revoke(revocation, workflow.now())

    @revoke.validator
    def _check_revocation(self, *args: Any) -> None:
        self._approvals.check_revocation(self._person(Revocation, args, "revoke", _REVOKE_EXAMPLE))

    def _person(
        self, model: type[S], args: tuple[Any, ...], what: str, example: str, *, strict: bool = True
    ) -> S:
        """A person's decision or revocation: known fields only, and its texts within the agent's
        bounds (``approval.max_*_bytes``). ``strict=False``, as before those rules, for an update's
        handler: its validator applied them, and on replay validators do not run."""
        payload = one_input(model, args, what, example, strict=strict)
        policy = self._s.agent.spec.approval if self._s.agent else ApprovalPolicy()
        if strict and (error := oversize(payload, policy)):
            raise ValueError(f"{what}: {error}")
        return payload

    @staticmethod
    def _signalled(parse: Callable[[bool], P]) -> P:
        """A signal's input, ``parse``d under today's rules (``strict``); ``ValueError`` for the
        rest. One that only the rules before them took asks the retired patch, as runs written the
        patch-per-branch way asked it here (``parse(False)`` first, as they did)."""
        try:
            return parse(True)
        except ValueError as refused:
            parse(False)  # raises if the rules before refused it too
            versioning.retired(OPERATOR_INPUT_PATCH)
            raise refused from None

    def _schema_of(self, tool: str) -> dict[str, Any] | None:
        """The JSON schema of the tool's arguments, as the model is told it."""
        tools = self._s.agent.tools if self._s.agent else []
        return next((t.definition.parameters for t in tools if t.definition.name == tool), None)

    # -- the loop -----------------------------------------------------------------

    async def _resolve(self, input: ConversationInput, *, start: bool = True) -> ResolvedAgent:
        """The agent of ``input``; at the ``start``, its system prompt opens the transcript."""
        if start:
            self._board.set("starting", "resolving the agent")
        try:
            resolved = await RESOLVE_AGENT.execute(
                AgentRef(name=input.agent, spec=input.agent_spec, model=input.overrides.model),
                local=True,  # in the workflow task itself: no round trip through the server
                # Short: reading a file is quick, and a worker that dies meanwhile is noticed sooner.
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=5),
                summary=f"resolve agent {input.agent or input.agent_spec.name}",  # type: ignore[union-attr]
            )
        except ActivityError as err:  # the worker's own words (an unknown agent, a bad inline one)
            kind = err.cause.type if isinstance(err.cause, ApplicationError) else "ConfigError"
            raise ApplicationError(failure_text(err), type=kind, non_retryable=True) from err
        resolved.spec = within_budget(input.overrides.apply(resolved.spec), input.subagent)
        resolved.tools = offered(resolved.tools, input.subagent)
        if clients := [*resolved.spec.client_tools, *input.client_tools]:
            resolved.tools += client_tool_specs(clients)
        if resolved.spec.mcp_servers:
            self._board.set("starting", "listing the tools of the MCP servers")
            resolved.tools += await self._list_mcp_tools(resolved)
        if start and resolved.spec.system_prompt and not input.history:
            self._s.messages.append(SystemMessage(text=resolved.spec.system_prompt))
            self._events.publish(MessageAdded(role="system", text=resolved.spec.system_prompt))
        return resolved

    async def _list_mcp_tools(self, agent: ResolvedAgent) -> list[ToolSpec]:
        """Each MCP server's tools, fetched once and recorded: replays and later turns see these,
        whatever the servers offer by then (``refresh_tools`` fetches them again)."""
        servers = agent.spec.mcp_servers
        if not servers:
            return []
        try:
            listed = await asyncio.gather(
                *(
                    LIST_MCP_TOOLS.execute(
                        server,
                        task_queue=agent.spec.tool_task_queue,
                        summary=f"list tools of MCP server {server.name}",
                        **server.call.activity_options(),
                    )
                    for server in servers
                )
            )
        except ActivityError as err:
            raise ApplicationError(
                f"cannot list the tools of MCP server: {failure_text(err)}",
                type="ConfigError",
                non_retryable=True,
            ) from err
        tools = [tool for found in listed for tool in found]
        names = [t.definition.name for t in agent.tools if t.mcp_server is None] + [
            t.definition.name for t in tools
        ]
        if duplicates := sorted({n for n in names if names.count(n) > 1}):
            raise ApplicationError(
                f"agent {agent.spec.name!r}: tool name(s) {', '.join(duplicates)} offered twice;"
                " give the MCP servers a 'prefix' or an 'allow'/'deny' list",
                type="ConfigError",
                non_retryable=True,
            )
        return tools

    @workflow.update(
        name=wire.REFRESH_TOOLS,
        description="list the tools of the MCP servers again (starter.py refresh-tools)",
    )
    async def refresh_tools(self, *args: Any) -> list[str]:
        """List the MCP servers' tools again for the next model calls; returns every tool name."""
        agent = self._s.agent
        assert agent is not None
        with self._waiting_update():
            own = [t for t in agent.tools if t.mcp_server is None]
            mcp = await self._list_mcp_tools(ResolvedAgent(spec=agent.spec, tools=own))
            # Calls the model already asked for run with the tools it was offered.
            await workflow.wait_condition(lambda: self._s.turn is None or not self._s.turn.calls)
            agent.tools = own + mcp
            return [t.definition.name for t in agent.tools]

    @refresh_tools.validator
    def _check_refresh(self, *args: Any) -> None:
        if self._s.agent is None or not self._s.agent.spec.mcp_servers:
            raise ValueError("this conversation has no MCP servers to refresh")
        if self._s.ended or self._closing:
            raise ValueError("the conversation is closing")

    async def _wait_for_message(self, agent: ResolvedAgent) -> bool:
        """In a chat, wait for the next message (or a due continue-as-new); False to close."""
        if self._s.ended:
            self._closed_by = "end_signal"
            return False
        if not agent.spec.chat and self._s.messages_received:  # else started without a prompt
            return False
        self._board.set("idle", "waiting for the next message")
        try:
            await workflow.wait_condition(
                lambda: bool(self._s.queue) or self._s.ended or self._continue_as_new_due(),
                timeout=timedelta(seconds=agent.spec.idle_timeout_seconds),
                timeout_summary="idle timeout",
            )
        except TimeoutError:
            self._closed_by = "idle_timeout"
            return False
        if not self._s.queue and self._s.ended:
            self._closed_by = "end_signal"
            return False
        return True

    async def _start_turn(self, agent: ResolvedAgent) -> None:
        """Take the next message; ``user_prompt_submit`` hooks fire here, once per user message."""
        message = self._s.queue.pop(0)
        self._board.show(queued_messages=len(self._s.queue))
        self._s.turn = TurnState(message_id=message.id, started_at=workflow.now())
        self._board.show(iteration=0)
        text = message.text
        for decision in await self._hooks(agent, "user_prompt_submit", message.id, HookInvocation(text=text)):
            if decision.action == "block":
                answer = f"Message blocked by hook {decision.hook}: {decision.reason}"
                self._keep_out(message.id, "blocked by hook", answer, "blocked_by_hook")
                return
            if decision.action == "rewrite" and decision.text is not None:
                text = decision.text
        if (stopped := await self._guardrails.failed(agent, "input", text, message.id)) is not None:
            self._keep_out(message.id, f"stopped by guardrail {stopped.guardrail}", ended_note(stopped))
            return
        self._s.messages.append(UserMessage(text=text, images=message.images))
        self._events.publish(MessageAdded(role="user", text=text, message_id=message.id))

    def _keep_out(
        self, message_id: str, why: str, answer: str, reason: StopReason = "guardrail_tripped"
    ) -> None:
        """End the turn of a refused message: its text stays out of the transcript (and so out of
        later model calls), a placeholder and ``answer`` stand in."""
        placeholder = f"[message {message_id} {why}]"
        self._s.messages.append(UserMessage(text=placeholder))
        self._events.publish(MessageAdded(role="user", text=placeholder, message_id=message_id))
        self._s.messages.append(AssistantMessage(text=answer))
        self._finish_turn(reason)

    async def _hooks(
        self, agent: ResolvedAgent, event: HookEvent, target: str, about: HookInvocation
    ) -> list[HookDecision]:
        """Run the agent's hooks for ``event`` in order, each seeing the previous one's rewrite."""
        decisions: list[HookDecision] = []
        for name in getattr(agent.spec.hooks, event):
            context = HookContext(
                conversation_id=workflow.info().workflow_id,
                call_id=target if event != "user_prompt_submit" else None,
                message_id=target if event == "user_prompt_submit" else None,
            )
            try:
                decision = await RUN_HOOK.execute(
                    about.model_copy(update={"hook": name, "context": context}),
                    start_to_close_timeout=timedelta(seconds=30),
                    retry_policy=RetryPolicy(maximum_attempts=3),
                    summary=f"hook {name} ({event})",
                )
            except ActivityError as err:  # a guard that cannot answer says no
                decision = HookDecision(
                    hook=name, action="block", reason=f"hook {name} failed: {failure_text(err)}"
                )
            self._record_hook(event, target, decision)
            decisions.append(decision)
            if decision.action == "block":
                break
            if decision.action == "rewrite":
                about = about.model_copy(
                    update={
                        k: v
                        for k, v in (("arguments", decision.arguments), ("text", decision.text))
                        if v is not None
                    }
                )
        return decisions

    def _record_hook(self, event: HookEvent, target: str, decision: HookDecision) -> None:
        self._s.hooks.append(
            HookRecord(
                event=event, target=target, hook=decision.hook, action=decision.action, reason=decision.reason
            )
        )
        self._events.publish(HookDecided(record=self._s.hooks[-1]))

    async def _step(self, agent: ResolvedAgent) -> None:
        """One step of the current turn: resolve the pending tool calls, or call the model."""
        turn = self._s.turn
        assert turn is not None
        if turn.calls:
            await self._resolve_calls(agent, turn)
            return
        spec = agent.spec
        if turn.interrupt:  # the interrupt signal came between model calls: no next one
            self._finish_turn("interrupted", note=SIGNALLED)
            return
        if spec.interrupt and self._s.queue:  # a newer message takes over before the next model call
            self._finish_turn("interrupted")
            return
        limit = self._limit(turn, agent)
        if limit is None:
            turn.iterations += 1
            self._board.show(iteration=turn.iterations)
            try:
                response = await self._models.next_message(agent, allow_tool_calls=True)
            except BudgetRefused as refused:  # the tenant's or user's budget: the turn ends, not the chat
                self._finish_turn("budget_exhausted", note=refused.text)
                return
            if response.message.tool_calls:
                turn.calls = response.message.tool_calls
            elif not await self._answer_passes(
                agent, turn, response.message.text, retried=turn.guardrail_retries
            ):
                return
            elif spec.output_schema is None:
                self._finish_turn("completed")
            else:
                self._check_answer(spec, turn, response.message.text)
            return
        if spec.on_limit == "fail":
            raise ApplicationError(_limit_text(limit, agent), type=_limit_type(limit), non_retryable=True)
        # A final-answer call only for the iteration limit: a spent budget or call allowance
        # is spent, and one more call would go past it.
        if spec.on_limit == "stop" or limit != "max_iterations_reached":
            self._finish_turn(limit)
            return
        self._board.say(f"{_limit_text(limit, agent)}, asking for a final answer")
        try:
            response = await self._models.next_message(agent, allow_tool_calls=False)
        except BudgetRefused as refused:
            self._finish_turn(limit, note=refused.text)
            return
        if not await self._answer_passes(agent, turn, response.message.text):
            return
        output = parse_answer(response.message.text, spec.output_schema)[0] if spec.output_schema else None
        self._finish_turn(limit, output)

    async def _answer_passes(
        self, agent: ResolvedAgent, turn: TurnState, text: str, *, retried: int | None = None
    ) -> bool:
        """The output guardrails' say on an answer: one that fails goes back to the model with the
        reason (``retry``; the next step calls it again) or ends the turn in its stead."""
        failed = await self._guardrails.failed(agent, "output", text, turn.message_id, retried=retried)
        if failed is None:
            return True
        if failed.action == "retry":
            turn.guardrail_retries += 1
            self._s.messages.append(UserMessage(text=retry_note(failed)))
        else:  # the refused answer is not stored yet: it never reaches the store or a later call
            self._s.messages[-1] = AssistantMessage(text=ended_note(failed))
            self._finish_turn("guardrail_tripped")
        return False

    def _check_answer(self, spec: AgentSpec, turn: TurnState, text: str) -> None:
        """A typed answer: one that matches the schema ends the turn; one that does not goes back to
        the model with the problem (the next step calls it again), ``output_retries`` times at most."""
        assert spec.output_schema is not None
        output, problem = parse_answer(text, spec.output_schema)
        if problem is None:
            self._finish_turn("completed", output)
        elif turn.output_retries < spec.output_retries:
            turn.output_retries += 1
            workflow.logger.info("answer does not match the output schema: %s", problem)
            self._s.messages.append(UserMessage(text=correction(problem)))
        else:
            self._finish_turn("invalid_output")

    def _limit(self, turn: TurnState, agent: ResolvedAgent) -> StopReason | None:
        """Checked before each model call, from recorded usage only: replay decides the same."""
        spec = agent.spec
        if self._s.model_calls >= spec.max_model_calls:
            return "model_call_limit_reached"
        if spec.token_budget is not None and self._s.usage.total_tokens >= spec.token_budget:
            return "token_budget_exhausted"
        cost = conversation_cost(agent, self._s)
        if spec.cost_budget is not None and cost is not None and cost >= spec.cost_budget:
            return "cost_budget_exhausted"
        if turn.iterations >= agent.spec.max_iterations:
            return "max_iterations_reached"
        return None

    def _finish_turn(
        self, reason: StopReason, output: dict[str, Any] | None = None, *, note: str | None = None
    ) -> None:
        """``note``: why, when the stop reason alone does not say (which budget, when it resets)."""
        turn = self._s.turn
        assert turn is not None
        text = self._last_text()
        if not text and reason not in ("completed", "blocked_by_hook"):
            # Say why there is no answer rather than answer with nothing.
            text = f"[no answer: {note or _limit_text(reason, self._s.agent)}]"  # type: ignore[arg-type]
        self._s.replies.append(
            Reply(
                message_id=turn.message_id,
                text=text,
                stop_reason=reason,
                iterations=turn.iterations,
                truncated=turn.truncated,
                output=output,
                model=self._s.model_attempts[-1].model
                if self._s.model_attempts and turn.iterations
                else None,
            )
        )
        self._events.publish(ReplySent(reply=self._s.replies[-1]))
        self._s.turn = None
        workflow.logger.info(
            "answered %s: %s", turn.message_id, reason, extra={"message_id": turn.message_id}
        )
        self._board.say(f"answered {turn.message_id}: {reason}" + (f" ({note})" if note else ""))

    def _last_text(self) -> str:
        """The latest assistant text of the current turn (empty if the model gave none)."""
        for m in reversed(self._s.messages):
            if isinstance(m, UserMessage):
                return ""
            if isinstance(m, AssistantMessage) and m.text:
                return m.text
        return ""

    # -- tool calls ---------------------------------------------------------------

    async def _resolve_calls(self, agent: ResolvedAgent, turn: TurnState) -> None:
        """Run a turn's calls concurrently; those needing approval wait while the others run.

        A call still waiting for a person when a continue-as-new is due is left
        without an outcome and carried to the next run.
        """
        self._board.set("running_tools", f"running tools: {', '.join(c.name for c in turn.calls)}")
        tools = {tool.definition.name: tool for tool in agent.tools}

        async def settle(call: ToolCall) -> None:
            # Kept as each call ends: a cancellation meanwhile keeps what completed.
            if (outcome := await self._resolve_call(agent, tools, call)) is not None:
                turn.outcomes[call.id] = outcome
                self._events.publish(
                    ToolCallFinished(
                        call_id=call.id, tool=call.name, content=outcome.content, is_error=outcome.is_error
                    )
                )

        await asyncio.gather(*(settle(c) for c in turn.calls if c.id not in turn.outcomes))
        if self._judges.running:  # a judge a person beat: its opinion is recorded (too late) first
            await workflow.wait_condition(lambda: not self._judges.running)
        if len(turn.outcomes) == len(turn.calls):
            self._record_outcomes(turn)

    def _record_outcomes(self, turn: TurnState) -> None:
        """Every call of the turn with its outcome, into the transcript and the audit trail."""
        tools = {tool.definition.name: tool for tool in self._s.agent.tools} if self._s.agent else {}
        for call in turn.calls:
            outcome = turn.outcomes[call.id]
            tool = tools.get(call.name)
            ran_with = self._approvals.arguments_for(call)
            self._s.messages.append(
                ToolResultMessage(
                    call_id=call.id, name=call.name, content=outcome.content, is_error=outcome.is_error
                )
            )
            self._s.tool_calls.append(
                ToolCallRecord(
                    call_id=call.id,
                    name=call.name,
                    arguments=ran_with,
                    iteration=turn.iterations,
                    content=outcome.content,
                    is_error=outcome.is_error,
                    mcp_server=tool.mcp_server if tool else None,
                    subagent_workflow_id=outcome.subagent_workflow_id,
                )
            )
        turn.calls, turn.outcomes = [], {}

    async def _resolve_call(
        self, agent: ResolvedAgent, tools: dict[str, ToolSpec], call: ToolCall
    ) -> ToolOutcome | None:
        """One call's outcome; whatever the model got wrong, or a person refused, goes back as an error."""
        tool = tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(tools)) or "none"
            return ToolOutcome(
                content=f"Unknown tool '{call.name}'. Available tools: {known}.", is_error=True
            )
        if call.arguments_error is not None:
            return ToolOutcome(
                content=f"Invalid arguments for '{call.name}': {call.arguments_error}", is_error=True
            )
        approval = agent.spec.approval
        record = self._approvals.records.get(call.id)
        asked_client = any(c.call_id == call.id for c in self._s.client_calls)
        if record is None and not asked_client:  # not yet past the hooks (a resumed call is)
            about = HookInvocation(tool=call.name, arguments=call.arguments)
            for decision in await self._hooks(agent, "pre_tool_use", call.id, about):
                if decision.action == "block":
                    return ToolOutcome(
                        content=f"Blocked by hook {decision.hook}: {decision.reason}", is_error=True
                    )
                if decision.action == "rewrite" and decision.arguments is not None:
                    call.arguments = decision.arguments
        if tool.client is not None:  # the client runs it (no approval, no activity): wait for its result
            versioning.retired(CLIENT_WAIT_PATCH)
            self._board.set("waiting_for_client", f"waiting for the client: {call.name} ({call.id})")
            outcome = await self._client_calls.resolve(
                tool, call, self._continue_as_new_due, self._client_waits
            )
            if outcome is not None and self._board.view.state == "waiting_for_client":
                self._show_tools_running()
            return outcome
        if approval.requires_approval(tool.definition.name, tool.requires_approval):
            if record is None:
                record = self._approvals.request(
                    call,
                    approval.deadline_for(call.name),
                    workflow.now(),
                    approval.decisions_for(call.name),
                    approval.approvers_for(call.name),
                )
                if asks(record):  # a person is asked (or answered first, in older runs)
                    self._events.publish(ApprovalRequested(record=record))
                # decided already: by a tool a person allowed, or a decision that came first (older runs)
                self._events.approvals_decided([record])
            self._judges.start(agent, tool, record)  # judges, if any, race the person
            # A call of a tool a person allowed for the conversation is approved already: no wait.
            if asks(record) and not await self._wait_for_decision(record):
                return None
            kind = decided(record)
            assert kind is not None  # waited for until it was decided
            step = kind.then(call)
            # What a person wrote reaches the model within the tool output's bound too.
            limit = agent.spec.max_tool_output_chars
            if isinstance(step, Refuse):
                return ToolOutcome(content=step.content, is_error=True).truncated(limit)
            # The model's call stays as it asked; an edit's result leads with what ran instead.
            outcome = await self._run(agent, tool, call.model_copy(update={"arguments": step.arguments}))
            if step.note is None:
                return outcome
            noted = outcome.model_copy(update={"content": f"{step.note}\n{outcome.content}"})
            return noted.truncated(limit)
        return await self._run(agent, tool, call)

    async def _run(self, agent: ResolvedAgent, tool: ToolSpec, call: ToolCall) -> ToolOutcome:
        """The call's sub-agent conversation, or its tool's activity."""
        self._tools_in_flight += 1
        self._events.publish(ToolCallStarted(call_id=call.id, tool=call.name, arguments=call.arguments))
        try:
            if tool.subagent is not None:
                return await self._delegate(agent, tool, call)
            if tool.handoff is not None:
                return await self._hand_off(agent, tool, call)
            return await self._run_tool(agent, tool, call)
        finally:
            self._tools_in_flight -= 1

    async def _delegate(self, agent: ResolvedAgent, tool: ToolSpec, call: ToolCall) -> ToolOutcome:
        """A sub-agent's conversation answers the call; this one does not continue as new meanwhile."""
        origin = child_origin(self._input.subagent, call.id, agent, self._s)
        outcome = await self._subagents.run(tool, call, origin, self._s)
        self._board.show(usage=self._s.usage, cost=conversation_cost(agent, self._s))
        return outcome

    async def _hand_off(self, agent: ResolvedAgent, tool: ToolSpec, call: ToolCall) -> ToolOutcome:
        """``tool.handoff``'s agent answers from the next model call (workflows/handoffs.py)."""
        target_input = ConversationInput(
            agent=tool.handoff,
            await_first_message=True,
            client_tools=self._input.client_tools,
            subagent=self._input.subagent,
        )
        try:
            target = taking_over(await self._resolve(target_input, start=False), agent)
        except ApplicationError as err:  # say, the agent file is gone: the model is told
            return ToolOutcome(content=f"The handoff failed: {err.message}", is_error=True)
        reason = str(call.arguments.get("reason") or "")
        self._s.agent = target
        record = HandoffRecord(
            call_id=call.id,
            from_agent=agent.spec.name,
            to_agent=target.spec.name,
            reason=reason,
            at=workflow.now(),
        )
        self._s.handoffs.append(record)
        self._events.publish(HandedOff(record=record))
        if target.spec.system_prompt:
            self._s.messages.append(SystemMessage(text=target.spec.system_prompt, handoff=True))
        self._board.name_agent(target.spec.name, target.spec.max_iterations)
        workflow.logger.info("handed off to %s: %s", target.spec.name, reason)
        return ToolOutcome(content=f"Transferred to {target.spec.name}; it answers from now on.")

    async def _run_tool(self, agent: ResolvedAgent, tool: ToolSpec, call: ToolCall) -> ToolOutcome:
        workflow_id = workflow.info().workflow_id
        log = {"iteration": self._board.view.iteration, "call_id": call.id, "tool": call.name}
        workflow.logger.info("running tool %s", call.name, extra=log)
        options = (  # a local tool runs in this workflow task, on this worker: no queue, no heartbeat
            tool.call.local_activity_options()
            if tool.local
            else {
                "task_queue": agent.spec.tool_task_queues.get(call.name, agent.spec.tool_task_queue),
                **tool.call.activity_options(),
            }
        )
        if tool.at_most_once:  # one attempt at a time: the workflow decides what follows a failed one
            options["retry_policy"] = RetryPolicy(maximum_attempts=1)
        invocation = ToolInvocation.of(
            call,
            workflow_id,
            call_key(),
            max_output_chars=agent.spec.max_tool_output_chars,
            post_hooks=agent.spec.hooks.post_tool_use,
            iteration=self._board.view.iteration,
            mcp=next((m for m in agent.spec.mcp_servers if m.name == tool.mcp_server), None),
            mcp_tool=tool.mcp_tool,
            stores=stores_of(agent),
            **({"at_most_once": True} if tool.at_most_once else {}),
        )

        async def attempt() -> ToolOutcome:
            return await RUN_TOOL.execute(
                invocation,
                local=tool.local,
                outages=self._board.outage,
                summary=f"mcp {tool.mcp_server}: {tool.mcp_tool}" if tool.mcp_server else f"tool {call.name}",
                **options,
                **({} if tool.local else tenancy.activity_priority(agent.spec.priority)),
            )

        try:
            if tool.at_most_once:
                outcome = await run_at_most_once(
                    tool,
                    call,
                    attempt,
                    self._approvals,
                    self._events,
                    agent.spec.approval.deadline_for(call.name),
                    self._wait_for_decision,
                )
            else:
                outcome = await attempt()
            for decision in outcome.hooks:
                self._record_hook("post_tool_use", call.id, decision)
            return outcome
        except ActivityError as err:
            workflow.logger.warning("tool %s failed: %s", call.name, failure_text(err), extra=log)
            return ToolOutcome(content=f"Tool '{call.name}' failed: {failure_text(err)}", is_error=True)

    async def _wait_for_decision(self, record: ApprovalRecord) -> bool:
        """Wait for a person; False when the wait is handed over to the next run."""
        log = {"iteration": self._board.view.iteration, "call_id": record.call_id, "tool": record.tool}
        workflow.logger.info("awaiting approval for %s", record.tool, extra=log)
        self._refresh_approval_state()
        self._tell(record)
        remaining = None if record.deadline is None else time_left(record.deadline, workflow.now())
        try:
            await workflow.wait_condition(
                lambda: record.state != "pending" or self._continue_as_new_due(),
                timeout=remaining,
                timeout_summary=f"approval deadline for {record.tool} ({record.call_id})",
            )
        except TimeoutError:
            self._approvals.time_out(record, workflow.now())
            self._events.approvals_decided([record])
        self._refresh_approval_state()
        if record.state != "pending":
            workflow.logger.info("%s %s by %s", record.tool, record.state, record.by, extra=log)
        return record.state != "pending"

    def _refresh_approval_state(self) -> None:
        if self._reporter is not None:
            self._reporter.report(list(self._approvals.records.values()), self._schema_of, self._subagents)
        pending = self._approvals.pending + self._subagents.pending
        self._board.show(pending_approvals=len(pending))
        if pending:
            names = ", ".join(
                f"{r.tool} ({r.call_id}{', outcome unknown' if r.asked == 'outcome_unknown' else ''})"
                for r in pending
            )
            self._board.set("awaiting_approval", f"awaiting approval: {names}")
        else:
            self._show_tools_running()

    def _client_waits(self, call: ClientCall) -> None:
        """A client tool's call was asked: the Web UI's details and the agent's webhook name it."""
        self._board.refresh()
        self._tell(call)

    def _tell(self, call: ApprovalRecord | ClientCall) -> None:
        """The agent's webhook is told that ``call`` waits (workflows/notifications.py)."""
        assert self._s.agent is not None  # calls wait only once the agent is resolved
        owner = self.tenancy
        self._notifications.waiting(self._s.agent.spec, call, tenant=owner.tenant, user=owner.user)

    def _show_tools_running(self) -> None:
        """``running_tools``, or ``waiting_for_client`` while a client tool's call waits."""
        waiting = self._client_calls.pending
        if waiting:
            versioning.retired(CLIENT_WAIT_PATCH)
            calls = ", ".join(f"{c.tool} ({c.call_id})" for c in waiting)
            self._board.set("waiting_for_client", f"waiting for the client: {calls}")
        else:
            self._board.set("running_tools", "running tools")

    # -- continue-as-new ----------------------------------------------------------

    def _continue_as_new_due(self) -> bool:
        """Due when Temporal suggests it or the run made its share of model calls; only at a point
        where nothing is in flight and every update handler has answered (but the stream's polls,
        which the continue-as-new hands over)."""
        if self._tools_in_flight or self._answering or self._notifications.in_flight:
            return False
        return self._rollover_wanted()

    def _rollover_wanted(self) -> bool:
        agent = self._s.agent
        if agent is None:
            return False
        every = agent.spec.continue_as_new_after
        return workflow.info().is_continue_as_new_suggested() or bool(
            every and self._models.in_this_run >= every
        )

    async def _continue_as_new(self, input: ConversationInput) -> None:
        agent = self._s.agent
        self._s.stream = await self._events.hand_over(agent.spec.carried_events if agent else 0)
        self._s.approvals = list(self._approvals.records.values())
        self._s.allowances = self._approvals.allowances
        self._s.runs += 1
        workflow.logger.info("continuing as new (run %d)", self._s.runs)
        workflow.continue_as_new(
            input.model_copy(update={"state": self._s, "history": []}),
            initial_versioning_behavior=versioning.next_run(),
        )

    # -- status and result --------------------------------------------------------

    def _cancelled(self, reason: str) -> ConversationResult:
        """Close as cancelled: completed calls kept, the rest (and pending approvals) marked cancelled."""
        self._closing = True
        self._closed_by = "cancelled"
        were_pending = self._approvals.pending
        self._judges.cancel()
        self._client_calls.cancel_pending()
        self._approvals.cancel_pending(f"conversation cancelled: {reason}", workflow.now())
        self._events.approvals_decided(were_pending)
        if (turn := self._s.turn) is not None:
            for call in turn.calls:
                if call.id not in turn.outcomes:
                    turn.outcomes[call.id] = ToolOutcome(
                        content=f"Tool call '{call.name}' was cancelled with the conversation.", is_error=True
                    )
                    self._events.publish(
                        ToolCallFinished(
                            call_id=call.id,
                            tool=call.name,
                            content=turn.outcomes[call.id].content,
                            is_error=True,
                        )
                    )
            self._record_outcomes(turn)
            self._finish_turn("cancelled")
        for message in self._s.queue:
            self._s.replies.append(
                Reply(
                    message_id=message.id,
                    text="The conversation was cancelled before this message was answered.",
                    stop_reason="cancelled",
                    iterations=0,
                )
            )
            self._events.publish(ReplySent(reply=self._s.replies[-1]))
        self._s.queue = []
        self._board.show(queued_messages=0, pending_approvals=0)
        self._board.set("cancelled", f"cancelled: {reason}")
        result = self._result()
        # The status query answers for the closed run too: with a sub-agent's spend, counted since.
        self._board.show(usage=result.usage, cost=result.cost, model_calls=result.model_calls)
        return result

    def _result(self) -> ConversationResult:
        if self._closed_by != "cancelled":
            self._board.set("completed", f"finished: {self._closed_by}")
        outcome = "cancelled" if self._closed_by == "cancelled" else "completed"
        self._events.publish(Ended(outcome=outcome, detail=self._board.view.detail))
        last = self._s.replies[-1] if self._s.replies else None
        return ConversationResult(
            **dict(self.history()),
            final_text=last.text if last else self._last_text(),
            stop_reason=last.stop_reason if last else "completed",
            max_iterations_reached=last is not None and last.stop_reason == "max_iterations_reached",
            iterations=last.iterations if last else (self._s.turn.iterations if self._s.turn else 0),
            model_calls=self._s.model_calls,
            truncated=last is not None and last.truncated,
            usage=self._s.usage,
            cost=conversation_cost(self._s.agent, self._s) if self._s.agent else None,
            replies=self._s.replies,
            closed_by=self._closed_by,
            detail=self._board.view.detail,
            runs=self._s.runs,
            output=last.output if last else None,
            models_used=models_used(self._s.model_attempts),
        )


def _set_by_caller(input: ConversationInput, info: workflow.Info) -> str:
    """What a start set that only the conversation itself carries to its next run (``state``) or only
    its parent gives (``subagent``); empty if nothing. Set by a caller, it would skip approvals and
    forge the audit trail."""
    if info.continued_run_id is not None:  # continued by the conversation itself
        return ""
    if input.state is not None:
        return "'state' is carried by the conversation from run to run; a start cannot set it"
    parent = info.parent.workflow_id if info.parent else None
    if input.subagent is not None and input.subagent.parent_workflow_id != parent:
        return "'subagent' is given by the conversation that delegates to this one; a start cannot set it"
    return ""


def _limit_text(limit: StopReason, agent: ResolvedAgent) -> str:
    spec = agent.spec
    match limit:
        case "model_call_limit_reached":
            return f"model call limit of {spec.max_model_calls} reached"
        case "token_budget_exhausted":
            return f"token budget of {spec.token_budget} exhausted"
        case "cost_budget_exhausted":
            return f"cost budget of ${spec.cost_budget:g} exhausted"
        case "cancelled":
            return "the conversation was cancelled"
        case "invalid_output":
            return f"no answer matched the output schema after {spec.output_retries} retries"
        case "interrupted":
            return "interrupted by a newer message"
        case "budget_exhausted":
            return "a budget of the tenant or user is spent"
    return f"iteration limit of {spec.max_iterations} reached"


def _limit_type(limit: StopReason) -> str:
    return "".join(word.capitalize() for word in limit.split("_"))
