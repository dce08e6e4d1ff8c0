"""Adapters without a server: neutral in, exact wire out; recorded wire response in, exact neutral out."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

import pytest
from temporalio.exceptions import ApplicationError

from durable_agents.activities.errors import provider_error, retry_after, status_error, stream_error
from durable_agents.activities.providers import anthropic_messages, openai_chat, openai_responses
from durable_agents.activities.providers._response import CUT_OFF, ResponseBuilder
from durable_agents.workflows.messages import (
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    SystemMessage,
    ToolCall,
    ToolDefinition,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from tests.support.fake_provider import (
    Reply,
    anthropic_message,
    anthropic_stream,
    openai_completion,
    openai_response,
    openai_responses_stream,
    openai_stream,
)
from tests.support.paths import DATA

ADD = ToolDefinition(
    name="add",
    description="Add two numbers.",
    parameters={"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
)


def _request(provider: str, *, allow_tool_calls: bool = True) -> ModelRequest:
    return ModelRequest(
        settings=ModelSettings(provider=provider, model="m-1", max_tokens=256, temperature=0.2),  # type: ignore[arg-type]
        messages=[
            SystemMessage(text="Be brief."),
            UserMessage(text="12 + 30, and 1 / 0?"),
            AssistantMessage(
                text="Computing.",
                tool_calls=[
                    ToolCall(id="c1", name="add", arguments={"a": 12, "b": 30}),
                    ToolCall(id="c2", name="divide", arguments={"a": 1, "b": 0}),
                ],
            ),
            ToolResultMessage(call_id="c1", name="add", content="42"),
            ToolResultMessage(call_id="c2", name="divide", content="Cannot divide by zero.", is_error=True),
        ],
        tools=[ADD],
        allow_tool_calls=allow_tool_calls,
    )


def _load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def test_openai_request_maps_tool_results_to_tool_role_messages() -> None:
    assert openai_chat.to_wire(_request("openai")) == {
        "model": "m-1",
        "max_tokens": 256,
        "temperature": 0.2,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "12 + 30, and 1 / 0?"},
            {
                "role": "assistant",
                "content": "Computing.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 12, "b": 30}'},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "divide", "arguments": '{"a": 1, "b": 0}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
            {"role": "tool", "tool_call_id": "c2", "content": "Error: Cannot divide by zero."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "add", "description": "Add two numbers.", "parameters": ADD.parameters},
            }
        ],
    }


def test_openai_request_turns_tools_off_with_tool_choice_none() -> None:
    wire = openai_chat.to_wire(
        _request("openai", allow_tool_calls=False), max_tokens_key="max_completion_tokens"
    )
    assert wire["tool_choice"] == "none"
    assert wire["max_completion_tokens"] == 256 and "max_tokens" not in wire


def test_openai_request_resends_malformed_arguments_verbatim() -> None:
    request = _request("openai")
    request.messages[2] = AssistantMessage(tool_calls=[ToolCall.from_json("c9", "add", '{"a": 1,')])
    assert openai_chat.to_wire(request)["messages"][2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "add", "arguments": '{"a": 1,'}}
        ],
    }


RECORDED_TOOL_CALLS = [
    ToolCall(id="call_hU0Yg4Zx3oQe1nVdB7sKpW2m", name="add", arguments={"a": 12, "b": 30}),
    ToolCall(
        id="call_9Lr2fQkT6wXs0aPjN4cVyE8d",
        name="multiply",
        arguments_error="arguments are not valid JSON (Expecting value at position 11)",
        raw_arguments='{"a":3,"b":',
    ),
]
"""The two calls both OpenAI recordings answer (Chat Completions and Responses): one whose arguments
are cut off."""


def test_openai_recorded_tool_call_response_maps_to_neutral() -> None:
    assert openai_chat.from_wire(_load("openai_tool_calls_response.json")) == ModelResponse(
        message=AssistantMessage(
            text="",
            tool_calls=RECORDED_TOOL_CALLS,
        ),
        usage=Usage(input_tokens=143, output_tokens=51),
        finish_reason="tool_calls",
        model="gpt-4o-mini-2024-07-18",
    )


def test_openai_recorded_text_response_cut_at_max_tokens_says_length() -> None:
    assert openai_chat.from_wire(_load("openai_text_response.json")) == ModelResponse(
        message=AssistantMessage(text="12 + 30 = 42."),
        usage=Usage(input_tokens=210, output_tokens=8),
        finish_reason="length",
        model="gpt-4o-mini-2024-07-18",
    )


def test_anthropic_request_groups_tool_results_in_one_user_message_with_is_error() -> None:
    request = _request("anthropic")
    request.settings.prompt_cache = False
    assert anthropic_messages.to_wire(request) == {
        "model": "m-1",
        "max_tokens": 256,
        "temperature": 0.2,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "12 + 30, and 1 / 0?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Computing."},
                    {"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 12, "b": 30}},
                    {"type": "tool_use", "id": "c2", "name": "divide", "input": {"a": 1, "b": 0}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "42"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "c2",
                        "content": "Cannot divide by zero.",
                        "is_error": True,
                    },
                ],
            },
        ],
        "tools": [{"name": "add", "description": "Add two numbers.", "input_schema": ADD.parameters}],
    }


def test_anthropic_request_marks_cache_breakpoints_on_tools_system_and_the_newest_message() -> None:
    wire = anthropic_messages.to_wire(_request("anthropic"))
    cached = {"type": "ephemeral"}
    assert wire["system"] == [{"type": "text", "text": "Be brief.", "cache_control": cached}]
    assert wire["tools"] == [
        {
            "name": "add",
            "description": "Add two numbers.",
            "input_schema": ADD.parameters,
            "cache_control": cached,
        }
    ]
    assert wire["messages"][0] == {"role": "user", "content": "12 + 30, and 1 / 0?"}  # before: unmarked
    assert wire["messages"][-1]["content"][-1] == {
        "type": "tool_result",
        "tool_use_id": "c2",
        "content": "Cannot divide by zero.",
        "is_error": True,
        "cache_control": cached,
    }
    first_turn = anthropic_messages.to_wire(
        _request("anthropic").model_copy(update={"messages": [UserMessage(text="hi")], "tools": []})
    )
    assert (first_turn["messages"], "system" in first_turn) == (
        [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": cached}]}],
        False,
    )
    assert json.dumps(wire).count('"cache_control"') == 3


def test_anthropic_request_turns_tools_off_with_tool_choice_none() -> None:
    wire = anthropic_messages.to_wire(_request("anthropic", allow_tool_calls=False))
    assert wire["tool_choice"] == {"type": "none"}


def test_anthropic_recorded_tool_use_response_maps_to_neutral() -> None:
    assert anthropic_messages.from_wire(_load("anthropic_tool_use_response.json")) == ModelResponse(
        message=AssistantMessage(
            text="I'll add those numbers.",
            tool_calls=[
                ToolCall(id="toolu_01A09q90qw90lq917835lq9", name="add", arguments={"a": 12, "b": 30}),
                ToolCall(id="toolu_01B7Rz3kLm5Np8Qs2Tv4Wx6Y", name="list_files", arguments={}),
            ],
        ),
        usage=Usage(input_tokens=512, output_tokens=87),
        finish_reason="tool_calls",
        model="claude-haiku-4-5-20251001",
    )


def test_cached_input_tokens_as_each_provider_reports_them() -> None:
    openai = _load("openai_text_response.json")
    openai["usage"]["prompt_tokens_details"] = {"cached_tokens": 128}
    anthropic = _load("anthropic_text_response.json")
    anthropic["usage"]["cache_read_input_tokens"] = 512
    assert (openai_chat.from_wire(openai).usage, anthropic_messages.from_wire(anthropic).usage) == (
        Usage(input_tokens=210, output_tokens=8, cached_input_tokens=128),
        Usage(input_tokens=1152, output_tokens=12, cached_input_tokens=512),  # of input_tokens, as OpenAI's
    )
    assert Usage(input_tokens=1).model_dump() == {
        "input_tokens": 1,
        "output_tokens": 0,
    }  # none cached: not said


def test_anthropic_recorded_text_response_maps_to_neutral() -> None:
    assert anthropic_messages.from_wire(_load("anthropic_text_response.json")) == ModelResponse(
        message=AssistantMessage(text="12 + 30 = 42."),
        usage=Usage(input_tokens=640, output_tokens=12),
        finish_reason="stop",
        model="claude-haiku-4-5-20251001",
    )


def test_anthropic_unknown_content_block_raises_instead_of_vanishing() -> None:
    wire = _load("anthropic_text_response.json")
    wire["content"].append({"type": "server_tool_use", "id": "x", "name": "web_search", "input": {}})
    with pytest.raises(ValueError, match="unsupported anthropic content block type 'server_tool_use'"):
        anthropic_messages.from_wire(wire)


def test_openai_responses_request_maps_the_transcript_to_input_items() -> None:
    request = _request("openai_responses")
    request.settings.reasoning_effort = "low"
    request.settings.reasoning_summary = "auto"
    assert openai_responses.to_wire(request) == {
        "model": "m-1",
        "max_output_tokens": 256,
        "store": False,
        "temperature": 0.2,
        "reasoning": {"effort": "low", "summary": "auto"},
        "input": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "12 + 30, and 1 / 0?"},
            {"role": "assistant", "content": "Computing."},
            {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 12, "b": 30}'},
            {"type": "function_call", "call_id": "c2", "name": "divide", "arguments": '{"a": 1, "b": 0}'},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
            {"type": "function_call_output", "call_id": "c2", "output": "Error: Cannot divide by zero."},
        ],
        "tools": [
            {
                "type": "function",
                "name": "add",
                "description": "Add two numbers.",
                "parameters": ADD.parameters,
                "strict": False,
            }
        ],
    }


def test_openai_responses_request_turns_tools_off_and_asks_for_a_typed_answer_natively() -> None:
    request = _request("openai_responses", allow_tool_calls=False)
    request.output_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    wire = openai_responses.to_wire(request)
    assert wire["tool_choice"] == "none" and "reasoning" not in wire
    assert wire["text"] == {
        "format": {"type": "json_schema", "name": "final_answer", "schema": request.output_schema}
    }


def test_openai_chat_request_sends_the_reasoning_effort() -> None:
    request = _request("openai")
    request.settings.reasoning_effort = "high"
    assert openai_chat.to_wire(request)["reasoning_effort"] == "high"


def test_openai_responses_recorded_parallel_calls_map_to_neutral_with_reasoning() -> None:
    assert openai_responses.from_wire(_load("openai_responses_tool_calls_response.json")) == ModelResponse(
        message=AssistantMessage(
            text="",
            tool_calls=RECORDED_TOOL_CALLS,
        ),
        usage=Usage(input_tokens=143, output_tokens=179, reasoning_tokens=128),
        finish_reason="tool_calls",
        model="gpt-5-mini-2025-08-07",
        reasoning="**Planning the arithmetic**\n\nThe user wants a sum; the add tool gives it.\n\n"
        "**Checking the product**\n\nI also call multiply.",
    )


def test_openai_responses_recorded_text_response_maps_to_neutral() -> None:
    assert openai_responses.from_wire(_load("openai_responses_text_response.json")) == ModelResponse(
        message=AssistantMessage(text="12 + 30 = 42."),
        usage=Usage(input_tokens=210, output_tokens=8),
        finish_reason="stop",
        model="gpt-5-mini-2025-08-07",
    )


def test_openai_responses_unknown_output_item_raises_instead_of_vanishing() -> None:
    wire = _load("openai_responses_text_response.json")
    wire["output"].append({"type": "web_search_call", "id": "ws_1", "status": "completed"})
    with pytest.raises(ValueError, match="unsupported openai_responses output item type 'web_search_call'"):
        openai_responses.from_wire(wire)


@pytest.mark.parametrize(
    ("event", "message", "kind", "retryable"),
    [
        (
            {"type": "error", "code": "server_error", "message": "The server had an error", "param": None},
            "openai_responses stream failed with server_error: The server had an error",
            "ProviderHTTP500",
            True,
        ),
        (
            {"type": "error", "code": "rate_limit_exceeded", "message": "Slow down", "param": None},
            "openai_responses stream failed with rate_limit_exceeded: Slow down",
            "ProviderHTTP429",
            True,
        ),
        (
            {
                "type": "response.failed",
                "response": {"status": "failed", "error": {"code": "invalid_prompt", "message": "No."}},
            },
            "openai_responses stream failed with invalid_prompt: No.",
            "ProviderHTTP500",
            True,
        ),
    ],
)
def test_openai_responses_error_and_failed_events_are_classified(
    event: dict, message: str, kind: str, retryable: bool
) -> None:
    with pytest.raises(ApplicationError) as info:
        openai_responses.add_event(ResponseBuilder("openai_responses"), event)
    assert (info.value.message, info.value.type, info.value.non_retryable) == (message, kind, not retryable)


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (408, True),
        (409, True),
        (413, False),
        (422, False),
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (529, True),
        (None, True),
    ],
)
def test_provider_error_classification(status: int | None, retryable: bool) -> None:
    error = provider_error("openai", "boom", status=status)
    assert error.non_retryable is (not retryable)


def test_provider_error_names_the_provider_and_its_message() -> None:
    error = provider_error("anthropic", "max_tokens: Field required", status=400)
    assert (error.message, error.type) == (
        "anthropic returned HTTP 400: max_tokens: Field required",
        "ProviderHTTP400",
    )


@pytest.mark.parametrize(
    ("headers", "delay"),
    [
        ({"retry-after": "7"}, timedelta(seconds=7)),
        ({"Retry-After": "1.5"}, timedelta(seconds=1.5)),
        ({"retry-after-ms": "250", "retry-after": "9"}, timedelta(milliseconds=250)),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, timedelta(0)),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_header_parsing(headers: dict[str, str], delay: timedelta | None) -> None:
    assert retry_after(headers) == delay


def test_rate_limit_error_carries_the_providers_delay() -> None:
    error = provider_error("openai", "slow down", status=429, headers={"retry-after": "3"})
    assert error.next_retry_delay == timedelta(seconds=3)
    assert error.non_retryable is False


def _events(reply: Reply) -> list[dict]:
    """The JSON data of a fake stream's server-sent events."""
    assert reply.events is not None
    data = [
        line.removeprefix("data: ")
        for e in reply.events
        for line in e.splitlines()
        if line.startswith("data: ")
    ]
    return [json.loads(d) for d in data if d != "[DONE]"]


