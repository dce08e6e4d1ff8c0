"""People before viewers: however many follow a conversation (``watch``, ``chat``, SSE clients),
and however they leave, they hold none of its update slots and add nothing to its history, so a
decision, a message or a cancel is never delayed or refused because of them; a client that reads
nothing is dropped after a bound instead of buffered."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durable_agents.client.live import follow
from durable_agents.dev_server import EmbeddedServer
from durable_agents.serve.fanout import Dropped, Hub
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.events import ApprovalRequested
from durable_agents.workflows.records import Decision
from tests.support.cli import starter
from tests.support.conversations import wait_for_pending
from tests.support.history import event_types
from tests.support.paths import ROOT
from tests.support.serving import Served, serving
from tests.support.workers import Env

pytestmark = pytest.mark.timeout(300)

WRITE = ("write_file", {"path": "out.txt", "content": "hi"})


def _awaiting_approval() -> object:
    """A conversation whose first tool call waits for a person."""
    agent = scripted_agent(step("Writing.", WRITE), step("{last_result}"), tools=["write_file", "add"])
    return conversation(agent)


@pytest.fixture
async def served(server: EmbeddedServer, tmp_path: Path) -> AsyncIterator[Served]:
    async with serving(server.address, tmp_path / "serve.log") as found:
        yield found


async def _sse_types(served: Served, workflow_id: str, seen: asyncio.Event) -> list[str]:
    """The event types one SSE client gets, to the end; ``seen`` once an approval is requested."""
    reader, writer = await asyncio.open_connection(served.host, served.port)
    writer.write(f"GET /conversations/{workflow_id}/events HTTP/1.1\r\nHost: {served.host}\r\n\r\n".encode())
    types: list[str] = []
    try:
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        async for line in reader:
            if line.startswith(b"event: "):
                types.append(line[7:].decode().strip())
                if types[-1] == "approval_requested":
                    seen.set()
                if types[-1] == "end":
                    break
    finally:
        writer.close()
    return types


async def _followed_types(client: Client, workflow_id: str, seen: asyncio.Event) -> list[str]:
    types: list[str] = []
    async for _, event in follow(client, workflow_id):
        types.append(event.type)
        if isinstance(event, ApprovalRequested):
            seen.set()
    return types


async def _watch(server: EmbeddedServer, workflow_id: str) -> asyncio.subprocess.Process:
    """``starter.py watch ID``, once it shows the approval awaited."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        "watch",
        workflow_id,
        cwd=ROOT,
        env=os.environ | {"TEMPORAL_ADDRESS": server.address},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    async for line in proc.stdout:
        if b"awaits a decision" in line:
            return proc
    raise AssertionError(f"watch ended before the approval: {(await proc.stderr.read()).decode()}")  # type: ignore[union-attr]


async def _updates_and_signals(handle: WorkflowHandle) -> dict[str, int]:
    kinds = await event_types(handle)
    return {
        "updates": kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED),
        "signals": kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED),
    }


async def test_followers_that_left_hold_no_update_slot_so_a_person_decides(
    env: Env, server: EmbeddedServer
) -> None:
    handle = await env.start(_awaiting_approval())
    [pending] = await wait_for_pending(handle)
    seen = [asyncio.Event() for _ in range(12)]
    followers = [asyncio.create_task(_followed_types(env.client, handle.id, s)) for s in seen]
    interrupted, killed = await _watch(server, handle.id), await _watch(server, handle.id)
    for s in seen:
        await s.wait()
    await asyncio.sleep(0.5)  # each follower is in its next read when it goes
    for task in followers:
        task.cancel()
    interrupted.send_signal(signal.SIGINT)  # Ctrl-C
    killed.kill()
    assert await interrupted.wait() == 130
    await killed.wait()

    code, out, err = await starter(
        server, "approve", handle.id, pending.call_id, "--digest", pending.arguments_digest, "--by", "alice"
    )

    assert (code, err) == (0, "")
    assert out == f"write_file call call_1_0 of {handle.id}: approved by alice\n"
    result = await handle.result()
    assert (result.final_text, result.approvals[0].state) == ("Wrote 2 bytes to out.txt.", "approved")
    assert await _updates_and_signals(handle) == {"updates": 1, "signals": 0}  # the decision alone


async def test_a_decision_takes_effect_and_reaches_500_sse_clients_and_50_followers(
    env: Env, server: EmbeddedServer, served: Served
) -> None:
    handle = await env.start(_awaiting_approval())
    [pending] = await wait_for_pending(handle)
    sse_seen = [asyncio.Event() for _ in range(500)]
    sse = [asyncio.create_task(_sse_types(served, handle.id, s)) for s in sse_seen]
    followers_seen = [asyncio.Event() for _ in range(50)]
    followers = [asyncio.create_task(_followed_types(env.client, handle.id, s)) for s in followers_seen]
    watchers = [await _watch(server, handle.id) for _ in range(2)]
    for s in sse_seen + followers_seen:
        await s.wait()

    record = await handle.execute_update(
        AgentWorkflow.decide, Decision(call_id=pending.call_id, approve=True, by="alice")
    )

    assert record.state == "approved"
    assert (await handle.result()).final_text == "Wrote 2 bytes to out.txt."
    everyone = await asyncio.gather(*sse, *followers)
    assert len(everyone) == 550
    for types in everyone:
        assert types.index("approval_requested") < types.index("approval_decided") < types.index("end")
        assert types[-1] == "end"
    for proc in watchers:
        out, _ = await proc.communicate()
        assert await proc.wait() == 0
        assert b"[approval call_1_0] write_file approved by alice (self-declared) via update" in out
    assert await _updates_and_signals(handle) == {"updates": 1, "signals": 0}
    assert "Traceback" not in served.log.read_text()


async def test_a_client_that_reads_nothing_is_dropped_and_the_others_get_every_event(env: Env) -> None:
    hub = Hub(env.client, kept=2)
    handle = await env.start(_awaiting_approval())
    await wait_for_pending(handle)
    slow, reader = hub.subscribe(handle.id), hub.subscribe(handle.id)
    got: list[str] = []

    async def read() -> None:
        async for entry in reader.events():
            got.append(entry.event.type)

    slow_events = slow.events()
    first = await anext(slow_events)  # subscribed, then never reads again
    reading = asyncio.create_task(read())
    while "approval_requested" not in got:
        await asyncio.sleep(0.05)
    await handle.execute_update(AgentWorkflow.decide, Decision(call_id="call_1_0", approve=True, by="alice"))
    await reading
    await hub.close()

    assert slow.dropped.is_set() and not reader.dropped.is_set()
    with pytest.raises(Dropped):
        await anext(slow_events)
    assert first.offset == 0
    assert got[0] == "state" and got[-1] == "end"
    assert got.index("approval_requested") < got.index("approval_decided")
