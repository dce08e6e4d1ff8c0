"""What the shared stores cost: PostgreSQL (``AGENT_DATABASE_URL``) against the SQLite default, same run.

    .venv/bin/python -m bench.stores [--conversations 40] [--database-url postgresql://...]

Without ``--database-url`` it starts a throwaway PostgreSQL server on loopback (initdb + pg_ctl, as
the tests do: ``tests/conftest.py``). Everything else runs in this process: an embedded Temporal dev
server (SQLite in a temp dir) and one worker per store kind, each on its own task queue.

1. The store's work per model call, as the model activity does it: read the transcript so far
   (10 or 100 messages of ~200 bytes) and write the two new messages. Median and p95, in ms.
2. Latency per conversation through Temporal: a scripted agent whose model calls ``write_file``,
   then ``read_file``, then answers (3 model calls, 2 tool calls: conversation store and workspace
   on every step). Conversations run one at a time, alternating store kinds so both see the same
   machine load. Median and p95, and the difference per model call.

The target: PostgreSQL adds at most 5 ms per model call over SQLite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from bench.processes import bench_dev_server, postgres_server
from durable_agents.settings import Settings
from durable_agents.stores.conversations import ConversationStore
from durable_agents.stores.postgres import database
from durable_agents.stores.settings import StoreSettings
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import ApprovalPolicy
from durable_agents.workflows.messages import AssistantMessage, UserMessage

MODEL_CALLS = 3
TARGET_MS = 5.0


def _settings(kind: str, tmp: Path, url: str) -> StoreSettings:
    if kind == "postgres":
        return Settings.from_env({"AGENT_DATABASE_URL": url}).stores
    return Settings.from_env(
        {
            "AGENT_STORE": str(tmp / "conversations.db"),
            "AGENT_IDEMPOTENCY_STORE": str(tmp / "idempotency.db"),
            "AGENT_PAYLOAD_STORE": str(tmp / "payloads.db"),
            "AGENT_WORKSPACE": str(tmp / "workspace"),
        }
    ).stores


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.95) - 1] * 1000


async def store_per_model_call(store: ConversationStore, transcript: int, repeats: int) -> list[float]:
    """Seconds for one model call's store work: load ``transcript`` messages, save two new ones."""
    samples = []
    for _ in range(repeats):
        key = f"bench/{uuid.uuid4()}"
        await store.save(key, 0, [UserMessage(text="x" * 200) for _ in range(transcript)])
        new = [AssistantMessage(text="y" * 200), UserMessage(text="z" * 200)]
        started = time.perf_counter()
        assert await store.load(key, transcript) is not None
        await store.save(key, transcript, new)
        samples.append(time.perf_counter() - started)
    return samples


async def main(conversations: int, url: str | None) -> None:
    with contextlib.ExitStack() as servers:
        if url is None:
            pg = servers.enter_context(postgres_server("bench.stores", ", or pass --database-url"))
            url = await pg.new_database()
        try:
            with tempfile.TemporaryDirectory() as folder:
                await _run(conversations, url, Path(folder))
        finally:
            await database(url).close()


async def _run(conversations: int, url: str, tmp: Path) -> None:
    os.environ["AGENT_PAYLOAD_STORE"] = str(tmp / "payloads.db")  # the benchmark client's, out of the repo
    kinds = ("sqlite", "postgres")
    settings = {kind: _settings(kind, tmp, url) for kind in kinds}
    await settings["postgres"].open()
    rows: list[tuple[str, str, str]] = []
    for transcript in (10, 100):
        figures = {}
        for kind in kinds:
            store = settings[kind].conversation_store()
            await store_per_model_call(store, transcript, 10)  # warm up
            figures[kind] = _ms(await store_per_model_call(store, transcript, 200))
        rows.append(
            (f"store work per model call, transcript of {transcript} messages",
             *(f"{figures[k][0]:.2f} ms (p95 {figures[k][1]:.2f})" for k in kinds))
        )  # fmt: skip

    server = await bench_dev_server(tmp)
    agent = scripted_agent(
        step("", ("write_file", {"path": "notes/a.txt", "content": "hello"})),
        step("", ("read_file", {"path": "notes/a.txt"})),
        step("{last_result}"),
        tools=["write_file", "read_file"],
    )
    latencies: dict[str, list[float]] = {kind: [] for kind in kinds}
    try:
        workers = [build_worker(server.client, task_queue=f"bench-{k}", stores=settings[k]) for k in kinds]
        async with workers[0], workers[1]:
            for n in range(conversations + 2):
                for kind in kinds if n % 2 else reversed(kinds):
                    started = time.perf_counter()
                    result = await server.client.execute_workflow(
                        AgentWorkflow.run,
                        conversation(agent, approval=ApprovalPolicy(auto=["write_file"])),
                        id=f"bench-{kind}-{uuid.uuid4().hex[:8]}",
                        task_queue=f"bench-{kind}",
                    )
                    assert result.final_text == "hello", result.final_text
                    if n >= 2:  # the first two of each warm up
                        latencies[kind].append(time.perf_counter() - started)
    finally:
        await server.stop()
    conversation_ms = {kind: _ms(latencies[kind]) for kind in kinds}
    rows.append(
        (f"latency per conversation ({MODEL_CALLS} model calls, 2 file tools), {conversations} each",
         *(f"{conversation_ms[k][0]:.1f} ms (p95 {conversation_ms[k][1]:.1f})" for k in kinds))
    )  # fmt: skip
    added = (conversation_ms["postgres"][0] - conversation_ms["sqlite"][0]) / MODEL_CALLS
    print("| measured | SQLite files (default) | PostgreSQL (AGENT_DATABASE_URL) |")
    print("|---|---|---|")
    for row in rows:
        print(f"| {' | '.join(row)} |")
    verdict = "within" if added <= TARGET_MS else "over"
    print(f"\nPostgreSQL adds {added:+.2f} ms per model call (median latency difference / {MODEL_CALLS}): "
          f"{verdict} the {TARGET_MS:g} ms target.")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--database-url", help="an existing PostgreSQL database (default: start one)")
    args = parser.parse_args()
    asyncio.run(main(args.conversations, args.database_url))
