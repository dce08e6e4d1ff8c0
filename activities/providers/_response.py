"""The one way a provider's answer, whole or streamed, becomes a neutral response.

Adapters only translate their wire format into calls on ``ResponseBuilder``; the rules
that must hold for every provider live here:

- tool-call arguments are parsed strictly from the text the model wrote, so malformed
  arguments go back to the model as an error instead of failing the call or being guessed at;
- the call the model was writing when the answer hit ``max_tokens`` never runs;
- a stream that ends before its final event is a failure to retry, not a short answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from durable_agents.activities.errors import provider_error
from durable_agents.workflows.messages import (
    AssistantMessage,
    FinishReason,
    ModelResponse,
    OnText,
    ToolCall,
    Usage,
)

CUT_OFF = "cut off at the max_tokens limit, so the call did not run; call again with shorter arguments"
"""The arguments error of a call the answer's token limit cut short (the model reads it)."""


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: str = ""
    """JSON text as the model wrote it (streamed in pieces, or whole)."""


class ResponseBuilder:
    """Collects one answer: whole, or as a stream's deltas in order."""

    def __init__(self, provider: str, on_text: OnText | None = None) -> None:
        self.provider = provider
        self.model = ""
        self.usage = Usage()
        self.finish: FinishReason | None = None
        """None until the provider said why it stopped: a stream without it ended early."""
        self._on_text = on_text
        self._on_call = getattr(on_text, "tool_call", None)
        """Told a tool call's argument text so far, when ``on_text`` has a ``tool_call`` method too."""
        self._text = ""
        self._reasoning = ""
        self._calls: dict[int, _Call] = {}
        self._writing: int | None = None
        """The call the latest output belonged to (None: text)."""

    def text(self, delta: str) -> None:
        if not delta:
            return
        self._text += delta
        self._writing = None
        if self._on_text:
            self._on_text(self._text)

    def reasoning(self, delta: str) -> None:
        """Extend the summary of the model's reasoning (never part of the answer's text)."""
        self._reasoning += delta

    def call(
        self, index: int, *, id: str | None = None, name: str | None = None, arguments: str = ""
    ) -> None:
        """Start tool call ``index`` or extend it: id and name come once, argument text in pieces."""
        call = self._calls.setdefault(index, _Call())
        call.id = id or call.id
        call.name += name or ""
        call.arguments += arguments
        self._writing = index
        if self._on_call is not None and call.name:
            self._on_call(index, call.id, call.name, call.arguments)

    def build(self) -> ModelResponse:
        if self.finish is None:
            raise provider_error(self.provider, "the stream ended before the answer was complete")
        calls = []
        for index, call in sorted(self._calls.items()):
            if self.finish == "length" and index == self._writing:
                calls.append(
                    ToolCall(
                        id=call.id, name=call.name, arguments_error=CUT_OFF, raw_arguments=call.arguments
                    )
                )
            else:
                calls.append(ToolCall.from_json(call.id, call.name, call.arguments))
        return ModelResponse(
            message=AssistantMessage(text=self._text, tool_calls=calls),
            usage=self.usage,
            finish_reason=self.finish,
            model=self.model,
            reasoning=self._reasoning,
        )


async def collect(
    stream: Any, add: Callable[[ResponseBuilder, dict[str, Any]], None], builder: ResponseBuilder
) -> ModelResponse:
    """Feed every event of an SDK stream to ``add``; the stream is closed whatever happens,
    so a cancelled call aborts its HTTP request at once."""
    async with stream:
        async for event in stream:
            add(builder, event.model_dump(mode="json"))
    return builder.build()
