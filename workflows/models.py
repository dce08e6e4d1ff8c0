"""Inputs, outputs and settings of the agent workflow and its activities."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, computed_field, model_validator
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.workflow import ActivityCancellationType

from workflows.messages import Message, ModelRequest, ModelSettings, ToolCall, ToolDefinition, Usage

AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
"""running, awaiting_approval, completed or failed: find conversations that wait for a person."""
AGENT_NAME = SearchAttributeKey.for_keyword("AgentName")

OnLimit = Literal["final_answer", "stop", "fail"]
StopReason = Literal[
    "completed",
    "max_iterations_reached",
    "model_call_limit_reached",
    "token_budget_exhausted",
    "cost_budget_exhausted",
    "blocked_by_hook",
    "cancelled",
]
ClosedBy = Literal["answered", "idle_timeout", "end_signal", "cancelled"]

MAX_PROMPT_CHARS = 1_000_000
"""Prompts above this are refused at start (from 128 KiB on, payloads go to the payload store)."""

DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024
"""Follow-up messages above this (UTF-8 bytes) are refused unless the agent sets ``max_message_bytes``."""

MAX_WAIT_SECONDS = 366 * 24 * 3600.0
"""Upper bound of every configurable timeout and deadline (a year); "none" is the way to wait forever."""

Seconds = Annotated[float, Field(gt=0, le=MAX_WAIT_SECONDS)]


class CallPolicy(BaseModel):
    """Timeout and retry settings of one kind of activity call."""

    model_config = {"extra": "forbid"}

    timeout_seconds: Seconds = 60.0
    """start-to-close timeout of one attempt."""
    max_attempts: int = Field(default=5, ge=0)
    """Attempts in all, the first included; 0 means unlimited."""
    initial_retry_seconds: Seconds = 0.5
    """Delay before the first retry; a provider's retry-after overrides it."""
    max_retry_seconds: Seconds = 60.0
    """Cap of the exponential backoff between retries."""
    heartbeat_seconds: Seconds | None = None
    """Heartbeat timeout for long calls, so a dead worker is noticed in seconds."""

    @model_validator(mode="after")
    def _backoff_in_order(self) -> CallPolicy:
        # Temporal refuses a retry policy whose cap is below its first interval,
        # and it would refuse it in the workflow task: check it at the door.
        if self.max_retry_seconds < self.initial_retry_seconds:
            raise ValueError(
                f"max_retry_seconds ({self.max_retry_seconds:g}) is below"
                f" initial_retry_seconds ({self.initial_retry_seconds:g})"
            )
        return self

    def activity_options(self) -> dict[str, Any]:
        return {
            "start_to_close_timeout": timedelta(seconds=self.timeout_seconds),
            "heartbeat_timeout": (
                timedelta(seconds=self.heartbeat_seconds) if self.heartbeat_seconds else None
            ),
            # A heartbeating call hears a cancellation and aborts (its HTTP request with it): wait for
            # that, so a cancelled conversation closes with nothing still running.
            "cancellation_type": (
                ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
                if self.heartbeat_seconds
                else ActivityCancellationType.TRY_CANCEL
            ),
            "retry_policy": self._retry_policy(),
        }

    def local_activity_options(self) -> dict[str, Any]:
        """For a local activity: it runs in the workflow task on the workflow's own worker, so there is
        no task queue and no heartbeat (a worker dying meanwhile times out the task; the call runs again)."""
        return {
            "start_to_close_timeout": timedelta(seconds=self.timeout_seconds),
            "retry_policy": self._retry_policy(),
        }

    def _retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            initial_interval=timedelta(seconds=self.initial_retry_seconds),
            maximum_interval=timedelta(seconds=self.max_retry_seconds),
            maximum_attempts=self.max_attempts,
        )


Deadline = Seconds | Literal["none"]
"""Seconds to wait for a person's decision, or "none" to wait forever."""

DEFAULT_APPROVAL_DEADLINE = 24 * 3600.0


