"""A person is told when a call waits (issue 44, finding 9): the worker's webhook (``AGENT_NOTIFY_URL``)
gets a signed JSON body from the ``notify`` activity when a call starts waiting, again as its
deadline nears, and when a client tool waits; a receiver that is down delays a notification and
loses none (workflows/notifications.py, activities/notify.py)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from durable_agents.activities.agent_files import AgentFileError, load_agent_file
from durable_agents.activities.notify import Notifier, signature
from durable_agents.activities.tools import default_registry
from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.workflows.activity_io import Notification
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import ApprovalPolicy, ClientToolConfig
from durable_agents.workflows.records import ClientResult, Decision
from tests.support.conversations import wait_for_pending
from tests.support.workers import Env

SECRET = b"notify-secret"
CONSOLE = "http://console.example/console"


class Receiver:
    """A plain-HTTP webhook: it keeps each body it accepts; while ``down``, it answers 503."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.refused = 0
        self.down = False
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.down:
                    receiver.refused += 1
                    self.send_response(503)
                else:
                    assert self.headers["X-Durable-Agents-Signature"] == signature(SECRET, body)
                    receiver.bodies.append(json.loads(body))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}/hook"

    async def until(self, count: int, what: str = "bodies") -> None:
        for _ in range(1200):  # a minute at most, on a loaded machine too
            if (len(self.bodies) if what == "bodies" else self.refused) >= count:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the receiver has {len(self.bodies)} bodies, {self.refused} refused")

    def __enter__(self) -> Receiver:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


@pytest.fixture
def environ(receiver: Receiver) -> dict[str, str]:
    return {
        "AGENT_NOTIFY_URL": receiver.url,
        "AGENT_NOTIFY_SECRET": SECRET.decode(),
        "AGENT_CONSOLE_URL": CONSOLE,
    }


def _told(event: str, handle_id: str, waiting: Any, agent: str = "demo", **fields: Any) -> dict[str, Any]:
    return {
        "event": event,
        "conversation": handle_id,
        "agent": agent,
        "tool": waiting.tool,
        "call_id": waiting.call_id,
        "arguments": json.dumps(waiting.arguments),
        "deadline": waiting.deadline.isoformat().replace("+00:00", "Z") if waiting.deadline else None,
        "link": f"{CONSOLE}/c/{handle_id}",
    } | fields


async def test_a_waiting_call_is_told_once_signed_and_again_after_the_receiver_was_down(
    env: Env, receiver: Receiver
) -> None:
    first = await env.start(ConversationInput(prompt="go", agent="demo", tenant="acme", user="ann"))
    [waiting] = await wait_for_pending(first)
    await receiver.until(1)
    await first.execute_update(
        AgentWorkflow.decide, Decision(call_id=waiting.call_id, approve=True, by="ann")
    )
    await first.result()

    receiver.down = True
    second = await env.start(ConversationInput(prompt="go", agent="demo"))
    [later] = await wait_for_pending(second)
    await receiver.until(2, "refused")  # tried, and tried again
    receiver.down = False
    await receiver.until(2)
    await second.terminate()

    assert receiver.bodies == [
        _told("approval_requested", first.id, waiting, tenant="acme", user="ann"),
        _told("approval_requested", second.id, later, tenant=None, user=None),
    ]


async def test_a_deadline_that_nears_and_a_client_tool_that_waits_are_told(
    env: Env, receiver: Receiver
) -> None:
    agent = scripted_agent(
        step("", ("write_file", {"path": "a.txt", "content": "a"}), ("ask_user", {"question": "Sure?"})),
        step("done"),
        tools=["write_file"],
        approval=ApprovalPolicy(require=["write_file"], deadline=8),
        client_tools=[ClientToolConfig(name="ask_user", description="Ask the user.")],
    )
    handle = await env.start(conversation(agent))
    [waiting] = await wait_for_pending(handle)
    await receiver.until(3)  # asked, client tool, then 2 s before the deadline
    [client_call] = await handle.query(AgentWorkflow.pending_client_calls)
    await handle.execute_update(
        AgentWorkflow.deliver_client_result, ClientResult(call_id="call_1_1", result="y")
    )
    await handle.result()

    assert sorted(receiver.bodies, key=lambda b: b["event"]) == [
        _told("approval_requested", handle.id, waiting, agent="test-agent", tenant=None, user=None),
        _told("client_tool_waiting", handle.id, client_call, agent="test-agent", tenant=None, user=None),
        _told("deadline_near", handle.id, waiting, agent="test-agent", tenant=None, user=None),
    ]


def test_slacks_shape_is_one_line_with_the_link() -> None:
    told = Notification(
        event="deadline_near",
        conversation="team/refunds-42",
        agent="refunds",
        tool="refund",
        call_id="call_1_0",
        arguments='{"amount": 20}',
        deadline=datetime(2026, 11, 29, 10, tzinfo=UTC),
        url="https://hooks.slack.com/services/T/B/X",
        format="slack",
    )
    assert Notifier(None, CONSOLE).body(told) == {
        "text": "refunds: refund (call_1_0) still waits for a person, its deadline near, deadline"
        ' 2026-11-29T10:00:00+00:00: {"amount": 20} <http://console.example/console/c/team%2Frefunds-42|team/refunds-42>'
    }


def test_an_agent_files_webhook_must_be_an_http_address(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text('[model]\nprovider = "scripted"\nmodel = "s"\n\n[notify]\nurl = "hooks.example.com"\n')
    with pytest.raises(AgentFileError) as refused:
        load_agent_file(path, default_registry())
    assert str(refused.value) == (f"{path}: field 'notify.url': String should match pattern '^https?://'")
