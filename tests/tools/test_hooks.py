"""Hooks run durably in activities: allow, block, rewrite, redact; prompt hooks once per user message."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from temporalio.client import WorkflowFailureError

from durable_agents.activities.hooks import HookRegistry, default_hooks, hook
from durable_agents.activities.tools import default_registry, tool
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.activity_io import HookContext, HookDecision
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import MessageInput
from durable_agents.workflows.config import HookConfig
from tests.support.history import activity_types
from tests.support.workers import Env

prompts_seen: list[str] = []


@hook("pre_tool_use")
def no_big_numbers(tool: str, arguments: dict, ctx: HookContext) -> HookDecision | None:
    """Block additions of numbers over 100."""
    if tool == "add" and arguments.get("a", 0) > 100:
        return HookDecision(action="block", reason="numbers over 100 are not allowed")
    return None


@hook("pre_tool_use")
def double_b(tool: str, arguments: dict, ctx: HookContext) -> HookDecision | None:
    """Rewrite b to twice its value."""
    return HookDecision(
        action="rewrite", arguments={**arguments, "b": arguments["b"] * 2}, reason="b doubled"
    )


@hook("pre_tool_use")
def broken(tool: str, arguments: dict, ctx: HookContext) -> HookDecision | None:
    """A hook with a bug."""
    raise KeyError("oops")


@hook("pre_tool_use")
def sloppy(tool: str, arguments: dict, ctx: HookContext) -> HookDecision | None:
    """Answers with a string instead of a decision."""
    return "fine by me"  # type: ignore[return-value]


@hook("post_tool_use")
def shout(tool: str, arguments: dict, content: str, is_error: bool, ctx: HookContext) -> HookDecision:
    """Upper-case the output."""
    return HookDecision(action="rewrite", content=content.upper(), reason="shouted")


@hook("user_prompt_submit")
def count_prompts(text: str, ctx: HookContext) -> HookDecision | None:
    """Remember every prompt it sees."""
    prompts_seen.append(f"{ctx.message_id}:{text}")
    if "forbidden" in text:
        return HookDecision(action="block", reason="that topic is off limits")
    return None


@tool
def leak() -> str:
    """Return text with a secret in it."""
    return "config: api_key=sk-live-abcdef1234567890 region=eu"


@pytest.fixture
def hooks() -> HookRegistry:
    return default_hooks(no_big_numbers, double_b, broken, sloppy, shout, count_prompts)


@pytest.fixture
async def hook_env(env: Env, hooks: HookRegistry) -> Env:
    queue = "hooks-" + env.task_queue
    async with build_worker(
        env.client,
        task_queue=queue,
        registry=default_registry(leak),
        hooks=hooks,
        workspace_root=env.workspace,
    ):
        yield Env(client=env.client, task_queue=queue, workspace=env.workspace)


async def test_pre_tool_use_blocks_and_the_model_is_told(hook_env: Env) -> None:
    agent = scripted_agent(
        step("", ("add", {"a": 500, "b": 1}), ("add", {"a": 5, "b": 1})),
        step("{last_result}"),
        hooks=HookConfig(pre_tool_use=["no_big_numbers"]),
    )
    handle = await hook_env.start(conversation(agent))
    result = await handle.result()

    assert result.final_text == "Blocked by hook no_big_numbers: numbers over 100 are not allowed, 6"
    assert sorted((h.event, h.target, h.hook, h.action) for h in result.hooks) == [
        ("pre_tool_use", "call_1_0", "no_big_numbers", "block"),
        ("pre_tool_use", "call_1_1", "no_big_numbers", "allow"),
    ]
    assert (await activity_types(handle)).count("durable_agents.run_tool") == 1


async def test_pre_tool_use_rewrites_arguments_before_the_tool_runs(hook_env: Env) -> None:
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 5})),
        step("{last_result}"),
        hooks=HookConfig(pre_tool_use=["double_b"]),
    )
    result = await hook_env.run(conversation(agent))
    assert result.final_text == "11"
    assert result.tool_calls[0].arguments == {"a": 1, "b": 10}
    assert (result.hooks[0].action, result.hooks[0].reason) == ("rewrite", "b doubled")


async def test_a_failing_hook_blocks_the_call(hook_env: Env) -> None:
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 5})), step("{last_result}"), hooks=HookConfig(pre_tool_use=["broken"])
    )
    result = await hook_env.run(conversation(agent))
    assert result.final_text == "Blocked by hook broken: hook broken failed: KeyError: 'oops'"


async def test_post_tool_use_redacts_before_the_output_enters_history(hook_env: Env) -> None:
    agent = scripted_agent(
        step("", ("leak", {})),
        step("{last_result}"),
        tools=["leak"],
        hooks=HookConfig(post_tool_use=["redact_secrets"]),
    )
    handle = await hook_env.start(conversation(agent))
    result = await handle.result()

    assert result.final_text == "config: api_key=[REDACTED] region=eu"
    assert [(h.event, h.hook, h.action, h.reason) for h in result.hooks] == [
        ("post_tool_use", "redact_secrets", "rewrite", "redacted 1 secret(s)")
    ]
    assert "sk-live-abcdef1234567890" not in (await handle.fetch_history()).to_json()


async def test_a_hook_answering_nonsense_blocks_the_call(hook_env: Env) -> None:
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 5})), step("{last_result}"), hooks=HookConfig(pre_tool_use=["sloppy"])
    )
    result = await hook_env.run(conversation(agent))
    assert result.final_text == (
        "Blocked by hook sloppy: hook sloppy failed: TypeError: returned str, expected HookDecision or None"
    )
    assert result.tool_calls[0].content == result.final_text


async def test_rewritten_output_enters_history_once(hook_env: Env) -> None:
    agent = scripted_agent(
        step("", ("leak", {})),
        step("done"),
        tools=["leak"],
        hooks=HookConfig(post_tool_use=["shout"]),
    )
    handle = await hook_env.start(conversation(agent))
    await handle.result()
    history = await handle.fetch_history()
    (tool_result,) = [
        e.activity_task_completed_event_attributes.result.payloads[0].data
        for e in history.events
        if e.HasField("activity_task_completed_event_attributes")
        and b"CONFIG" in e.activity_task_completed_event_attributes.result.payloads[0].data
    ]
    # The tool's result carries the output once; the hook decision keeps only action and reason.
    assert tool_result.count(b"CONFIG: API_KEY=") == 1
    assert b'"hooks":[{"action":"rewrite","reason":"shouted","hook":' in tool_result


@pytest.fixture
def seen_prompts() -> Iterator[list[str]]:
    """What ``count_prompts`` saw during this test only."""
    prompts_seen.clear()
    yield prompts_seen
    prompts_seen.clear()


async def test_user_prompt_submit_fires_once_per_user_message(hook_env: Env, seen_prompts: list[str]) -> None:
    agent = scripted_agent(
        step("", ("add", {"a": 1, "b": 2})),
        step("", ("add", {"a": 3, "b": 4})),
        step("first done"),
        step("second done"),
        chat=True,
        hooks=HookConfig(user_prompt_submit=["count_prompts"]),
    )
    handle = await hook_env.start(conversation(agent, "one"))
    await handle.execute_update(AgentWorkflow.send_message, MessageInput(text="two"))
    blocked = await handle.execute_update(
        AgentWorkflow.send_message, MessageInput(text="something forbidden")
    )
    await handle.signal(AgentWorkflow.end)
    result = await handle.result()

    assert seen_prompts == ["m1:one", "m2:two", "m3:something forbidden"]
    assert (await activity_types(handle)).count("durable_agents.run_hook") == 3
    assert (blocked.stop_reason, blocked.text) == (
        "blocked_by_hook",
        "Message blocked by hook count_prompts: that topic is off limits",
    )
    assert [r.text for r in result.replies][:2] == ["first done", "second done"]
    # The refused text is not kept for later model calls.
    assert all("forbidden" not in getattr(m, "text", "") for m in result.messages)


async def test_prompt_rewrite_reaches_the_model(hook_env: Env) -> None:
    agent = scripted_agent(
        step("you said: {user}"), hooks=HookConfig(user_prompt_submit=["refuse_empty_prompt"])
    )
    result = await hook_env.run(conversation(agent, "  lots   of\n space "))
    assert result.final_text == "you said: lots of space"


async def test_agent_naming_an_unknown_or_misplaced_hook_fails_clearly(hook_env: Env) -> None:
    agent = scripted_agent(step("hi"), hooks=HookConfig(pre_tool_use=["redact_secrets"]))
    with pytest.raises(WorkflowFailureError) as info:
        await hook_env.run(conversation(agent))
    assert (info.value.cause.type, info.value.cause.message) == (
        "ConfigError",
        "inline agent 'test-agent': field 'hooks.pre_tool_use':"
        " hook 'redact_secrets' is a post_tool_use hook",
    )


def test_duplicate_hook_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate hook name 'redact_secrets'"):
        default_hooks(hook("post_tool_use", name="redact_secrets")(lambda **_: None))
