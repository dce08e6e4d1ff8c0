"""A real worker process for the fault tests: the default tools plus a slow one and two paying ones.

TEMPORAL_ADDRESS=... AGENT_TASK_QUEUE=... FAULT_EFFECTS=effects.txt python -m tests.support.fault_worker
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from temporalio.client import Client

from durable_agents.activities.tools import ToolContext, default_registry, tool
from durable_agents.converter import data_converter
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.config import CallPolicy


@tool
async def slow_step(seconds: float) -> str:
    """Work for a while.

    Args:
        seconds: How long.
    """
    await asyncio.sleep(seconds)
    return f"slept {seconds:g}s"


# Each worker kill costs the charges it catches an attempt (the replacement retries them at once:
# durable_agents/worker/lost_calls.py); the soak test kills three times. A tool that kills its worker
# itself is still stopped by max_attempts.
@tool(call=CallPolicy(timeout_seconds=30, max_attempts=5, heartbeat_seconds=3))
async def charge(amount: float, ctx: ToolContext) -> str:
    """Charge a card once, then finish the paperwork (slowly when FAULT_AFTER_EFFECT says so).

    Args:
        amount: Euros.
    """
    receipt = await ctx.once("charge", lambda: _charge(ctx.idempotency_key, amount))
    with Path(os.environ["FAULT_EFFECTS"] + ".recorded").open("a") as recorded:  # once() stored it
        recorded.write(f"{ctx.idempotency_key}\n")
    await asyncio.sleep(float(os.environ.get("FAULT_AFTER_EFFECT", "0")))
    return receipt


@tool(at_most_once=True, call=CallPolicy(timeout_seconds=30, max_attempts=5, heartbeat_seconds=3))
async def pay(amount: float, ctx: ToolContext) -> str:
    """Pay an invoice: at most once (no ``ctx.once`` here), then the paperwork (FAULT_AFTER_EFFECT).

    Args:
        amount: Euros.
    """
    receipt = _charge(ctx.idempotency_key, amount)
    await asyncio.sleep(float(os.environ.get("FAULT_AFTER_EFFECT", "0")))
    return receipt


def _charge(key: str, amount: float) -> str:
    with Path(os.environ["FAULT_EFFECTS"]).open("a") as effects:
        effects.write(f"{key} {amount:g}\n")
    return f"charged {amount:g} EUR"


async def main() -> None:
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"], data_converter=data_converter())
    rate = os.environ.get("AGENT_RATE_LIMIT")
    worker = build_worker(
        client,
        task_queue=os.environ["AGENT_TASK_QUEUE"],
        registry=default_registry(slow_step, charge, pay),
        role=os.environ.get("AGENT_WORKER_ROLE", "all"),  # type: ignore[arg-type]
        activities_per_second=float(rate) if rate else None,
    )
    async with worker:
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
