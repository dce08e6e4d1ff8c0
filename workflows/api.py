"""The workflow's public API: its start input, signal and update payloads, query results, result
and search attributes."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from durable_agents.workflows.config import (
    MAX_PROMPT_CHARS,
    AgentSpec,
    ApprovalPolicy,
    ClientToolConfig,
    OnLimit,
    Seconds,
    client_tools,
)
from durable_agents.workflows.inputs import Payload
from durable_agents.workflows.messages import Image, Message, Usage
from durable_agents.workflows.records import ConversationHistory, Reply, StopReason
from durable_agents.workflows.state import ConversationState
from durable_agents.workflows.transcript import history_error

AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
"""running, awaiting_approval, completed or failed: find conversations that wait for a person."""


AGENT_NAME = SearchAttributeKey.for_keyword("AgentName")


AGENT_PARENT = SearchAttributeKey.for_keyword("AgentParent")
"""Set on a sub-agent's conversation: the workflow id of the conversation that delegated to it."""
AGENT_FORK_OF = SearchAttributeKey.for_keyword("AgentForkOf")
"""The id of the conversation a fork started from (``starter.py fork``)."""
AGENT_TENANT = SearchAttributeKey.for_keyword("AgentTenant")
"""The tenant a conversation belongs to (``--tenant``), inherited by its sub-agents and forks."""
AGENT_USER = SearchAttributeKey.for_keyword("AgentUser")
"""The user a conversation belongs to (``--user``), inherited by its sub-agents and forks."""
AGENT_COST = SearchAttributeKey.for_float("AgentCost")
"""US dollars the conversation has spent (a Double), where its model has a price: written with
AgentStatus when that changes (at the end of a turn, a wait for a person, the close), so it adds no
event per model call."""


def start_search_attributes(
    agent: str,
    *,
    parent: str | None = None,
    fork_of: str | None = None,
    tenant: str | None = None,
    user: str | None = None,
) -> TypedSearchAttributes:
    """What a conversation starts with: its agent, ``running``, the conversation it came from, and
    its tenant and user."""
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(AGENT_NAME, agent),
        SearchAttributePair(AGENT_STATUS, "running"),
    ]
    if parent is not None:
        pairs.append(SearchAttributePair(AGENT_PARENT, parent))
    if fork_of is not None:
        pairs.append(SearchAttributePair(AGENT_FORK_OF, fork_of))
    if tenant is not None:
        pairs.append(SearchAttributePair(AGENT_TENANT, tenant))
    if user is not None:
        pairs.append(SearchAttributePair(AGENT_USER, user))
    return TypedSearchAttributes(pairs)


ClosedBy = Literal["answered", "idle_timeout", "end_signal", "cancelled"]


class AgentOverrides(Payload):
    """What one conversation changes of its agent. A new override is one field here (and, when it
    is not an AgentSpec field of the same name, one line in ``apply``)."""

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
    interrupt: bool | None = None
    """A newer message cancels the running model call (``AgentSpec.interrupt``)."""
    max_depth: int | None = Field(default=None, ge=1)

    def apply(self, spec: AgentSpec) -> AgentSpec:
        """The agent with these overrides merged onto it."""
        updates = self.model_dump(exclude_none=True, exclude={"model"})
        spec = spec.model_copy(update={name: getattr(self, name) for name in updates}, deep=True)
        if self.model:
            spec.model.model = self.model
        return spec


class SubagentOrigin(Payload):
    """Where a sub-agent's conversation comes from: the delegating conversation and its tool call.
    Only that conversation may give it (``workflow.info().parent``): a start that does is refused."""

    parent_workflow_id: str
    call_id: str
    depth: int = Field(default=1, ge=1)
    """1 for a child of a top conversation, 2 for a grandchild..."""
    max_depth: int = Field(default=3, ge=1)
    """The top conversation's ``max_depth``."""
    token_budget: int | None = None
    """What the delegating conversation's token budget had left when it delegated: the sub-agent
    stops at the smaller of this and its own (its tokens count against both)."""
    cost_budget: float | None = None
    """The same for the cost budget, in US dollars."""
    report_key: str | None = None
    """Drawn by the parent for this child: the child's approval reports carry it, and the parent
    takes no report without it (workflows/subagents.py). None: started before reports had one."""


