"""Tenants and users: budgets across conversations in the shared ledger, provider limits shared by
every worker, a 429 that slows them all (docs/tenants.md). Counts and order only, never times."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from contextlib import closing
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from durable_agents.activities.budgets import BudgetsFile
from durable_agents.client.conversations import send_or_start, start_conversation
from durable_agents.settings import Settings
from durable_agents.stores.ledger import TABLES, Ledger, Limit, Spend, SQLiteLedger, period_key
from durable_agents.stores.postgres import Database, PostgresLedger
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import AGENT_TENANT, AGENT_USER, ConversationInput
from durable_agents.workflows.config import AgentSpec, ApprovalPolicy, JudgeConfig, Price
from durable_agents.workflows.messages import ModelSettings, Usage
from durable_agents.workflows.records import Decision
from tests.support.cli import starter_cli
from tests.support.conversations import wait_for_pending
from tests.support.fake_provider import FakeProvider, Reply, anthropic_message, error_reply, openai_completion
from tests.support.workers import Env, running_worker

WINDOW = 1.0
"""The provider limits' window in these tests (a minute in production)."""
MODEL = f"gpt-limited-{uuid.uuid4().hex[:6]}"
"""A model of these tests' own, whose provider limits no other test shares."""


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    budgets = tmp_path / "budgets.toml"
    budgets.write_text(f"window_seconds = {WINDOW}\nslowdown_seconds = 30\n")
    return {"AGENT_BUDGETS": str(budgets)}


def _budgets(environ: dict[str, str], text: str) -> None:
    """Rewrite the budgets file: the workers read it again at their next call (its mtime changed)."""
    path = Path(environ["AGENT_BUDGETS"])
    path.write_text(f"window_seconds = {WINDOW}\nslowdown_seconds = 30\n{text}")
    BudgetsFile(path).current()  # a bad file fails here, not in a worker


def _agent(model: str = "gpt-4o-mini", **kwargs) -> AgentSpec:
    return AgentSpec(
        name="tenant-agent", model=ModelSettings(provider="openai", model=model, max_tokens=50), **kwargs
    )


def _answer(text: str, prompt_tokens: int, completion_tokens: int) -> Reply:
    body = openai_completion(text)
    body["usage"] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return Reply(body=body)


def _tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


async def test_a_tenant_at_its_token_limit_stops_before_any_provider_request(
    env: Env, fake: FakeProvider, environ: dict[str, str]
) -> None:
    spent, other = _tenant(), _tenant()
    _budgets(environ, f"[tenants.{spent}]\ntokens_per_day = 990\n[tenants.{other}]\ntokens_per_day = 990\n")
    fake.queue(_answer("first", 900, 40), _answer("other's", 10, 5))
    handle = await start_conversation(
        env.client,
        ConversationInput(prompt="hi", agent_spec=_agent(), tenant=spent, user="ann"),
        id=f"tenant-{uuid.uuid4().hex[:8]}",
        task_queue=env.task_queue,
    )
    first = await handle.result()
    assert (first.stop_reason, first.usage.total_tokens, len(fake.received)) == ("completed", 940, 1)
    described = await handle.describe()
    assert (
        described.typed_search_attributes.get(AGENT_TENANT),
        described.typed_search_attributes.get(AGENT_USER),
    ) == (
        spent,
        "ann",
    )
    assert described.raw_description.workflow_execution_info.priority.fairness_key == spent

    # 940 spent: the next call's worst case (its input and max_tokens 50) would pass 990.
    refused = await send_or_start(
        env.client, f"tenant-{uuid.uuid4().hex[:8]}", "again", agent=_agent(), task_queue=env.task_queue,
        tenant=spent,
    )  # fmt: skip
    assert refused.stop_reason == "budget_exhausted"
    assert f"tenant {spent}'s daily limit of 990 tokens reached; it resets at " in refused.text
    assert len(fake.received) == 1  # no provider request for it

    answered = await start_conversation(
        env.client,
        ConversationInput(prompt="hi", agent_spec=_agent(), tenant=other),
        id=f"tenant-{uuid.uuid4().hex[:8]}",
        task_queue=env.task_queue,
    )
    assert (await answered.result()).final_text == "other's"
    assert len(fake.received) == 2

    # The ledger's totals are the conversations' recorded usage.
    ledger = Settings.from_env().stores.ledger()
    [row] = await ledger.usage(period="day", now=time.time(), tenant=spent)
    assert (row.calls, row.input_tokens, row.output_tokens, row.user) == (1, 900, 40, "ann")
    assert await ledger.pending(time.time()) == 0


