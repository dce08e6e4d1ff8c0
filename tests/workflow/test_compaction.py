"""Context compaction: past its share of the model's context window, a conversation summarises its
older messages; the model then sees the summary and the recent messages, the history keeps all."""

from __future__ import annotations

import uuid

import pytest
from temporalio.worker import Replayer

from durable_agents.activities.agent_files import AgentFileError, load_agent_file
from durable_agents.activities.agent_resolution import AgentResolver
from durable_agents.activities.hooks import HookRegistry
from durable_agents.activities.mcp_activity import LazyMCPPool
from durable_agents.activities.models import DEFAULT_CONTEXT_WINDOW, load_models
from durable_agents.activities.providers import anthropic_messages, openai_chat
from durable_agents.activities.tools import default_registry
from durable_agents.cli import starter
from durable_agents.converter import data_converter
from durable_agents.dev_server import EmbeddedServer
from durable_agents.stores.errors import StoreIdentity
from durable_agents.workflows.activity_io import AgentRef
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput, MessageInput
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.messages import (
    AssistantMessage,
    ModelRequest,
    ModelSettings,
    SummaryMessage,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from durable_agents.workflows.transcript import (
    SUMMARY_INSTRUCTION,
    compaction_cut,
    model_view,
    summary_request,
)
from tests.support.fake_provider import FakeProvider, Reply, openai_completion
from tests.support.history import activity_types
from tests.support.record_histories import compacting
from tests.support.workers import Env

SYSTEM = SystemMessage(text="Be brief.")
CALL = ToolCall(id="c1", name="add", arguments={"a": 1, "b": 2})


def _turns() -> list:
    return [
        SYSTEM,
        UserMessage(text="one"),
        AssistantMessage(tool_calls=[CALL]),
        ToolResultMessage(call_id="c1", name="add", content="3"),
        AssistantMessage(text="3"),
        UserMessage(text="two"),
    ]


def test_the_cut_keeps_the_last_user_message_and_what_follows() -> None:
    messages = _turns()
    assert compaction_cut(messages) == 5
    assert summary_request(messages[:5]) == [*messages[:5], UserMessage(text=SUMMARY_INSTRUCTION)]


def test_a_long_turn_alone_is_cut_before_its_latest_model_response_with_its_results() -> None:
    messages = [*_turns()[:4]]  # one user message, then a tool call and its result
    assert compaction_cut(messages) == 2
    summarised = [*messages[:2], SummaryMessage(text="s", replaces=1), *messages[2:]]
    assert model_view(summarised) == [SYSTEM, SummaryMessage(text="s", replaces=1), *messages[2:]]
    assert compaction_cut(summarised) is None  # nothing new before the latest response


def test_the_model_sees_the_system_prompt_the_latest_summary_and_what_follows() -> None:
    first = SummaryMessage(text="first", replaces=4)
    second = SummaryMessage(text="second", replaces=3)
    messages = [SYSTEM, UserMessage(text="a"), first, UserMessage(text="b"), second, UserMessage(text="c")]
    assert model_view(messages) == [SYSTEM, second, UserMessage(text="c")]
    assert compaction_cut(messages) is None  # only the latest summary and the current turn


def test_adapters_send_the_summary_with_the_system_prompt() -> None:
    summary = SummaryMessage(text="They asked for 1 + 2.", replaces=4)
    request = ModelRequest(
        settings=ModelSettings(provider="openai", model="m"),
        messages=[SYSTEM, summary, UserMessage(text="two")],
    )
    told = (
        "Summary of the earlier conversation (older messages were summarised to fit):\nThey asked for 1 + 2."
    )
    assert openai_chat.to_wire(request)["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": told},
        {"role": "user", "content": "two"},
    ]
    request.settings.prompt_cache = False  # the text alone, without cache breakpoints
    wire = anthropic_messages.to_wire(request)
    assert wire["system"] == f"Be brief.\n\n{told}"
    assert wire["messages"] == [{"role": "user", "content": "two"}]


