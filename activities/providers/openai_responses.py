"""OpenAI Responses adapter: OpenAI's API for new work, with reasoning effort and summaries.

Stateless like the other adapters: every call sends the transcript (``store`` off, so OpenAI keeps
nothing between calls and the conversation's history stays the one record). A reasoning model's
reasoning is not sent back: only its summary, when asked for, is kept, with the model call's response.
"""

from __future__ import annotations

from typing import Any, assert_never

import openai
from openai.types.responses import Response, ResponseStreamEvent

from durable_agents.activities.errors import stream_error
from durable_agents.activities.providers._response import ResponseBuilder
from durable_agents.activities.providers._sdk import SDKCall, SDKModel, build_models
from durable_agents.activities.providers.openai_chat import OpenAIChatModel, arguments, result_text
from durable_agents.workflows.answers import OUTPUT_NAME
from durable_agents.workflows.messages import (
    AssistantMessage,
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    SummaryMessage,
    SystemMessage,
    ToolResultMessage,
    Usage,
    UserMessage,
)

build_models(Response, ResponseStreamEvent)

_INCOMPLETE: dict[str, FinishReason] = {"max_output_tokens": "length", "content_filter": "content_filter"}
"""Why a response stopped short (``incomplete_details.reason``)."""


class OpenAIResponsesModel(SDKModel[openai.AsyncOpenAI]):
    """Neutral request in, neutral response out, over ``responses.create``."""

    name = "openai_responses"
    sdk = openai
    client_class = openai.AsyncOpenAI
    environment = OpenAIChatModel.environment

    def call(self, request: ModelRequest) -> SDKCall:
        return SDKCall(self._client.responses.create, to_wire(request), add_event, from_wire)


def to_wire(request: ModelRequest) -> dict[str, Any]:
    """The keyword arguments of ``responses.create`` for a neutral request."""
    settings = request.settings
    wire: dict[str, Any] = {
        "model": settings.model,
        "input": [item for m in request.messages for item in _items(m)],
        "max_output_tokens": settings.max_tokens,
        "store": False,
    }
    if settings.temperature is not None:
        wire["temperature"] = settings.temperature
    reasoning = {"effort": settings.reasoning_effort, "summary": settings.reasoning_summary}
    if reasoning := {key: value for key, value in reasoning.items() if value is not None}:
        wire["reasoning"] = reasoning
    if request.tools:
        # Not strict: strict schemas need every property required, which typed tools' defaults are not.
        wire["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                "strict": False,
            }
            for t in request.tools
        ]
        if not request.allow_tool_calls:
            wire["tool_choice"] = "none"
    if request.output_schema is not None:
        wire["text"] = {
            "format": {"type": "json_schema", "name": OUTPUT_NAME, "schema": request.output_schema}
        }
    return wire


def _items(message: Message) -> list[dict[str, Any]]:
    """A message's input items: an assistant's text is one, each of its tool calls another."""
    match message:
        case SystemMessage(text=text):
            return [{"role": "system", "content": text}]
        case UserMessage(text=text, images=[]):
            return [{"role": "user", "content": text}]
        case UserMessage(text=text, images=images):
            seen = [
                {"type": "input_image", "image_url": image.data_url, "detail": "auto"} for image in images
            ]
            return [{"role": "user", "content": [{"type": "input_text", "text": text}, *seen]}]
        case SummaryMessage():
            return [{"role": "system", "content": message.context}]
        case AssistantMessage(text=text, tool_calls=calls):
            said = [{"role": "assistant", "content": text}] if text else []
            return said + [
                {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": arguments(c)}
                for c in calls
            ]
        case ToolResultMessage(call_id=call_id):
            return [{"type": "function_call_output", "call_id": call_id, "output": result_text(message)}]
        case _:
            assert_never(message)


def from_wire(response: dict[str, Any]) -> ModelResponse:
    """A neutral response from a Response as JSON; unknown output items raise, never vanish."""
    builder = ResponseBuilder(OpenAIResponsesModel.name)
    add_event(builder, {"type": "response.completed", "response": response})
    for index, item in enumerate(response.get("output") or []):
        _item(builder, index, item)
    return builder.build()


def add_event(builder: ResponseBuilder, event: dict[str, Any]) -> None:
    """Add one streamed event (a whole Response is its final event, then each output item whole)."""
    match event.get("type"):
        case "response.created" | "response.in_progress":
            builder.model = event["response"].get("model") or builder.model
        case "response.output_item.added":  # empty yet: a call's id and name, its arguments to come
            _item(builder, event["output_index"], event["item"])
        case "response.output_text.delta" | "response.refusal.delta":
            builder.text(event["delta"])
        case "response.function_call_arguments.delta":
            builder.call(event["output_index"], arguments=event["delta"])
        case "response.reasoning_summary_text.delta":
            builder.reasoning(event["delta"])
        case "response.reasoning_summary_part.added" if event["summary_index"] > 0:
            builder.reasoning("\n\n")
        case "response.completed" | "response.incomplete":
            _finished(builder, event["response"])
        case "response.failed":
            raise stream_error(builder.provider, event["response"].get("error") or {})
        case "error":
            raise stream_error(builder.provider, {"code": event.get("code"), "message": event.get("message")})
        case _:
            pass  # the .done events repeat what the deltas said; other events carry no content


def _item(builder: ResponseBuilder, index: int, item: dict[str, Any]) -> None:
    match item.get("type"):
        case "message":
            for part in item.get("content") or []:
                match part.get("type"):
                    case "output_text":
                        builder.text(part.get("text") or "")
                    case "refusal":
                        builder.text(part.get("refusal") or "")
                    case kind:
                        raise ValueError(f"unsupported openai_responses content part type {kind!r}")
        case "function_call":
            builder.call(index, id=item["call_id"], name=item["name"], arguments=item.get("arguments") or "")
        case "reasoning":
            for position, part in enumerate(item.get("summary") or []):  # parts apart, as streamed
                builder.reasoning(("\n\n" if position else "") + (part.get("text") or ""))
        case kind:
            raise ValueError(f"unsupported openai_responses output item type {kind!r}")


def _finished(builder: ResponseBuilder, response: dict[str, Any]) -> None:
    """The final event's (or the whole Response's) model, usage and why it stopped."""
    builder.model = response.get("model") or builder.model
    usage = response.get("usage") or {}
    builder.usage = Usage(
        input_tokens=usage.get("input_tokens") or 0,
        output_tokens=usage.get("output_tokens") or 0,
        reasoning_tokens=(usage.get("output_tokens_details") or {}).get("reasoning_tokens") or 0,
        cached_input_tokens=(usage.get("input_tokens_details") or {}).get("cached_tokens") or 0,
    )
    match response.get("status"):
        case "completed":
            calls = any(item.get("type") == "function_call" for item in response.get("output") or [])
            builder.finish = "tool_calls" if calls else "stop"
        case "incomplete":
            reason = (response.get("incomplete_details") or {}).get("reason") or ""
            builder.finish = _INCOMPLETE.get(reason, "other")
        case "failed":
            raise stream_error(builder.provider, response.get("error") or {})
        case _:
            builder.finish = "other"
