"""The real openai and anthropic SDKs over HTTP against a local fake server, through a real worker."""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from durable_agents.activities.agent_files import load_agent_file
from durable_agents.activities.tools import default_registry
from durable_agents.cli.display import format_event, format_result
from durable_agents.client.live import follow
from durable_agents.converter import FAILURE_LIMIT
from durable_agents.workflows.activity_refs import CALL_MODEL
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec, CallPolicy
from durable_agents.workflows.events import ModelCallFinished
from durable_agents.workflows.messages import ModelProgress, ModelSettings
from tests.support.docs import block_after, docs_page
from tests.support.fake_provider import (
    FakeProvider,
    Reply,
    anthropic_message,
    anthropic_stream,
    error_reply,
    openai_completion,
    openai_response,
    openai_responses_stream,
    openai_stream,
)
from tests.support.paths import DATA
from tests.support.workers import Env

SECRET = "sk-test-secret-never-in-history"


def _recorded(name: str) -> Reply:
    return Reply(body=json.loads((DATA / name).read_text()))


@pytest.fixture
def environ() -> dict[str, str]:
    return {"OPENAI_API_KEY": SECRET, "ANTHROPIC_API_KEY": SECRET}  # conftest's ``fake`` set them: new values


async def _history_json(env: Env, workflow_id: str) -> str:
    history = await env.client.get_workflow_handle(workflow_id).fetch_history()
    return history.to_json()


async def test_openai_agent_runs_tools_through_real_sdk(env: Env, fake: FakeProvider) -> None:
    fake.queue(_recorded("openai_tool_calls_response.json"), _recorded("openai_text_response.json"))
    handle = await env.start(ConversationInput(prompt="12 + 30?", agent="calculator-openai"))
    result = await handle.result()

    assert result.final_text == "12 + 30 = 42."
    assert result.truncated is True  # the recorded answer stopped at max_tokens
    assert [(c.name, c.content, c.is_error) for c in result.tool_calls] == [
        ("add", "42", False),
        (
            "multiply",
            "Invalid arguments for 'multiply': arguments are not valid JSON (Expecting value at position 11)",
            True,
        ),
    ]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (353, 59)

    first, second = fake.received
    assert first.path == second.path == "/v1/chat/completions"
    assert first.headers["authorization"] == f"Bearer {SECRET}"
    assert first.body["model"] == "gpt-4o-mini"
    assert [t["function"]["name"] for t in first.body["tools"]] == [
        "add",
        "subtract",
        "multiply",
        "divide",
        "sqrt",
    ]
    assert second.body["messages"][-2:] == [
        {"role": "tool", "tool_call_id": "call_hU0Yg4Zx3oQe1nVdB7sKpW2m", "content": "42"},
        {
            "role": "tool",
            "tool_call_id": "call_9Lr2fQkT6wXs0aPjN4cVyE8d",
            "content": "Error: Invalid arguments for 'multiply': arguments are not valid JSON "
            "(Expecting value at position 11)",
        },
    ]
    assert SECRET not in await _history_json(env, handle.id)


