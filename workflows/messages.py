"""The neutral conversation model shared by the workflow, activities, CLI and tests.

Nothing here imports a provider SDK: adapters in ``activities/providers`` map these
types to and from each wire protocol.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from durable_agents.workflows.providers import PROVIDER_NAMES, Provider


class Lean(BaseModel):
    """A model with fields added later (``LATER``): each is left out of a dump while at its default,
    so what the command lines, queries and streams showed before (and the token estimates made of
    messages) stays the same until the field is used."""

    LATER: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return self._lean(handler(self))

    def _lean(self, dumped: dict[str, Any]) -> dict[str, Any]:
        fields = type(self).model_fields
        for name in self.LATER:
            if name in dumped and getattr(self, name) == fields[name].get_default(call_default_factory=True):
                del dumped[name]
        return dumped


class Tagged(Lean):
    """A member of a discriminated union says its tag (the field ``TAG`` names) even where payloads
    leave out defaults (durable_agents/converter.py): it tells the members apart when read back."""

    TAG: ClassVar[str] = "kind"

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {self.TAG: getattr(self, self.TAG), **self._lean(handler(self))}


class SystemMessage(Tagged):
    LATER = ("handoff",)

    kind: Literal["system"] = "system"
    text: str
    handoff: bool = False
    """The prompt of an agent the conversation was handed to: the model sees it, first, instead of
    the prompts before it (workflows/transcript.py)."""


IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image formats both providers take."""
MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""The largest image sent whole (Anthropic's limit); a larger one goes by URL."""


class Image(BaseModel):
    """An image in a user message: a URL the provider fetches, or the image itself (``data``,
    base64, with its ``media_type``). A large one is no burden on history: payloads past the payload
    store's threshold are kept there, and history holds a reference (durable_agents/converter.py)."""

    model_config = {"extra": "forbid"}

    url: str | None = None
    data: str | None = None
    media_type: str | None = None

    @model_validator(mode="after")
    def _url_or_data(self) -> Image:
        if (self.url is None) == (self.data is None):
            raise ValueError("an image is a 'url' or 'data' (base64) with its 'media_type', not both")
        if self.url is not None and not self.url.startswith(("https://", "http://")):
            raise ValueError(f"image url {self.url[:60]!r}: give an http(s) URL (or the image as 'data')")
        if self.data is not None:
            if self.media_type not in IMAGE_TYPES:
                raise ValueError(f"image media_type {self.media_type!r}: one of {', '.join(IMAGE_TYPES)}")
            if len(self.data) * 3 // 4 > MAX_IMAGE_BYTES:
                raise ValueError(
                    f"image of {len(self.data) * 3 // 4} bytes: at most {MAX_IMAGE_BYTES} (else by url)"
                )
        return self

    @property
    def data_url(self) -> str:
        """The image as OpenAI takes it: its URL, or a ``data:`` URL."""
        return self.url if self.url is not None else f"data:{self.media_type};base64,{self.data}"


class UserMessage(Tagged):
    LATER = ("images",)

    kind: Literal["user"] = "user"
    text: str
    images: list[Image] = Field(default_factory=list)
    """Images the user sent with the text (both providers see them, in their own format)."""


class ToolCall(BaseModel):
    """A tool call requested by the model."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    arguments_error: str | None = None
    """Set when the arguments cannot be used (not a JSON object, or cut off at ``max_tokens``):
    the call never runs, and this goes back to the model. ``raw_arguments`` keeps them."""
    raw_arguments: str | None = None
    """The arguments exactly as the model sent them, when they cannot be used."""

    @classmethod
    def from_json(cls, id: str, name: str, raw: str) -> ToolCall:
        """A call whose arguments arrived as JSON text; malformed text is flagged, not dropped."""
        try:
            arguments = json.loads(raw or "{}")
        except json.JSONDecodeError as e:
            error = f"arguments are not valid JSON ({e.msg} at position {e.pos})"
            return cls(id=id, name=name, arguments_error=error, raw_arguments=raw)
        if not isinstance(arguments, dict):
            error = "arguments must be a JSON object"
            return cls(id=id, name=name, arguments_error=error, raw_arguments=raw)
        return cls(id=id, name=name, arguments=arguments)


class AssistantMessage(Tagged):
    kind: Literal["assistant"] = "assistant"
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)


class ToolResultMessage(Tagged):
    kind: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    is_error: bool = False


class SummaryMessage(Tagged):
    """Stands for the messages before it (back to the previous summary), made when the conversation
    outgrew its model's context window. It sits in the transcript where it was made; from then on
    the model sees the system prompt, the latest summary and what follows it (workflows/transcript.py)."""

    kind: Literal["summary"] = "summary"
    text: str
    replaces: int = 0
    """How many messages before it this summary stands for (an earlier summary counts as one)."""

    @property
    def context(self) -> str:
        """What the model is told (adapters send it with the system prompt)."""
        return f"Summary of the earlier conversation (older messages were summarised to fit):\n{self.text}"


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolResultMessage | SummaryMessage,
    Field(discriminator="kind"),
]


class Usage(Lean):
    LATER = ("reasoning_tokens", "cached_input_tokens")

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    """Of ``output_tokens``, those the model spent reasoning (OpenAI's reasoning models say so)."""
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those read from the provider's prompt cache (priced at the models
    table's ``cached_input``)."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{name: getattr(self, name) + getattr(other, name) for name in Usage.model_fields})

    def __sub__(self, other: Usage) -> Usage:
        return Usage(**{name: getattr(self, name) - getattr(other, name) for name in Usage.model_fields})

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class ToolDefinition(BaseModel):
    """What the model is told about a tool."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object."""


OnText = Callable[[str], None]
"""Called with the answer's text so far while a streamed model call runs."""

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "other"]

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
ReasoningSummary = Literal["auto", "concise", "detailed"]


class ModelSettings(BaseModel):
    """Which model to call and how. Keys and base URLs stay in the worker's environment."""

    provider: Provider
    model: str
    max_tokens: int = 1024
    temperature: float | None = None
    reasoning_effort: ReasoningEffort | None = None
    """How hard a reasoning model thinks before it answers (OpenAI's ``reasoning.effort``, sent by
    both OpenAI adapters); None: the model's default. Anthropic has no such setting: its adapter
    sends none."""
    reasoning_summary: ReasoningSummary | None = None
    """Ask for a summary of the model's reasoning (``openai_responses`` only): it is recorded with the
    model call's response and shown on the event stream."""
    prompt_cache: bool = True
    """Anthropic: mark cache breakpoints on the system prompt, the tools and the transcript so far,
    so the next call reads them from the cache; False sends none. (OpenAI caches on its own.)"""
    stream: bool = False
    """Stream the answer from the provider; the partial text shows in ``starter.py watch``."""
    context_window: int | None = Field(default=None, ge=1)
    """Tokens the model takes in; default: the worker's models table (config/models.toml)."""
    compact_at: float = Field(default=0.8, gt=0, le=1)
    """Share of ``context_window`` past which older messages are summarised before a model call."""
    script: list[ScriptStep] = Field(default_factory=list)
    """Responses of the offline ``scripted`` provider, in order (ignored by real providers)."""
    fallback: list[str] = Field(default_factory=list)
    """``provider:model`` names to call, in order, when a call to this model fails for good (the
    other settings stay the same); each call starts again with this model."""

    @field_validator("fallback")
    @classmethod
    def _provider_and_model(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            provider, _, model = entry.partition(":")
            if provider not in PROVIDER_NAMES or not model:
                known = ", ".join(PROVIDER_NAMES)
                raise ValueError(
                    f"fallback {entry!r}: write it as 'provider:model', the provider one of {known}"
                )
        return entries

    @property
    def label(self) -> str:
        return f"{self.provider}:{self.model}"


class ScriptStep(BaseModel):
    """One scripted model response: text, tool calls, or both."""

    text: str = ""
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    input_tokens: int = 10
    output_tokens: int = 5
    repeat: int = Field(default=1, ge=1)
    """Play this step so many times in a row."""
    delay_seconds: float = Field(default=0.0, ge=0)
    """Think this long before answering, like a slow model."""
    fails_on: list[str] = Field(default_factory=list)
    """Scripted model names that fail this step for good, as a provider's HTTP 400 would (the other
    names answer it): a model fallback, offline."""


class ScriptedToolCall(BaseModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None
    """Sent instead of ``arguments`` to simulate a model emitting malformed JSON."""
    id: str | None = None
    """Sent instead of the generated call id, to simulate a server that reuses or omits ids."""


class ModelRequest(BaseModel):
    """What an adapter receives: one neutral request."""

    settings: ModelSettings
    messages: list[Message]
    tools: list[ToolDefinition] = Field(default_factory=list)
    allow_tool_calls: bool = True
    """False asks for a text answer: tools stay declared (history may reference them) but unusable."""
    output_schema: dict[str, Any] | None = None
    """JSON schema of the object the answer must be: adapters ask their provider for it natively."""


class ModelResponse(BaseModel):
    """What an adapter returns: one neutral response."""

    message: AssistantMessage
    usage: Usage = Field(default_factory=Usage)
    finish_reason: FinishReason = "stop"
    model: str = ""
    reasoning: str = ""
    """The summary of the model's reasoning, when the request asked for one (``reasoning_summary``)."""


ModelSettings.model_rebuild()


class ModelProgress(BaseModel):
    """Heartbeat details of a running model call: what the model has said so far."""

    partial_text: str = ""
