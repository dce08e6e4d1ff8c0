"""What the workflow sends its activities, and what they answer."""

from __future__ import annotations

import functools
import hashlib
import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field
from temporalio import activity

from durable_agents.workflows.config import (
    AgentSpec,
    CallPolicy,
    ClientToolConfig,
    JudgeConfig,
    MCPServerConfig,
    Price,
)
from durable_agents.workflows.messages import Message, ModelRequest, ToolCall, ToolDefinition, Usage


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
    subagent: str | None = None
    """For a sub-agent tool: the agent a call runs as a child conversation (no activity)."""
    handoff: str | None = None
    """For a handoff tool: the agent a call hands the conversation to (no activity)."""
    at_most_once: bool = False
    """Never retried once an attempt may have started: an unknown outcome waits for a person."""
    client: ClientToolConfig | None = None
    """For a client tool: it runs on the client, which delivers its result (no activity)."""


class ResolvedAgent(BaseModel):
    """An agent with its tools looked up in the worker's registry; recorded in history."""

    spec: AgentSpec
    tools: list[ToolSpec]
    price: Price | None = None
    """The model's price from the worker's price table, when it has one."""
    fallback_prices: dict[str, Price] = Field(default_factory=dict)
    """The prices of the fallback models (by their ``provider:model`` entry) that the table has."""
    judge_prices: dict[str, Price] = Field(default_factory=dict)
    """The prices of the model judges' models (by ``provider:model``) that the table has: a judge's
    call is counted in the ledger at its own model's price."""
    context_window: int | None = None
    """The model's context window: the agent's ``model.context_window``, else the worker's table.
    None in conversations resolved before context compaction existed: they never compact."""
    stores: str = ""
    """The identity of the stores of the worker that resolved the agent: the conversation's model and
    tool calls run only on workers with the same (empty in conversations from before the check)."""


class ModelCallInput(BaseModel):
    """Input of the model activity: a reference to the stored transcript plus what is new.

    The activity appends ``request.messages`` to the conversation store after the
    first ``stored`` messages, then sends the model its view of the whole transcript
    (all of it until a summary replaces the older part: workflows/transcript.py). History
    thus holds each message once, and grows linearly with the conversation.
    """

    conversation_key: str = ""
    """What the stores key the conversation by; empty where its run says it (``implied``)."""
    stored: int = 0
    """Messages the store already holds for this conversation; ``request.messages`` follow them."""
    request: ModelRequest
    timeout_seconds: float = 120.0
    iteration: int = 0
    """For log lines."""
    model_call: int | None = None
    """The call's number in the conversation's event stream, set when it streams: its text goes to
    the stream as ``text_delta`` events (workflows/events.py)."""
    registry_tools: list[str] = Field(default_factory=list)
    """Tools the model is offered by name: the activity takes their definitions from its worker's
    tool registry (ahead of ``request.tools``), so history does not hold them at every call."""
    registry_digest: str = ""
    """``definitions_digest`` of those definitions as the workflow knows them: a model worker whose
    registry differs refuses the call (``ToolDefinitionsDiffer``) and gets them whole."""
    summarise: bool = False
    """Ask for a summary of the transcript instead of its next message (context compaction)."""
    stores: str = ""
    """The conversation's store identity (``ResolvedAgent.stores``), whole or ``brief``: another
    worker refuses the call."""
    tenant: str | None = None
    """The conversation's tenant and user: the call is counted against their budgets in the shared
    ledger (durable_agents/stores/ledger.py), which may refuse it (``BudgetExhausted``)."""
    user: str | None = None
    price: Price | None = None
    """The called model's price, for the ledger's cost (None: its tokens only)."""

    def completed(self) -> ModelCallInput:
        """In the activity: the input with the conversation key its run implies, where it was left out."""
        return self if self.conversation_key else self.model_copy(update={"conversation_key": implied()})