class ApprovalPolicy(BaseModel):
    """Which tool calls wait for a person, and for how long.

    A tool in ``auto`` never waits; one in ``require`` always does; otherwise the
    tool's own default (``@tool(requires_approval=True)``) applies, then ``default``.
    """

    model_config = {"extra": "forbid"}

    default: Literal["auto", "require"] = "auto"
    require: list[str] = Field(default_factory=list)
    auto: list[str] = Field(default_factory=list)
    deadline: Deadline = DEFAULT_APPROVAL_DEADLINE
    """After this many seconds without a decision the call is rejected ("none": wait forever)."""
    tool_deadlines: dict[str, Deadline] = Field(default_factory=dict)
    """Per-tool deadlines, overriding ``deadline``."""

    def requires_approval(self, tool: ToolSpec) -> bool:
        name = tool.definition.name
        if name in self.auto:
            return False
        return name in self.require or tool.requires_approval or self.default == "require"

    def deadline_for(self, tool_name: str) -> timedelta | None:
        deadline = self.tool_deadlines.get(tool_name, self.deadline)
        return None if deadline == "none" else timedelta(seconds=deadline)


HookEvent = Literal["pre_tool_use", "post_tool_use", "user_prompt_submit"]


class HookConfig(BaseModel):
    """Names of hooks (from the worker's hook registry) to run, in order, at each point."""

    model_config = {"extra": "forbid"}

    pre_tool_use: list[str] = Field(default_factory=list)
    post_tool_use: list[str] = Field(default_factory=list)
    user_prompt_submit: list[str] = Field(default_factory=list)


class HookContext(BaseModel):
    conversation_id: str
    call_id: str | None = None
    message_id: str | None = None


class HookDecision(BaseModel):
    """What a hook decided: allow, block (with a reason) or rewrite (arguments, content or text)."""

    action: Literal["allow", "block", "rewrite"] = "allow"
    reason: str = ""
    arguments: dict[str, Any] | None = None
    """New tool arguments (pre_tool_use)."""
    content: str | None = None
    """New tool output (post_tool_use)."""
    text: str | None = None
    """New user message (user_prompt_submit)."""
    hook: str = ""


class HookInvocation(BaseModel):
    """Input of the hook activity."""

    hook: str = ""
    context: HookContext | None = None
    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    content: str | None = None
    is_error: bool = False
    text: str | None = None


class HookRecord(BaseModel):
    """One hook decision in the audit trail."""

    event: HookEvent
    target: str
    """The tool call id or user message id it was about."""
    hook: str
    action: Literal["allow", "block", "rewrite"]
    reason: str = ""


_SENSITIVE = re.compile(r"auth|token|key|secret|password|cookie|credential", re.IGNORECASE)
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""``${NAME}``: a worker environment variable in an MCP server's args, env or headers."""


class MCPServerConfig(BaseModel):
    """An MCP server whose tools an agent may use: stdio (``command``) or streamable HTTP (``url``).

    Values in ``args``, ``env`` and ``headers`` may name the worker's environment variables as ``${NAME}``;
    they are filled in on the worker, so secrets never enter workflow inputs or history.
    """

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    prefix: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,30}$")
    """Tools are offered to the model as ``<prefix>_<tool>``; none by default."""
    allow: list[str] = Field(default_factory=list)
    """Only these of the server's tools (its own names); all when empty."""
    deny: list[str] = Field(default_factory=list)
    """Never these of the server's tools."""
    approval: Literal["auto", "require", "unless_read_only"] = "auto"
    """The server's tools' own default, like ``@tool(requires_approval=...)``: ``unless_read_only``
    lets through tools the server marks ``readOnlyHint``. The agent's approval lists still win."""
    call: CallPolicy = Field(
        default_factory=lambda: CallPolicy(timeout_seconds=60, max_attempts=3, heartbeat_seconds=5)
    )
    """Timeout and retries of each tool call (and of listing the tools)."""
    startup_timeout_seconds: Seconds = 30.0
    """How long one attempt waits for the server to start (or connect); a server still starting
    keeps starting for the next attempt. Capped by ``call.timeout_seconds``."""

    @model_validator(mode="after")
    def _no_literal_secrets(self) -> MCPServerConfig:
        # History records this configuration: secrets must come from the worker's environment.
        for field, values in (("headers", self.headers), ("env", self.env)):
            for name, value in values.items():
                if _SENSITIVE.search(name) and not ENV_REFERENCE.search(value):
                    raise ValueError(
                        f"MCP server {self.name!r}: {field}.{name} looks like a secret; write it as"
                        f" ${{VARIABLE}} and set the variable on the worker"
                    )
        return self

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                f"MCP server {self.name!r}: give exactly one of 'command' (stdio) or 'url' (HTTP)"
            )
        return self

    def exposed_name(self, tool: str) -> str:
        return f"{self.prefix}_{tool}" if self.prefix else tool

    def offers(self, tool: str) -> bool:
        return (not self.allow or tool in self.allow) and tool not in self.deny


