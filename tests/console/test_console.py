"""The operator console in a real browser (chromium through Playwright) against the real
``starter.py serve`` process: calls decided from the inbox (edited, refused by the schema, rejected,
a sub-agent's), the conversation page live, and what keeps it safe (login, CSRF, escaping)."""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import httpx2
import pytest
from playwright.async_api import Browser, Page, expect
from temporalio.client import Client

from durable_agents.client.conversations import start_conversation
from durable_agents.client.search import UNREGISTERED
from durable_agents.connection import AGENT_PROMPT, SEARCH_ATTRIBUTES
from durable_agents.dev_server import EmbeddedServer
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import (
    ASK_USER,
    AgentSpec,
    ApprovalPolicy,
    ClientToolConfig,
    GuardrailConfig,
    GuardrailsConfig,
    JudgeConfig,
    Rule,
)
from durable_agents.workflows.messages import ModelSettings
from tests.support.browser import browser, log_in
from tests.support.conversations import delegating, find_workflows, wait_for_pending
from tests.support.fake_provider import FakeProvider, Reply, openai_completion, openai_stream
from tests.support.paths import ROOT
from tests.support.servers import start_dev_server
from tests.support.serving import Served, serving
from tests.support.workers import Env, running_worker

TOKEN = "console-s3cret"
SCREENSHOTS = os.environ.get("CONSOLE_SCREENSHOTS")
"""Where the screenshots go: ``CONSOLE_SCREENSHOTS=docs/images`` retakes the docs' (else a temporary
folder, so that a test run leaves the repository as it was)."""


