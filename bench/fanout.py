"""Fan-out: 1,000 SSE clients on one ``serve`` process, on one conversation and 10 per conversation
over 100 conversations.

    .venv/bin/python -m bench.fanout [--clients 1000] [--per-conversation 10] [--rounds 2]

Each conversation waits for its first message while its clients connect; then it streams an
answer of 50 pieces 20 ms apart over the fast channel, calls ``write_file`` (which waits for a
person) and, once approved, answers again (20 more pieces) and ends. Measured: the ``serve``
process's RSS with every client attached (and its peak), its CPU time per event delivered to a
client (every SSE frame any client got, over the whole run of the conversations), the delivery
latency of text deltas (from the fake model's stamp on the newest piece in a delta to the client
that got it; p50 and p99 over every client's every delta), and the decision latency with those
clients attached (the ``decide`` update's round trip, from this process). The clients run in this
process on the same 2 cores: their own reading is in the latencies. Every client must get every
log event in order and end with ``end``; tests assert counts, never these times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid

from temporalio.client import WorkflowUpdateStage

from bench.live_setup import Live, Reader, live_setup, percentile, read_sse
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import AgentSpec, ApprovalPolicy
from durable_agents.workflows.messages import ModelSettings
from durable_agents.workflows.records import Decision

AGENT = AgentSpec(
    name="bench-fanout",
    model=ModelSettings(provider="openai", model="bench-approval-once-x50@20ms", stream=True),
    tools=["write_file"],
    approval=ApprovalPolicy(deadline="none"),
)


async def _pending(live: Live, workflow_id: str) -> str:
    handle = live.client.get_workflow_handle(workflow_id)
    while not (pending := await handle.query(AgentWorkflow.pending_approvals)):
        await asyncio.sleep(0.02)
    return pending[0].call_id


async def scenario(live: Live, conversations: int, per_conversation: int) -> dict[str, float]:
    ids = [f"fanout-{uuid.uuid4().hex[:8]}" for _ in range(conversations)]
    handles = [await live.waiting(AGENT, workflow_id) for workflow_id in ids]
    readers = [(workflow_id, Reader()) for workflow_id in ids for _ in range(per_conversation)]
    tasks = []
    for workflow_id, reader in readers:  # connected in slices, as a crowd arrives
        tasks.append(asyncio.create_task(read_sse(live.port, workflow_id, reader)))
        if len(tasks) % 100 == 0:
            await asyncio.sleep(0.05)
    for _, reader in readers:
        await reader.connected.wait()
    rss_attached = live.serve_rss_mib()
    cpu_before = live.serve_cpu()
    await asyncio.gather(  # the reply comes after the approval: accepted is enough
        *(
            h.start_update(
                AgentWorkflow.send_message, {"text": "go"}, wait_for_stage=WorkflowUpdateStage.ACCEPTED
            )
            for h in handles
        )
    )
    calls = await asyncio.gather(*(_pending(live, workflow_id) for workflow_id in ids))
    decisions: list[float] = []
    for handle, call_id in zip(handles, calls, strict=True):
        started = time.perf_counter()
        await handle.execute_update(AgentWorkflow.decide, Decision(call_id=call_id, approve=True, by="bench"))
        decisions.append((time.perf_counter() - started) * 1000)
    await asyncio.wait_for(asyncio.gather(*tasks), 300)
    cpu = live.serve_cpu() - cpu_before
    delivered = sum(len(r.types) for _, r in readers)
    delays = [d for _, r in readers for d in r.delays_ms]
    for workflow_id, reader in readers:
        logged = [t for t in reader.types if t not in ("text_delta", "tool_call_delta", "text_replaced")]
        if logged[-1] != "end" or logged.count("model_call_finished") != 2 or not reader.delays_ms:
            raise RuntimeError(f"a client of {workflow_id} got {reader.types}")
    return {
        "clients": len(readers),
        "conversations": conversations,
        "serve RSS MiB, clients attached": round(rss_attached, 1),
        "serve peak RSS MiB": round(live.serve_rss_mib("VmHWM"), 1),
        "events delivered": delivered,
        "serve CPU µs per delivered event": round(cpu / delivered * 1e6, 2),
        "delivery latency p50 ms": round(percentile(delays, 0.5), 2),
        "delivery latency p99 ms": round(percentile(delays, 0.99), 2),
        "decision latency median ms": round(statistics.median(decisions), 1),
        "decision latency max ms": round(max(decisions), 1),
    }


async def measure(clients: int, per_conversation: int, rounds: int) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {"one conversation": [], "per conversation": []}
    for _ in range(rounds):
        async with live_setup() as live:
            await scenario(live, 1, 10)  # warm
            results["one conversation"].append(await scenario(live, 1, clients))
        async with live_setup() as live:
            await scenario(live, 1, 10)
            results["per conversation"].append(
                await scenario(live, clients // per_conversation, per_conversation)
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--per-conversation", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results = asyncio.run(measure(args.clients, args.per_conversation, args.rounds))
    names = list(results["one conversation"][0])
    columns = [f"{k}, round {i + 1}" for k in results for i in range(args.rounds)]
    print("| figure | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * (2 * args.rounds))
    for name in names:
        row = [str(r[name]) for k in results for r in results[k]]
        print(f"| {name} | " + " | ".join(row) + " |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