def definitions_digest(definitions: list[ToolDefinition]) -> str:
    """A short fingerprint of tool definitions (SHA-256 of their canonical JSON)."""
    canonical = json.dumps(
        [d.model_dump(mode="json") for d in definitions], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class ToolInvocation(BaseModel):
    """Input of the tool activity."""

    name: str
    arguments: dict[str, Any]
    call_id: str
    conversation_id: str = ""
    idempotency_key: str = ""
    """Stable across retries and worker crashes: pass it to external systems. It and
    ``conversation_id`` are left out where the run implies them (``completed``)."""
    conversation_key: str = ""
    """What the stores key this conversation by (``workflows.activity_refs.conversation_key``): its
    workspace and its store identity. Set only where the idempotency key does not say it (``of``):
    read it as ``stored_under``."""
    max_output_chars: int = 20_000
    post_hooks: list[str] = Field(default_factory=list)
    """post_tool_use hooks, run in the activity so a redaction happens before history."""
    iteration: int = 0
    """For log lines."""
    mcp: MCPServerConfig | None = None
    """Set for an MCP tool: the server to call; ``mcp_tool`` is the tool's name there."""
    mcp_tool: str | None = None
    stores: str = ""
    """The conversation's store identity (``ResolvedAgent.stores``), whole or ``brief``: another
    worker refuses the call."""
    at_most_once: bool = False
    """A failure before the tool's function ran says so (``ToolNotStarted``): only then is it retried."""
    kept: dict[str, str] = Field(default_factory=dict)
    """``ctx.once`` results an earlier try had when its store went out (key to JSON): this try
    returns them instead of repeating the effects (``workflows/outages.py``)."""

    def with_kept(self, kept: dict[str, str]) -> ToolInvocation:
        return self.model_copy(update={"kept": {**self.kept, **kept}})

    @classmethod
    def of(cls, call: ToolCall, conversation_id: str, conversation_key: str, **more: Any) -> ToolInvocation:
        """The invocation of the model's ``call``; its idempotency key is ``<conversation_key>/<call id>``.
        An empty ``conversation_key`` (the run implies it: ``implied``) leaves out the ids: the
        activity's ``completed`` puts them back. Else the conversation key travels on its own only
        when the idempotency key does not say it (a tenant's conversation whose call id holds '/'):
        the same bytes twice in every tool call's input otherwise, which workers of every release
        read back from the idempotency key."""
        if not conversation_key:
            return cls(name=call.name, arguments=call.arguments, call_id=call.id, **more)
        invocation = cls(
            name=call.name,
            arguments=call.arguments,
            call_id=call.id,
            conversation_id=conversation_id,
            idempotency_key=f"{conversation_key}/{call.id}",
            **more,
        )
        if invocation.stored_under != conversation_key:
            invocation.conversation_key = conversation_key
        return invocation

    def completed(self) -> ToolInvocation:
        """In the activity: the invocation with the ids its run implies, where they were left out."""
        if self.idempotency_key:
            return self
        return self.model_copy(
            update={
                "conversation_id": activity.info().workflow_id,
                "idempotency_key": f"{implied()}/{self.call_id}",
            }
        )

    @property
    def stored_under(self) -> str:
        """The conversation key: ``conversation_key`` when it travelled, else taken from the
        idempotency key (``[tenants/<tenant>/]<workflow id>/<first run id>/<call id>``; a run id
        holds no '/')."""
        if self.conversation_key:
            return self.conversation_key
        prefix = self.conversation_id + "/"
        if not self.idempotency_key.startswith(prefix):
            return self.idempotency_key.rpartition("/")[0] or self.idempotency_key
        return prefix + self.idempotency_key.removeprefix(prefix).partition("/")[0]


@functools.lru_cache(maxsize=64)  # asked at every call, of the few identities a process meets
def brief(stores: str) -> str:
    """A store identity (``ResolvedAgent.stores``) as a lean call carries it: 12 hex digits of its
    digest, which tell one set of stores from another as surely as the whole (48 bits), in a fifth of
    the bytes (``StoreIdentity.check`` takes either)."""
    return hashlib.sha256(stores.encode()).hexdigest()[:12]


def run_key(workflow_id: str, run_id: str) -> str:
    """The key of a conversation by its first run (before a tenant's scope: workflows/tenancy.py)."""
    return f"{workflow_id}/{run_id}"


def implied() -> str:
    """In an activity: the conversation key its run implies, for a call that left it out (the
    workflow does so only in a conversation's first run without a tenant, whose key that is)."""
    info = activity.info()
    return run_key(info.workflow_id, info.workflow_run_id)


class ToolOutcome(BaseModel):
    content: str
    is_error: bool = False
    hooks: list[HookDecision] = Field(default_factory=list)
    """Decisions of the post_tool_use hooks that shaped ``content``."""
    subagent_workflow_id: str | None = None
    """For a sub-agent call: the child conversation that answered it."""

    def truncated(self, limit: int) -> ToolOutcome:
        """Cut to ``limit`` characters, saying so (``cut``)."""
        if len(self.content) <= limit:
            return self
        return self.model_copy(update={"content": cut(self.content, limit)})


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying so, before it enters history (no tool output, no
    client's result and no person's words may hit the 2 MB payload limit or flood the model's context)."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[output truncated: {len(text)} characters, the first {limit} shown]"


class JudgeInput(BaseModel):
    """Input of the judge activity: a model judge, the call it judges and what led to it."""

    judge: JudgeConfig
    tool: str
    description: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)
    transcript: list[Message] = Field(default_factory=list)
    """The latest messages of the conversation (``judge.transcript_messages``)."""
    conversation_key: str = ""
    """The conversation's key, as the ledger records its calls (empty in calls scheduled before
    judges were metered)."""
    tenant: str | None = None
    """The conversation's tenant and user: the judge's call counts against their budgets in the
    shared ledger as a model call does, and a refusal (``BudgetExhausted``) escalates to a person."""
    user: str | None = None
    price: Price | None = None
    """The judge's model's price, for the ledger's cost (None: its tokens only)."""


class JudgeAnswer(BaseModel):
    """What a model judge answered."""

    verdict: Literal["approve", "deny", "escalate"]
    reason: str = ""
    model: str = ""
    usage: Usage = Field(default_factory=Usage)


class Notification(BaseModel):
    """A call that waits, as the ``notify`` activity tells the agent's webhook (activities/notify.py)."""

    event: Literal["approval_requested", "deadline_near", "client_tool_waiting"]
    conversation: str
    agent: str
    tenant: str | None = None
    user: str | None = None
    tool: str
    call_id: str
    arguments: str
    """The call's arguments as JSON, cut (workflows/waiting.py)."""
    deadline: datetime | None = None
    url: str
    format: Literal["json", "slack"] = "json"