def _streamed(add: Callable[[ResponseBuilder, dict], None], reply: Reply, provider: str) -> ModelResponse:
    builder = ResponseBuilder(provider)
    for event in _events(reply):
        add(builder, event)
    return builder.build()


@pytest.mark.parametrize("name", ["openai_tool_calls_response.json", "openai_text_response.json"])
def test_openai_stream_gives_the_same_response_as_the_whole_answer(name: str) -> None:
    whole = _load(name)
    assert _streamed(openai_chat.add_chunk, openai_stream(whole), "openai") == openai_chat.from_wire(whole)


@pytest.mark.parametrize(
    "name", ["openai_responses_tool_calls_response.json", "openai_responses_text_response.json"]
)
def test_openai_responses_stream_gives_the_same_response_as_the_whole_answer(name: str) -> None:
    whole = _load(name)
    streamed = _streamed(openai_responses.add_event, openai_responses_stream(whole), "openai_responses")
    assert streamed == openai_responses.from_wire(whole)


@pytest.mark.parametrize("name", ["anthropic_tool_use_response.json", "anthropic_text_response.json"])
def test_anthropic_stream_gives_the_same_response_as_the_whole_answer(name: str) -> None:
    whole = _load(name)
    streamed = _streamed(anthropic_messages.add_event, anthropic_stream(whole), "anthropic")
    assert streamed == anthropic_messages.from_wire(whole)


