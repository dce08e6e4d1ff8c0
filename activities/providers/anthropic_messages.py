"""Anthropic Messages adapter."""

from __future__ import annotations

import json
import os
from typing import Any, assert_never

import anthropic

from activities.errors import body_message, provider_error
from workflows.messages import (
    AssistantMessage,
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    OnText,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)

_FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}


class AnthropicMessagesModel:
    """Neutral request in, neutral response out, over ``messages.create``."""

    name = "anthropic"

    def __init__(self, client: anthropic.AsyncAnthropic | None = None) -> None:
        self._client = client or anthropic.AsyncAnthropic(
            api_key=os.environ.get("ANTHROPIC_API_KEY") or "unset",
            base_url=os.environ.get("ANTHROPIC_BASE_URL") or None,
            max_retries=0,
        )

    async def complete(
        self, request: ModelRequest, timeout: float, on_text: OnText | None = None
    ) -> ModelResponse:
        try:
            if request.settings.stream:
                async with self._client.messages.stream(**to_wire(request), timeout=timeout) as stream:
                    text = ""
                    async for delta in stream.text_stream:
                        text += delta
                        if on_text:
                            on_text(text)
                    message = await stream.get_final_message()
            else:
                message = await self._client.messages.create(**to_wire(request), timeout=timeout)
        except anthropic.APIStatusError as e:
            raise provider_error(
                self.name,
                body_message(e.body, e.message),
                status=e.status_code,
                headers=dict(e.response.headers),
            ) from e
        except anthropic.APIConnectionError as e:  # includes APITimeoutError
            raise provider_error(self.name, str(e)) from e
        return from_wire(message.model_dump(mode="json"))


def to_wire(request: ModelRequest) -> dict[str, Any]:
    """The keyword arguments of ``messages.create`` for a neutral request."""
    settings = request.settings
    system = "\n\n".join(m.text for m in request.messages if isinstance(m, SystemMessage))
    wire: dict[str, Any] = {
        "model": settings.model,
        "max_tokens": settings.max_tokens,
        "messages": _messages(request.messages),
    }
    if system:
        wire["system"] = system
    if settings.temperature is not None:
        wire["temperature"] = settings.temperature
    if request.tools:
        wire["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
        if not request.allow_tool_calls:
            wire["tool_choice"] = {"type": "none"}
    return wire


def _messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Tool results of one turn go together in one user message, right after the tool_use turn."""
    out: list[dict[str, Any]] = []
    for message in messages:
        match message:
            case SystemMessage():
                continue
            case UserMessage(text=text):
                out.append({"role": "user", "content": text})
            case AssistantMessage(text=text, tool_calls=calls):
                blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
                blocks += [
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in calls
                ]
                out.append({"role": "assistant", "content": blocks})
            case ToolResultMessage(call_id=call_id, content=content, is_error=is_error):
                block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": content}
                if is_error:
                    block["is_error"] = True
                previous = out[-1] if out else None
                if previous and previous["role"] == "user" and isinstance(previous["content"], list):
                    previous["content"].append(block)
                else:
                    out.append({"role": "user", "content": [block]})
            case _:
                assert_never(message)
    return out


def from_wire(message: dict[str, Any]) -> ModelResponse:
    """A neutral response from a Message as JSON; unknown content blocks raise, never vanish."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in message.get("content") or []:
        kind = block.get("type")
        if kind == "text":
            texts.append(block["text"])
        elif kind == "tool_use":
            arguments = block.get("input")
            if isinstance(arguments, dict):
                calls.append(ToolCall(id=block["id"], name=block["name"], arguments=arguments))
            else:
                calls.append(ToolCall.from_json(block["id"], block["name"], json.dumps(arguments)))
        elif kind in ("thinking", "redacted_thinking"):
            continue  # not requested; never sent back
        else:
            raise ValueError(f"unsupported anthropic content block type {kind!r}")
    usage = message.get("usage") or {}
    return ModelResponse(
        message=AssistantMessage(text="".join(texts), tool_calls=calls),
        usage=Usage(
            input_tokens=usage.get("input_tokens") or 0,
            output_tokens=usage.get("output_tokens") or 0,
        ),
        finish_reason=_FINISH.get(message.get("stop_reason") or "", "other"),
        model=message.get("model") or "",
    )