class AgentSpec(BaseModel):
    """An agent: which model, what it is told, which tools it may use, and its limits."""

    model_config = {"extra": "forbid"}

    name: str
    model: ModelSettings
    system_prompt: str = ""
    tools: list[str] = Field(default_factory=list)
    """Allowlist of tool names from the worker's registry."""
    local_tools: list[str] = Field(default_factory=list)
    """Of ``tools``, those that run as local activities (besides tools marked ``@tool(local=True)``):
    inside the workflow task, with no server round trip. Only for quick tools without side effects."""
    max_iterations: int = Field(default=5, ge=1)
    """Model calls that may ask for tools before the limit applies."""
    on_limit: OnLimit = "final_answer"
    model_call: CallPolicy = Field(
        default_factory=lambda: CallPolicy(timeout_seconds=120, heartbeat_seconds=3)
    )
    """Timeouts and retries of model calls."""
    approval: ApprovalPolicy = Field(default_factory=ApprovalPolicy)
    chat: bool = False
    """Stay open after an answer for follow-up messages, until ``end`` or the idle timeout."""
    idle_timeout_seconds: Seconds = 24 * 3600.0
    """An open chat with no new message for this long completes cleanly."""
    max_model_calls: int = Field(default=100, ge=1)
    """Model calls in the whole conversation (all messages, all runs): a guard on runaway cost."""
    continue_as_new_after: int | None = Field(default=None, ge=1)
    """Start a fresh run after this many model calls; otherwise when Temporal suggests it."""
    max_tool_output_chars: int = Field(default=20_000, ge=100)
    """Longer tool outputs are cut before they enter history, and the model is told so."""
    hooks: HookConfig = Field(default_factory=HookConfig)
    mcp_servers: list[MCPServerConfig] = Field(default_factory=list)
    """MCP servers whose tools the agent may use besides ``tools``; listed when the conversation starts."""
    model_task_queue: str | None = None
    """Task queue for model calls (a rate-limited pool of model workers); default: the workflow's own."""
    tool_task_queue: str | None = None
    """Task queue for tool calls (workers on hosts with the right access); default: the workflow's own."""
    tool_task_queues: dict[str, str] = Field(default_factory=dict)
    """Per-tool task queues, overriding ``tool_task_queue``."""
    token_budget: int | None = Field(default=None, ge=1)
    """Tokens (input + output, all model calls) the conversation may use; checked before each call."""
    cost_budget: float | None = Field(default=None, gt=0)
    """US dollars the conversation may spend, priced by the worker's price table; checked before each call."""
    max_message_bytes: int = Field(default=DEFAULT_MAX_MESSAGE_BYTES, ge=1, le=MAX_PROMPT_CHARS)
    """Follow-up messages (``send_message``, ``post_message``) above this many UTF-8 bytes are refused."""

    @model_validator(mode="after")
    def _unique_servers(self) -> AgentSpec:
        names = [s.name for s in self.mcp_servers]
        if duplicates := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"MCP server name(s) {', '.join(duplicates)} used twice")
        return self


OVERRIDABLE = (
    "max_iterations",
    "on_limit",
    "approval",
    "chat",
    "idle_timeout_seconds",
    "max_model_calls",
    "continue_as_new_after",
    "token_budget",
    "cost_budget",
)
"""AgentSpec fields a start input may override for one conversation."""


