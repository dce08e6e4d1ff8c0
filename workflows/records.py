"""The audit trail a conversation keeps: tool calls, approvals, hook decisions, replies; with its
messages, its history."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field

from durable_agents.workflows.config import DECISION_KINDS, DecisionKind, HookEvent
from durable_agents.workflows.inputs import Payload
from durable_agents.workflows.messages import Message, Usage

StopReason = Literal[
    "completed",
    "max_iterations_reached",
    "model_call_limit_reached",
    "token_budget_exhausted",
    "cost_budget_exhausted",
    "blocked_by_hook",
    "cancelled",
    "invalid_output",
    "interrupted",
    "budget_exhausted",
    "guardrail_tripped",
]


class HookRecord(BaseModel):
    """One hook decision in the audit trail."""

    event: HookEvent
    target: str
    """The tool call id or user message id it was about."""
    hook: str
    action: Literal["allow", "block", "rewrite"]
    reason: str = ""


class GuardrailRecord(BaseModel):
    """One guardrail's check of a user message (``input``) or of an answer (``output``)."""

    stage: Literal["input", "output"]
    guardrail: str
    message_id: str
    """The user message whose turn it was in."""
    passed: bool
    reason: str = ""
    """Why it failed (or, a model check's, why it passed)."""
    action: Literal["none", "end_turn", "retry"] = "none"
    """What followed: ``retry``, the model was told why and asked again; ``end_turn``, the turn ended."""
    usage: Usage | None = None
    """A model check's tokens (counted in the conversation's usage)."""


class HandoffRecord(BaseModel):
    """The conversation went from one agent to another: the call that took it, and why."""

    call_id: str
    from_agent: str
    to_agent: str
    reason: str
    at: datetime


class ToolCallRecord(BaseModel):
    """One tool call as the audit trail keeps it."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    iteration: int
    content: str
    is_error: bool
    mcp_server: str | None = None
    """The MCP server that ran it, for an MCP tool."""
    subagent_workflow_id: str | None = None
    """The sub-agent's conversation that answered it, for a sub-agent tool."""


class ModelAttempt(BaseModel):
    """One try of a model call by an agent with fallback models: the model, and whether it answered."""

    model: str
    """``provider:model``."""
    model_call: int
    """The conversation's model call (counting from 1) this try belongs to."""
    iteration: int
    error: str | None = None
    """Why the call failed for good; None: this model answered."""


ApprovalState = Literal["pending", "approved", "rejected", "timed_out", "cancelled"]


def arguments_digest(arguments: dict[str, Any]) -> str:
    """A short fingerprint of a tool call's arguments: what a person saw is what gets approved."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


class Verdict(BaseModel):
    """Who made a decision, as the worker's ``verify_decision`` found it (``AGENT_APPROVER_KEYS``)."""

    approver: Literal["signed", "self-declared", "refused"]
    """``signed``: the key named by ``by`` signed it; ``self-declared``: the workers have no approver
    keys, ``by`` is what the decider wrote; ``refused``: unsigned or badly signed (never applied)."""
    key: str | None = None
    """The approver key whose signature holds."""
    reason: str = ""
    """Why refused, on one line."""

    @property
    def valid(self) -> bool:
        return self.approver != "refused"


class Judgement(BaseModel):
    """A judge's opinion of a waiting call (workflows/judges.py): the verdict of a judge that
    decided it, or the opinion a person sees while asked."""

    judge: str
    kind: Literal["rules", "model"]
    verdict: Literal["approve", "deny", "escalate"]
    reason: str = ""
    at: datetime
    model: str | None = None
    """``provider:model`` of a model judge."""
    usage: Usage | None = None
    """The tokens a model judge used (counted in the conversation's)."""
    too_late: bool = False
    """The call had been decided (by a person) before this opinion came: it changed nothing."""


class LateDecision(BaseModel):
    """A person's decision that came after a judge had decided the call: recorded, not taken."""

    by: str
    approve: bool
    reason: str = ""
    at: datetime