async def test_anthropic_agent_runs_tools_through_real_sdk(env: Env, fake: FakeProvider) -> None:
    fake.queue(_recorded("anthropic_tool_use_response.json"), _recorded("anthropic_text_response.json"))
    handle = await env.start(ConversationInput(prompt="12 + 30?", agent="calculator-anthropic"))
    result = await handle.result()

    assert result.final_text == "12 + 30 = 42."
    assert [(c.name, c.is_error) for c in result.tool_calls] == [("add", False), ("list_files", True)]
    assert result.tool_calls[1].content.startswith("Unknown tool 'list_files'. Available tools: add, divide")

    first, second = fake.received
    assert first.path == second.path == "/v1/messages"
    assert SECRET in (
        first.headers.get("x-api-key"),
        first.headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert first.body["system"][0]["text"].startswith("You are a precise calculator assistant.")
    assert second.body["messages"][-1]["role"] == "user"
    assert [b["tool_use_id"] for b in second.body["messages"][-1]["content"]] == [
        "toolu_01A09q90qw90lq917835lq9",
        "toolu_01B7Rz3kLm5Np8Qs2Tv4Wx6Y",
    ]
    assert second.body["messages"][-1]["content"][1]["is_error"] is True
    assert SECRET not in await _history_json(env, handle.id)


async def test_provider_400_fails_the_conversation_without_retrying(env: Env, fake: FakeProvider) -> None:
    fake.queue(error_reply(400, "Invalid 'messages[1].content': string too long."))
    handle = await env.start(ConversationInput(prompt="hi", agent="calculator-openai"))
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()

    assert info.value.cause.message == (
        "model call to openai:gpt-4o-mini failed: "
        "openai returned HTTP 400: Invalid 'messages[1].content': string too long."
    )
    assert len(fake.received) == 1


async def test_provider_401_is_not_retried(env: Env, fake: FakeProvider) -> None:
    fake.queue(error_reply(401, "invalid x-api-key"))
    handle = await env.start(ConversationInput(prompt="hi", agent="calculator-anthropic"))
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    assert info.value.cause.message.endswith("anthropic returned HTTP 401: invalid x-api-key")
    assert len(fake.received) == 1


async def test_rate_limit_is_retried_after_the_providers_delay(env: Env, fake: FakeProvider) -> None:
    fake.queue(
        error_reply(429, "Rate limit reached", {"retry-after": "2"}), _recorded("openai_text_response.json")
    )
    result = await env.run(ConversationInput(prompt="hi", agent="calculator-openai"))

    assert result.final_text == "12 + 30 = 42."
    assert len(fake.received) == 2
    assert fake.received[1].at - fake.received[0].at >= 1.9


async def test_overloaded_529_is_retried(env: Env, fake: FakeProvider) -> None:
    fake.queue(error_reply(529, "Overloaded"), _recorded("anthropic_text_response.json"))
    result = await env.run(ConversationInput(prompt="hi", agent="calculator-anthropic"))
    assert result.final_text == "12 + 30 = 42."
    assert len(fake.received) == 2


def _streaming(provider: str, model: str) -> ConversationInput:
    spec = AgentSpec(
        name=f"{provider}-stream",
        model=ModelSettings(provider=provider, model=model, stream=True),  # type: ignore[arg-type]
        tools=["add", "subtract", "multiply", "divide", "sqrt"],
    )
    return ConversationInput(prompt="12 + 30?", agent_spec=spec)


RECORDED_OUTCOMES = [
    ("call_hU0Yg4Zx3oQe1nVdB7sKpW2m", "add", "42", False),
    (
        "call_9Lr2fQkT6wXs0aPjN4cVyE8d",
        "multiply",
        "Invalid arguments for 'multiply': arguments are not valid JSON (Expecting value at position 11)",
        True,
    ),
]
"""The tool calls of the OpenAI recordings (Chat Completions, Responses) as the conversation ran
them: (id, tool, result, is_error); the second's arguments are cut off."""


async def test_openai_streaming_gives_the_same_result(env: Env, fake: FakeProvider) -> None:
    fake.queue(
        openai_stream(json.loads((DATA / "openai_tool_calls_response.json").read_text())),
        openai_stream(json.loads((DATA / "openai_text_response.json").read_text())),
    )
    result = await env.run(_streaming("openai", "gpt-4o-mini"))

    assert result.final_text == "12 + 30 = 42."
    assert result.truncated is True
    assert [(c.call_id, c.name, c.content, c.is_error) for c in result.tool_calls] == RECORDED_OUTCOMES
    assert (result.usage.input_tokens, result.usage.output_tokens) == (353, 59)
    assert fake.received[0].body["stream"] is True


async def test_anthropic_streaming_gives_the_same_result(env: Env, fake: FakeProvider) -> None:
    fake.queue(
        anthropic_stream(json.loads((DATA / "anthropic_tool_use_response.json").read_text())),
        anthropic_stream(json.loads((DATA / "anthropic_text_response.json").read_text())),
    )
    result = await env.run(_streaming("anthropic", "claude-haiku-4-5"))

    assert result.final_text == "12 + 30 = 42."
    assert [(c.call_id, c.name, c.arguments) for c in result.tool_calls] == [
        ("toolu_01A09q90qw90lq917835lq9", "add", {"a": 12, "b": 30}),
        ("toolu_01B7Rz3kLm5Np8Qs2Tv4Wx6Y", "list_files", {}),
    ]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (1152, 99)


async def test_partial_answer_is_visible_while_the_model_streams(env: Env, fake: FakeProvider) -> None:
    long_text = json.loads((DATA / "openai_text_response.json").read_text())
    long_text["choices"][0]["message"]["content"] = "The answer is forty-two, computed with care."
    fake.queue(openai_stream(long_text, delay=0.25))
    handle = await env.start(_streaming("openai", "gpt-4o-mini"))
    seen: list[str] = []
    while not (await handle.describe()).close_time:
        partial = await _partial_answer(env.client, handle)
        if partial and partial not in seen:
            seen.append(partial)
        await asyncio.sleep(0.1)
    final = (await handle.result()).final_text

    assert final == "The answer is forty-two, computed with care."
    # Partials grow towards the answer; the last may be all of it (the call ends a chunk later).
    assert all(final.startswith(p) for p in seen)
    assert any(len(p) < len(final) for p in seen), f"no partial answer before the whole one: {seen}"


async def _partial_answer(client: Client, handle: WorkflowHandle) -> str:
    """The text a streaming model call has produced so far, from its heartbeat details (the Web UI
    shows them), or ""."""
    for pending in (await handle.describe()).raw_description.pending_activities:
        if pending.activity_type.name == CALL_MODEL.name and pending.heartbeat_details.payloads:
            [progress] = await client.data_converter.decode(
                list(pending.heartbeat_details.payloads), [ModelProgress]
            )
            return progress.partial_text
    return ""


async def test_server_error_500_is_retried(env: Env, fake: FakeProvider) -> None:
    fake.queue(error_reply(500, "The server had an error"), _recorded("openai_text_response.json"))
    result = await env.run(ConversationInput(prompt="hi", agent="calculator-openai"))
    assert result.final_text == "12 + 30 = 42."
    assert len(fake.received) == 2


async def test_a_retried_failure_with_a_long_message_reads_its_first_line_in_history(
    env: Env, fake: FakeProvider
) -> None:
    # 20 KB of error body: the failure with its stack traces would be over Temporal's 4 KB limit,
    # which the server would record as "Failure exceeds size limit." instead.
    fake.queue(
        error_reply(500, "The server had an error.\n" + "upstream said: overloaded " * 800),
        _recorded("openai_text_response.json"),
    )
    spec = AgentSpec(
        name="retrying",
        model=ModelSettings(provider="openai", model="gpt-4o-mini"),
        model_call=CallPolicy(initial_retry_seconds=0.1, max_retry_seconds=0.1),
    )
    handle = await env.start(ConversationInput(prompt="hi", agent_spec=spec))
    assert (await handle.result()).final_text == "12 + 30 = 42."

    [retried] = [
        e.activity_task_started_event_attributes
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    failure = retried.last_failure
    assert (retried.attempt, failure.application_failure_info.type) == (2, "ProviderHTTP500")
    assert failure.message.splitlines()[0] == "openai returned HTTP 500: The server had an error."
    assert failure.ByteSize() <= FAILURE_LIMIT


async def test_hung_response_times_out_and_is_retried(env: Env, fake: FakeProvider) -> None:
    hung = _recorded("openai_text_response.json")
    hung.delay = 5.0
    fake.queue(hung, _recorded("openai_text_response.json"))
    spec = AgentSpec(
        name="impatient",
        model=ModelSettings(provider="openai", model="gpt-4o-mini"),
        model_call=CallPolicy(timeout_seconds=1.5, heartbeat_seconds=1),
    )
    handle = await env.start(ConversationInput(prompt="hi", agent_spec=spec))
    result = await handle.result()

    assert result.final_text == "12 + 30 = 42."
    assert len(fake.received) == 2
    assert fake.received[1].at - fake.received[0].at >= 1.5


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_the_responses_agent_runs_parallel_tools_and_reports_its_reasoning(
    env: Env, fake: FakeProvider, tmp_path, stream: bool
) -> None:
    """docs/agents-and-tools.md's Responses agent file as written (and, whole, with ``stream`` off)."""
    agent = block_after(docs_page("agents-and-tools"), "### The OpenAI Responses API", "toml")
    path = tmp_path / "reasoner.toml"
    path.write_text(agent)
    spec = load_agent_file(path, default_registry())
    spec.model.stream = stream
    calls, answer = (
        json.loads((DATA / f"openai_responses_{name}_response.json").read_text())
        for name in ("tool_calls", "text")
    )
    fake.queue(
        *(
            (openai_responses_stream(calls), openai_responses_stream(answer))
            if stream
            else (Reply(body=calls), Reply(body=answer))
        )
    )
    handle = await env.start(ConversationInput(prompt="12 + 30, and 3 x 4?", agent_spec=spec))
    result = await handle.result()

    assert result.final_text == "12 + 30 = 42."
    assert [(c.call_id, c.name, c.content, c.is_error) for c in result.tool_calls] == RECORDED_OUTCOMES
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (353, 187, 128)
    first, second = fake.received
    assert first.path == second.path == "/v1/responses"
    assert (first.body["model"], first.body["max_output_tokens"], first.body["store"]) == (
        "gpt-5-mini",
        4096,
        False,
    )
    assert first.body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert first.body.get("stream", False) is stream
    assert [t["name"] for t in first.body["tools"]] == ["add", "multiply"]
    assert second.body["input"][-4:] == [
        {
            "type": "function_call",
            "call_id": "call_hU0Yg4Zx3oQe1nVdB7sKpW2m",
            "name": "add",
            "arguments": '{"a": 12, "b": 30}',
        },
        {
            "type": "function_call",
            "call_id": "call_9Lr2fQkT6wXs0aPjN4cVyE8d",
            "name": "multiply",
            "arguments": '{"a":3,"b":',
        },
        {"type": "function_call_output", "call_id": "call_hU0Yg4Zx3oQe1nVdB7sKpW2m", "output": "42"},
        {
            "type": "function_call_output",
            "call_id": "call_9Lr2fQkT6wXs0aPjN4cVyE8d",
            "output": "Error: Invalid arguments for 'multiply': arguments are not valid JSON"
            " (Expecting value at position 11)",
        },
    ]
    finished = [e async for _, e in follow(env.client, handle.id) if isinstance(e, ModelCallFinished)]
    assert [e.reasoning for e in finished] == [
        "**Planning the arithmetic**\n\nThe user wants a sum; the add tool gives it.\n\n"
        "**Checking the product**\n\nI also call multiply.",
        "",
    ]
    assert format_event(finished[0])[:3] == [  # as ``starter.py watch`` prints it
        "[reasoning] **Planning the arithmetic**",
        "[reasoning] The user wants a sum; the add tool gives it.",
        "[reasoning] **Checking the product**",
    ]


CACHED = {  # one answer's usage, 2000 tokens in of which 1920 read from the cache, as each provider says it
    "openai": (
        openai_completion,
        openai_stream,
        {
            "prompt_tokens": 2000,
            "completion_tokens": 10,
            "total_tokens": 2010,
            "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        },
        "gpt-4o-mini",
        (80 * 0.15 + 1920 * 0.075 + 10 * 0.60) / 1e6,
    ),
    "openai_responses": (
        openai_response,
        openai_responses_stream,
        {
            "input_tokens": 2000,
            "input_tokens_details": {"cached_tokens": 1920},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 2010,
        },
        "gpt-5-mini",
        (80 * 0.25 + 1920 * 0.025 + 10 * 2.00) / 1e6,
    ),
    "anthropic": (
        anthropic_message,
        anthropic_stream,
        {
            "input_tokens": 80,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 1920,
            "output_tokens": 10,
        },
        "claude-haiku-4-5",
        (80 * 1.00 + 1920 * 0.10 + 10 * 5.00) / 1e6,
    ),
}
"""Per provider: its answer, its stream of it, the usage it reports, the model and the cost at the
models table's prices (uncached input, cached input, output)."""


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("provider", list(CACHED))
async def test_cached_input_tokens_are_reported_and_priced_at_the_cached_price(
    env: Env, fake: FakeProvider, tmp_path, provider: str, stream: bool
) -> None:
    """docs/agents-and-tools.md's caching agent file as written, for Anthropic; with OpenAI's models
    for the others, whose caching needs no setting."""
    path = tmp_path / "handbook.toml"
    path.write_text(block_after(docs_page("agents-and-tools"), "### Prompt caching", "toml"))
    spec = load_agent_file(path, default_registry())
    answer, streamed, usage, model, cost = CACHED[provider]
    spec.model = spec.model.model_copy(update={"provider": provider, "model": model, "stream": stream})
    body = answer("Section 4.2: 25 days of leave.") | {"usage": usage}
    fake.queue(streamed(body) if stream else Reply(body=body))
    result = await env.run(ConversationInput(prompt="How many days of leave?", agent_spec=spec))

    assert (result.usage.input_tokens, result.usage.cached_input_tokens, result.usage.output_tokens) == (
        2000,
        1920,
        10,
    )
    assert result.cost == pytest.approx(cost, rel=1e-12)
    assert result.cost_by_model == {f"{provider}:{model}": pytest.approx(cost, rel=1e-12)}
    assert format_result(result).endswith("tokens: 2000 in (1920 cached) / 10 out")
    [sent] = fake.received
    marked = json.dumps(sent.body).count('"cache_control"')
    assert marked == (3 if provider == "anthropic" else 0)  # the tools, the system prompt, the message
    if provider == "anthropic":
        assert sent.body["system"] == [
            {"type": "text", "text": spec.system_prompt, "cache_control": {"type": "ephemeral"}}
        ]