@pytest.fixture(scope="module")
async def served(server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    log = tmp_path_factory.mktemp("console") / "serve.log"
    async with serving(server.address, log, env={"AGENT_SERVE_TOKEN": TOKEN}) as found:
        yield found
    assert "Traceback" not in log.read_text()


@pytest.fixture(scope="module")
async def chromium() -> AsyncIterator[Browser]:
    async with browser() as launched:
        yield launched


@pytest.fixture
async def page(chromium: Browser, served: Served) -> AsyncIterator[Page]:
    """A fresh browser context, logged in as alice, 1280 px wide."""
    context = await chromium.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    await log_in(page, served.url, "alice", TOKEN)
    yield page
    await context.close()


def _multiplying(*, then: str = "The product is ready.", delay: float = 0.0, judges=(), priced: bool = False):
    agent = scripted_agent(
        step("", ("multiply", {"a": 6, "b": 6})),
        step(then),
        tools=["multiply"],
        approval=ApprovalPolicy(require=["multiply"], judges=list(judges)),
    )
    agent.model.stream = True
    if priced:  # $1/M input, $2/M output (config/models.toml): 10 + 5 tokens a scripted call
        agent.model.model = "scripted-demo"
    agent.model.script[1].delay_seconds = delay
    return conversation(agent, "What is six times seven?")


async def _judged(handle, timeout: float = 10.0) -> None:
    """Until the waiting call carries its judge's opinion (the judge answers after the call waits)."""
    for _ in range(int(timeout / 0.05)):
        pending = await wait_for_pending(handle)
        if pending[0].judgements:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no judge gave an opinion")


def _call(page: Page, workflow_id: str, call_id: str = "call_1_0"):
    return page.locator(f"article.call[data-call='{call_id}']").filter(
        has=page.locator(f"a[href='/console/c/{quote(workflow_id, safe='')}']")
    )


async def test_an_edit_the_schema_refuses_is_shown_inline_then_the_fixed_call_runs_and_the_answer_streams(
    env: Env, page: Page, served: Served, tmp_path: Path
) -> None:
    images = ROOT / SCREENSHOTS if SCREENSHOTS else tmp_path
    handle = await env.start(
        _multiplying(then="Six times seven is forty-two, as the tool says.", delay=1.5, priced=True)
    )
    [waiting] = await wait_for_pending(handle)
    await page.reload()
    call = _call(page, handle.id)
    await expect(call).to_be_visible()
    await expect(call.locator(".digest")).to_have_text(waiting.arguments_digest)
    images.mkdir(exist_ok=True)
    await page.screenshot(path=images / "console-inbox.png", full_page=True)
    await page.set_viewport_size({"width": 375, "height": 800})
    await page.screenshot(path=images / "console-inbox-phone.png", full_page=True)
    await page.set_viewport_size({"width": 1280, "height": 900})

    arguments = call.locator("textarea[name=arguments]")
    await arguments.fill('{"a": "six", "b": 7}')
    await call.locator("button[value=approve]").click()
    await expect(call.locator(".outcome")).to_contain_text(
        "Refused: edited arguments for multiply do not fit"
    )
    assert (await handle.query("durable_agents.pending_approvals"))[0]["state"] == "pending"

    await arguments.fill('{"a": 6, "b": 7}')
    await call.locator("button[value=approve]").click()
    decided = page.locator("article.call.decided[data-call='call_1_0']")
    await expect(decided).to_contain_text("approved by alice")
    await expect(decided).to_contain_text('"a": 6')

    await page.goto(f"{served.url}/console/c/{quote(handle.id, safe='')}")
    await expect(page.locator("#streamed")).not_to_be_empty(timeout=15000)
    await expect(page.locator(".m-assistant .text").last).to_have_text(
        "Six times seven is forty-two, as the tool says.", timeout=15000
    )
    await expect(page.locator(".m-tool_result pre")).to_have_text(
        '[alice edited the arguments before the call ran; it ran with {"a": 6, "b": 7}] 42'
    )
    await expect(page.locator(".toolcall .approval")).to_contain_text("approved by alice")
    await expect(page.locator(".toolcall pre.edited")).to_contain_text('"a": 6')
    per_model = page.locator("table.per-model tr[data-model='scripted:scripted-demo'] td")
    await expect(per_model).to_have_text(["20", "0", "10", "$0.000040"])
    await page.screenshot(path=images / "console-conversation.png", full_page=True)
    assert (await handle.result()).tool_calls[0].arguments == {"a": 6, "b": 7}

    # The list: the AgentCost the workflow wrote with its closing AgentStatus
    await find_workflows(env.client, f"WorkflowId = '{handle.id}' AND AgentCost > 0")
    await page.goto(f"{served.url}/console/conversations")
    row = page.locator("tr").filter(has=page.locator(f"a[href='/console/c/{quote(handle.id, safe='')}']"))
    await expect(row.locator("td").last).to_have_text("$0.000040")


CONFIRM = ClientToolConfig(
    name="confirm",
    description="Show the user a form to confirm.",
    result_schema={"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}},
)


async def _client_call_waits(handle, call_id: str) -> None:
    for _ in range(200):
        if any(c.call_id == call_id for c in await handle.query(AgentWorkflow.pending_client_calls)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no client tool call {call_id} waits")


async def test_client_tools_are_answered_a_wrong_shape_refused_inline_and_ask_user_from_the_inbox(
    env: Env, page: Page, served: Served
) -> None:
    agent = scripted_agent(
        step("", ("confirm", {"what": "the forecast"})),
        step("", ("ask_user", {"question": "Which city are you in?"})),
        step("Then the weather in {last_result} it is."),
        tools=[],
        client_tools=[CONFIRM, ASK_USER],
    )
    handle = await env.start(conversation(agent, "What's the weather?"))
    await _client_call_waits(handle, "call_1_0")
    await page.goto(f"{served.url}/console/c/{quote(handle.id, safe='')}")
    confirm = page.locator("article.asking[data-client-call='call_1_0']")
    await expect(confirm.locator("pre.args")).to_contain_text('"what": "the forecast"')
    await expect(confirm.locator("time.countdown")).to_be_visible()
    result = confirm.locator("textarea[name=text]")
    await result.fill('"yes"')
    await confirm.locator("button[type=submit]").click()
    await expect(confirm.locator(".outcome")).to_have_text(
        "Refused: the result for confirm does not fit its result schema: $ must be of type object, not string"
    )
    await result.fill('{"ok": true}')
    await confirm.locator("button[type=submit]").click()
    await expect(page.locator("article.answered[data-client-call='call_1_0']")).to_contain_text("delivered")

    await _client_call_waits(handle, "call_2_0")
    await page.reload()
    question = page.locator("article.asking[data-client-call='call_2_0'] .question")
    await expect(question).to_have_text("Which city are you in?")

    asking = _asking(page, handle.id, "call_2_0")
    for _ in range(50):  # AgentStatus reaches the visibility store a moment later
        await page.goto(f"{served.url}/console/")
        if await asking.count():
            break
        await asyncio.sleep(0.2)
    await expect(asking.locator(".question")).to_have_text("Which city are you in?")
    await asking.locator("input[name=text]").fill("Lisbon")
    await asking.locator("button[type=submit]").click()
    await expect(page.locator("article.answered[data-client-call='call_2_0']")).to_contain_text(
        "delivered: Lisbon"
    )
    assert (await handle.result()).final_text == "Then the weather in Lisbon it is."
    await page.goto(f"{served.url}/console/c/{quote(handle.id, safe='')}")
    await expect(page.locator(".m-assistant .text").last).to_have_text("Then the weather in Lisbon it is.")


def _asking(page: Page, workflow_id: str, call_id: str):
    return page.locator(f"section.asking article.asking[data-client-call='{call_id}']").filter(
        has=page.locator(f"a[href='/console/c/{quote(workflow_id, safe='')}']")
    )


async def test_a_judge_s_opinion_is_shown_and_a_rejection_s_feedback_reaches_the_model(
    env: Env, page: Page
) -> None:
    small = JudgeConfig(
        name="small-numbers", kind="rules", tools=["multiply"], rules=[Rule(argument="a", max=5)]
    )
    handle = await env.start(_multiplying(then="Understood.", judges=[small]))
    await _judged(handle)
    await page.reload()
    call = _call(page, handle.id)
    opinion = call.locator(".judge li")
    await expect(opinion).to_contain_text("small-numbers (rules): escalate")
    await expect(opinion.locator(".reason")).to_have_text("a is 6, above 5")
    await call.locator("input[name=reason]").fill("use the cheaper tool")
    await call.locator("button[value=reject]").click()
    await expect(page.locator("article.call.decided[data-call='call_1_0']")).to_contain_text(
        "rejected by alice"
    )
    result = await handle.result()
    assert result.tool_calls[0].content == "Tool call 'multiply' was rejected by alice: use the cheaper tool"


async def test_a_sub_agent_s_call_is_decided_from_the_inbox(env: Env, page: Page) -> None:
    parent, child = await delegating(env)
    await page.reload()
    call = _call(page, parent.id, "call_1_0/call_1_0")
    await expect(call).to_be_visible()
    await call.locator("button[value=approve]").click()
    await expect(page.locator("article.call.decided[data-call='call_1_0/call_1_0']")).to_contain_text(
        "approved by alice"
    )
    result = await child.result()
    assert result.approvals[0].by == "alice"


async def test_without_the_token_nothing_is_shown(env: Env, chromium: Browser, served: Served) -> None:
    handle = await env.start(_multiplying())
    await wait_for_pending(handle)
    context = await chromium.new_context()
    page = await context.new_page()
    for path in ("/console/", "/console/conversations", f"/console/c/{quote(handle.id, safe='')}"):
        await page.goto(f"{served.url}{path}")
        assert page.url == f"{served.url}/console/login"
        assert handle.id not in await page.content()
    await page.fill("#name", "mallory")
    await page.fill("#token", "guess")
    await page.click("form.login button[type=submit]")
    await expect(page.locator(".refused")).to_have_text(
        "wrong token: give the AGENT_SERVE_TOKEN this console was started with, or yours"
    )
    async with httpx2.AsyncClient() as http:
        body = await http.get(f"{served.url}/console/c/{quote(handle.id, safe='')}/body")
        events = await http.get(f"{served.url}/console/c/{quote(handle.id, safe='')}/events")
    assert (body.status_code, events.status_code) == (303, 303)
    await context.close()
    await handle.cancel()


SLOW = (
    "Here is a slow streamed answer for the operator console, arriving one word at a time, and then it ends."
)


async def test_a_page_opened_mid_reply_shows_the_live_text_from_its_first_word(
    env: Env, page: Page, served: Served
) -> None:
    agent = scripted_agent(step(SLOW), tools=[])
    agent.model.stream = True
    agent.model.script[0].delay_seconds = 12.0
    handle = await env.start(conversation(agent, "Tell me slowly."))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(timeout=60) as http:  # until the reply has begun streaming
        url = f"{served.url}/conversations/{quote(handle.id, safe='')}/events"
        async with http.stream("GET", url, headers=headers) as events:
            async for line in events.aiter_lines():
                if line == "event: text_delta":
                    break

    await page.goto(f"{served.url}/console/c/{quote(handle.id, safe='')}")
    await expect(page.locator("#streamed")).to_have_text(re.compile("^Here is a slow"), timeout=15000)
    await expect(page.locator(".m-assistant .text").last).to_have_text(SLOW, timeout=30000)


async def test_the_list_is_filtered_searched_by_id_and_paged_both_ways_each_row_with_its_prompt(
    env: Env, page: Page, served: Served
) -> None:
    tag = f"list-{uuid.uuid4().hex[:6]}"
    alpha = scripted_agent(step("Done."), tools=[])
    beta = scripted_agent(
        step("", ("multiply", {"a": 6, "b": 7})),
        tools=["multiply"],
        approval=ApprovalPolicy(require=["multiply"]),
    )
    alpha.name, beta.name = "alpha", "beta"
    for name, agent, tenant, user, prompt in [
        ("a1", alpha, "acme", "ann", "Summarise the quarterly report"),
        ("b1", beta, "acme", "bob", "Multiply the invoices"),
        ("b2", beta, "globex", "bob", "Check the ledger"),
    ]:
        started = ConversationInput(prompt=prompt, agent_spec=agent, tenant=tenant, user=user)
        await start_conversation(env.client, started, id=f"{tag}-{name}", task_queue=env.task_queue)
    await find_workflows(
        env.client, f"WorkflowId STARTS_WITH '{tag}' AND AgentStatus = 'awaiting_approval'", 2
    )
    await find_workflows(env.client, f"WorkflowId = '{tag}-a1' AND ExecutionStatus = 'Completed'")
    ids = page.locator("tbody td:first-child")

    await page.goto(f"{served.url}/console/conversations?search={tag}")
    await expect(ids).to_have_text([f"{tag}-b2", f"{tag}-b1", f"{tag}-a1"])
    prompts = ["Check the ledger", "Multiply the invoices", "Summarise the quarterly report"]
    await expect(page.locator("tbody td.prompt")).to_have_text(prompts)
    await page.select_option("#l-status", "awaiting_approval")
    await page.fill("#l-agent", "beta")
    await page.click("form.list-filters button[type=submit]")
    await expect(ids).to_have_text([f"{tag}-b2", f"{tag}-b1"])
    await page.fill("#l-tenant", "acme")
    await page.fill("#l-user", "bob")
    await page.click("form.list-filters button[type=submit]")
    await expect(ids).to_have_text([f"{tag}-b1"])

    await page.goto(f"{served.url}/console/conversations?search={tag}&size=1")
    older, newer = (
        page.get_by_role("link", name="Older conversations"),
        page.get_by_role("link", name="Newer conversations"),
    )
    await expect(ids).to_have_text([f"{tag}-b2"])
    await expect(newer).to_have_count(0)
    for shown in ("b1", "a1"):
        await older.click()
        await expect(ids).to_have_text([f"{tag}-{shown}"])
    await expect(older).to_have_count(0)
    for shown in ("b1", "b2"):
        await newer.click()
        await expect(ids).to_have_text([f"{tag}-{shown}"])
    await expect(newer).to_have_count(0)
    response = await page.goto(f"{served.url}/console/conversations?status=sleeping")
    assert response is not None and response.status == 400
    assert "status must be one of running, idle" in await page.inner_text("body")


async def test_the_search_box_finds_a_conversation_by_the_words_of_its_prompt_as_well_as_by_its_id(
    env: Env, page: Page, served: Served
) -> None:
    tag, word = f"find-{uuid.uuid4().hex[:6]}", f"kestrel{uuid.uuid4().hex[:6]}"
    agent = scripted_agent(step("Done."), tools=[])
    for name, prompt in [
        ("a", "Summarise the quarterly report"),
        ("b", f"Check the ledger of {word.upper()}, please"),
        ("c", f"Check the ledger of {word}x"),
    ]:
        started = ConversationInput(prompt=prompt, agent_spec=agent)
        await start_conversation(env.client, started, id=f"{tag}-{name}", task_queue=env.task_queue)
    await find_workflows(env.client, f"WorkflowId STARTS_WITH '{tag}' AND ExecutionStatus = 'Completed'", 3)
    ids = page.locator("tbody td:first-child")

    # Whole words, any case, any order; what is not a word (a quote, a star) is left out.
    await page.goto(f"{served.url}/console/conversations?search={word}")
    await expect(ids).to_have_text([f"{tag}-b"])
    prompt = f"Check the ledger of {word.upper()}, please"
    await expect(page.locator("tbody td.prompt")).to_have_text([prompt])
    await page.fill("#l-search", f'LEDGER "{word}*')
    await page.click("form.list-filters button[type=submit]")
    await expect(page).to_have_url(re.compile("search=LEDGER"))
    await expect(ids).to_have_text([f"{tag}-b"])
    await expect(page.locator("#search-notice")).to_have_count(0)
    # The same box finds ids by their start.
    await page.fill("#l-search", f"{tag}-")
    await page.click("form.list-filters button[type=submit]")
    await expect(ids).to_have_text([f"{tag}-c", f"{tag}-b", f"{tag}-a"])


async def test_without_agent_prompt_on_the_server_conversations_start_and_the_list_searches_ids_only(
    chromium: Browser, tmp_path: Path
) -> None:
    server = await start_dev_server(search_attributes=[k for k in SEARCH_ATTRIBUTES if k != AGENT_PROMPT])
    try:
        address, tag = server.client.service_client.config.target_host, f"bare-{uuid.uuid4().hex[:6]}"
        started = ConversationInput(prompt="Check the ledger", agent="demo")
        handle = await start_conversation(server.client, started, id=f"{tag}-1", task_queue="nobody-polls")
        assert AGENT_PROMPT not in (await handle.describe()).typed_search_attributes
        await find_workflows(server.client, f"WorkflowId = '{tag}-1'")
        async with serving(address, tmp_path / "serve.log", env={"AGENT_SERVE_TOKEN": TOKEN}) as bare:
            context = await chromium.new_context()
            page = await context.new_page()
            await log_in(page, bare.url, "alice", TOKEN)
            await page.goto(f"{bare.url}/console/conversations?search=ledger")
            await expect(page.locator("#search-notice")).to_have_text(UNREGISTERED)
            await expect(page.locator("p.empty")).to_have_text("No conversations match.")
            await page.fill("#l-search", tag)
            await page.click("form.list-filters button[type=submit]")
            await expect(page.locator("tbody td:first-child")).to_have_text([f"{tag}-1"])
            await context.close()
    finally:
        await server.shutdown()


async def test_after_a_decision_focus_goes_on_to_the_next_card(env: Env, page: Page) -> None:
    first = await env.start(_multiplying())
    await wait_for_pending(first)
    second = await env.start(_multiplying())
    await wait_for_pending(second)
    await page.reload()
    newest = _call(page, second.id)
    await newest.locator("button[value=approve]").focus()
    await page.keyboard.press("Enter")
    await expect(page.locator("article.call.decided[data-call='call_1_0']").first).to_contain_text("approved")
    await expect(_call(page, first.id)).to_be_focused()


async def test_what_a_model_or_a_tool_wrote_is_shown_as_text(env: Env, page: Page, served: Served) -> None:
    script = "<script>window.pwned = 1</script><img src=x onerror='window.pwned = 2'>"
    agent = scripted_agent(step("", (script, {})), step(script))
    handle = await env.start(conversation(agent, script))
    await handle.result()
    await page.goto(f"{served.url}/console/c/{quote(handle.id, safe='')}")
    await expect(page.locator(".m-tool_result pre")).to_contain_text(f"Unknown tool '{script}'")
    await expect(page.locator(".m-assistant .text").last).to_have_text(script)
    await expect(page.locator(".m-user .text")).to_have_text(script)
    assert await page.evaluate("window.pwned") is None


async def test_an_action_without_the_csrf_token_is_refused(env: Env, page: Page, served: Served) -> None:
    handle = await env.start(_multiplying())
    [waiting] = await wait_for_pending(handle)
    url = f"{served.url}/console/c/{quote(handle.id, safe='')}/decide"
    form = {"call_id": "call_1_0", "digest": waiting.arguments_digest, "action": "approve"}
    without = await page.request.post(url, form=form)
    wrong = await page.request.post(url, form={**form, "csrf": "guess"})
    assert (without.status, wrong.status) == (403, 403)
    assert await without.text() == "refused: the form's CSRF token is missing or wrong; load the page again\n"
    assert len(await handle.query("durable_agents.pending_approvals")) == 1
    await handle.cancel()


async def test_interrupt_ends_the_running_turn_and_the_chat_takes_the_next_message(
    env: Env, fake: FakeProvider, page: Page, served: Served
) -> None:
    fake.queue(
        openai_stream(openai_completion("a very long essay " * 20), delay=0.5),
        openai_stream(openai_completion("Short answer, about dogs.")),
    )
    settings = ModelSettings(provider="openai", model="gpt-4o-mini", stream=True)
    agent = AgentSpec(name="chatty", model=settings, chat=True)
    handle = await env.start(conversation(agent, prompt="write an essay about cats"))
    while not fake.received:
        await asyncio.sleep(0.05)
    await page.goto(f"{served.url}/console/c/{quote(handle.id, safe='')}")
    await page.click("#interrupt")
    await expect(page.locator("#act-outcome")).to_have_text(
        "Interrupted: its model call is cancelled and the turn answered 'interrupted' (a chat stays open)."
    )
    await expect(page.locator("#status")).to_have_text("idle", timeout=10000)  # the chat stays open
    await page.fill("#text", "just a line about dogs")
    await page.click("form.send button[type=submit]")
    answer = page.locator(".m-assistant .text")
    await expect(answer).to_have_text(["Short answer, about dogs."], timeout=10000)
    replies = await handle.query(AgentWorkflow.replies)
    assert [(r.message_id, r.stop_reason) for r in replies] == [("m1", "interrupted"), ("m2", "completed")]
    await handle.signal(AgentWorkflow.end)
    await handle.result()


def _guarded(name: str, stage: str, excludes: str, **kwargs) -> GuardrailsConfig:
    rules = [Rule(argument="text", excludes=excludes)]
    return GuardrailsConfig(**{stage: [GuardrailConfig(name=name, kind="rules", rules=rules, **kwargs)]})


async def test_the_conversation_page_lists_guardrail_checks_and_handoffs_and_shows_cached_tokens(
    client: Client, fake: FakeProvider, page: Page, served: Served, tmp_path: Path
) -> None:
    model = ModelSettings(provider="openai", model="gpt-4o-mini")
    agents = {
        "front-desk": AgentSpec(
            name="front-desk", model=model, tools=[], handoffs=["billing"],
            guardrails=_guarded("no_card_numbers", "input", r"\b(?:\d[ -]?){13,16}\b"),
        ),
        "billing": AgentSpec(
            name="billing", model=model, tools=[],
            guardrails=_guarded("no_phone_numbers", "output", r"\d{3}-\d{4}", on_fail="retry"),
        ),
    }  # fmt: skip
    cached = {
        "prompt_tokens": 2000,
        "completion_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 1920},
    }
    reason = "An invoice question."
    answers = [
        openai_completion("", [("call_1", "transfer_to_billing", {"reason": reason})], "tool_calls"),
        openai_completion("Call us at 555-0100."),
        openai_completion("Your last invoice was 42 EUR."),
    ]
    fake.queue(*(Reply(body=answer | {"usage": cached}) for answer in answers))
    async with running_worker(client, tmp_path, agents=agents) as env:
        handle = await env.start(ConversationInput(prompt="What was my last invoice?", agent="front-desk"))
        assert (await handle.result()).final_text == "Your last invoice was 42 EUR."
        await page.goto(f"{served.url}/console/c/{quote(handle.id, safe='')}")

        await expect(page.locator("ol.checks li")).to_have_text(
            [
                "no_card_numbers input of m1: passed",
                "no_phone_numbers output of m1: failed: text matches \\d{3}-\\d{4}; the model answered again",
                "no_phone_numbers output of m1: passed",
            ]
        )
        await expect(page.locator("ol.checks li.failed b")).to_have_text(["no_phone_numbers"])
        await expect(page.locator("ol.handoffs li .what")).to_have_text([f"front-desk → billing: {reason}"])
        await expect(page.locator("ol.handoffs li small")).to_contain_text("call_1, ")
        facts = page.locator("section[aria-label=Usage] dd")
        await expect(facts).to_have_text(["6000", "5760", "30", "$0.000486", "3"])
        per_model = page.locator("table.per-model tr[data-model='openai:gpt-4o-mini'] td")
        await expect(per_model).to_have_text(["6000", "5760", "30", "$0.000486"])
