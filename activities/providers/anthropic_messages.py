"""Anthropic Messages adapter."""

from __future__ import annotations

import json
from typing import Any, assert_never

import anthropic

from durable_agents.activities.providers._response import ResponseBuilder
from durable_agents.activities.providers._sdk import SDKCall, SDKModel, build_models
from durable_agents.workflows.answers import OUTPUT_NAME
from durable_agents.workflows.messages import (
    AssistantMessage,
    FinishReason,
    Image,
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

build_models(anthropic.types.Message, anthropic.types.RawMessageStreamEvent)

_FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}


class AnthropicMessagesModel(SDKModel[anthropic.AsyncAnthropic]):
    """Neutral request in, neutral response out, over ``messages.create``."""

    name = "anthropic"
    sdk = anthropic
    client_class = anthropic.AsyncAnthropic
    environment = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")

    def call(self, request: ModelRequest) -> SDKCall:
        return SDKCall(self._client.messages.create, to_wire(request), add_event, from_wire)

    async def complete(
        self, request: ModelRequest, timeout: float, on_text: OnText | None = None
    ) -> ModelResponse:
        response = await super().complete(request, timeout, on_text)
        return answer_from_tool(response) if request.output_schema is not None else response


def to_wire(request: ModelRequest) -> dict[str, Any]:
    """The keyword arguments of ``messages.create`` for a neutral request."""
    settings = request.settings
    # Messages has no system role inside the conversation: a summary goes with the system prompt.
    system = "\n\n".join(
        m.text if isinstance(m, SystemMessage) else m.context
        for m in request.messages
        if isinstance(m, SystemMessage | SummaryMessage)
    )
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
    if request.output_schema is not None:
        # A typed answer is a call of the answer tool: forced, or among the tools the model must pick from.
        answer = {"name": OUTPUT_NAME, "description": _ANSWER_TOOL, "input_schema": request.output_schema}
        wire["tools"] = [*wire.get("tools", []), answer]
        wire["tool_choice"] = (
            {"type": "any"}
            if request.tools and request.allow_tool_calls
            else {"type": "tool", "name": OUTPUT_NAME}
        )
    if settings.prompt_cache:
        _cache_breakpoints(wire)
    return wire


_CACHED = {"type": "ephemeral"}


def _cache_breakpoints(wire: dict[str, Any]) -> None:
    """Mark the ends of what stays the same from call to call, so the next call reads it from the
    cache: the tools, the system prompt, and the transcript up to its newest message (three of the
    four breakpoints Anthropic allows). Below the model's smallest cacheable prompt nothing is cached."""
    if "system" in wire:
        wire["system"] = _blocks(wire["system"])
    last_message = wire["messages"][-1] if wire["messages"] else None
    if last_message is not None:
        last_message["content"] = _blocks(last_message["content"])
    for blocks in (wire.get("tools"), wire.get("system"), last_message and last_message["content"]):
        if blocks:
            blocks[-1]["cache_control"] = _CACHED


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Content as blocks (only a block takes a ``cache_control``)."""
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


_ANSWER_TOOL = "Give your final answer: call this once, when you are done, with the answer as its input."


def answer_from_tool(response: ModelResponse) -> ModelResponse:
    """A typed answer arrives as a call of the answer tool: its input becomes the answer's text
    (as the model wrote it, when it is not a JSON object, for the workflow to send back)."""
    message = response.message
    answer = next((c for c in message.tool_calls if c.name == OUTPUT_NAME), None)
    if answer is None:
        return response
    text = (
        (answer.raw_arguments or "")
        if answer.arguments_error
        else json.dumps(answer.arguments, ensure_ascii=False)
    )
    calls = [c for c in message.tool_calls if c.name != OUTPUT_NAME]
    finish = "stop" if not calls and response.finish_reason == "tool_calls" else response.finish_reason
    return response.model_copy(
        update={"message": AssistantMessage(text=text, tool_calls=calls), "finish_reason": finish}
    )


def _messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Tool results of one turn go together in one user message, right after the tool_use turn."""
    out: list[dict[str, Any]] = []
    for message in messages:
        match message:
            case SystemMessage() | SummaryMessage():
                continue
            case UserMessage(text=text, images=[]):
                out.append({"role": "user", "content": text})
            case UserMessage(text=text, images=images):  # images first, as Anthropic advises
                seen = [{"type": "image", "source": _source(image)} for image in images]
                out.append({"role": "user", "content": [*seen, {"type": "text", "text": text}]})
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