CUT = ToolCall(id="c1", name="add", arguments_error=CUT_OFF, raw_arguments='{"a": 1, "b": 23')


WIRES = {
    "openai": (openai_chat.add_chunk, openai_stream, openai_chat.from_wire),
    "openai_responses": (openai_responses.add_event, openai_responses_stream, openai_responses.from_wire),
    "anthropic": (anthropic_messages.add_event, anthropic_stream, anthropic_messages.from_wire),
}
"""Per provider: how a stream's events are added, its fake stream of an answer, an answer read whole."""


@pytest.mark.parametrize(
    ("provider", "response"),
    [
        ("openai", openai_completion("", [("c1", "add", '{"a": 1, "b": 23')], "length")),
        ("openai_responses", openai_response("", [("c1", "add", '{"a": 1, "b": 23')], "length")),
        ("anthropic", anthropic_message("", [("c1", "add", '{"a": 1, "b": 23')], "max_tokens")),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_call_cut_at_max_tokens_is_flagged_not_completed(provider: str, response: dict, stream: bool) -> None:
    add, streamed, whole = WIRES[provider]
    neutral = _streamed(add, streamed(response), provider) if stream else whole(response)
    assert (neutral.finish_reason, neutral.message.tool_calls) == ("length", [CUT])


def test_cut_call_whose_input_parsed_still_does_not_run() -> None:
    """Whole, Anthropic sends the input parsed so far: valid JSON, but not what the model meant."""
    response = anthropic_messages.from_wire(
        anthropic_message("", [("c0", "sqrt", {"x": 4}), ("c1", "add", {"a": 1, "b": 23})], "max_tokens")
    )
    assert response.message.tool_calls == [
        ToolCall(id="c0", name="sqrt", arguments={"x": 4}),
        CUT.model_copy(update={"raw_arguments": '{"a": 1, "b": 23}'}),
    ]


def test_calls_before_text_cut_at_max_tokens_are_complete() -> None:
    response = anthropic_messages.from_wire(
        {
            **anthropic_message("", [("c1", "add", {"a": 1, "b": 2})], "max_tokens"),
            "content": [
                {"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 1, "b": 2}},
                {"type": "text", "text": "And then"},
            ],
        }
    )
    assert response.message.tool_calls == [ToolCall(id="c1", name="add", arguments={"a": 1, "b": 2})]


def test_stream_that_ends_before_its_final_event_is_retried() -> None:
    reply = anthropic_stream(anthropic_message("12 + 30 = 42."))
    builder = ResponseBuilder("anthropic")
    for event in _events(reply)[:3]:
        anthropic_messages.add_event(builder, event)
    with pytest.raises(ApplicationError) as info:
        builder.build()
    assert (info.value.type, info.value.non_retryable) == ("ProviderUnavailable", False)
    assert info.value.message == "anthropic: the stream ended before the answer was complete"


@pytest.mark.parametrize(
    ("body", "message", "kind", "retryable"),
    [
        (
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "anthropic stream failed with overloaded_error: Overloaded",
            "ProviderHTTP529",
            True,
        ),
        ({"error": {"type": "api_error", "message": "x"}}, None, "ProviderHTTP500", True),
        ({"error": {"type": "rate_limit_error", "message": "x"}}, None, "ProviderHTTP429", True),
        ({"error": {"type": "invalid_request_error", "message": "x"}}, None, "ProviderHTTP400", False),
        ({"error": {"type": "authentication_error", "message": "x"}}, None, "ProviderHTTP401", False),
        ({"error": {"type": "permission_error", "message": "x"}}, None, "ProviderHTTP403", False),
        ({"type": "server_error", "message": "x", "code": None}, None, "ProviderHTTP500", True),
        ({"type": "tokens", "code": "rate_limit_exceeded", "message": "x"}, None, "ProviderHTTP429", True),
        (
            {"type": "invalid_request_error", "code": "invalid_api_key", "message": "x"},
            None,
            "ProviderHTTP401",
            False,
        ),
        ({"type": "brand_new_error", "message": "x"}, None, "ProviderHTTP500", True),
        (
            "not even json",
            "anthropic stream failed with an unnamed error: no message",
            "ProviderHTTP500",
            True,
        ),
    ],
)
def test_error_event_in_a_stream_is_classified_like_its_http_status(
    body: object, message: str | None, kind: str, retryable: bool
) -> None:
    error = stream_error("anthropic", body)
    assert (error.type, error.non_retryable) == (kind, not retryable)
    if message is not None:
        assert error.message == message


def test_status_below_400_is_an_error_event_inside_a_stream() -> None:
    body = {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}
    error = status_error("anthropic", 200, body, "raw", {})
    assert (error.message, error.type) == (
        "anthropic stream failed with api_error: Internal server error",
        "ProviderHTTP500",
    )
