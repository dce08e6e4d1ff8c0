"""A worker process as on a host of its own: its own data folder (the working directory), and only
``AGENT_DATABASE_URL`` in common with the other hosts. The fault worker's tools, plus one with a large output.

cd HOSTDIR && TEMPORAL_ADDRESS=... AGENT_TASK_QUEUE=... AGENT_DATABASE_URL=... FAULT_EFFECTS=... \
    PYTHONPATH=REPO python -m tests.support.host_worker
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from durable_agents.activities.tools import ToolContext, default_registry, tool
from durable_agents.converter import data_converter
from durable_agents.settings import Settings
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.config import CallPolicy
from tests.support.fault_worker import charge, slow_step


@tool
def emit(chars: int, seed: int) -> str:
    """Return a long text (a large tool output).

    Args:
        chars: Length of the text.
        seed: Makes each text different.
    """
    return big_text(chars, seed)


@tool(call=CallPolicy(timeout_seconds=60, max_attempts=3, heartbeat_seconds=3))
async def charge_and_report(amount: float, chars: int, ctx: ToolContext) -> str:
    """Charge a card once, work for FAULT_AFTER_EFFECT seconds, then return a long report.

    Args:
        amount: Euros.
        chars: Length of the report.
    """
    receipt = await charge.function(amount, ctx)
    return f"{receipt}\n{big_text(chars, int(amount))}"


@tool(call=CallPolicy(timeout_seconds=60, max_attempts=3, heartbeat_seconds=3))
async def charge_then_wait(amount: float, ctx: ToolContext) -> str:
    """Charge a card once; the charge returns when the file FAULT_EFFECTS.go exists.

    Args:
        amount: Euros.
    """

    async def pay() -> str:
        with Path(os.environ["FAULT_EFFECTS"]).open("a") as effects:
            effects.write(f"{ctx.idempotency_key} {amount:g}\n")
        while not Path(os.environ["FAULT_EFFECTS"] + ".go").exists():
            await asyncio.sleep(0.05)
        return f"charged {amount:g} EUR"

    return await ctx.once("charge", pay)


# Attempts for every poll a paused host keeps open (the SDK's 5 activity pollers): the server hands
# each a retry, which times out at its heartbeat timeout (docs/guarantees.md), and one more.
@tool(call=CallPolicy(timeout_seconds=60, max_attempts=8, heartbeat_seconds=2))
async def pay_inside(amount: float, blocking: bool, ctx: ToolContext) -> str:
    """Pay once: inside ``ctx.once`` say so (FAULT_EFFECTS.inside), work FAULT_INSIDE_SECONDS (in a
    blocking call in a thread, or awaiting), then append the payment to FAULT_EFFECTS.

    Args:
        amount: Euros.
        blocking: Whether the work blocks a thread (nothing can cancel it).
    """
    effects = Path(os.environ["FAULT_EFFECTS"])
    seconds = float(os.environ.get("FAULT_INSIDE_SECONDS", "0"))
    step_key = f"{ctx.idempotency_key}/pay"

    def said() -> None:
        with effects.with_suffix(".inside").open("a") as inside:
            inside.write(f"{step_key}\n")

    def paid() -> str:
        with effects.open("a") as out:
            out.write(f"{step_key} {amount:g}\n")
        return f"paid {amount:g} EUR"

    def blocked() -> str:
        said()
        time.sleep(seconds)
        return paid()

    async def pay_blocking() -> str:
        return await asyncio.to_thread(blocked)

    async def pay_awaiting() -> str:
        said()
        await asyncio.sleep(seconds)
        return paid()

    return await ctx.once("pay", pay_blocking if blocking else pay_awaiting)


# As ``pay_inside``: the failing first attempt, one for each poll a paused host keeps open, and more.
@tool(call=CallPolicy(timeout_seconds=30, max_attempts=8, heartbeat_seconds=2))
def note(text: str, ctx: ToolContext) -> str:
    """Append a line to FAULT_EFFECTS: a plain effect, no ``ctx.once``. Its first attempt fails before
    the effect, so that the call's next attempt is queued for any worker's polls (a first attempt
    starts eagerly, on the worker that scheduled it).

    Args:
        text: The line.
    """
    if activity.info().attempt == 1:  # an activity's failure (a tool's own error goes to the model)
        raise ApplicationError("the first attempt of note fails, before its effect")
    with Path(os.environ["FAULT_EFFECTS"]).open("a") as out:
        out.write(f"{ctx.idempotency_key} {text}\n")
    return f"noted {text}"


def big_text(chars: int, seed: int) -> str:
    unit = f"[{seed}:{chars}]"
    return (unit * (chars // len(unit) + 1))[:chars]


async def main() -> None:
    settings = Settings.from_env()
    stores = settings.stores
    await stores.open()
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"], data_converter=data_converter(settings))
    worker = build_worker(
        client,
        task_queue=os.environ["AGENT_TASK_QUEUE"],
        registry=default_registry(
            slow_step, charge, emit, charge_and_report, charge_then_wait, pay_inside, note
        ),
        stores=stores,
    )
    running = asyncio.create_task(worker.run())
    while not (worker.is_running or running.done()):
        await asyncio.sleep(0.05)
    print("ready", flush=True)
    await running  # a worker that stops by itself (its lease taken) ends the process, saying why


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
