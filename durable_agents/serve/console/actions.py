"""What a person at the console does to a conversation, through the same updates, signals and
client functions as ``starter.py``: decide a call (``decide``, signed as ``starter.py approve``
signs), answer a client tool's call (``deliver_client_result``, as ``starter.py answer``), revoke a
tool, send a message, interrupt a turn, end, cancel, fork. Each either took, or
raises ``Refused`` with the reason on one line, for the page to show where the person acted."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError

from durable_agents.client import conversations, decisions
from durable_agents.client.conversations import fork_conversation, interrupt_turn, refusal
from durable_agents.client.decisions import Refused
from durable_agents.serve.console.sessions import Session
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import MessageInput
from durable_agents.workflows.inputs import first_error
from durable_agents.workflows.records import (
    ApprovalRecord,
    ClientCall,
    ClientResult,
    Revocation,
    ToolAllowance,
)


def edited_arguments(text: str) -> dict[str, Any] | None:
    """The JSON object a person edited the arguments into; None for none given."""
    try:
        return conversations.edited_arguments(text)
    except ValueError as e:
        raise Refused(f"the arguments: {e}") from e


async def decide(
    client: Client,
    workflow_id: str,
    session: Session,
    *,
    call_id: str,
    digest: str,
    approve: bool,
    reason: str = "",
    arguments: dict[str, Any] | None = None,
    remember: bool = False,
    wait_seconds: float = 10.0,
) -> ApprovalRecord:
    """The ``decide`` update, as the logged-in person, bound to the ``digest`` they saw; signed with
    their approver key when they have one. The worker checks edited arguments against the tool's
    schema (the update's validator: a refusal leaves no trace in history)."""
    given = {"call_id": call_id, "approve": approve, "reason": reason, "arguments_digest": digest}
    decision = decisions.decision_from(
        given | {"arguments": arguments, "remember": remember or None},
        by=session.name,
        wait_seconds=wait_seconds,
    )
    signer = decisions.Signer(session.name, session.secret)
    try:
        return await decisions.decide(client.get_workflow_handle(workflow_id), decision, signer=signer)
    except RPCError as e:
        raise Refused(e.message) from e


async def answer(client: Client, workflow_id: str, call_id: str, text: str, *, as_json: bool) -> ClientCall:
    """Deliver a client tool's result (``ask_user``: the person's answer, as text; another tool's
    result: ``text`` parsed as JSON). The worker checks it against the tool's result schema and that
    the call still waits (the update's validator: a refusal leaves no trace in history)."""
    value: Any = text
    if as_json:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise Refused(f"the result is not JSON ({e.msg} at position {e.pos})") from e
    try:
        result = ClientResult(call_id=call_id, result=value)
    except ValidationError as e:
        raise Refused(f"invalid result: {first_error(e)}") from e
    return await _update(client.get_workflow_handle(workflow_id), AgentWorkflow.deliver_client_result, result)


async def revoke(client: Client, workflow_id: str, session: Session, tool: str) -> ToolAllowance:
    try:
        revocation = Revocation(tool=tool, by=session.name)
    except ValidationError as e:
        raise Refused(f"invalid revocation: {first_error(e)}") from e
    return await _update(client.get_workflow_handle(workflow_id), AgentWorkflow.revoke, revocation)


async def send_message(client: Client, workflow_id: str, text: str) -> None:
    """Queue a message; returns once the conversation accepted it (its reply comes on the stream)."""
    try:
        message = MessageInput(text=text)
    except ValidationError as e:
        raise Refused(f"invalid message: {first_error(e)}") from e
    handle = client.get_workflow_handle(workflow_id)
    try:
        await handle.start_update(
            AgentWorkflow.send_message, message, wait_for_stage=WorkflowUpdateStage.ACCEPTED
        )
    except WorkflowUpdateFailedError as e:
        raise Refused(refusal(e)) from e
    except RPCError as e:
        raise Refused(e.message) from e


async def end(client: Client, workflow_id: str) -> None:
    """Close a chat after its current turn (the ``end`` signal)."""
    await _rpc(client.get_workflow_handle(workflow_id).signal(AgentWorkflow.end))


async def interrupt(client: Client, workflow_id: str) -> str:
    """End the running turn (the ``interrupt`` signal), saying what that does to it, as the starter
    does (``interrupt_turn``); refused when no turn runs."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        described = await handle.describe()
        return f"Interrupted: {await interrupt_turn(client, handle, described.task_queue)}"
    except ValueError as e:
        raise Refused(f"{workflow_id} {e}") from e
    except RPCError as e:
        raise Refused(e.message) from e


async def cancel(client: Client, workflow_id: str) -> None:
    """Cancel: the conversation ends with what it has so far."""
    await _rpc(client.get_workflow_handle(workflow_id).cancel())


async def fork(client: Client, workflow_id: str, at: int) -> str:
    """A new conversation from the first ``at`` messages: its workflow id."""
    try:
        return (await fork_conversation(client, workflow_id, at)).id
    except ValueError as e:
        raise Refused(str(e)) from e
    except RPCError as e:
        raise Refused(e.message) from e


async def _update(handle: WorkflowHandle, update: Any, arg: Any) -> Any:
    try:
        return await handle.execute_update(update, arg)
    except WorkflowUpdateFailedError as e:
        raise Refused(refusal(e)) from e
    except RPCError as e:
        raise Refused(e.message) from e


async def _rpc(call: Any) -> None:
    try:
        await call
    except RPCError as e:
        raise Refused(e.message) from e
