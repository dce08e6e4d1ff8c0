"""OpenAI Chat Completions adapter; also serves OpenAI-compatible servers (Ollama, LM Studio, vLLM)."""

from __future__ import annotations

import json
import os
from typing import Any, assert_never

import openai

from durable_agents.activities.errors import stream_error
from durable_agents.activities.providers._response import ResponseBuilder, collect
from durable_agents.activities.providers._sdk import SDKModel, client_options
from durable_agents.workflows.answers import OUTPUT_NAME
from durable_agents.workflows.messages import (
    AssistantMessage,
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    OnText,
    SummaryMessage,
    SystemMessage,
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


class OpenAIChatModel(SDKModel[openai.AsyncOpenAI]):
    """Neutral request in, neutral response out, over ``chat.completions.create``."""

    name = "openai"

    async def complete(
        self, request: ModelRequest, timeout: float, on_text: OnText | None = None
    ) -> ModelResponse:
        official = self._client.base_url.host == "api.openai.com"
        wire = to_wire(request, max_tokens_key="max_completion_tokens" if official else "max_tokens")
        try:
            with self.sdk_errors(openai):
                if request.settings.stream:
                    stream = await self._client.chat.completions.create(
                        **wire, stream=True, stream_options={"include_usage": True}, timeout=timeout
                    )
                    return await collect(stream, add_chunk, ResponseBuilder(self.name, on_text))
                completion = await self._client.chat.completions.create(**wire, timeout=timeout)
        except openai.APIError as e:  # an error event inside the stream; its body is the inner error
            raise stream_error(self.name, e.body) from e
        return from_wire(completion.model_dump(mode="json"))

    @staticmethod
    def client_from_environment() -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            **client_options(os.environ.get("OPENAI_API_KEY"), os.environ.get("OPENAI_BASE_URL"))
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
        case UserMessage(text=text):
            return {"role": "user", "content": text}
        case SummaryMessage():
            return {"role": "system", "content": message.context}
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
