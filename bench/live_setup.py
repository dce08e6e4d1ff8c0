"""What the live-stream benchmarks (``bench.tokens``, ``bench.fanout``) share: an embedded dev server,
the fake model streaming timestamped pieces (``bench/fake_model.py``), one worker process and one
``starter.py serve`` process, all on 127.0.0.1 in a temp folder, killed at the end; and a raw SSE
client cheap enough to run a thousand of in the benchmark's own process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client, WorkflowHandle

from bench.measure import cpu_seconds, vm_kib
from bench.processes import ROOT, Procs, bench_dev_server, die_with_parent
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import AgentSpec

STAMP = re.compile(rb"\[(\d+)\]")


@dataclass
class Live:
    client: Client
    """The embedded dev server's (``live_setup`` stops the server)."""
    procs: Procs
    serve: subprocess.Popen
    port: int
    task_queue: str
    tmp: Path

    def serve_cpu(self) -> float:
        return cpu_seconds(self.serve.pid)

    def serve_rss_mib(self, key: str = "VmRSS") -> float:
        return vm_kib(self.serve.pid, key) / 1024

    async def waiting(self, agent: AgentSpec, workflow_id: str) -> WorkflowHandle:
        """A conversation that waits for its first message (its readers connect first)."""
        return await self.client.start_workflow(
            AgentWorkflow.run,
            ConversationInput(agent_spec=agent, await_first_message=True),
            id=workflow_id,
            task_queue=self.task_queue,
        )


@contextlib.asynccontextmanager
async def live_setup(*, same_host_channel: bool = True) -> AsyncIterator[Live]:
    """Everything running; ``same_host_channel=False`` gives ``serve`` a delta folder of its own, so
    the worker finds no reader and batches its text into the event stream (the fallback)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-live-"))
    os.environ["AGENT_PAYLOAD_STORE"] = str(tmp / "payloads.db")  # read by data_converter()
    os.environ["AGENT_DELTA_DIR"] = str(tmp / "deltas")  # the worker's (spawned with this environment)
    server = await bench_dev_server(tmp)
    procs = Procs(tmp, server.address, ROOT)
    serve: subprocess.Popen | None = None
    try:
        procs.start_fake()
        task_queue = "bench-live"
        worker = procs.spawn_worker(task_queue)
        await worker.wait_ready()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        serve = subprocess.Popen(
            [sys.executable, "starter.py", "--task-queue", task_queue, "serve", "--port", str(port)],
            cwd=ROOT,
            env=os.environ
            | {
                "TEMPORAL_ADDRESS": server.address,
                "AGENT_DATA_DIR": str(tmp),
                "AGENT_DELTA_DIR": str(tmp / ("deltas" if same_host_channel else "serve-deltas")),
            },
            stdout=subprocess.DEVNULL,
            stderr=(tmp / "serve.log").open("wb"),
            preexec_fn=die_with_parent,
        )
        for _ in range(300):
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            await asyncio.sleep(0.1)
        yield Live(server.client, procs, serve, port, task_queue, tmp)
    finally:
        if serve is not None:
            serve.kill()
            serve.wait()
        procs.stop_all()
        await server.stop()


@dataclass
class Reader:
    """One SSE client of a conversation: the event types it got, in order, and for each text delta
    the time it took from the fake model's last piece in it to this client."""

    types: list[str] = field(default_factory=list)
    delays_ms: list[float] = field(default_factory=list)
    first_text_ms: float | None = None
    """The first text delta's delay: the first piece's time to this client."""
    connected: asyncio.Event = field(default_factory=asyncio.Event)


async def read_sse(port: int, workflow_id: str, reader: Reader) -> Reader:
    """Read ``/conversations/ID/events`` to its ``end`` event."""
    stream, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    writer.write(f"GET /conversations/{workflow_id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    kind = b""
    try:
        status = await stream.readline()
        if not status.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"SSE {workflow_id}: {status!r}")
        async for line in stream:
            if line.startswith(b"event: "):
                kind = line[7:].strip()
                reader.types.append(kind.decode())
                reader.connected.set()
            elif line.startswith(b"data: ") and kind == b"text_delta":
                now = time.monotonic_ns()
                stamps = STAMP.findall(line)
                if stamps:
                    reader.delays_ms.append((now - int(stamps[-1])) / 1e6)
                    if reader.first_text_ms is None:
                        reader.first_text_ms = (now - int(stamps[0])) / 1e6
            elif line.startswith(b"data: ") and kind == b"end":
                break
    finally:
        writer.close()
    return reader


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]
