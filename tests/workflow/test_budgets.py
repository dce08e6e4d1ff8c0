"""Token and cost budgets, enforced in workflow code before each model call."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import MessageInput
from durable_agents.workflows.messages import ModelSettings, Usage
from tests.support.workers import Env


def _spender(**kwargs):
    """Every call asks for another tool call and uses 10 input + 5 output tokens."""
    agent = scripted_agent(
        *[step(f"step {i}", ("add", {"a": i, "b": 0})) for i in range(1, 30)], max_iterations=20
    )
    return agent.model_copy(update=kwargs)


async def test_token_budget_stops_before_the_call_that_would_exceed_it(env: Env) -> None:
    result = await env.run(conversation(_spender(on_limit="stop"), token_budget=40))
    assert (result.stop_reason, result.model_calls) == ("token_budget_exhausted", 3)
    assert result.usage == Usage(input_tokens=30, output_tokens=15)
    assert result.final_text == "step 3"


async def test_token_budget_can_fail_the_conversation(env: Env) -> None:
    handle = await env.start(conversation(_spender(on_limit="fail", token_budget=40)))
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.message) == ("TokenBudgetExhausted", "token budget of 40 exhausted")


async def test_cost_budget_priced_from_the_table_stops_without_another_call(env: Env) -> None:
    agent = _spender(
        model=ModelSettings(provider="scripted", model="scripted-demo", script=_spender().model.script)
    )
    result = await env.run(conversation(agent, cost_budget=0.00005))
    # $1/M input, $2/M output: 20 micro-dollars a call; the budget is spent after 3 calls, and a
    # final-answer call would spend past it: the answer is the latest text.
    assert (result.stop_reason, result.model_calls) == ("cost_budget_exhausted", 3)
    assert result.cost == 60 / 1_000_000
    assert result.final_text == "step 3"


async def test_a_spent_token_budget_makes_no_final_answer_call(env: Env) -> None:
    result = await env.run(conversation(_spender(), token_budget=40))
    assert (result.stop_reason, result.model_calls, result.usage.total_tokens) == (
        "token_budget_exhausted",
        3,
        45,
    )
    assert result.final_text == "step 3"


async def test_a_limit_without_any_text_says_so(env: Env) -> None:
    agent = scripted_agent(*[step("", ("add", {"a": i, "b": 0})) for i in range(5)], max_model_calls=2)
    result = await env.run(conversation(agent))
    assert (result.stop_reason, result.final_text) == (
        "model_call_limit_reached",
        "[no answer: model call limit of 2 reached]",
    )


async def test_a_spent_budget_answers_later_messages_without_calling_the_model(env: Env) -> None:
    handle = await env.start(conversation(_spender(chat=True), token_budget=40))
    later = await handle.execute_update(AgentWorkflow.send_message, MessageInput(text="more"))
    await handle.signal(AgentWorkflow.end)
    result = await handle.result()
    # Three calls in the first turn; none in the second.
    assert (later.stop_reason, later.iterations, result.model_calls) == ("token_budget_exhausted", 0, 3)
    assert later.text == "[no answer: token budget of 40 exhausted]"
