"""The fault matrix: provider x mode x fault, each ending as ``tests/fault_matrix.md`` promises.

Every cell runs the real ``openai`` or ``anthropic`` SDK over HTTP against the fake
provider, through a real worker, and asserts the same outcome for all six paths
(OpenAI Chat Completions, OpenAI Responses and Anthropic, streamed and whole), so the adapters
cannot drift apart.
Cells assert counts (requests the provider saw, attempts in history) and exact
messages, never durations.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHandle

from durable_agents.activities.providers._response import CUT_OFF
from durable_agents.cli import starter
from durable_agents.client.conversations import conversation_result
from durable_agents.dev_server import EmbeddedServer
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec, CallPolicy
from durable_agents.workflows.messages import ModelSettings
from tests.support.docs import docs_page
from tests.support.fake_provider import (
    Arguments,
    FakeProvider,
    Reply,
    anthropic_error_event,
    anthropic_error_reply,
    anthropic_message,
    anthropic_stream,
    broken_off,
    error_reply,
    openai_completion,
    openai_error_event,
    openai_response,
    openai_responses_error_event,
    openai_responses_stream,
    openai_stream,
)
from tests.support.history import activity_types
from tests.support.paths import TESTS
from tests.support.workers import Env

Provider = Literal["openai", "openai_responses", "anthropic"]
MODELS: dict[Provider, str] = {
    "openai": "gpt-4o-mini",
    "openai_responses": "gpt-5-mini",
    "anthropic": "claude-haiku-4-5",
}
TOOLS = ["add", "subtract", "multiply", "divide", "sqrt"]
ANSWER = "12 + 30 = 42."
TABLE = TESTS / "fault_matrix.md"


@dataclass(frozen=True)
class Promise:
    fault: str
    """The fault as the table names it."""
    outcome: str
    """What happens, as the table says it."""
    requests: int
    """Requests the provider sees."""
    attempts: tuple[int, ...] | None
    """Per model call, the attempt that ended it (from history); None: not checked."""
    streaming_only: bool = False


PROMISES: dict[str, Promise] = {
    "429": Promise(
        "429 with `retry-after`",
        "retried after the delay the provider asked for; the conversation answers",
        2,
        (2,),
    ),
    "500": Promise("500", "retried; the conversation answers", 2, (2,)),
    "overloaded": Promise("529 / overloaded (OpenAI: 503)", "retried; the conversation answers", 2, (2,)),
    "stream-error": Promise(
        "error event inside the stream (after HTTP 200)",
        "classified like the HTTP status its type stands for (`overloaded_error` 529, `api_error` and"
        " `server_error` 500, `rate_limit_error` 429, `invalid_request_error` 400, ...): here retried;"
        " the conversation answers",
        2,
        (2,),
        streaming_only=True,
    ),
    "400": Promise(
        "400",
        "not retried; the conversation fails with one line: the model call and the provider's message",
        1,
        (1,),
    ),
    "401": Promise(
        "401",
        "not retried; the conversation fails with one line: the model call and the provider's message",
        1,
        (1,),
    ),
    "hang": Promise(
        "hang past the timeout", "the attempt times out and is retried; the conversation answers", 2, (2,)
    ),
    "malformed-json": Promise(
        "malformed tool-call JSON",
        "the tool does not run; the model gets an error result saying what is wrong, and answers",
        2,
        (1, 1),
    ),
    "cut-call": Promise(
        "tool call cut at `max_tokens`",
        "the tool does not run, even if the cut arguments parse; the model gets an error result saying"
        " they were cut off; the reply is flagged truncated",
        2,
        (1, 1),
    ),
    "cut-text": Promise(
        "text cut at `max_tokens`", "the text so far is the reply, flagged truncated", 1, (1,)
    ),
    "unknown-tool": Promise(
        "unknown tool",
        "the model gets an error result naming the available tools, and answers",
        2,
        (1, 1),
    ),
    "cancelled": Promise(
        "conversation cancelled during the model call",
        "the conversation ends as cancelled (`closed_by` and `stop_reason` are `cancelled`); the model"
        " call is cancelled and its HTTP request aborted",
        1,
        None,
    ),
}

CELLS = [
    pytest.param(fault, provider, stream, id=f"{provider}-{'stream' if stream else 'whole'}-{fault}")
    for fault, promise in PROMISES.items()
    for provider in MODELS
    for stream in (False, True)
    if stream or not promise.streaming_only
]


@pytest.fixture
def environ(server: EmbeddedServer) -> dict[str, str]:
    return {"TEMPORAL_ADDRESS": server.address}  # for the CLI


@pytest.mark.parametrize(("fault", "provider", "stream"), CELLS)
async def test_fault_ends_as_promised(
    fault: str,
    provider: Provider,
    stream: bool,
    env: Env,
    fake: FakeProvider,
    capsys: pytest.CaptureFixture[str],
) -> None:
    promise = PROMISES[fault]
    wire = _Wire(provider, stream)
    label = f"{provider}:{MODELS[provider]}"
    conversation = ConversationInput(
        prompt="12 + 30?", agent_spec=_agent(provider, stream, timeout=2 if fault == "hang" else 30)
    )
    match fault:  # each cell queues the provider's replies first, then starts the conversation
        case "429" | "500" | "overloaded" | "stream-error" | "hang":
            first, failure_type, retry_delay = wire.fault(fault)
            fake.queue(first, wire.answer())
            handle = await env.start(conversation)
            result = await handle.result()
            assert (result.final_text, result.stop_reason, result.truncated) == (ANSWER, "completed", False)
            if failure_type is not None:
                assert await _model_failures(handle) == [(failure_type, retry_delay)]
        case "400" | "401":
            status = int(fault)
            message = wire.error_message(status)
            fake.queue(wire.status_error(status, message))
            handle = await env.start(conversation)
            with pytest.raises(WorkflowFailureError) as info:
                await handle.result()
            line = f"model call to {label} failed: {provider} returned HTTP {status}: {message}"
            assert info.value.cause.message == line
            assert await starter.run(["result", handle.id]) == 1
            assert capsys.readouterr().err == f"error: conversation failed: {line}\n"
        case "malformed-json" | "cut-call" | "unknown-tool":
            name, arguments, finish, content = {
                "malformed-json": (
                    "add",
                    '{"a": 12 "b": 30}',
                    "tool_calls",
                    "Invalid arguments for 'add': arguments are not valid JSON"
                    " (Expecting ',' delimiter at position 9)",
                ),
                # Whole, Anthropic sends the input it parsed so far: valid JSON, yet cut.
                "cut-call": (
                    "add",
                    {"a": 1, "b": 23} if provider == "anthropic" and not stream else '{"a": 1, "b": 23',
                    "length",
                    f"Invalid arguments for 'add': {CUT_OFF}",
                ),
                "unknown-tool": (
                    "list_files",
                    {},
                    "tool_calls",
                    "Unknown tool 'list_files'. Available tools: add, divide, multiply, sqrt, subtract.",
                ),
            }[fault]
            fake.queue(wire.tool_call("call_1", name, arguments, finish), wire.answer())
            handle = await env.start(conversation)
            result = await handle.result()
            assert (result.final_text, result.stop_reason) == (ANSWER, "completed")
            assert [(c.name, c.content, c.is_error) for c in result.tool_calls] == [(name, content, True)]
            assert wire.tool_result_sent(fake.received[1].body) == ("call_1", content)
            assert "durable_agents.run_tool" not in await activity_types(handle)
            assert result.truncated is (fault == "cut-call")
        case "cut-text":
            fake.queue(wire.answer("12 + 30 = 4", finish="length"))
            handle = await env.start(conversation)
            result = await handle.result()
            assert (result.final_text, result.stop_reason, result.truncated) == (
                "12 + 30 = 4",
                "completed",
                True,
            )
        case "cancelled":
            fake.queue(wire.answer("forty-two " * 20, delay=0.5 if stream else 30))
            handle = await env.start(conversation)
            while not fake.received:
                await asyncio.sleep(0.05)
            await handle.cancel()
            result = await conversation_result(env.client, handle)
            assert (result.closed_by, result.stop_reason) == ("cancelled", "cancelled")
            await asyncio.to_thread(fake.received[0].ended.wait)
            assert fake.received[0].disconnected, "the provider sent its whole answer: the call ran on"
        case _:
            raise AssertionError(f"no cell for fault {fault!r}")

    assert len(fake.received) == promise.requests
    if promise.attempts is not None:
        assert await _model_attempts(handle) == list(promise.attempts)


def test_fault_matrix_table_matches_the_promises() -> None:
    rows = [
        "| fault | what happens | provider requests |",
        "|---|---|---|",
        *(f"| {p.fault} | {p.outcome} | {p.requests} |" for p in PROMISES.values()),
    ]
    table = [line for line in TABLE.read_text().splitlines() if line.startswith("|")]
    assert table == rows
    page = docs_page("guarantees").splitlines()
    at = page.index(rows[0])
    assert page[at : at + len(rows)] == rows, "docs/guarantees.md shows the fault matrix as it is"


def _agent(provider: Provider, stream: bool, *, timeout: float) -> AgentSpec:
    return AgentSpec(
        name=f"matrix-{provider}",
        model=ModelSettings(provider=provider, model=MODELS[provider], stream=stream, max_tokens=256),
        tools=TOOLS,
        model_call=CallPolicy(
            timeout_seconds=timeout,
            max_attempts=3,
            initial_retry_seconds=0.05,
            max_retry_seconds=0.05,
            heartbeat_seconds=10,  # beats every 3 s: a loaded machine keeps them
        ),
    )


@dataclass
class _Wire:
    """What one provider sends, streamed or whole, for each fault."""

    provider: Provider
    stream: bool

    def _reply(self, text: str, calls: list[tuple[str, str, Arguments]], finish: str, delay: float) -> Reply:
        match self.provider:
            case "openai":
                body, stream = openai_completion(text, calls, finish), openai_stream
            case "openai_responses":
                body, stream = openai_response(text, calls, finish), openai_responses_stream
            case "anthropic":
                stop = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}[finish]
                body, stream = anthropic_message(text, calls, stop), anthropic_stream
        return stream(body, delay) if self.stream else Reply(body=body, delay=delay)

    def answer(self, text: str = ANSWER, *, finish: str = "stop", delay: float = 0.0) -> Reply:
        return self._reply(text, [], finish, delay)

    def tool_call(self, id: str, name: str, arguments: Arguments, finish: str) -> Reply:
        return self._reply("", [(id, name, arguments)], finish, 0.0)

    def error_message(self, status: int) -> str:
        return {400: "max_tokens: Field required", 401: "invalid x-api-key"}[status]

    def status_error(self, status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
        if self.provider != "anthropic":
            return error_reply(status, message, headers)
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            429: "rate_limit_error",
            500: "api_error",
            529: "overloaded_error",
        }[status]
        return anthropic_error_reply(status, kind, message, headers)

    def fault(self, fault: str) -> tuple[Reply, str | None, timedelta | None]:
        """The failing first reply, and the failure type and retry delay history records for it."""
        openai = self.provider != "anthropic"
        match fault:
            case "429":
                reply = self.status_error(429, "Rate limit reached", {"retry-after": "0.2"})
                return reply, "ProviderHTTP429", timedelta(seconds=0.2)
            case "500":
                return self.status_error(500, "The server had an error"), "ProviderHTTP500", None
            case "overloaded":
                status = 503 if openai else 529
                return self.status_error(status, "Overloaded"), f"ProviderHTTP{status}", None
            case "stream-error":
                event = {
                    "openai": openai_error_event,
                    "openai_responses": openai_responses_error_event,
                    "anthropic": lambda _, message: anthropic_error_event("overloaded_error", message),
                }[self.provider]("server_error", "The server had an error" if openai else "Overloaded")
                return (
                    broken_off(self.answer(), event),
                    "ProviderHTTP500" if openai else "ProviderHTTP529",
                    None,
                )
            case "hang":  # timed out by the SDK or by Temporal, whichever is first: type not checked
                return self.answer(delay=30), None, None
        raise AssertionError(fault)

    def tool_result_sent(self, request: dict) -> tuple[str, str]:
        """The call id and content of the tool result the next request carried back to the model."""
        if self.provider == "openai_responses":
            last = request["input"][-1]
            assert last["type"] == "function_call_output" and last["output"].startswith("Error: ")
            return last["call_id"], last["output"].removeprefix("Error: ")
        last = request["messages"][-1]
        if self.provider == "openai":
            assert last["role"] == "tool" and last["content"].startswith("Error: ")
            return last["tool_call_id"], last["content"].removeprefix("Error: ")
        (block,) = last["content"]
        assert block["is_error"] is True
        return block["tool_use_id"], block["content"]


async def _model_events(handle: WorkflowHandle) -> list:
    """ActivityTaskStarted of each model call: the attempt that ended it, and the failure before."""
    scheduled: dict[int, str] = {}
    started = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attributes = event.activity_task_started_event_attributes
            if scheduled[attributes.scheduled_event_id] == "durable_agents.call_model":
                started.append(attributes)
    return started


async def _model_attempts(handle: WorkflowHandle) -> list[int]:
    return [a.attempt for a in await _model_events(handle)]


async def _model_failures(handle: WorkflowHandle) -> list[tuple[str, timedelta | None]]:
    """Type and requested retry delay of the failure each retried model call retried after."""
    out = []
    for attributes in await _model_events(handle):
        if attributes.HasField("last_failure"):
            info = attributes.last_failure.application_failure_info
            delay = info.next_retry_delay.ToTimedelta() if info.HasField("next_retry_delay") else None
            out.append((info.type, delay))
    return out
