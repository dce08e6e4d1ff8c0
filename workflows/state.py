"""What a conversation carries from run to run (continue-as-new): everything it has done."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field
from temporalio.contrib.workflow_streams import WorkflowStreamState

from durable_agents.workflows.activity_io import ResolvedAgent, ToolOutcome
from durable_agents.workflows.messages import Image, ToolCall, Usage
from durable_agents.workflows.records import ConversationHistory, Decision, Reply


class QueuedMessage(BaseModel):
    id: str
    text: str
    images: list[Image] = Field(default_factory=list)


class TurnState(BaseModel):
    """Progress of the answer to one user message; carried across continue-as-new."""

    message_id: str
    started_at: datetime | None = None
    """When the turn began (its span's start: workflows/telemetry.py); None in turns begun before."""
    iterations: int = 0
    calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls of the latest model response that still need outcomes."""
    outcomes: dict[str, ToolOutcome] = Field(default_factory=dict)
    truncated: bool = False
    """A model response of this turn was cut at max_tokens (a cut tool call included)."""
    output_retries: int = 0
    """Answers of this turn sent back for not matching the agent's ``output_schema``."""
    guardrail_retries: int = 0
    """Answers of this turn an output guardrail sent back to the model."""
    interrupt: bool = False
    """The ``interrupt`` signal asked to end this turn: its model call is cancelled, or, between
    calls, the turn ends before the next one (workflows/interrupts.py)."""


class ConversationState(ConversationHistory):
    """Everything a conversation carries from one run to the next: its history, and where it is."""

    agent: ResolvedAgent | None = None
    stored: int = 0
    """How many of ``messages`` the conversation store is known to hold."""
    queue: list[QueuedMessage] = Field(default_factory=list)
    turn: TurnState | None = None
    replies: list[Reply] = Field(default_factory=list)
    early_decisions: list[Decision] = Field(default_factory=list)
    """No longer read: decisions kept for calls not asked yet, which only runs before release 1 kept
    (retired with ``approvals-bind-to-pending-calls``); kept so that a state that carries it reads."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens of the whole conversation, its sub-agents' included."""
    subagent_usage: Usage = Field(default_factory=Usage)
    """Of ``usage``, the sub-agents' tokens: priced by their own models, into ``subagent_cost``."""
    subagent_cost: float | None = None
    """US dollars the sub-agents spent, when their models have a price."""
    model_calls: int = 0
    model_requests: int = 0
    """Model activity calls made for ``model_calls`` (fallback models' and summaries' included): the
    event stream's number for each."""
    context_tokens: int = 0
    """Input and output tokens of the latest model call (after a summary: an estimate of what the
    model sees), for context compaction; 0 when not known."""
    context_messages: int = 0
    """How many of ``messages`` ``context_tokens`` counts."""
    messages_received: int = 0
    ended: bool = False
    runs: int = 1
    stream: WorkflowStreamState | None = None
    """The event stream's log (workflows/events.py), so subscribers resume at their offset in the
    next run; None in runs from before the stream."""