async def test_a_refused_chat_stays_open_for_later_messages(env: Env, fake: FakeProvider, environ) -> None:
    tenant = _tenant()
    _budgets(environ, f"[users.u-{tenant}]\ntokens_per_day = 10\n")
    workflow_id = f"tenant-{uuid.uuid4().hex[:8]}"
    reply = await send_or_start(
        env.client, workflow_id, "hi", agent=_agent(), task_queue=env.task_queue, tenant=tenant,
        user=f"u-{tenant}",
    )  # fmt: skip
    assert reply.stop_reason == "budget_exhausted" and f"user u-{tenant}'s daily limit" in reply.text
    handle = env.client.get_workflow_handle(workflow_id)
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    _budgets(environ, "")  # the operator lifts the limit: no restart
    fake.queue(_answer("now it answers", 10, 5))
    later = await send_or_start(env.client, workflow_id, "again", agent=_agent(), task_queue=env.task_queue)
    assert (later.stop_reason, later.text, len(fake.received)) == ("completed", "now it answers", 1)
    await handle.signal(AgentWorkflow.end)


def _judged_writer(tenant: str, judge_tokens: int = 50) -> ConversationInput:
    """A scripted agent that writes a file, judged by a model judge on the fake OpenAI (gpt-4o-mini,
    priced in the models table)."""
    judge = JudgeConfig(
        name="reviewer",
        kind="model",
        tools=["write_file"],
        model=ModelSettings(provider="openai", model="gpt-4o-mini", max_tokens=judge_tokens),
        on_deny="final",
    )
    agent = scripted_agent(
        step("", ("write_file", {"path": "a.txt", "content": "hi"})),
        step("written"),
        tools=["write_file"],
        approval=ApprovalPolicy(judges=[judge]),
    )
    agent.model.max_tokens = 50
    return conversation(agent, tenant=tenant, user="ann")


async def test_a_model_judges_tokens_and_cost_are_in_the_tenants_ledger_as_in_the_conversation(
    env: Env, fake: FakeProvider
) -> None:
    tenant = _tenant()
    fake.queue(_answer(json.dumps({"verdict": "approve", "reason": "a plain note"}), 900, 100))
    handle = await env.start(_judged_writer(tenant))
    result = await handle.result()
    [record] = result.approvals
    assert (record.state, record.by, len(fake.received)) == ("approved", "reviewer", 1)
    # The scripted model's two answers (10 and 5 tokens each, unpriced) and the judge's.
    assert (result.usage.input_tokens, result.usage.output_tokens) == (2 * 10 + 900, 2 * 5 + 100)

    [row] = await Settings.from_env().stores.ledger().usage(period="day", now=time.time(), tenant=tenant)
    assert (row.calls, row.input_tokens, row.output_tokens, row.user) == (3, 920, 110, "ann")
    assert row.cost == Price(input=0.15, output=0.60).cost(Usage(input_tokens=900, output_tokens=100))


async def test_a_judge_the_tenants_budget_refuses_escalates_to_a_person_unasked(
    env: Env, fake: FakeProvider, environ: dict[str, str]
) -> None:
    tenant = _tenant()
    _budgets(environ, f"[tenants.{tenant}]\ntokens_per_day = 3000\n")
    fake.queue(_answer(json.dumps({"verdict": "approve", "reason": "fine"}), 10, 5))
    handle = await env.start(_judged_writer(tenant, judge_tokens=5000))  # its worst case passes 3000
    for _ in range(400):  # the call waits at once; its judge's opinion comes after
        [pending] = await wait_for_pending(handle)
        if pending.judgements:
            break
        await asyncio.sleep(0.05)
    [opinion] = pending.judgements
    assert (opinion.verdict, len(fake.received)) == ("escalate", 0)
    assert opinion.reason.startswith(
        f"the judge was not asked: tenant {tenant}'s daily limit of 3000 tokens reached; it resets at "
    ), opinion.reason
    await handle.execute_update(AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="bob"))
    result = await handle.result()
    assert (result.final_text, result.approvals[0].by) == ("written", "bob")