def test_context_window_and_share_come_from_the_model_table_and_are_checked(tmp_path) -> None:
    path = tmp_path / "small.toml"
    path.write_text('[model]\nprovider = "openai"\nmodel = "m"\ncontext_window = 8000\ncompact_at = 0.5\n')
    spec = load_agent_file(path, default_registry())
    assert (spec.model.context_window, spec.model.compact_at) == (8000, 0.5)
    path.write_text('[model]\nprovider = "openai"\nmodel = "m"\ncompact_at = 1.5\n')
    with pytest.raises(AgentFileError) as info:
        load_agent_file(path, default_registry())
    assert str(info.value) == f"{path}: field 'model.compact_at': Input should be less than or equal to 1"


async def test_the_window_is_the_agents_own_else_the_tables_else_the_default() -> None:
    async def identity() -> str:
        return "test-stores"

    resolver = AgentResolver(
        {}, load_models(), default_registry(), HookRegistry([]), LazyMCPPool(tuple), StoreIdentity(identity)
    )

    async def window(
        model: str, own: int | None = None, override: str | None = None, provider: str = "openai"
    ) -> int | None:
        settings = ModelSettings(provider=provider, model=model, context_window=own)  # type: ignore[arg-type]
        spec = AgentSpec(name="a", model=settings)
        return (await resolver.resolve_agent(AgentRef(spec=spec, model=override))).context_window

    assert await window("claude-haiku-4-5") == 200_000
    assert await window("gpt-4o-mini", own=4000) == 4000
    assert await window("my-local-model") == DEFAULT_CONTEXT_WINDOW == 32_000
    assert await window("my-local-model", override="gpt-4o") == 128_000  # the conversation's model
    assert await window("scripted-demo", provider="scripted") is None  # takes in anything
    assert await window("scripted-demo", own=100, provider="scripted") == 100


# -- through a real worker, the real openai SDK and a fake server ------------------------------------


def _reply(text: str = "", calls: tuple = (), prompt_tokens: int = 100) -> Reply:
    body = openai_completion(text, calls, finish="tool_calls" if calls else "stop")
    body["usage"] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 10,
        "total_tokens": prompt_tokens + 10,
    }
    return Reply(body=body)


async def test_past_the_share_the_model_sees_the_summary_and_the_recent_messages_only(
    env: Env, fake: FakeProvider
) -> None:
    agent = AgentSpec(
        name="compacting",
        system_prompt="Be brief.",
        tools=["add"],
        chat=True,
        model=ModelSettings(provider="openai", model="gpt-4o-mini", context_window=1000, compact_at=0.5),
    )
    fake.queue(
        _reply("one"),
        _reply("two", prompt_tokens=600),  # 610 of 1000 tokens: over the half
        _reply("Asked one and two; answered one and two."),  # the summary
        _reply(calls=(("call_a", "add", {"a": 1, "b": 2}),)),
        _reply("3"),
    )
    handle = await env.start(
        ConversationInput(prompt="first", agent_spec=agent), f"compact-{uuid.uuid4().hex[:8]}"
    )
    for text in ("second", "third"):
        await handle.execute_update(AgentWorkflow.send_message, MessageInput(text=text))
    history = await handle.query(AgentWorkflow.history)
    await handle.signal(AgentWorkflow.end)
    result = await handle.result()

    system = {"role": "system", "content": "Be brief."}
    summary, call, after_call = (r.body for r in fake.received[2:])
    assert summary["messages"] == [
        system,
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": SUMMARY_INSTRUCTION},
    ]
    assert summary["tool_choice"] == "none"
    told = SummaryMessage(text="Asked one and two; answered one and two.", replaces=4)
    assert call["messages"] == [
        system,
        {"role": "system", "content": told.context},
        {"role": "user", "content": "third"},
    ]
    assert after_call["messages"][:3] == call["messages"]
    assert [m["role"] for m in after_call["messages"][3:]] == ["assistant", "tool"]

    assert history.messages == [
        SystemMessage(text="Be brief."),
        UserMessage(text="first"),
        AssistantMessage(text="one"),
        UserMessage(text="second"),
        AssistantMessage(text="two"),
        told,
        UserMessage(text="third"),
        AssistantMessage(tool_calls=[ToolCall(id="call_a", name="add", arguments={"a": 1, "b": 2})]),
        ToolResultMessage(call_id="call_a", name="add", content="3"),
        AssistantMessage(text="3"),
    ]
    assert result.messages == history.messages
    assert (result.model_calls, result.usage.input_tokens) == (5, 100 + 600 + 100 + 100 + 100)

    # What the worker recorded replays on today's code: the decision is made from recorded data.
    recorded = await handle.fetch_history()
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=data_converter())
    assert (await replayer.replay_workflow(recorded, raise_on_replay_failure=True)).replay_failure is None


