"""Agent configuration: what an agent file (or an inline agent) says, and the price table."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType

from durable_agents.workflows.answers import check_schema
from durable_agents.workflows.messages import ModelSettings, Usage
from durable_agents.workflows.schemas import check as check_json_schema

OnLimit = Literal["final_answer", "stop", "fail"]
Versioning = Literal["pinned", "auto_upgrade"]


MAX_WAIT_SECONDS = 366 * 24 * 3600.0
"""Upper bound of every configurable timeout and deadline (a year); "none" is the way to wait forever."""


Seconds = Annotated[float, Field(gt=0, le=MAX_WAIT_SECONDS)]


DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024
"""Follow-up messages above this (UTF-8 bytes) are refused unless the agent sets ``max_message_bytes``."""


MAX_PROMPT_CHARS = 1_000_000
"""Prompts above this are refused at start (from 128 KiB on, payloads go to the payload store)."""


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


DecisionKind = Literal["approve", "edit", "reject", "remember"]
"""What a person may decide about a call: approve it, approve it with edited arguments, reject it,
or approve it and allow the tool for the rest of the conversation (each a type in
workflows/decisions.py, which says what it means and does)."""


DECISION_KINDS: list[DecisionKind] = ["approve", "edit", "reject", "remember"]


Decisions = Annotated[list[DecisionKind], Field(min_length=1)]


_NAME = r"^[A-Za-z0-9_-]{1,64}$"


class Rule(BaseModel):
    """One condition of a ``rules`` judge over one argument of the call (no code): every condition
    given must hold. ``argument`` is a dotted path into the arguments (``order.amount``)."""

    model_config = {"extra": "forbid"}

    argument: str = Field(min_length=1)
    equals: str | int | float | bool | None = None
    one_of: list[str | int | float | bool] | None = None
    """The value is one of these; for a list argument, each of its items is."""
    min: float | None = None
    max: float | None = None
    glob: str | None = None
    """A path pattern (``notes/*.txt``, ``*`` within a folder, ``**`` across folders); a path with
    ``..`` or that starts with ``/`` never matches."""
    excludes: str | None = None
    """A regular expression the value (a text) must not contain (a card number, a word)."""

    @model_validator(mode="after")
    def _some_condition(self) -> Rule:
        if not self.model_fields_set & {"equals", "one_of", "min", "max", "glob", "excludes"}:
            raise ValueError(f"rule on {self.argument!r}: give equals, one_of, min, max, glob or excludes")
        if self.excludes is not None:
            try:
                re.compile(self.excludes)
            except re.error as e:
                raise ValueError(
                    f"rule on {self.argument!r}: excludes is not a regular expression: {e}"
                ) from e
        return self


class JudgeConfig(BaseModel):
    """A judge of an agent's approvals (``[[approval.judges]]``): it decides a waiting call of its
    ``tools`` before a person does, or escalates to the person (workflows/judges.py)."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=_NAME)
    kind: Literal["rules", "model"]
    tools: list[str] = Field(min_length=1)
    """The tools whose calls it judges (calls that wait for approval only)."""
    rules: list[Rule] = Field(default_factory=list)
    """``rules``: all hold, approved; any does not, escalated to a person."""
    model: ModelSettings | None = None
    """``model``: the model that judges (any provider; ``scripted`` offline)."""
    instructions: str = ""
    """``model``: what the judge is told besides the tool, its arguments and the recent transcript."""
    transcript_messages: int = Field(default=6, ge=0, le=50)
    """``model``: how many of the latest messages it reads."""
    call: CallPolicy = Field(default_factory=lambda: CallPolicy(timeout_seconds=30, max_attempts=2))
    """``model``: timeout and retries of the ``judge`` activity; one that fails escalates."""
    max_calls: int = Field(default=50, ge=1)
    """``model``: judge calls per conversation; past it, calls are escalated unjudged."""
    on_deny: Literal["final", "escalate"] = "escalate"
    """``model``: a denial rejects the call (``final``), or goes to a person as an opinion."""

    @model_validator(mode="after")
    def _its_kind(self) -> JudgeConfig:
        if self.kind == "rules" and not self.rules:
            raise ValueError(f"judge {self.name!r}: a rules judge needs 'rules'")
        if self.kind == "model" and self.model is None:
            raise ValueError(f"judge {self.name!r}: a model judge needs 'model'")
        return self


class GuardrailConfig(BaseModel):
    """A check of the user's message before the model sees it (``[[guardrails.input]]``) or of the
    model's answer before it is returned (``[[guardrails.output]]``): workflows/guardrails.py."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=_NAME)
    kind: Literal["rules", "function", "model"]
    rules: list[Rule] = Field(default_factory=list)
    """``rules``: conditions over ``text`` (the message or the answer), as judges' rules; all must hold."""
    function: str | None = None
    """``function``: a ``@hook("guardrail")`` function of the worker's hook registry: it is given the
    text, returns None to pass or a ``HookDecision`` with ``action="block"`` and the reason to fail."""
    model: ModelSettings | None = None
    """``model``: the model that checks the text (its tokens count as a model judge's do)."""
    instructions: str = ""
    """``model``: what the text must respect, told to the checking model."""
    call: CallPolicy = Field(default_factory=lambda: CallPolicy(timeout_seconds=30, max_attempts=2))
    """``function`` and ``model``: timeout and retries of the check's activity (failed: the text fails)."""
    on_fail: Literal["end_turn", "retry"] = "end_turn"
    """``end_turn``: the turn ends with the guardrail's reason as the reply; ``retry`` (output only):
    the model is told why and answers again, ``max_retries`` times, then the turn ends."""
    max_retries: int = Field(default=2, ge=1, le=10)

    @model_validator(mode="after")
    def _its_kind(self) -> GuardrailConfig:
        needs = {"rules": self.rules, "function": self.function, "model": self.model}[self.kind]
        if not needs:
            raise ValueError(f"guardrail {self.name!r}: a {self.kind} guardrail needs {self.kind!r}")
        return self


class GuardrailsConfig(BaseModel):
    """An agent's guardrails, each list checked in order; the first that fails decides."""

    model_config = {"extra": "forbid"}

    input: list[GuardrailConfig] = Field(default_factory=list)
    output: list[GuardrailConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _input_ends_the_turn(self) -> GuardrailsConfig:
        for guardrail in self.input:
            if guardrail.on_fail == "retry":
                raise ValueError(
                    f"input guardrail {guardrail.name!r}: on_fail 'retry' is for output guardrails"
                    " (the model did not write the message)"
                )
        return self


class ClientToolConfig(BaseModel):
    """A tool that runs on the client (``client_tools``): the conversation asks for it on its event
    stream (``client_tool_requested``) and waits for the client's result (workflows/client_tools.py)."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=_NAME)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """The JSON schema of its arguments, as the model is told it."""
    result_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "string"})
    """The JSON schema a delivered result must fit."""
    deadline: Deadline = 3600.0
    """Seconds to wait for the result ("none": forever); then the model reads that nobody answered."""

    @field_validator("parameters", "result_schema")
    @classmethod
    def _enforceable(cls, value: dict[str, Any], info: Any) -> dict[str, Any]:
        check_json_schema(value, info.field_name)
        return value


ASK_USER = ClientToolConfig(
    name="ask_user",
    description="Ask the user a question and get their answer. Use it when you need something only"
    " the user can tell you.",
    parameters={
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "The question, in one or two sentences."}
        },
        "required": ["question"],
    },
)
"""The built-in client tool: ``client_tools = ["ask_user"]``."""


def client_tools(entries: Any) -> Any:
    """``client_tools`` entries: a name of a built-in one (``ask_user``) or a whole definition."""
    if not isinstance(entries, list):
        return entries
    built_in = {ASK_USER.name: ASK_USER}
    out = []
    for entry in entries:
        if isinstance(entry, str):
            if entry not in built_in:
                raise ValueError(f"{entry!r} is no built-in client tool (built in: {', '.join(built_in)})")
            entry = built_in[entry].model_copy()
        out.append(entry)
    return out


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
    decisions: Decisions = Field(default_factory=lambda: list(DECISION_KINDS))
    """The decisions a person may take about a waiting call (all by default)."""
    tool_decisions: dict[str, Decisions] = Field(default_factory=dict)
    """Per-tool decisions, overriding ``decisions``."""
    max_reason_bytes: int = Field(default=4096, ge=1)
    """A decision's ``reason`` above this many UTF-8 bytes is refused: a rejection's reason is what
    the model reads as the call's result."""
    max_by_bytes: int = Field(default=256, ge=1)
    """Who decided or revoked (``by``), in UTF-8 bytes: it goes into the audit trail and the model's
    tool result."""
    max_arguments_bytes: int = Field(default=64 * 1024, ge=2)
    """Edited ``arguments``, as compact JSON in UTF-8 bytes."""
    approvers: list[str] = Field(default_factory=list)
    """Who may decide (a decision's ``by``: with approver keys, the key that signs it); empty: anyone."""
    tool_approvers: dict[str, list[str]] = Field(default_factory=dict)
    """Per-tool approvers, overriding ``approvers``."""
    judges: list[JudgeConfig] = Field(default_factory=list)
    """Judges that may decide a waiting call before a person does (workflows/judges.py)."""

    def judges_for(self, tool_name: str) -> list[JudgeConfig]:
        return [judge for judge in self.judges if tool_name in judge.tools]

    def requires_approval(self, tool_name: str, risky: bool) -> bool:
        """``risky``: the tool's own default (``ToolSpec.requires_approval``)."""
        if tool_name in self.auto:
            return False
        return tool_name in self.require or risky or self.default == "require"

    def deadline_for(self, tool_name: str) -> timedelta | None:
        deadline = self.tool_deadlines.get(tool_name, self.deadline)
        return None if deadline == "none" else timedelta(seconds=deadline)

    def decisions_for(self, tool_name: str) -> list[DecisionKind]:
        return list(self.tool_decisions.get(tool_name, self.decisions))

    def approvers_for(self, tool_name: str) -> list[str] | None:
        """None: anyone may decide."""
        return list(self.tool_approvers.get(tool_name, self.approvers)) or None


HookEvent = Literal["pre_tool_use", "post_tool_use", "user_prompt_submit", "guardrail"]


class HookConfig(BaseModel):
    """Names of hooks (from the worker's hook registry) to run, in order, at each point."""

    model_config = {"extra": "forbid"}

    pre_tool_use: list[str] = Field(default_factory=list)
    post_tool_use: list[str] = Field(default_factory=list)
    user_prompt_submit: list[str] = Field(default_factory=list)


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


class NotifyConfig(BaseModel):
    """``[notify]``: a webhook told when a call of the agent waits for a person (and again as its
    deadline nears) or for a client (docs/console.md, "Notifications")."""

    model_config = {"extra": "forbid"}

    url: str | None = Field(default=None, pattern=r"^https?://")
    """The webhook; default: the worker's ``AGENT_NOTIFY_URL`` (neither: nobody is told)."""
    format: Literal["json", "slack"] = "json"
    """``json``: our body; ``slack``: Slack's incoming-webhook body (``{"text": ...}``); signed alike."""
    before_deadline_seconds: float = Field(default=3600.0, gt=0)
    """How long before a waiting call's deadline it is said again (a quarter of its wait at most)."""


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
    """Longer tool outputs (client tools' results too) are cut before they enter history, and the
    model is told so."""
    hooks: HookConfig = Field(default_factory=HookConfig)
    guardrails: GuardrailsConfig = Field(default_factory=GuardrailsConfig)
    """Checks of each user message and of each answer (workflows/guardrails.py)."""
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
    """Follow-up messages (``send_message``, ``post_message``) and client tools' results above this
    many UTF-8 bytes are refused."""
    output_schema: dict[str, Any] | None = None
    """JSON schema of a JSON object the final answer must be (workflows/answers.py); the reply carries
    the parsed object. In code, a pydantic model class stands for its JSON schema."""
    output_retries: int = Field(default=2, ge=0)
    """Answers that do not match ``output_schema`` go back to the model with the problem this many
    times; then the turn stops with ``invalid_output``."""

    @field_validator("output_schema", mode="before")
    @classmethod
    def _schema_of_model(cls, value: Any) -> Any:
        if isinstance(value, type) and issubclass(value, BaseModel):
            return value.model_json_schema()
        return value

    @field_validator("output_schema")
    @classmethod
    def _enforceable_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_schema(value)
        return value

    at_most_once: list[str] = Field(default_factory=list)
    """Of ``tools``, those never retried once an attempt may have started (besides tools marked
    ``@tool(at_most_once=True)``): an attempt whose outcome is unknown waits for a person."""
    client_tools: list[ClientToolConfig] = Field(default_factory=list)
    """Tools that run on the client: a name of a built-in one (``ask_user``) or a definition."""

    @field_validator("client_tools", mode="before")
    @classmethod
    def _built_in_client_tools(cls, value: Any) -> Any:
        return client_tools(value)

    interrupt: bool = False
    """A message that arrives while a model call runs cancels that call, and the turn starts over with
    the new message appended; tool calls already running finish, pending approvals stay pending."""
    carried_events: int = Field(default=500, ge=0)
    """Events of the live stream a continue-as-new carries to the next run (the newest): a
    subscriber further behind starts again at the oldest carried one."""
    description: str = ""
    """What the agent does: the model of an agent that delegates to this one reads it (``subagents``)."""
    subagents: list[str] = Field(default_factory=list)
    """Agents (by name) this one may delegate to: each is a tool ``ask_<name>`` whose call runs that
    agent as a child conversation (workflows/subagents.py)."""
    handoffs: list[str] = Field(default_factory=list)
    """Agents (by name) this one may hand the conversation to: each is a tool ``transfer_to_<name>``
    whose call makes that agent answer from the next model call on (workflows/handoffs.py)."""
    max_depth: int = Field(default=3, ge=1)
    """Levels of sub-agents below a conversation of this agent; one at the limit gets no sub-agent
    tools. The top conversation's setting holds for the whole tree."""
    priority: int | None = Field(default=None, ge=1, le=5)
    """Temporal's task priority of the conversation's model and tool calls, 1 (first) to 5 (last);
    a start's ``--priority`` wins. None: the server's default (3)."""
    notify: NotifyConfig | None = None
    """Who is told when a call waits (None: the worker's ``AGENT_NOTIFY_URL``, if any)."""
    versioning: Versioning = "pinned"
    """On a versioned worker (``AGENT_BUILD_ID``): ``pinned`` keeps each run of a conversation on the
    build that started it; ``auto_upgrade`` moves it to the deployment's current build at its next
    workflow task (changes to the workflow code then need ``workflow.patched``). Either way a
    continue-as-new starts the next run on the current build (workflows/versioning.py)."""

    @model_validator(mode="after")
    def _unique_servers(self) -> AgentSpec:
        names = [s.name for s in self.mcp_servers]
        if duplicates := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"MCP server name(s) {', '.join(duplicates)} used twice")
        return self


class Price(BaseModel):
    """US dollars per million tokens."""

    model_config = {"extra": "forbid"}

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    """Per million input tokens read from the provider's prompt cache; None: at ``input``."""

    def cost(self, usage: Usage) -> float:
        cached = usage.cached_input_tokens
        cached_price = self.input if self.cached_input is None else self.cached_input
        paid = (usage.input_tokens - cached) * self.input + cached * cached_price
        return (paid + usage.output_tokens * self.output) / 1_000_000
