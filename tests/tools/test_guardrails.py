"""Guardrails: an input guardrail ends a turn before the model sees the message, an output guardrail
sends the answer back until it passes, function guardrails run in activities and fail closed; the
agent file of docs/agents-and-tools.md "Guardrails" runs as written, through the real SDKs."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_agents.activities.agent_files import AgentFileError, load_agent_file
from durable_agents.activities.hooks import default_hooks, hook
from durable_agents.activities.tools import default_registry
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.activity_io import HookContext, HookDecision
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec, GuardrailConfig, GuardrailsConfig
from durable_agents.workflows.messages import Usage, UserMessage
from tests.support.cli import starter_cli
from tests.support.docs import block_after, docs_page
from tests.support.fake_provider import FakeProvider, Reply, openai_completion, typed_answer
from tests.support.workers import Env

CARD = r"\b(?:\d[ -]?){13,16}\b"


@hook("guardrail")
def on_topic(text: str, ctx: HookContext) -> HookDecision | None:
    """Orders only."""
    return HookDecision(action="block", reason="not about an order") if "weather" in text else None


@hook("guardrail")
def broken_check(text: str, ctx: HookContext) -> HookDecision | None:
    """A checker that is down."""
    raise RuntimeError("the checker is down")


def _support(tmp_path: Path) -> AgentSpec:
    path = tmp_path / "support.toml"
    path.write_text(block_after(docs_page("agents-and-tools"), "## Guardrails", "toml"))
    return load_agent_file(path, default_registry(), default_hooks())


async def test_an_input_guardrail_ends_the_turn_before_the_model_sees_the_message(
    env: Env, fake: FakeProvider, tmp_path: Path
) -> None:
    result = await env.run(
        ConversationInput(prompt="Refund card 4111 1111 1111 1111 please", agent_spec=_support(tmp_path))
    )

    assert (result.final_text, result.stop_reason) == (
        f"[message stopped by guardrail no_card_numbers: text matches {CARD}]",
        "guardrail_tripped",
    )
    assert fake.received == []
    assert [m.text for m in result.messages if isinstance(m, UserMessage)] == [
        "[message m1 stopped by guardrail no_card_numbers]"
    ]
    assert [(g.stage, g.guardrail, g.passed, g.action) for g in result.guardrails] == [
        ("input", "no_card_numbers", False, "end_turn")
    ]


async def test_an_output_guardrail_sends_the_answer_back_until_it_passes(
    env: Env, fake: FakeProvider, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.queue(
        Reply(body=openai_completion("Call us at 555-0100.")),
        Reply(body=openai_completion("Ask at the front desk.")),
        model="gpt-4o-mini",
    )
    fake.queue(
        typed_answer({"verdict": "deny", "reason": "It gives a phone number."}),
        typed_answer({"verdict": "approve", "reason": "No phone number."}),
        model="claude-haiku-4-5",
    )
    handle = await env.start(ConversationInput(prompt="How do I reach you?", agent_spec=_support(tmp_path)))
    result = await handle.result()

    assert (result.final_text, result.stop_reason) == ("Ask at the front desk.", "completed")
    code, out, _ = await starter_cli(env, capsys, "history", handle.id)
    assert code == 0 and out.splitlines()[-3:] == [
        "[guardrail no_card_numbers] input of m1 passed",
        "[guardrail no_phone_numbers] output of m1 failed: It gives a phone number.; the model answers again",
        "[guardrail no_phone_numbers] output of m1 passed",
    ]
    assert [(g.stage, g.guardrail, g.passed, g.reason, g.action) for g in result.guardrails] == [
        ("input", "no_card_numbers", True, "", "none"),
        ("output", "no_phone_numbers", False, "It gives a phone number.", "retry"),
        ("output", "no_phone_numbers", True, "", "none"),
    ]
    assert [r.path for r in fake.received] == [
        "/v1/chat/completions",
        "/v1/messages",
        "/v1/chat/completions",
        "/v1/messages",
    ]
    [asked] = fake.received[1].body["messages"][0]["content"]
    assert '"text": "Call us at 555-0100."' in asked["text"]
    assert fake.received[2].body["messages"][-2:] == [
        {"role": "assistant", "content": "Call us at 555-0100."},
        {
            "role": "user",
            "content": "Your answer was not returned: guardrail no_phone_numbers refused it"
            " (It gives a phone number.). Answer again so that it passes.",
        },
    ]
    # The model check's tokens count as a judge's: in the usage, not in the agent's own model's.
    checked = Usage(input_tokens=100, output_tokens=10)
    assert [g.usage for g in result.guardrails] == [None, checked, checked]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (400, 40)
    assert list(result.usage_by_model) == ["openai:gpt-4o-mini"]


async def test_function_guardrails_run_in_activities_and_fail_closed(env: Env) -> None:
    agent = scripted_agent(
        step("Your order ships today."),
        tools=[],
        guardrails=GuardrailsConfig(
            input=[GuardrailConfig(name="topic", kind="function", function="on_topic")],
            output=[GuardrailConfig(name="checker", kind="function", function="broken_check")],
        ),
    )
    queue = "guardrails-" + env.task_queue
    async with build_worker(
        env.client,
        task_queue=queue,
        hooks=default_hooks(on_topic, broken_check),
        workspace_root=env.workspace,
    ):
        guarded = Env(client=env.client, task_queue=queue, workspace=env.workspace)
        off_topic = await guarded.run(conversation(agent, "What is the weather?"))
        unchecked = await guarded.run(conversation(agent, "Where is my order?"))

    assert (off_topic.final_text, off_topic.stop_reason, off_topic.model_calls) == (
        "[message stopped by guardrail topic: not about an order]",
        "guardrail_tripped",
        0,
    )
    assert (unchecked.final_text, unchecked.stop_reason, unchecked.model_calls) == (
        "[answer stopped by guardrail checker: hook broken_check failed: RuntimeError: the checker is down]",
        "guardrail_tripped",
        1,
    )
    assert "Your order ships today." not in [getattr(m, "text", None) for m in unchecked.messages]


@pytest.mark.parametrize(
    ("guardrail", "problem"),
    [
        (
            '[[guardrails.input]]\nname = "g"\nkind = "rules"\non_fail = "retry"\n'
            'rules = [{ argument = "text", excludes = "x" }]\n',
            "field 'guardrails': Value error, input guardrail 'g': on_fail 'retry' is for output"
            " guardrails (the model did not write the message)",
        ),
        (
            '[[guardrails.output]]\nname = "g"\nkind = "function"\nfunction = "nope"\n',
            "field 'guardrails.output': function 'nope' is not a guardrail function of this worker"
            ' (register it with @hook("guardrail"))',
        ),
        (
            '[[guardrails.output]]\nname = "g"\nkind = "model"\n',
            "field 'guardrails.output.0': Value error, guardrail 'g': a model guardrail needs 'model'",
        ),
    ],
    ids=["input-retry", "unknown-function", "model-without-model"],
)
def test_a_bad_guardrail_is_refused_in_one_line(tmp_path: Path, guardrail: str, problem: str) -> None:
    path = tmp_path / "a.toml"
    path.write_text(f'name = "a"\n[model]\nprovider = "scripted"\nmodel = "m"\n\n{guardrail}')
    with pytest.raises(AgentFileError) as info:
        load_agent_file(path, default_registry(), default_hooks())
    assert str(info.value) == f"{path}: {problem}"
