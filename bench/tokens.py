"""Time to first token through the whole path, against the provider SDK reading the same stream.

    .venv/bin/python -m bench.tokens [--conversations 100] [--batched 20]

Through the whole path: the fake model streams its answer's first piece (stamped with the shared
monotonic clock as it is sent), the model activity in the worker process reads it with the
``openai`` SDK and our adapter, sends it over the fast channel to the ``serve`` process, whose
follower hands it to an SSE client in this process: the time from the stamp to the client's
first ``text_delta``. Directly: the ``openai`` SDK in this process reads the same stream from the
same fake model: stamp to first content chunk. Batched: the same path with the channel out of
reach (``serve`` listens elsewhere), so the text comes in the event stream's 0.5 s batches, as
before the channel. Prints median and p99 of each; tests assert counts, never these times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid

import openai

from bench.live_setup import STAMP, Live, Reader, live_setup, percentile, read_sse
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.messages import ModelSettings

AGENT = AgentSpec(
    name="bench-tokens",
    model=ModelSettings(provider="openai", model="bench-text-x40@25ms", stream=True),
)
"""One streamed text answer: 40 pieces, 25 ms apart (1 s: longer than a batch interval)."""


async def through_the_path(live: Live, count: int) -> list[float]:
    found: list[float] = []
    for _ in range(count):
        workflow_id = f"tokens-{uuid.uuid4().hex[:8]}"
        handle = await live.waiting(AGENT, workflow_id)
        reader = Reader()
        reading = asyncio.create_task(read_sse(live.port, workflow_id, reader))
        await reader.connected.wait()
        await handle.execute_update(AgentWorkflow.send_message, {"text": "go"})
        await asyncio.wait_for(reading, 60)
        if reader.first_text_ms is None or reader.types.count("model_call_finished") != 1:
            raise RuntimeError(f"{workflow_id}: no streamed text reached the client: {reader.types}")
        found.append(reader.first_text_ms)
    return found


async def directly(live: Live, count: int) -> list[float]:
    sdk = openai.AsyncOpenAI(base_url=f"{live.procs.fake_url}/v1", api_key="x", max_retries=0)
    found: list[float] = []
    try:
        for _ in range(count):
            stream = await sdk.chat.completions.create(
                model=AGENT.model.model, messages=[{"role": "user", "content": "go"}], stream=True
            )
            async with stream:
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        now = time.monotonic_ns()
                        stamp = STAMP.search(chunk.choices[0].delta.content.encode())
                        assert stamp is not None
                        found.append((now - int(stamp.group(1))) / 1e6)
                        break
    finally:
        await sdk.close()
    return found


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "median_ms": round(statistics.median(values), 2),
        "p99_ms": round(percentile(values, 0.99), 2),
    }


async def measure(count: int, batched: int) -> dict[str, dict[str, float]]:
    async with live_setup() as live:
        await through_the_path(live, 3)  # warm: SDK imports, connections, caches
        path = await through_the_path(live, count)
        direct = await directly(live, count)
    results = {"through the path (fast channel)": summary(path), "provider SDK directly": summary(direct)}
    if batched:
        async with live_setup(same_host_channel=False) as live:
            results["through the path, batched (no channel)"] = summary(await through_the_path(live, batched))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--batched", type=int, default=20, help="conversations without the channel (0: none)")
    args = parser.parse_args()
    results = asyncio.run(measure(args.conversations, args.batched))
    print("| time to first token | n | median ms | p99 ms |")
    print("|---|---:|---:|---:|")
    for name, figures in results.items():
        print(f"| {name} | {figures['n']} | {figures['median_ms']} | {figures['p99_ms']} |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
