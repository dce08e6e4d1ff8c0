"""The ``notify`` activity: a webhook told that a call waits (workflows/notifications.py schedules it;
docs/console.md, "Notifications").

The body is JSON: ours (``event``, ``conversation``, ``agent``, ``tenant``, ``user``, ``tool``,
``call_id``, ``arguments`` cut, ``deadline``, ``link`` to the console's page of the conversation),
or, with ``format = "slack"``, Slack's incoming-webhook body (``{"text": ...}``, the same facts in one
line). With a secret (``AGENT_NOTIFY_SECRET``) it is signed: ``X-Durable-Agents-Signature:
sha256=<hex HMAC-SHA256 of the body>``. ``X-Durable-Agents-Delivery`` names the notification, the
same on every attempt, so a receiver can drop a repeat. A 2xx answer delivers it; a refused
connection, a timeout, 408, 409, 429 or a 5xx fails the attempt, which Temporal retries (the
receiver is down: delayed, not lost); any other answer is a mistake of configuration, given up at once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx2
from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_agents.activities.errors import is_retryable_status
from durable_agents.workflows.activity_io import Notification
from durable_agents.workflows.activity_refs import NOTIFY

DEFAULT_CONSOLE_URL = "http://127.0.0.1:8765/console"
"""The console of ``starter.py serve`` on this machine (``AGENT_CONSOLE_URL`` says where it is)."""
SIGNATURE = "X-Durable-Agents-Signature"
DELIVERY = "X-Durable-Agents-Delivery"
_SAID = {
    "approval_requested": "waits for a person",
    "deadline_near": "still waits for a person, its deadline near",
    "client_tool_waiting": "waits for the client",
}


def signature(secret: bytes, body: bytes) -> str:
    """The signature header's value for ``body``: what a receiver computes to check it."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


@dataclass(frozen=True, eq=False)
class Notifier:
    secret: bytes | None
    """``AGENT_NOTIFY_SECRET``: the key the bodies are signed with (None: unsigned)."""
    console_url: str
    """``AGENT_CONSOLE_URL``: the console's address, for the link to the conversation's page."""

    def body(self, n: Notification) -> dict[str, Any]:
        link = f"{self.console_url}/c/{quote(n.conversation, safe='')}"
        if n.format == "slack":
            deadline = f", deadline {n.deadline.isoformat()}" if n.deadline else ""
            return {
                "text": f"{n.agent}: {n.tool} ({n.call_id}) {_SAID[n.event]}{deadline}:"
                f" {n.arguments} <{link}|{n.conversation}>"
            }
        return n.model_dump(mode="json", exclude={"url", "format"}) | {"link": link}

    @NOTIFY.defn
    async def notify(self, n: Notification) -> None:
        body = json.dumps(self.body(n)).encode()
        info = activity.info()
        headers = {"Content-Type": "application/json", DELIVERY: f"{info.workflow_id}/{info.activity_id}"}
        if self.secret is not None:
            headers[SIGNATURE] = signature(self.secret, body)
        try:
            async with httpx2.AsyncClient(timeout=20) as client:
                answer = await client.post(n.url, content=body, headers=headers)
        except httpx2.HTTPError as e:
            raise ApplicationError(f"{n.url}: {e!r}", type="NotifyUnreachable") from e
        if answer.is_success:
            return
        text = f"{n.url} answered HTTP {answer.status_code}"
        raise ApplicationError(
            text,
            type=f"NotifyHTTP{answer.status_code}",
            non_retryable=not is_retryable_status(answer.status_code),
        )
