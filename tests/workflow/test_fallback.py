"""Model fallback: when a model call fails for good, the agent's next model answers; every try is
recorded, and each model's tokens are priced at its own price."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from temporalio.client import WorkflowFailureError

from durable_agents.cli import starter
from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec, CallPolicy
from durable_agents.workflows.messages import ModelSettings, ScriptedToolCall, ScriptStep
from durable_agents.workflows.records import ModelAttempt
from tests.support.fake_provider import FakeProvider, Reply, anthropic_message, error_reply, openai_completion
from tests.support.history import activity_calls
from tests.support.workers import Env

NOT_FOUND = "openai returned HTTP 400: The model `gpt-4o` does not exist or you do not have access to it."


def _agent(*fallback: str, **kwargs: object) -> ConversationInput:
    spec = AgentSpec(
        name="with-fallback",
        model=ModelSettings(provider="openai", model="gpt-4o", fallback=list(fallback)),
        **kwargs,  # type: ignore[arg-type]
    )
    return ConversationInput(prompt="hi", agent_spec=spec)


async def test_next_model_answers_after_a_400_from_the_first(env: Env, fake: FakeProvider) -> None:
    fake.queue(error_reply(400, NOT_FOUND.removeprefix("openai returned HTTP 400: ")), model="gpt-4o")
    fake.queue(Reply(body=anthropic_message("Hello from B.")), model="claude-haiku-4-5")
    handle = await env.start(_agent("anthropic:claude-haiku-4-5"))
    result = await handle.result()

    assert (result.final_text, result.stop_reason) == ("Hello from B.", "completed")
    assert [(r.path, r.body["model"]) for r in fake.received] == [
        ("/v1/chat/completions", "gpt-4o"),
        ("/v1/messages", "claude-haiku-4-5"),
    ]
    attempts = [
        ModelAttempt(model="openai:gpt-4o", model_call=1, iteration=1, error=NOT_FOUND),
        ModelAttempt(model="anthropic:claude-haiku-4-5", model_call=1, iteration=1),
    ]
    assert result.model_attempts == attempts
    assert (await handle.query(AgentWorkflow.history)).model_attempts == attempts
    assert result.models_used == ["anthropic:claude-haiku-4-5"]
    assert result.replies[0].model == "anthropic:claude-haiku-4-5"
    assert result.model_calls == 1
    # claude-haiku-4-5 costs $1 / $5 per million tokens (config/models.toml); gpt-4o used none.
    assert result.cost == (100 * 1.00 + 10 * 5.00) / 1_000_000
    assert await activity_calls(handle) == [
        ("durable_agents.resolve_agent", True),
        ("durable_agents.call_model", False),
        ("durable_agents.call_model", False),
    ]


async def test_next_model_answers_once_retries_of_the_first_are_spent(env: Env, fake: FakeProvider) -> None:
    fake.queue(error_reply(500, "boom"), error_reply(500, "boom"), model="gpt-4o")
    fake.queue(Reply(body=openai_completion("Hello from mini.")), model="gpt-4o-mini")
    policy = CallPolicy(max_attempts=2, initial_retry_seconds=0.1, max_retry_seconds=0.1)
    result = await env.run(_agent("openai:gpt-4o-mini", model_call=policy))

    assert result.final_text == "Hello from mini."
    assert [r.body["model"] for r in fake.received] == ["gpt-4o", "gpt-4o", "gpt-4o-mini"]
    assert [(a.model, a.error) for a in result.model_attempts] == [
        ("openai:gpt-4o", "openai returned HTTP 500: boom"),
        ("openai:gpt-4o-mini", None),
    ]
    assert result.cost == (100 * 0.15 + 10 * 0.60) / 1_000_000


async def test_conversation_fails_when_every_model_fails(env: Env, fake: FakeProvider) -> None:
    fake.queue(error_reply(400, "bad A"), model="gpt-4o")
    fake.queue(error_reply(401, "bad B"), model="gpt-4o-mini")
    handle = await env.start(_agent("openai:gpt-4o-mini"))
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()

    assert (info.value.cause.type, info.value.cause.message) == (
        "ModelCallFailed",
        "model call to openai:gpt-4o failed: openai returned HTTP 400: bad A;"
        " then openai:gpt-4o-mini failed: openai returned HTTP 401: bad B",
    )


async def test_each_call_starts_again_with_the_agents_own_model(
    env: Env, server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Offline: the scripted model named "broken" fails the steps that say so, "backup" answers them."""
    agent = scripted_agent(
        ScriptStep(
            tool_calls=[ScriptedToolCall(name="add", arguments={"a": 1, "b": 2})], fails_on=["broken"]
        ),
        ScriptStep(text="3, says {last_result}"),
        tools=["add"],
    )
    agent.model = agent.model.model_copy(update={"model": "broken", "fallback": ["scripted:backup"]})
    handle = await env.start(conversation(agent))
    result = await handle.result()

    assert result.final_text == "3, says 3"
    assert [(a.model, a.model_call, a.error is None) for a in result.model_attempts] == [
        ("scripted:broken", 1, False),
        ("scripted:backup", 1, True),
        ("scripted:broken", 2, True),
    ]
    assert result.models_used == ["scripted:backup", "scripted:broken"]
    assert result.replies[0].model == "scripted:broken"
    assert result.cost is None  # no scripted model has a price

    monkeypatch.setenv("TEMPORAL_ADDRESS", server.address)
    assert await starter.run(["--task-queue", env.task_queue, "history", handle.id]) == 0
    assert capsys.readouterr().out.splitlines()[-3:] == [
        "[model call 1] scripted:broken failed:"
        " scripted returned HTTP 400: model broken fails this step by script",
        "[model call 1] scripted:backup answered",
        "[model call 2] scripted:broken answered",
    ]


async def test_agent_without_fallback_records_no_attempts(env: Env) -> None:
    result = await env.run(conversation(scripted_agent(ScriptStep(text="hi"), tools=[])))
    assert (result.model_attempts, result.models_used, result.replies[0].model) == ([], [], None)


def test_fallback_entries_name_a_provider_and_a_model() -> None:
    with pytest.raises(
        ValidationError, match=r"fallback 'gpt-4o': write it as 'provider:model', the provider one of"
    ):
        ModelSettings(provider="openai", model="x", fallback=["gpt-4o"])
    with pytest.raises(ValidationError, match=r"fallback 'mistral:large'"):
        ModelSettings(provider="openai", model="x", fallback=["mistral:large"])