async def test_a_first_message_over_the_share_goes_to_the_model_whole(env: Env, fake: FakeProvider) -> None:
    """Nothing before the current turn to summarise: the call goes ahead (the provider may refuse it)."""
    agent = AgentSpec(
        name="big", model=ModelSettings(provider="openai", model="gpt-4o-mini", context_window=100)
    )
    fake.queue(_reply("fine"))
    result = await env.run(ConversationInput(prompt="x" * 2000, agent_spec=agent))
    assert (result.model_calls, result.final_text) == (1, "fine")
    assert fake.received[0].body["messages"] == [{"role": "user", "content": "x" * 2000}]


async def test_the_scripted_model_goes_on_with_its_script_after_a_summary(
    env: Env, server: EmbeddedServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shape of the checked-in history ``compaction.json``: the first turn is summarised."""
    handle = await env.client.start_workflow(
        AgentWorkflow.run,
        compacting(),
        id=f"compact-{uuid.uuid4().hex[:8]}",
        task_queue=env.task_queue,
        start_signal="post_message",
        start_signal_args=[MessageInput(text="second")],
    )
    result = await handle.result()
    assert result.messages[4:] == [
        SummaryMessage(text="(scripted summary of 2 model turns) The user said: go", replaces=4),
        UserMessage(text="second"),
        AssistantMessage(text="you said second"),
    ]
    assert [r.text for r in result.replies] == ["3", "you said second"]
    assert await activity_types(handle) == [
        "durable_agents.resolve_agent",
        "durable_agents.call_model",
        "durable_agents.run_tool",
        "durable_agents.call_model",
        "durable_agents.call_model",  # the summary
        "durable_agents.call_model",
    ]

    monkeypatch.setenv("TEMPORAL_ADDRESS", server.address)
    assert await starter.run(["history", handle.id]) == 0
    assert capsys.readouterr().out.splitlines()[4:] == [
        "[summary of the 4 messages before] (scripted summary of 2 model turns) The user said: go",
        "[user] second",
        "[assistant] you said second",
    ]


async def test_the_shipped_long_chat_agent_summarises_its_first_turn_before_the_second(env: Env) -> None:
    handle = await env.start(ConversationInput(prompt="Remember that my order is 12345.", agent="long-chat"))
    reply = await handle.execute_update(
        AgentWorkflow.send_message, MessageInput(text="What was my order number?")
    )
    await handle.signal(AgentWorkflow.end)
    result = await handle.result()

    assert reply.text == "I have a summary of our earlier talk; you asked: What was my order number?"
    assert result.messages == [
        SystemMessage(text="You are a patient support assistant."),
        UserMessage(text="Remember that my order is 12345."),
        AssistantMessage(text="Noted: order 12345."),
        SummaryMessage(
            text="(scripted summary of 1 model turns) The user said: Remember that my order is 12345.",
            replaces=2,
        ),
        UserMessage(text="What was my order number?"),
        AssistantMessage(text=reply.text),
    ]
    assert result.model_calls == 3  # the first answer, the summary, the second answer
