"""OpenAI Chat Completions adapter; also serves OpenAI-compatible servers (Ollama, LM Studio, vLLM)."""

from __future__ import annotations

import json
from typing import Any, assert_never

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from durable_agents.activities.providers._response import ResponseBuilder
from durable_agents.activities.providers._sdk import SDKCall, SDKModel, build_models
from durable_agents.workflows.answers import OUTPUT_NAME
from durable_agents.workflows.messages import (
    AssistantMessage,
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    SummaryMessage,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)

build_models(ChatCompletion, ChatCompletionChunk)

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


class OpenAIChatModel(SDKModel[openai.AsyncOpenAI]):
    """Neutral request in, neutral response out, over ``chat.completions.create``."""

    name = "openai"
    sdk = openai
    client_class = openai.AsyncOpenAI
    environment = ("OPENAI_API_KEY", "OPENAI_BASE_URL")

    def call(self, request: ModelRequest) -> SDKCall:
        official = self._client.base_url.host == "api.openai.com"
        return SDKCall(
            self._client.chat.completions.create,
            to_wire(request, max_tokens_key="max_completion_tokens" if official else "max_tokens"),
            add_chunk,
            from_wire,
            stream_options={"stream_options": {"include_usage": True}},
        )


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
    if settings.reasoning_effort is not None:
        wire["reasoning_effort"] = settings.reasoning_effort
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
    if request.output_schema is not None:
        wire["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": OUTPUT_NAME, "schema": request.output_schema},
        }
    return wire


def _message(message: Message) -> dict[str, Any]:
    match message:
        case SystemMessage(text=text):
            return {"role": "system", "content": text}
        case UserMessage(text=text, images=[]):
            return {"role": "user", "content": text}
        case UserMessage(text=text, images=images):
            seen = [{"type": "image_url", "image_url": {"url": image.data_url}} for image in images]
            return {"role": "user", "content": [{"type": "text", "text": text}, *seen]}
        case SummaryMessage():
            return {"role": "system", "content": message.context}
        case AssistantMessage(text=text, tool_calls=calls):
            out: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                out["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments(c)}}
                    for c in calls
                ]
            return out
        case ToolResultMessage(call_id=call_id):
            return {"role": "tool", "tool_call_id": call_id, "content": result_text(message)}
        case _:
            assert_never(message)


def arguments(call: ToolCall) -> str:
    """A call's arguments as the model gets them back: as it wrote them when they were unusable."""
    return call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments)


def result_text(message: ToolResultMessage) -> str:
    """A tool result's text: OpenAI's APIs have no error flag, so an error says so in the content."""
    return f"Error: {message.content}" if message.is_error else message.content


def from_wire(completion: dict[str, Any]) -> ModelResponse:
    """A neutral response from a ChatCompletion as JSON."""
    choices = completion.get("choices") or []
    if not choices:
        raise ValueError("openai response has no choices")
    builder = ResponseBuilder(OpenAIChatModel.name)
    add_chunk(builder, completion | {"choices": [choices[0] | {"delta": choices[0].get("message") or {}}]})
    builder.finish = builder.finish or "other"
    return builder.build()


def add_chunk(builder: ResponseBuilder, chunk: dict[str, Any]) -> None:
    """Add one streamed ChatCompletionChunk (a whole answer is one chunk with everything in it)."""
    builder.model = chunk.get("model") or builder.model
    if usage := chunk.get("usage"):
        builder.usage = Usage(
            input_tokens=usage.get("prompt_tokens") or 0,
            output_tokens=usage.get("completion_tokens") or 0,
            reasoning_tokens=(usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0,
            cached_input_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0,
        )
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        builder.text(delta.get("refusal") or delta.get("content") or "")
        for position, part in enumerate(delta.get("tool_calls") or []):
            if part.get("type", "function") not in ("function", None):
                raise ValueError(f"unsupported openai tool call type {part.get('type')!r}")
            function = part.get("function") or {}
            builder.call(
                part.get("index", position),
                id=part.get("id"),
                name=function.get("name"),
                arguments=function.get("arguments") or "",
            )
        if reason := choice.get("finish_reason"):
            builder.finish = _FINISH.get(reason, "other")
