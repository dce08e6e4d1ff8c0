"""``ctx.once`` claims on SQLite: a retry waits for a running step's claim, runs it past its expiry,
and at once when its owner gave it up; a result recorded after the claim was taken is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from durable_agents.stores.idempotency import SQLiteIdempotencyStore, StepTakenOver, run_once


async def test_a_retry_waits_for_the_claimed_step_and_returns_its_result(tmp_path: Path) -> None:
    store = SQLiteIdempotencyStore(tmp_path / "idempotency.db")
    effects: list[str] = []
    inside, go = asyncio.Event(), asyncio.Event()

    async def first(key: str) -> str:
        inside.set()
        await go.wait()
        effects.append(key)
        return "first"

    owner = asyncio.create_task(run_once(store, "call/pay", first, claim_seconds=60))
    await inside.wait()
    retry = asyncio.create_task(
        run_once(store, "call/pay", lambda: effects.append("retry"), claim_seconds=60)
    )
    await asyncio.sleep(0.5)  # the retry meets the claim and waits
    go.set()

    assert await asyncio.wait_for(asyncio.gather(owner, retry), 10) == ["first", "first"]
    assert effects == ["call/pay"]


async def test_an_expired_claim_runs_the_step_again_and_refuses_the_late_owner(tmp_path: Path) -> None:
    store = SQLiteIdempotencyStore(tmp_path / "idempotency.db")
    go = asyncio.Event()

    async def late() -> str:
        await go.wait()
        return "late"

    owner = asyncio.create_task(run_once(store, "call/pay", late, claim_seconds=0.2))
    await asyncio.sleep(0.5)  # the claim has expired: past the fence
    assert await run_once(store, "call/pay", lambda: "retry", claim_seconds=60) == "retry"
    go.set()
    with pytest.raises(StepTakenOver):
        await owner
    assert await store.get("call/pay") == '"retry"'


async def test_a_step_whose_function_raised_runs_again_at_once(tmp_path: Path) -> None:
    store = SQLiteIdempotencyStore(tmp_path / "idempotency.db")

    def broken() -> str:
        raise OSError("card service down")

    with pytest.raises(OSError):
        await run_once(store, "call/pay", broken, claim_seconds=600)
    assert await asyncio.wait_for(run_once(store, "call/pay", lambda: "paid", claim_seconds=600), 5) == "paid"
