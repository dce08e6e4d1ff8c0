"""Client tools: tools that run on the client, which delivers their results.

An agent lists them as ``client_tools`` (a definition with its JSON schemas, or the built-in
``ask_user``), or a start input brings them. The model is offered them as any tool; a call of one
publishes ``client_tool_requested`` on the event stream and waits, durably, for the client to
deliver the result with the ``deliver_client_result`` update (``starter.py answer``): until the
tool's deadline (then the model reads that the user did not answer), or until the conversation is
cancelled. The wait holds nothing: it survives worker crashes, and a continue-as-new carries it to
the next run (``client_calls`` in the carried state). A result is checked against the tool's
``result_schema``; one for a call that does not wait (unknown, delivered, past its deadline), of
the wrong shape, or (the validator's bound) over ``max_message_bytes`` is refused with one line. A
result longer than ``max_tool_output_chars`` is kept cut, as any tool's output: the record, the
update's answer and what the model reads hold the same cut text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

from durable_agents.workflows.activity_io import ToolOutcome, ToolSpec, cut
from durable_agents.workflows.approvals import time_left
from durable_agents.workflows.config import ClientToolConfig
from durable_agents.workflows.decisions import schema_error
from durable_agents.workflows.events import ClientToolRequested, ConversationEvents
from durable_agents.workflows.messages import ToolCall, ToolDefinition
from durable_agents.workflows.records import ClientCall, ClientResult


def client_tool_specs(tools: list[ClientToolConfig]) -> list[ToolSpec]:
    """The tools the model is offered for ``tools``."""
    return [
        ToolSpec(
            definition=ToolDefinition(name=t.name, description=t.description, parameters=t.parameters),
            client=t,
        )
        for t in tools
    ]


class ClientCalls:
    """The conversation's client-tool calls: those that wait, and what was delivered."""

    def __init__(self, calls: list[ClientCall], events: ConversationEvents) -> None:
        self.calls = calls
        """The carried state's own list: a continue-as-new takes it along."""
        self._events = events

    @property
    def pending(self) -> list[ClientCall]:
        return [c for c in self.calls if c.state == "pending"]

    def check(self, result: ClientResult, now: datetime, *, max_bytes: int | None = None) -> ClientCall:
        """The waiting call ``result`` is for; ``ValueError`` with one line when it cannot be taken.
        ``max_bytes`` is the validator's alone: the handler takes on replay what an older release took."""
        call = next((c for c in self.calls if c.call_id == result.call_id), None)
        if call is None:
            waiting = ", ".join(c.call_id for c in self.pending) or "none"
            raise ValueError(f"no client tool call {result.call_id!r} waits (waiting: {waiting})")
        if call.state != "pending" or (call.deadline is not None and now >= call.deadline):
            state = "past its deadline" if call.state == "pending" else call.state
            raise ValueError(f"client tool call {result.call_id!r} is {state}: nothing waits for its result")
        if max_bytes is not None and (size := len(result_text(result.result).encode())) > max_bytes:
            raise ValueError(
                f"the result for {call.tool} is {size} bytes; this conversation takes at most {max_bytes}"
            )
        if not result.is_error and (problem := schema_error(result.result, call.result_schema)) is not None:
            raise ValueError(f"the result for {call.tool} does not fit its result schema: {problem}")
        return call

    def deliver(self, call: ClientCall, result: ClientResult, now: datetime, max_chars: int) -> ClientCall:
        """Take ``result`` for ``call`` (as ``check`` found it), cut to ``max_chars``: then kept as the
        text the model reads."""
        text = result_text(result.result)
        call.state, call.result, call.is_error, call.delivered_at = (
            "delivered",
            result.result if len(text) <= max_chars else cut(text, max_chars),
            result.is_error,
            now,
        )
        return call

    def cancel_pending(self) -> None:
        for call in self.pending:
            call.state = "cancelled"

    async def resolve(
        self,
        tool: ToolSpec,
        call: ToolCall,
        hand_over: Callable[[], bool],
        asked: Callable[[ClientCall], None],
    ) -> ToolOutcome | None:
        """The call's outcome once the client delivered it or its deadline passed; None when the wait
        is handed over to the next run (``hand_over``: a continue-as-new is due). ``asked``: told
        once the call waits (the Web UI's details name it)."""
        assert tool.client is not None
        waiting = next((c for c in self.calls if c.call_id == call.id), None)
        if waiting is None:
            now = workflow.now()
            deadline = tool.client.deadline
            waiting = ClientCall(
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments,
                requested_at=now,
                deadline=None if deadline == "none" else now + timedelta(seconds=deadline),
                result_schema=tool.client.result_schema,
            )
            self.calls.append(waiting)
            self._events.publish(ClientToolRequested(call=waiting))
            asked(waiting)
        record = waiting
        if record.state == "pending":
            remaining = None if record.deadline is None else time_left(record.deadline, workflow.now())
            try:
                await workflow.wait_condition(
                    lambda: record.state != "pending" or hand_over(),
                    timeout=remaining,
                    timeout_summary=f"client result for {record.tool} ({record.call_id})",
                )
            except TimeoutError:
                if record.state == "pending":
                    record.state = "timed_out"
        match record.state:
            case "pending":
                return None
            case "delivered":
                return ToolOutcome(content=result_text(record.result), is_error=record.is_error)
            case "timed_out":
                return ToolOutcome(
                    content=f"The user did not answer: no result for {record.tool} came before its deadline.",
                    is_error=True,
                )
        return ToolOutcome(content=f"Client tool call '{record.tool}' was cancelled.", is_error=True)


def result_text(value: Any) -> str:
    """What the model reads of a client's result: the text, or any other value as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
