"""Handoffs: a transfer tool per target; taken (here after a person approved it), the conversation
goes on with the target agent's prompt, tools and model, recorded with why, named in the status and
the AgentName search attribute. The two agent files of docs/agents-and-tools.md "Handoffs", as written,
through the real openai and anthropic SDKs."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_agents.activities.agent_files import AgentFileError, check_subagents, load_agent_file
from durable_agents.activities.hooks import default_hooks
from durable_agents.activities.tools import default_registry
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import AGENT_NAME, ConversationInput
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.records import Decision
from tests.support.cli import starter_cli
from tests.support.conversations import wait_for_pending
from tests.support.docs import code_blocks, docs_page
from tests.support.fake_provider import FakeProvider, Reply, anthropic_message, openai_completion
from tests.support.workers import Env

REASON = "The customer asks about an invoice."


def _docs_agents(folder: Path) -> dict[str, AgentSpec]:
    page = docs_page("agents-and-tools")
    start = page.index("## Handoffs")
    section = page[start : page.index("\n## ", start)]
    agents = {}
    for block in code_blocks(section, "toml"):
        path = folder / block.splitlines()[0].removeprefix("# agents/")
        path.write_text(block)
        spec = load_agent_file(path, default_registry(), default_hooks())
        agents[spec.name] = spec
    return agents


@pytest.fixture
def worker_agents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, AgentSpec]:
    agents = _docs_agents(tmp_path_factory.mktemp("agents"))
    assert list(agents) == ["front-desk", "billing"]
    return agents


async def test_an_approved_handoff_makes_the_new_agent_answer(
    env: Env, fake: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.queue(
        Reply(
            body=openai_completion("", [("call_1", "transfer_to_billing", {"reason": REASON})], "tool_calls")
        ),
        model="gpt-4o-mini",
    )
    fake.queue(Reply(body=anthropic_message("Your last invoice was 42 EUR.")), model="claude-haiku-4-5")
    handle = await env.start(ConversationInput(prompt="What was my last invoice?", agent="front-desk"))
    [pending] = await wait_for_pending(handle, timeout=60)
    assert (pending.tool, pending.arguments) == ("transfer_to_billing", {"reason": REASON})
    await handle.execute_update(
        AgentWorkflow.decide, Decision(call_id=pending.call_id, approve=True, by="ann")
    )
    result = await handle.result()

    assert (result.final_text, result.stop_reason) == ("Your last invoice was 42 EUR.", "completed")
    assert [(h.call_id, h.from_agent, h.to_agent, h.reason) for h in result.handoffs] == [
        ("call_1", "front-desk", "billing", REASON)
    ]
    front, billing = fake.received
    assert [t["function"]["name"] for t in front.body["tools"]] == ["transfer_to_billing"]
    assert (
        "Answers questions about invoices and refunds." in front.body["tools"][0]["function"]["description"]
    )
    assert billing.path == "/v1/messages" and billing.body["model"] == "claude-haiku-4-5"
    assert [b["text"] for b in billing.body["system"]] == ["You handle invoices and refunds."]
    assert [t["name"] for t in billing.body["tools"]] == ["add"]
    assert billing.body["messages"][-1]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "call_1",
        "content": "Transferred to billing; it answers from now on.",
        "cache_control": {"type": "ephemeral"},
    }
    assert (await handle.query(AgentWorkflow.status)).agent == "billing"
    assert (await handle.describe()).typed_search_attributes.get(AGENT_NAME) == "billing"
    assert list(result.usage_by_model) == ["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5"]
    each_at_its_price = (100 * 0.15 + 10 * 0.60) / 1e6 + (100 * 1.00 + 10 * 5.00) / 1e6
    assert result.cost == pytest.approx(each_at_its_price, rel=1e-12)
    code, out, _ = await starter_cli(env, capsys, "history", handle.id)
    assert code == 0 and out.splitlines()[-1] == f"[handoff call_1] front-desk -> billing: {REASON}"


def test_a_handoff_to_an_agent_the_worker_lacks_is_refused_in_one_line(tmp_path: Path) -> None:
    agents = _docs_agents(tmp_path)
    del agents["billing"]
    with pytest.raises(AgentFileError) as info:
        check_subagents(agents, {"front-desk": "agents/front-desk.toml"})
    assert str(info.value) == (
        "agents/front-desk.toml: field 'handoffs': unknown agent(s) billing; the worker has: front-desk"
    )
