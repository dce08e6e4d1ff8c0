"""Typed answers: an agent's ``output_schema``, asked of each provider natively, checked in the workflow,
a wrong answer sent back with the problem, and the parsed object in the reply and the result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from durable_agents.activities.agent_files import AgentFileError, load_agent_file
from durable_agents.activities.providers import anthropic_messages, openai_chat
from durable_agents.activities.tools import default_registry
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.answers import check_schema, correction, parse_answer
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.messages import (
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ScriptStep,
    ToolCall,
    ToolDefinition,
    UserMessage,
)
from tests.support.fake_provider import FakeProvider, Reply, anthropic_message, typed_answer
from tests.support.workers import Env


class Weather(BaseModel):
    city: str
    celsius: float = Field(ge=-90, le=60)


SCHEMA = Weather.model_json_schema()
MISSING = "Your answer does not match the required output schema: $ lacks the required property 'celsius'. "
MISSING += "Answer again with only a JSON object that matches the schema."
ADD = ToolDefinition(name="add", description="Add.", parameters={"type": "object", "properties": {}})


def _typed(provider: str, model: str, tools: list[str]) -> ConversationInput:
    spec = AgentSpec(
        name=f"{provider}-typed",
        model=ModelSettings(provider=provider, model=model),  # type: ignore[arg-type]
        tools=tools,
        output_schema=Weather,
    )
    return ConversationInput(prompt="Weather in Paris?", agent_spec=spec)


# -- the validator ------------------------------------------------------------------------------


def test_answer_is_parsed_or_the_problems_are_named() -> None:
    assert parse_answer('{"city": "Paris", "celsius": 21}', SCHEMA) == (
        {"city": "Paris", "celsius": 21},
        None,
    )
    assert parse_answer('{"city": 7, "celsius": 99}', SCHEMA) == (
        None,
        "$.city must be of type string, not integer; $.celsius must be at most 60",
    )
    assert parse_answer('{"city": "Paris", ', SCHEMA) == (
        None,
        "the answer is not valid JSON (Expecting property name enclosed in double quotes at position 18)",
    )
    assert parse_answer("[1]", SCHEMA) == (None, "$ must be of type object, not array")


def test_validator_follows_refs_unions_and_closed_objects() -> None:
    class Stop(BaseModel):
        model_config = {"extra": "forbid"}
        name: str
        kind: Literal["bus", "tram"]

    class Route(BaseModel):
        stops: list[Stop] = Field(min_length=1)
        note: str | None = None

    schema = Route.model_json_schema()
    assert parse_answer('{"stops": [{"name": "A", "kind": "tram"}], "note": null}', schema)[1] is None
    assert parse_answer('{"stops": [{"name": "A", "kind": "boat", "x": 1}], "note": 3}', schema) == (
        None,
        '$.stops[0].kind must be one of ["bus", "tram"]; $.stops[0] has the unexpected property \'x\';'
        " $.note matches none of the allowed shapes (anyOf)",
    )
    assert parse_answer('{"stops": []}', schema) == (None, "$.stops must have at least 1 items")


def test_schema_the_validator_cannot_enforce_is_refused_at_load() -> None:
    with pytest.raises(ValueError, match=r"^output schema\.properties\.a: unsupported keyword\(s\) if$"):
        check_schema({"type": "object", "properties": {"a": {"if": {}}}})
    with pytest.raises(ValueError, match=r'must describe a JSON object \("type": "object"\)'):
        check_schema({"type": "array"})
    with pytest.raises(ValueError, match=r"reference #/\$defs/Nope leads nowhere"):
        check_schema({"type": "object", "properties": {"a": {"$ref": "#/$defs/Nope"}}})


def test_agent_file_takes_a_schema_inline_or_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "weather.json").write_text(json.dumps(SCHEMA))
    head = 'tools = []\n[model]\nprovider = "scripted"\nmodel = "x"\n'
    (tmp_path / "file.toml").write_text('output_schema = "schemas/weather.json"\n' + head)
    (tmp_path / "inline.toml").write_text(
        head + '[output_schema]\ntype = "object"\nrequired = ["city"]\n'
        '[output_schema.properties.city]\ntype = "string"\n'
    )
    assert load_agent_file(tmp_path / "file.toml", default_registry()).output_schema == SCHEMA
    assert load_agent_file(tmp_path / "inline.toml", default_registry()).output_schema == {
        "type": "object",
        "required": ["city"],
        "properties": {"city": {"type": "string"}},
    }

    (tmp_path / "missing.toml").write_text('output_schema = "schemas/nope.json"\n' + head)
    with pytest.raises(
        AgentFileError, match=r"missing\.toml: field 'output_schema': cannot read .*nope\.json"
    ):
        load_agent_file(tmp_path / "missing.toml", default_registry())
    (tmp_path / "bad.toml").write_text(head + '[output_schema]\ntype = "string"\n')
    with pytest.raises(
        AgentFileError, match=r"bad\.toml: field 'output_schema': Value error, the output schema"
    ):
        load_agent_file(tmp_path / "bad.toml", default_registry())


def test_pydantic_model_stands_for_its_schema_in_code() -> None:
    spec = AgentSpec(name="a", model=ModelSettings(provider="scripted", model="x"), output_schema=Weather)
    assert spec.output_schema == SCHEMA
    with pytest.raises(ValidationError, match="output_retries"):
        AgentSpec(name="a", model=ModelSettings(provider="scripted", model="x"), output_retries=-1)


# -- the adapters, without a server -------------------------------------------------------------


def _request(provider: str, *, tools: bool, allow_tool_calls: bool = True) -> ModelRequest:
    return ModelRequest(
        settings=ModelSettings(provider=provider, model="m-1"),  # type: ignore[arg-type]
        messages=[UserMessage(text="Weather in Paris?")],
        tools=[ADD] if tools else [],
        allow_tool_calls=allow_tool_calls,
        output_schema=SCHEMA,
    )


def test_openai_asks_for_the_schema_as_response_format() -> None:
    wire = openai_chat.to_wire(_request("openai", tools=False))
    assert wire["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "final_answer", "schema": SCHEMA},
    }


def test_anthropic_forces_the_answer_tool_or_makes_it_one_of_the_choices() -> None:
    answer = {
        "name": "final_answer",
        "description": "Give your final answer: call this once, when you are done,"
        " with the answer as its input.",
        "input_schema": SCHEMA,
    }
    alone = anthropic_messages.to_wire(_request("anthropic", tools=False))
    cached = answer | {"cache_control": {"type": "ephemeral"}}  # the last tool: a cache breakpoint
    assert (alone["tools"], alone["tool_choice"]) == ([cached], {"type": "tool", "name": "final_answer"})
    among = anthropic_messages.to_wire(_request("anthropic", tools=True))
    assert ([t["name"] for t in among["tools"]], among["tool_choice"]) == (
        ["add", "final_answer"],
        {"type": "any"},
    )
    tools_off = anthropic_messages.to_wire(_request("anthropic", tools=True, allow_tool_calls=False))
    assert tools_off["tool_choice"] == {"type": "tool", "name": "final_answer"}


def test_anthropic_answer_tool_input_becomes_the_answer_text() -> None:
    wire = anthropic_message(
        "Here it is.",
        [("toolu_1", "final_answer", {"city": "Paris", "celsius": 21.5}), ("toolu_2", "add", {"a": 1})],
        stop_reason="tool_use",
    )
    assert anthropic_messages.answer_from_tool(anthropic_messages.from_wire(wire)) == ModelResponse(
        message=AssistantMessage(
            text='{"city": "Paris", "celsius": 21.5}',
            tool_calls=[ToolCall(id="toolu_2", name="add", arguments={"a": 1})],
        ),
        usage=anthropic_messages.from_wire(wire).usage,
        finish_reason="tool_calls",
        model="claude-haiku-4-5-20251001",
    )
    alone = anthropic_message(calls=[("toolu_1", "final_answer", {"city": "Paris"})], stop_reason="tool_use")
    response = anthropic_messages.answer_from_tool(anthropic_messages.from_wire(alone))
    assert (response.message, response.finish_reason) == (AssistantMessage(text='{"city": "Paris"}'), "stop")


# -- through a real worker ----------------------------------------------------------------------


async def test_openai_typed_answer_is_corrected_after_the_model_sees_the_problem(
    env: Env, fake: FakeProvider
) -> None:
    fake.queue(typed_answer({"city": "Paris"}), typed_answer({"city": "Paris", "celsius": 21.5}))
    result = await env.run(_typed("openai", "gpt-4o-mini", tools=[]))

    assert (result.stop_reason, result.final_text) == ("completed", '{"city": "Paris", "celsius": 21.5}')
    assert result.output == {"city": "Paris", "celsius": 21.5}
    assert result.replies[0].output == result.output
    assert (result.model_calls, result.iterations) == (2, 2)
    first, second = fake.received
    expected_format = {"type": "json_schema", "json_schema": {"name": "final_answer", "schema": SCHEMA}}
    assert first.response_format == second.response_format == expected_format
    assert second.body["messages"][-2:] == [
        {"role": "assistant", "content": '{"city": "Paris"}'},
        {"role": "user", "content": MISSING},
    ]


async def test_anthropic_typed_answer_comes_by_the_answer_tool_and_is_corrected(
    env: Env, fake: FakeProvider
) -> None:
    fake.queue(
        typed_answer({"city": "Paris"}),
        typed_answer({"city": "Paris", "celsius": 21.5}),
    )
    result = await env.run(_typed("anthropic", "claude-haiku-4-5", tools=[]))

    assert (result.stop_reason, result.output) == ("completed", {"city": "Paris", "celsius": 21.5})
    first, second = fake.received
    assert first.tool_choice == second.tool_choice == {"type": "tool", "name": "final_answer"}
    assert first.body["tools"][-1]["input_schema"] == SCHEMA
    assert second.body["messages"][-2:] == [
        {"role": "assistant", "content": [{"type": "text", "text": '{"city": "Paris"}'}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": MISSING, "cache_control": {"type": "ephemeral"}}],
        },
    ]


async def test_anthropic_typed_answer_may_use_tools_first(env: Env, fake: FakeProvider) -> None:
    fake.queue(
        Reply(
            body=anthropic_message(calls=[("toolu_1", "add", {"a": 20, "b": 1.5})], stop_reason="tool_use")
        ),
        typed_answer({"city": "Paris", "celsius": 21.5}),
    )
    result = await env.run(_typed("anthropic", "claude-haiku-4-5", tools=["add"]))

    assert result.output == {"city": "Paris", "celsius": 21.5}
    assert [(c.name, c.content) for c in result.tool_calls] == [("add", "21.5")]
    assert [r.tool_choice for r in fake.received] == [{"type": "any"}, {"type": "any"}]


async def test_answers_that_never_match_stop_the_turn_with_invalid_output(env: Env) -> None:
    wrong = ScriptStep(text='{"city": "Paris"}', repeat=3)
    agent = scripted_agent(wrong, tools=[], output_schema=Weather, output_retries=1)
    handle = await env.start(conversation(agent))
    result = await handle.result()

    assert (result.stop_reason, result.final_text, result.output) == (
        "invalid_output",
        '{"city": "Paris"}',
        None,
    )
    assert result.model_calls == 2
    history = await handle.query(AgentWorkflow.history)
    assert [m.text for m in history.messages if isinstance(m, UserMessage)] == ["go", MISSING]


async def test_shipped_triage_agent_answers_typed_after_one_correction(env: Env) -> None:
    result = await env.run(ConversationInput(prompt="Checkout is down!", agent="triage"))

    assert result.output == {"category": "bug", "urgency": 5, "summary": "Checkout fails for every customer"}
    assert result.model_calls == 2
    assert [m.text for m in result.messages if isinstance(m, UserMessage)] == [
        "Checkout is down!",
        correction('$.category must be one of ["bug", "billing", "question"]'),
    ]


async def test_agent_without_a_schema_answers_as_before(env: Env) -> None:
    result = await env.run(conversation(scripted_agent(step("not json"), tools=[])))
    assert (result.stop_reason, result.final_text, result.output, result.model_calls) == (
        "completed",
        "not json",
        None,
        1,
    )