class ConversationInput(Payload):
    """Start input of one conversation: an agent (by name or inline), a prompt, and the overrides.

    The overrides may also be given as top-level fields (``{"prompt": ..., "max_iterations": 3}``),
    as operators type them and as conversations started before ``overrides`` existed recorded them.
    """

    ALSO_KNOWN: ClassVar[frozenset[str]] = frozenset(AgentOverrides.model_fields)

    await_first_message: bool = False
    """Start without a prompt: the conversation waits for its first message, as update-with-start
    sends it (``send_message``)."""
    prompt: str | None = Field(default=None, min_length=1, max_length=MAX_PROMPT_CHARS, validate_default=True)
    """The first message; required unless ``await_first_message``."""
    images: list[Image] = Field(default_factory=list)
    """Images sent with ``prompt`` (as ``MessageInput.images``)."""
    agent: str | None = None
    """Name of an agent file known to the worker."""
    agent_spec: AgentSpec | None = None
    """Inline agent settings, used instead of a named agent."""
    overrides: AgentOverrides = Field(default_factory=AgentOverrides)
    subagent: SubagentOrigin | None = None
    """Set when another conversation started this one to answer a call of its sub-agent tool; by
    nobody else (a start that sets it is refused)."""
    history: list[Message] = Field(default_factory=list)
    """Messages the conversation starts from, before ``prompt`` (a fork's first messages, system
    prompt included: the agent's own is then not added)."""
    client_tools: list[ClientToolConfig] = Field(default_factory=list)
    """Tools the client runs, besides the agent's own ``client_tools`` (workflows/client_tools.py);
    ``"ask_user"`` names the built-in one."""
    state: ConversationState | None = None
    """Set by the workflow itself when it continues as new; a start that sets it is refused."""
    tenant: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[^/\s]+$")
    """Who the conversation belongs to (docs/tenants.md): its model calls count against the tenant's
    budgets in the shared ledger, its data is scoped by it, its tasks are fair across tenants.
    Inherited by sub-agents and forks; the ``AgentTenant`` search attribute."""
    user: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^\S+$")
    """The user within the tenant (the ``AgentUser`` search attribute), with budgets of its own."""

    @field_validator("client_tools", mode="before")
    @classmethod
    def _built_in_client_tools(cls, value: Any) -> Any:
        return client_tools(value)

    @model_validator(mode="before")
    @classmethod
    def _lift_flat_overrides(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.keys() & AgentOverrides.model_fields.keys():
            return data
        data = dict(data)
        nested = data.get("overrides")
        flat = {name: data.pop(name) for name in AgentOverrides.model_fields if name in data}
        if isinstance(nested, AgentOverrides):
            nested = nested.model_dump(exclude_none=True)
        data["overrides"] = {**flat, **(nested or {})} if isinstance(nested, dict | None) else nested
        return data

    @field_validator("prompt")
    @classmethod
    def _prompt_unless_awaited(cls, prompt: str | None, info: ValidationInfo) -> str | None:
        # await_first_message is declared before prompt, so it is validated (and in info.data) first.
        awaited = info.data.get("await_first_message", False)
        if prompt is None and not awaited:
            raise PydanticCustomError("missing", "Field required (or await_first_message: true)")
        if prompt is not None and awaited:
            raise PydanticCustomError("extra_prompt", "give a prompt or await_first_message, not both")
        return prompt

    @model_validator(mode="after")
    def _one_agent(self) -> ConversationInput:
        if (self.agent is None) == (self.agent_spec is None):
            raise ValueError("give exactly one of 'agent' (a name) or 'agent_spec' (inline settings)")
        if error := history_error(self.history):
            raise ValueError(f"history: {error}")
        return self


class MessageInput(Payload):
    """Input of the ``send_message`` update and the ``post_message`` signal: ``{"text": "..."}``.

    The agent's ``max_message_bytes`` bounds it further, in the workflow.
    """

    text: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    images: list[Image] = Field(default_factory=list)
    """Images sent with the text: ``{"url": "https://..."}``, or ``{"data": "<base64>", "media_type":
    "image/png"}``."""


class ConversationResult(ConversationHistory):
    """A finished conversation: its whole history, the answer and why it closed."""

    final_text: str
    stop_reason: StopReason
    max_iterations_reached: bool = False
    iterations: int
    """Model calls that were allowed to use tools."""
    model_calls: int
    truncated: bool = False
    """The last answer was cut by the model's max_tokens."""
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    replies: list[Reply] = Field(default_factory=list)
    closed_by: ClosedBy = "answered"
    detail: str = ""
    """Why it closed, in words (e.g. the cancellation reason)."""
    runs: int = 1
    """Workflow runs the conversation used (continue-as-new starts a new one)."""
    output: dict[str, Any] | None = None
    """The last answer as an object, for an agent with an ``output_schema``."""
    models_used: list[str] = Field(default_factory=list)
    """The models that answered, in order of their first answer, for an agent with fallback models."""


class ConversationStatus(BaseModel):
    state: Literal[
        "starting",
        "calling_model",
        "running_tools",
        "awaiting_approval",
        "waiting_for_client",
        "waiting_for_storage",
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
    tenant: str | None = None
    """Whose conversation it is (``AgentTenant``, ``AgentUser``)."""
    user: str | None = None


ConversationInput.model_rebuild()