class WaitingCall(BaseModel):
    """A tool call the conversation put to someone outside it (a person, a client) and waits on."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    requested_at: datetime
    deadline: datetime | None = None
    """None: no deadline, the call waits until it is answered (or the conversation ends)."""


class ApprovalRecord(WaitingCall):
    """A tool call that needed a person: the request and, once made, the decision (each kind of
    decision writes itself here and reads back from here: workflows/decisions.py)."""

    state: ApprovalState = "pending"
    by: str | None = None
    reason: str | None = None
    decided_at: datetime | None = None
    via: Literal["signal", "update", "deadline", "cancellation", "remember", "judge"] | None = None
    """``remember``: approved without asking, the tool being allowed for the conversation;
    ``judge``: decided by the judge ``by`` names (its ``judgements`` say why)."""
    edited_arguments: dict[str, Any] | None = None
    """The arguments the person approved instead of ``arguments``: the call ran with these."""
    remember: bool = False
    """The approval also allowed the tool for the rest of the conversation."""
    allowed_decisions: list[DecisionKind] = Field(default_factory=lambda: list(DECISION_KINDS))
    """What a person may decide about this call (the agent's ``approval.tool_decisions``)."""
    approvers: list[str] | None = None
    """Who may decide (the agent's ``approval.approvers``/``tool_approvers``); None: anyone."""
    verdict: Verdict | None = None
    """Who decided, as the worker verified it; None for what no person decided (deadline,
    cancellation, remember) and for decisions taken before decisions were verified."""
    asked: Literal["approval", "outcome_unknown"] = "approval"
    """``outcome_unknown``: an at-most-once call whose attempt may or may not have run; approve runs
    it again, a ``result`` is recorded as its result, reject fails it (``for_call`` names the call)."""
    for_call: str | None = None
    """The tool call an ``outcome_unknown`` record is about (its own id is ``<call>.unknown``...)."""
    result: str | None = None
    """The result a person recorded for an ``outcome_unknown`` call."""
    judgements: list[Judgement] = Field(default_factory=list)
    """The judges' opinions, in the order they came (workflows/judges.py)."""
    late: list[LateDecision] = Field(default_factory=list)
    """People's decisions that came after a judge had decided: too late, not taken."""
    conversation: str | None = None
    """The conversation that asked: the first run id of its chain (kept across continue-as-new; a
    sub-agent's own). Signatures name it, so that one made for this call fits no other conversation
    that reuses the workflow id. None in records asked before it was kept (the conversation's own)."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def arguments_digest(self) -> str:
        return arguments_digest(self.arguments)


class Reply(BaseModel):
    """The answer to one user message, as ``send_message`` returns it."""

    message_id: str
    text: str
    stop_reason: StopReason
    iterations: int
    truncated: bool = False
    output: dict[str, Any] | None = None
    """The answer as an object, for an agent with an ``output_schema`` (when the answer matched it)."""
    model: str | None = None
    """The ``provider:model`` that gave the answer, for an agent with fallback models."""


class ApprovalSignal(Payload):
    """Input of the ``approve`` / ``reject`` signals: ``{"call_id": "...", "by": "...", "reason": "..."}``.

    With ``arguments_digest`` (as ``pending_approvals`` shows it) the decision applies only if the
    pending call's arguments are exactly the ones the person saw. ``by``, ``reason`` and
    ``arguments`` are bounded by the agent's ``approval.max_*_bytes`` (workflows/decisions.py, whose
    ``parse`` says which kind of decision it is).
    """

    call_id: str = Field(min_length=1)
    by: str = "unknown"
    reason: str = ""
    arguments_digest: str | None = None
    arguments: dict[str, Any] | None = None
    """Approve with these arguments instead (checked against the tool's schema)."""
    remember: bool | None = None
    """true: approve, and let later calls of this tool run without asking for the rest of the
    conversation. (None rather than false when not given: a plain decision's payload stays as it was.)"""
    signature: str | None = None
    """HMAC-SHA256 (hex) by the key of the approver ``by`` names over the decision
    (``workflows/signatures.py``); required when the workers have approver keys."""
    result: str | None = None
    """For a call whose outcome is unknown (at most once): record this as its result instead of
    running it again."""


class Decision(ApprovalSignal):
    """Input of the ``decide`` update, which answers whether the decision took."""

    approve: bool
    wait_seconds: float = Field(default=10.0, gt=0, le=600)
    """How long a decision for a sub-agent's call waits for the sub-agent to take it before the
    update answers why not (the starter gives ``AGENT_DECIDE_TIMEOUT``)."""


class ToolAllowance(BaseModel):
    """A tool a person allowed for the rest of the conversation (an approval with ``remember``)."""

    tool: str
    by: str
    call_id: str
    """The approval that allowed it."""
    granted_at: datetime
    revoked_by: str | None = None
    revoked_at: datetime | None = None


class Revocation(Payload):
    """Input of the ``revoke`` update: ``{"tool": "write_file", "by": "alice"}``."""

    tool: str = Field(min_length=1)
    by: str = "unknown"


class ClientCall(WaitingCall):
    """A call of a client tool (workflows/client_tools.py): asked of the client, and its answer."""

    state: Literal["pending", "delivered", "timed_out", "cancelled"] = "pending"
    result: Any = None
    is_error: bool = False
    delivered_at: datetime | None = None
    result_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "string"})


class ClientResult(Payload):
    """Input of the ``deliver_client_result`` update: ``{"call_id": "call_1_0", "result": "..."}``."""

    call_id: str = Field(min_length=1)
    result: Any
    is_error: bool = False
    """The client could not run the tool: ``result`` says why, and the model reads it as an error."""


class ConversationHistory(BaseModel):
    """The messages and the audit trail of decisions: what the ``history`` query returns, and the
    part of the result a finished conversation keeps."""

    messages: list[Message] = Field(default_factory=list)
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    approvals: list[ApprovalRecord] = Field(default_factory=list)
    hooks: list[HookRecord] = Field(default_factory=list)
    guardrails: list[GuardrailRecord] = Field(default_factory=list)
    """Every guardrail check, passed or failed, in order."""
    handoffs: list[HandoffRecord] = Field(default_factory=list)
    """Every handoff to another agent, in order."""
    allowances: list[ToolAllowance] = Field(default_factory=list)
    """Tools a person allowed for the rest of the conversation, and who revoked them."""
    model_attempts: list[ModelAttempt] = Field(default_factory=list)
    """Every try of every model call, for an agent with fallback models."""
    client_calls: list[ClientCall] = Field(default_factory=list)
    """Calls of client tools, asked of the client, and what it delivered."""
    usage_by_model: dict[str, Usage] = Field(default_factory=dict)
    """The conversation's own model calls' tokens (summaries' included; not its sub-agents', not its
    judges'), by ``provider:model``. Before per-model usage was kept for every agent, only one with
    fallback models kept it: an older conversation's map counts only the calls since."""
    cost_by_model: dict[str, float] = Field(default_factory=dict)
    """US dollars of ``usage_by_model``, for each model with a price."""