def _source(image: Image) -> dict[str, Any]:
    if image.url is not None:
        return {"type": "url", "url": image.url}
    return {"type": "base64", "media_type": image.media_type, "data": image.data}


def from_wire(message: dict[str, Any]) -> ModelResponse:
    """A neutral response from a Message as JSON; unknown content blocks raise, never vanish."""
    builder = ResponseBuilder(AnthropicMessagesModel.name)
    add_event(builder, {"type": "message_start", "message": message})
    for index, block in enumerate(message.get("content") or []):
        add_event(builder, {"type": "content_block_start", "index": index, "content_block": block})
    builder.finish = _FINISH.get(message.get("stop_reason") or "", "other")
    return builder.build()


def add_event(builder: ResponseBuilder, event: dict[str, Any]) -> None:
    """Add one streamed event (a whole Message is a start event plus one start event per block)."""
    match event.get("type"):
        case "message_start":
            message = event["message"]
            builder.model = message.get("model") or ""
            builder.usage = _usage(message.get("usage") or {}, builder.usage)
        case "content_block_start":
            _block(builder, event["index"], event["content_block"])
        case "content_block_delta":
            delta = event["delta"]
            match delta.get("type"):
                case "text_delta":
                    builder.text(delta["text"])
                case "input_json_delta":
                    builder.call(event["index"], arguments=delta["partial_json"])
                case "thinking_delta" | "signature_delta" | "citations_delta":
                    pass  # thinking is not requested; citations annotate text already taken
                case other:
                    raise ValueError(f"unsupported anthropic stream delta type {other!r}")
        case "message_delta":
            if reason := (event.get("delta") or {}).get("stop_reason"):
                builder.finish = _FINISH.get(reason, "other")
            builder.usage = _usage(event.get("usage") or {}, builder.usage)
        case _:
            pass  # content_block_stop, message_stop, and event types added later carry no content


def _block(builder: ResponseBuilder, index: int, block: dict[str, Any]) -> None:
    match block.get("type"):
        case "text":
            builder.text(block.get("text") or "")
        case "tool_use":
            # Whole, the input is parsed already (a compatible server may send it as text);
            # streamed, it starts empty and arrives as JSON text in input_json_delta events.
            arguments = block.get("input")
            text = (
                arguments
                if isinstance(arguments, str)
                else ""
                if arguments in (None, {})
                else json.dumps(arguments)
            )
            builder.call(index, id=block["id"], name=block["name"], arguments=text)
        case "thinking" | "redacted_thinking":
            pass  # not requested; never sent back
        case kind:
            raise ValueError(f"unsupported anthropic content block type {kind!r}")


def _usage(usage: dict[str, Any], before: Usage) -> Usage:
    """Usage of message_start, then updated by message_delta (whose counts are totals so far).
    Anthropic's ``input_tokens`` are those after the last cache breakpoint: the input is they, the
    tokens written to the cache and those read from it (the cached ones)."""
    if usage.get("input_tokens") is None:
        return before.model_copy(update={"output_tokens": usage.get("output_tokens") or before.output_tokens})
    read = usage.get("cache_read_input_tokens") or 0
    return Usage(
        input_tokens=usage["input_tokens"] + (usage.get("cache_creation_input_tokens") or 0) + read,
        output_tokens=usage.get("output_tokens") or before.output_tokens,
        cached_input_tokens=read,
    )