async def test_an_inline_agent_asking_for_negative_max_tokens_is_refused_before_any_charge(
    env: Env, environ: dict[str, str]
) -> None:
    tenant = _tenant()
    _budgets(environ, f"[tenants.{tenant}]\ntokens_per_day = 1\n")
    agent = scripted_agent(step("hi"), tools=[])
    agent.model.max_tokens = -100_000  # its worst case would fit any budget
    handle = await env.start(conversation(agent, tenant=tenant))
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    assert (info.value.cause.type, info.value.cause.message) == (  # type: ignore[attr-defined]
        "ConfigError",
        "inline agent 'test-agent': field 'model.max_tokens': -100000 is not a positive number of tokens",
    )
    assert await Settings.from_env().stores.ledger().usage(period="day", now=time.time(), tenant=tenant) == []


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Ledger:
    if request.param == "sqlite":
        return SQLiteLedger(tmp_path / "ledger.db")
    return PostgresLedger(Database(request.getfixturevalue("database_url")))


async def test_a_reservation_is_replaced_by_the_calls_next_attempt_or_lapses(ledger: Ledger) -> None:
    """A worker killed mid-call leaves its reservation: the call's next attempt (on any worker)
    replaces it, and one no attempt comes back for lapses at its expiry."""
    limit = [Limit("tenant", "acme", "day", "tokens", 100.0)]
    now = time.time()

    async def reserve(id: str, at: float) -> str | None:
        return await ledger.reserve(
            id, tenant="acme", user="", conversation="c", model="m", tokens=60, cost=0.0, limits=limit,
            expires_at=at + 10, now=at, replaces=id.rpartition("/")[0] + "/",
        )  # fmt: skip

    assert await reserve("wf/run/1/1", now) is None  # the attempt the killed worker ran
    assert await reserve("wf/run/1/2", now + 1) is None  # its retry: 60 + 60 would pass 100 unless replaced
    assert await ledger.pending(now + 1) == 1
    assert "limit of 100 tokens reached" in (await reserve("wf/run/2/1", now + 2) or "")  # another call
    assert await ledger.pending(now + 12) == 0  # nobody came back: it lapsed
    assert await reserve("wf/run/2/1", now + 12) is None
    await ledger.settle("wf/run/2/1", Usage(input_tokens=30, output_tokens=10), 0.0)
    assert await ledger.pending(now + 12) == 0
    [row] = await ledger.usage(period="day", now=now + 12, tenant="acme")
    assert (row.calls, row.tokens) == (1, 40)


CACHED_USAGE = {"input_tokens": 80, "cache_read_input_tokens": 1920, "output_tokens": 10}
"""An Anthropic answer's usage: 2000 tokens in, 1920 of them read from the prompt cache."""
CACHED_COST = (80 * 1.00 + 1920 * 0.10 + 10 * 5.00) / 1e6
"""Its cost at the models table's prices of claude-haiku-4-5 (input, cached input, output)."""


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
async def test_cached_input_tokens_are_in_the_ledger_its_folded_totals_and_usage(
    client: Client,
    fake: FakeProvider,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    store: str,
) -> None:
    if store == "sqlite":
        monkeypatch.setenv("AGENT_STORE", str(tmp_path / "conversations.db"))  # a ledger of this test's own
    else:
        monkeypatch.setenv("AGENT_DATABASE_URL", await request.getfixturevalue("postgres").new_database())
    fake.queue(*[Reply(body=anthropic_message("Leave: 25 days.") | {"usage": CACHED_USAGE})] * 3)
    agent = AgentSpec(
        name="handbook", model=ModelSettings(provider="anthropic", model="claude-haiku-4-5", max_tokens=50)
    )
    async with running_worker(client, tmp_path) as env:
        for tenant, user in [("acme", "ann"), ("acme", "ann"), (None, None)]:  # settled; recorded at once
            await env.run(ConversationInput(prompt="Leave?", agent_spec=agent, tenant=tenant, user=user))
        assert await starter_cli(env, capsys, "usage") == (
            0,
            "TENANT       USER  CALLS  INPUT  CACHED  OUTPUT  TOKENS  COST USD\n"
            "(no tenant)  -     1      2000   1920    10      2010    0.000322\n"  # at the worker's prices
            "acme         ann   2      4000   3840    20      4020    0.000644\n"
            "TOTAL              3      6000   5760    30      6030    0.000966\n",
            "",
        )
        ledger = Settings.from_env().stores.ledger()
        assert await ledger.forget_user("ann", "acme") == 2  # folded into acme's anonymous day total
        [total] = await ledger.usage(period="month", now=time.time(), tenant="acme")
        counts = (total.calls, total.input_tokens, total.cached_input_tokens, total.output_tokens)
        assert (total.user, counts) == ("", (1, 4000, 3840, 20))
        assert total.cost == pytest.approx(2 * CACHED_COST, rel=1e-12)
        assert await starter_cli(env, capsys, "usage", "--tenant", "acme") == (
            0,
            "TENANT  USER  CALLS  INPUT  CACHED  OUTPUT  TOKENS  COST USD\n"
            "acme    -     1      4000   3840    20      4020    0.000644\n"
            "TOTAL         1      4000   3840    20      4020    0.000644\n",
            "",
        )