class ConversationInput(BaseModel):
    """Start input of one conversation: an agent (by name or inline), a prompt, limits."""

    model_config = {"extra": "forbid"}

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    agent: str | None = None
    """Name of an agent file known to the worker."""
    agent_spec: AgentSpec | None = None
    """Inline agent settings, used instead of a named agent."""
    max_iterations: int | None = Field(default=None, ge=1)
    on_limit: OnLimit | None = None
    model: str | None = None
    """Another model name for the agent's provider (e.g. a local server's model)."""
    approval: ApprovalPolicy | None = None
    """Replaces the agent's approval policy for this conversation."""
    chat: bool | None = None
    idle_timeout_seconds: Seconds | None = None
    max_model_calls: int | None = Field(default=None, ge=1)
    continue_as_new_after: int | None = Field(default=None, ge=1)
    token_budget: int | None = Field(default=None, ge=1)
    cost_budget: float | None = Field(default=None, gt=0)
    state: ConversationState | None = None
    """Set by the workflow itself when it continues as new; never by callers."""

    def agent_for_conversation(self, spec: AgentSpec) -> AgentSpec:
        """The agent with this conversation's overrides applied."""
        updates = {name: getattr(self, name) for name in OVERRIDABLE if getattr(self, name) is not None}
        spec = spec.model_copy(update=updates, deep=True)
        if self.model:
            spec.model.model = self.model
        return spec

    @model_validator(mode="after")
    def _one_agent(self) -> ConversationInput:
        if (self.agent is None) == (self.agent_spec is None):
            raise ValueError("give exactly one of 'agent' (a name) or 'agent_spec' (inline settings)")
        return self


class AgentRef(BaseModel):
    name: str | None = None
    spec: AgentSpec | None = None
    model: str | None = None
    """The conversation's model override, so the right price is looked up."""


class ToolSpec(BaseModel):
    """A tool as the workflow sees it: what the model is told, and how to call it."""

    definition: ToolDefinition
    call: CallPolicy = Field(default_factory=CallPolicy)
    requires_approval: bool = False
    """The tool's own default: risky tools wait for a person unless the agent says otherwise."""
    mcp_server: str | None = None
    """For an MCP tool: the name of its server in the agent's ``mcp_servers``."""
    mcp_tool: str | None = None
    """For an MCP tool: its name on the server (without the prefix)."""
    local: bool = False
    """Run as a local activity, in the workflow task on the workflow's own worker (never an MCP tool).
    Conversations recorded before this field existed lack it, so they replay on the normal path."""


class Price(BaseModel):
    """US dollars per million tokens."""

    model_config = {"extra": "forbid"}

    input: float = Field(ge=0)
    output: float = Field(ge=0)

    def cost(self, usage: Usage) -> float:
        return (usage.input_tokens * self.input + usage.output_tokens * self.output) / 1_000_000


class ResolvedAgent(BaseModel):
    """An agent with its tools looked up in the worker's registry; recorded in history."""

    spec: AgentSpec
    tools: list[ToolSpec]
    price: Price | None = None
    """The model's price from the worker's price table, when it has one."""


class ModelCallInput(BaseModel):
    """Input of the model activity: a reference to the stored transcript plus what is new.

    The activity appends ``request.messages`` to the conversation store after the
    first ``stored`` messages, then sends the whole transcript to the model. History
    thus holds each message once, and grows linearly with the conversation.
    """

    conversation_key: str
    stored: int = 0
    """Messages the store already holds for this conversation; ``request.messages`` follow them."""
    request: ModelRequest
    timeout_seconds: float = 120.0
    iteration: int = 0
    """For log lines."""


class ToolInvocation(BaseModel):
    """Input of the tool activity."""

    name: str
    arguments: dict[str, Any]
    call_id: str
    conversation_id: str
    idempotency_key: str
    """Stable across retries and worker crashes: pass it to external systems."""
    max_output_chars: int = 20_000
    post_hooks: list[str] = Field(default_factory=list)
    """post_tool_use hooks, run in the activity so a redaction happens before history."""
    iteration: int = 0
    """For log lines."""
    mcp: MCPServerConfig | None = None
    """Set for an MCP tool: the server to call; ``mcp_tool`` is the tool's name there."""
    mcp_tool: str | None = None


class ToolOutcome(BaseModel):
    content: str
    is_error: bool = False
    hooks: list[HookDecision] = Field(default_factory=list)
    """Decisions of the post_tool_use hooks that shaped ``content``."""


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


