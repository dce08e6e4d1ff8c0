"""The stores over a long run: their size after each round of short conversations, and after the
retention pass that follows it (a retention of 0 s: every closed conversation is past it).

    .venv/bin/python -m bench.lifecycle [--rounds 5] [--conversations 20] [--no-retention]

Everything runs in this process on SQLite files in a temp dir: an embedded Temporal dev server and
one worker. Each conversation belongs to a tenant and user (ledger rows), starts with a 150 KB
prompt of its own (a payload in the payload store), writes a file, and answers. Printed per round:
live rows of each store and the bytes of the stores' files (SQLite keeps a file's pages once it has
them and reuses the free ones: the bytes reach a plateau, the rows return to zero).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import tempfile
import uuid
from contextlib import closing
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client

from durable_agents.client.lifecycle import run_retention
from durable_agents.converter import data_converter
from durable_agents.dev_server import EmbeddedServer, start_embedded_server
from durable_agents.settings import Settings
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.plugin import build_worker
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.config import ApprovalPolicy

TABLES = {
    "conversations.db": ["messages"],
    "idempotency.db": ["results"],
    "payloads.db": ["payloads", "payload_owners"],
    "ledger.db": ["agent_ledger"],
}
PROMPT_BYTES = 150_000


def _rows(data: Path) -> dict[str, int]:
    counts = {}
    for file, tables in TABLES.items():
        with closing(sqlite3.connect(data / file)) as db:
            for table in tables:
                counts[table] = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    counts["workspace files"] = sum(len(files) for _, _, files in os.walk(data / "workspace"))
    return counts


def _bytes(data: Path) -> int:
    """The stores' files on disk (each database with its write-ahead log) and the workspaces."""
    files = [p for p in data.rglob("*") if p.is_file() and not p.name.startswith("temporal")]
    return sum(p.stat().st_size for p in files)


async def main(rounds: int, conversations: int, passes: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder)
        environ = {
            "AGENT_STORE": str(data / "conversations.db"),
            "AGENT_IDEMPOTENCY_STORE": str(data / "idempotency.db"),
            "AGENT_PAYLOAD_STORE": str(data / "payloads.db"),
            "AGENT_WORKSPACE": str(data / "workspace"),
        }
        settings = Settings.from_env(environ)
        server = await start_embedded_server(port=None, ui=False, db_file=data / "temporal.db")
        try:
            await _run(server, settings, data, rounds, conversations, passes)
        finally:
            await server.stop()


async def _run(
    server: EmbeddedServer, settings: Settings, data: Path, rounds: int, conversations: int, passes: bool
) -> None:
    client = await Client.connect(server.address, data_converter=data_converter(settings))
    agent = scripted_agent(
        step("", ("write_file", {"path": "note.txt", "content": "hello"})),
        step("{last_result}"),
        tools=["write_file"],
    )
    print("| round | conversations so far | rows before the pass | bytes before | rows after | bytes after |")
    print("|---|---|---|---|---|---|")
    async with build_worker(client, settings, task_queue="bench-lifecycle", stores=settings.stores):
        for n in range(1, rounds + 1):
            await asyncio.gather(
                *(
                    client.execute_workflow(
                        AgentWorkflow.run,
                        conversation(
                            agent,
                            prompt=f"{uuid.uuid4()} " + "x" * PROMPT_BYTES,
                            approval=ApprovalPolicy(auto=["write_file"]),
                            tenant="bench",
                            user=f"user-{i % 5}",
                        ),
                        id=f"bench-{uuid.uuid4().hex[:8]}",
                        task_queue="bench-lifecycle",
                    )
                    for i in range(conversations)
                )
            )
            before, size_before = _rows(data), _bytes(data)
            if passes:
                await run_retention(client, retention=timedelta(0), task_queue="bench-lifecycle")
            after, size_after = _rows(data), _bytes(data)
            print(
                f"| {n} | {n * conversations} | {_text(before)} | {size_before / 1e6:.1f} MB"
                f" | {_text(after)} | {size_after / 1e6:.1f} MB |"
            )


def _text(rows: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in rows.items())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--conversations", type=int, default=20, help="conversations per round")
    parser.add_argument("--no-retention", action="store_true", help="no passes: the growth without them")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.conversations, not args.no_retention))
