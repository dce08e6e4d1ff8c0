"""OpenAI Chat Completions adapter; also serves OpenAI-compatible servers (Ollama, LM Studio, vLLM)."""

from __future__ import annotations

import json
import os
from typing import Any, assert_never

import openai

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
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


class OpenAIChatModel:
    """Neutral request in, neutral response out, over ``chat.completions.create``."""

    name = "openai"

    def __init__(self, client: openai.AsyncOpenAI | None = None) -> None:
        self._client = client or openai.AsyncOpenAI(
            # Compatible local servers take any key; the official API rejects a missing one clearly.
            api_key=os.environ.get("OPENAI_API_KEY") or "unset",
            base_url=os.environ.get("OPENAI_BASE_URL") or None,
            max_retries=0,
        )
        self._official = self._client.base_url.host == "api.openai.com"

    async def complete(
        self, request: ModelRequest, timeout: float, on_text: OnText | None = None
    ) -> ModelResponse:
        wire = to_wire(request, max_tokens_key="max_completion_tokens" if self._official else "max_tokens")
        try:
            if request.settings.stream:
                return from_wire(await self._streamed(wire, timeout, on_text))
            completion = await self._client.chat.completions.create(**wire, timeout=timeout)
        except openai.APIStatusError as e:
            raise provider_error(
                self.name,
                body_message(e.body, e.message),
                status=e.status_code,
                headers=dict(e.response.headers),
            ) from e
        except openai.APIConnectionError as e:  # includes APITimeoutError
            raise provider_error(self.name, str(e)) from e
        return from_wire(completion.model_dump(mode="json"))

    async def _streamed(self, wire: dict[str, Any], timeout: float, on_text: OnText | None) -> dict[str, Any]:
        """Accumulate a streamed answer into the shape of a ChatCompletion."""
        stream = await self._client.chat.completions.create(
            **wire, stream=True, stream_options={"include_usage": True}, timeout=timeout
        )
        text, model, finish, usage = "", "", None, None
        calls: dict[int, dict[str, Any]] = {}
        async for chunk in stream:
            model = chunk.model or model
            usage = chunk.usage.model_dump() if chunk.usage else usage
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text += delta.content
                    if on_text:
                        on_text(text)
                for part in delta.tool_calls or []:
                    call = calls.setdefault(
                        part.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                    )
                    call["id"] = part.id or call["id"]
                    if part.function:
                        call["function"]["name"] += part.function.name or ""
                        call["function"]["arguments"] += part.function.arguments or ""
                finish = choice.finish_reason or finish
        message = {
            "role": "assistant",
            "content": text or None,
            "tool_calls": [calls[i] for i in sorted(calls)],
        }
        return {"model": model, "choices": [{"message": message, "finish_reason": finish}], "usage": usage}


def to_wire(request: ModelRequest, *, max_tokens_key: str = "max_tokens") -> dict[str, Any]:
    """The keyword arguments of ``chat.completions.create`` for a neutral request.

    The official API wants ``max_completion_tokens`` (reasoning models reject
    ``max_tokens``); compatible servers reliably understand only ``max_tokens``.
    """
    settings = request.settings
    wire: dict[str, Any] = {
        "model": settings.model,
        "messages": [_message(m) for m in request.messages],
        max_tokens_key: settings.max_tokens,
    }
    if settings.temperature is not None:
        wire["temperature"] = settings.temperature
    if request.tools:
        wire["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in request.tools
        ]
        if not request.allow_tool_calls:
            wire["tool_choice"] = "none"
    return wire


def _message(message: Message) -> dict[str, Any]:
    match message:
        case SystemMessage(text=text):
            return {"role": "system", "content": text}
        case UserMessage(text=text):
            return {"role": "user", "content": text}
        case AssistantMessage(text=text, tool_calls=calls):
            out: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                out["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": c.raw_arguments
                            if c.raw_arguments is not None
                            else json.dumps(c.arguments),
                        },
                    }
                    for c in calls
                ]
            return out
        case ToolResultMessage(call_id=call_id, content=content, is_error=is_error):
            # Chat Completions has no error flag: say it in the content.
            return {
                "role": "tool",
                "tool_call_id": call_id,
                "content": f"Error: {content}" if is_error else content,
            }
        case _:
            assert_never(message)


def from_wire(completion: dict[str, Any]) -> ModelResponse:
    """A neutral response from a ChatCompletion as JSON."""
    choices = completion.get("choices") or []
    if not choices:
        raise ValueError("openai response has no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    text = message.get("refusal") or message.get("content") or ""
    calls = [_tool_call(c) for c in message.get("tool_calls") or []]
    usage = completion.get("usage") or {}
    return ModelResponse(
        message=AssistantMessage(text=text, tool_calls=calls),
        usage=Usage(
            input_tokens=usage.get("prompt_tokens") or 0,
            output_tokens=usage.get("completion_tokens") or 0,
        ),
        finish_reason=_FINISH.get(choice.get("finish_reason") or "", "other"),
        model=completion.get("model") or "",
    )


def _tool_call(call: dict[str, Any]) -> ToolCall:
    if call.get("type", "function") != "function":
        raise ValueError(f"unsupported openai tool call type {call.get('type')!r}")
    function = call["function"]
    return ToolCall.from_json(call.get("id") or "", function["name"], function.get("arguments") or "")