class ApprovalSignal(BaseModel):
    """Input of the ``approve`` / ``reject`` signals: ``{"call_id": "...", "by": "...", "reason": "..."}``.

    With ``arguments_digest`` (as ``pending_approvals`` shows it) the decision applies only if the
    pending call's arguments are exactly the ones the person saw.
    """

    call_id: str = Field(min_length=1)
    by: str = "unknown"
    reason: str = ""
    arguments_digest: str | None = None


class Decision(ApprovalSignal):
    """Input of the ``decide`` update, which answers whether the decision took."""

    approve: bool


ApprovalState = Literal["pending", "approved", "rejected", "timed_out", "cancelled"]


def arguments_digest(arguments: dict[str, Any]) -> str:
    """A short fingerprint of a tool call's arguments: what a person saw is what gets approved."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


class ApprovalRecord(BaseModel):
    """A tool call that needed a person: the request and, once made, the decision."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    requested_at: datetime
    deadline: datetime | None = None
    """None: no deadline, the call waits for a person."""
    state: ApprovalState = "pending"
    by: str | None = None
    reason: str | None = None
    decided_at: datetime | None = None
    via: Literal["signal", "update", "deadline", "cancellation"] | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def arguments_digest(self) -> str:
        return arguments_digest(self.arguments)


class MessageInput(BaseModel):
    """Input of the ``send_message`` update and the ``post_message`` signal: ``{"text": "..."}``.

    The agent's ``max_message_bytes`` bounds it further, in the workflow.
    """

    text: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)


class QueuedMessage(BaseModel):
    id: str
    text: str


class Reply(BaseModel):
    """The answer to one user message, as ``send_message`` returns it."""

    message_id: str
    text: str
    stop_reason: StopReason
    iterations: int
    truncated: bool = False


class TurnState(BaseModel):
    """Progress of the answer to one user message; carried across continue-as-new."""

    message_id: str
    iterations: int = 0
    calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls of the latest model response that still need outcomes."""
    outcomes: dict[str, ToolOutcome] = Field(default_factory=dict)
    truncated: bool = False
    """A model response of this turn was cut at max_tokens (a cut tool call included)."""


class ConversationState(BaseModel):
    """Everything a conversation carries from one run to the next."""

    agent: ResolvedAgent | None = None
    messages: list[Message] = Field(default_factory=list)
    stored: int = 0
    """How many of ``messages`` the conversation store is known to hold."""
    queue: list[QueuedMessage] = Field(default_factory=list)
    turn: TurnState | None = None
    replies: list[Reply] = Field(default_factory=list)
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    approvals: list[ApprovalRecord] = Field(default_factory=list)
    early_decisions: list[Decision] = Field(default_factory=list)
    hooks: list[HookRecord] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    model_calls: int = 0
    messages_received: int = 0
    ended: bool = False
    runs: int = 1


class ConversationResult(BaseModel):
    final_text: str
    stop_reason: StopReason
    max_iterations_reached: bool = False
    iterations: int
    """Model calls that were allowed to use tools."""
    model_calls: int
    truncated: bool = False
    """The last answer was cut by the model's max_tokens."""
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    approvals: list[ApprovalRecord] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    messages: list[Message] = Field(default_factory=list)
    replies: list[Reply] = Field(default_factory=list)
    hooks: list[HookRecord] = Field(default_factory=list)
    closed_by: ClosedBy = "answered"
    detail: str = ""
    """Why it closed, in words (e.g. the cancellation reason)."""
    runs: int = 1
    """Workflow runs the conversation used (continue-as-new starts a new one)."""


class ConversationHistory(BaseModel):
    """What the ``history`` query returns: the messages and the audit trail of decisions."""

    messages: list[Message]
    tool_calls: list[ToolCallRecord]
    approvals: list[ApprovalRecord]
    hooks: list[HookRecord] = Field(default_factory=list)


class ConversationStatus(BaseModel):
    state: Literal[
        "starting",
        "calling_model",
        "running_tools",
        "awaiting_approval",
        "idle",
        "completed",
        "cancelled",
        "failed",
    ]
    agent: str = ""
    iteration: int = 0
    max_iterations: int = 0
    model_calls: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    """US dollars spent so far, when the model has a price."""
    pending_approvals: int = 0
    queued_messages: int = 0
    run: int = 1
    detail: str = ""


ConversationInput.model_rebuild()
