"""``starter.py delete`` and ``forget``: a conversation (with its sub-agent) or a user removed from
Temporal and from every store, checked store by store with SQL of the test's own, on SQLite and on
PostgreSQL; another user's conversation untouched (docs/production.md, "Deleting and erasing")."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import WorkflowExecutionStatus

from durable_agents.workflows.api import ConversationInput
from tests.support.cli import starter_cli
from tests.support.conversations import until_state
from tests.support.lifecycle import (
    NOTHING,
    Stores,
    a_user,
    conversation_key,
    finished,
    gone,
)
from tests.support.workers import Env


async def test_delete_removes_a_conversation_and_its_subagent_from_every_store_and_from_temporal(
    lifecycle: tuple[Env, Stores], capsys: pytest.CaptureFixture[str]
) -> None:
    env, stores = lifecycle
    ann_name, bob_name = a_user("ann"), a_user("bob")
    (ann, ann_helper), (bob, _) = await finished(env, ann_name), await finished(env, bob_name)
    keys = {h.id: await conversation_key(h) for h in (ann, ann_helper, bob)}
    before = await stores.held(keys[bob.id], bob.id)
    held = await stores.held(keys[ann.id], ann.id)
    assert held == {"messages": 5, "once results": 1, "payloads": 3, "ledger rows": 2, "workspace files": 1}
    assert await stores.held(keys[ann_helper.id], ann_helper.id) == {
        "messages": 4, "once results": 1, "payloads": 0, "ledger rows": 2, "workspace files": 1,
    }  # fmt: skip

    code, out, err = await starter_cli(env, capsys, "delete", ann.id)

    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"Deleted {ann.id}: 2 conversation(s) ({ann.id}, {ann_helper.id})."
    assert out.splitlines()[1:] == [
        "STORE            REMOVED",
        "messages         9",
        "once results     2",
        "workspace files  2",
        "payloads         3",
        "ledger rows      4",
        "temporal runs    2",
    ]
    for handle in (ann, ann_helper):
        assert await stores.held(keys[handle.id], handle.id) == NOTHING
    assert await stores.held(keys[bob.id], bob.id) == before
    assert (await bob.describe()).status == WorkflowExecutionStatus.COMPLETED
    assert {ann_name, bob_name} <= await stores.ledger_users()  # ann's spend stays, as day totals
    await gone(ann, ann_helper)


async def test_delete_refuses_a_running_conversation_and_cancels_it_with_cancel(
    lifecycle: tuple[Env, Stores], capsys: pytest.CaptureFixture[str]
) -> None:
    env, stores = lifecycle
    handle = await env.start(ConversationInput(prompt="hi", agent="chatty"), f"chat-{uuid.uuid4().hex[:8]}")
    await until_state(handle, "idle", timeout=60)
    key = await conversation_key(handle, tenant=None)

    code, out, err = await starter_cli(env, capsys, "delete", handle.id)

    assert (code, out) == (1, "")
    assert err == (
        f"error: not deleted: {handle.id} still running: cancel it first, or ask with cancel"
        " (starter.py delete --cancel)\n"
    )
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    assert (await stores.held(key, handle.id))["messages"] == 1

    code, out, err = await starter_cli(env, capsys, "delete", handle.id, "--cancel")

    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"Deleted {handle.id}: 1 conversation(s) ({handle.id})."
    assert out.splitlines()[-1] == "temporal runs    1"  # carried out later (the other tests wait)
    assert await stores.held(key, handle.id) == NOTHING


async def test_forget_erases_every_conversation_of_a_user_and_keeps_the_others(
    lifecycle: tuple[Env, Stores], capsys: pytest.CaptureFixture[str]
) -> None:
    env, stores = lifecycle
    carol, dave_name = a_user("carol"), a_user("dave")
    (first, first_helper), (second, second_helper) = await finished(env, carol), await finished(env, carol)
    (dave, _) = await finished(env, dave_name)
    keys = {h.id: await conversation_key(h) for h in (first, first_helper, second, second_helper, dave)}
    before = await stores.held(keys[dave.id], dave.id)

    code, out, err = await starter_cli(env, capsys, "forget", "--user", carol, "--tenant", "acme")

    assert (code, err) == (0, "")
    assert out.splitlines()[0].startswith(f"Forgot user {carol} of tenant acme: 4 conversation(s) (")
    assert out.splitlines()[1:] == [
        "STORE                         REMOVED",
        "messages                      18",
        "once results                  4",
        "workspace files               4",
        "payloads                      5",  # one start input both had: one payload
        "ledger rows                   8",
        "temporal runs                 4",
        "ledger totals made anonymous  1",  # carol's day total, now acme's with no user
    ]
    for handle in (first, first_helper, second, second_helper):
        assert await stores.held(keys[handle.id], handle.id) == NOTHING
    assert await stores.held(keys[dave.id], dave.id) == before
    assert carol not in await stores.ledger_users()
    assert "" in await stores.ledger_users()  # the anonymous total
    assert dave_name in await stores.ledger_users()

    code, out, err = await starter_cli(env, capsys, "forget", "--user", carol, "--tenant", "acme")

    assert (code, err) == (0, "")  # again: nothing left in any store (Temporal may still list them)
    removed = dict(line.rsplit(maxsplit=1) for line in out.splitlines()[2:])
    assert removed["ledger totals made anonymous"] == "0"
    assert {count for store, count in removed.items() if store != "temporal runs"} == {"0"}


async def test_delete_of_an_unknown_conversation_says_so_in_one_line(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = f"nosuch-{uuid.uuid4().hex[:8]}"

    code, out, err = await starter_cli(env, capsys, "delete", missing)

    assert (code, out, err) == (1, "", f"error: not deleted: no conversation {missing}\n")