async def test_a_ledger_file_of_the_previous_release_keeps_its_rows_and_takes_its_writes_beside_cached_tokens(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    old_row = "INSERT INTO agent_ledger VALUES (?, 'acme', 'ann', 'c', 'm', ?, ?, ?, 30, 10, 40, 0.5, NULL)"
    now = time.time()
    day, month = period_key("day", now), period_key("month", now)
    with closing(sqlite3.connect(path)) as db, db:  # as the previous release made it and wrote a call
        for statement in TABLES:
            db.execute(statement)
        db.execute(old_row, ("old/1", day, month, now))
    ledger = SQLiteLedger(path)
    used = Usage(input_tokens=20, cached_input_tokens=16)
    await ledger.record("new/1", conversation="c", model="m", used=used, cost=0.0, now=now)
    with closing(sqlite3.connect(path)) as db, db:  # the previous release's worker, still running beside
        db.execute(old_row, ("old/2", day, month, now))
    assert await ledger.usage(period="day", now=now) == [
        Spend("", "", 1, 20, 0, 0.0, cached_input_tokens=16),
        Spend("acme", "ann", 2, 60, 20, 1.0),
    ]


def _most_in_a_window(received: list, tokens: bool) -> int:
    """The most requests (or tokens) the provider saw in any window of ``WINDOW`` seconds."""
    times = sorted((r.at, 50 if tokens else 1) for r in received)
    return max(sum(n for t, n in times if start <= t < start + WINDOW) for start, _ in times)


async def _conversations(env: Env, count: int, label: str, model: str = MODEL) -> list:
    handles = [
        await env.start(ConversationInput(prompt=f"{label}-{i}", agent_spec=_agent(model), tenant=label))
        for i in range(count)
    ]
    return await asyncio.gather(*(h.result() for h in handles))


async def test_two_workers_sharing_a_tokens_per_minute_limit_never_send_more_in_any_window(
    client: Client, fake: FakeProvider, environ: dict[str, str], monkeypatch, tmp_path: Path
) -> None:
    model = f"{MODEL}-tpm"
    _budgets(environ, f'[limits."openai/{model}"]\ntokens_per_minute = 120\n')
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    fake.queue(*[_answer("ok", 20, 30) for _ in range(8)])  # 50 tokens each: 2 a window
    async with running_worker(client, tmp_path / "a") as a, running_worker(client, tmp_path / "b") as b:
        results = await asyncio.gather(_conversations(a, 4, "a", model), _conversations(b, 4, "b", model))
    assert [r.stop_reason for rs in results for r in rs] == ["completed"] * 8
    assert len(fake.received) == 8
    assert _most_in_a_window(fake.received, tokens=True) <= 120


async def test_a_429_slows_every_worker(
    client: Client, fake: FakeProvider, environ: dict[str, str], monkeypatch, tmp_path: Path
) -> None:
    model = f"{MODEL}-429"
    _budgets(environ, f'[limits."openai/{model}"]\nrequests_per_minute = 4\n')
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    fake.queue(error_reply(429, "slow down"), *[_answer("ok", 10, 5) for _ in range(8)])
    async with running_worker(client, tmp_path / "a") as a, running_worker(client, tmp_path / "b") as b:
        results = await asyncio.gather(_conversations(a, 4, "a", model), _conversations(b, 4, "b", model))
    assert [r.stop_reason for rs in results for r in rs] == ["completed"] * 8
    assert len(fake.received) == 9
    # Past the window of the 429 (whose places were taken before it), every worker goes at half
    # the limit of 4 a window: without the slowdown the 8 conversations would take all 4.
    after = [r for r in fake.received if r.at >= fake.received[0].at + WINDOW]
    senders = {r.body["messages"][-1]["content"][0] for r in after}
    assert senders == {"a", "b"}
    assert _most_in_a_window(after, tokens=False) <= 2
