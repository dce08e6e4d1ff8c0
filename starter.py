"""Start and inspect conversations: ``python starter.py start "prompt" --agent demo --wait``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import os
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from connection import TASK_QUEUE, connect, connect_config, data_converter, ui_link
from workflows.agent import ROLLING_OVER, AgentWorkflow
from workflows.messages import (
    AssistantMessage,
    Message,
    ModelProgress,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)
from workflows.models import (
    ApprovalRecord,
    ConversationHistory,
    ConversationInput,
    ConversationResult,
    Decision,
    MessageInput,
    Reply,
)


class CommandError(Exception):
    """Printed as one line, exit code 1."""


def conversation_summary(agent: str, prompt: str) -> str:
    """The one line the Web UI shows for a conversation."""
    short = " ".join(prompt.split())
    return f"{agent}: {short[:120]}{'…' if len(short) > 120 else ''}"


def format_transcript(messages: Sequence[Message]) -> str:
    lines: list[str] = []
    for m in messages:
        match m:
            case SystemMessage(text=text):
                lines.append(f"[system] {text}")
            case UserMessage(text=text):
                lines.append(f"[user] {text}")
            case AssistantMessage(text=text, tool_calls=calls):
                if text:
                    lines.append(f"[assistant] {text}")
                lines += [f"[tool call {c.id}] {c.name}({json.dumps(c.arguments)})" for c in calls]
            case ToolResultMessage(call_id=call_id, content=content, is_error=is_error):
                lines.append(f"[tool {'error' if is_error else 'result'} {call_id}] {content}")
    return "\n".join(lines)


def format_approval(record: ApprovalRecord) -> str:
    if record.state == "pending":
        deadline = f"deadline {record.deadline:%Y-%m-%d %H:%M:%S} UTC" if record.deadline else "no deadline"
        return f"[approval {record.call_id}] {record.tool} awaits a decision ({deadline})"
    why = f": {record.reason}" if record.reason else ""
    return f"[approval {record.call_id}] {record.tool} {record.state} by {record.by} via {record.via}{why}"


def format_result(result: ConversationResult) -> str:
    usage = result.usage
    flags = " (truncated at max_tokens)" if result.truncated else ""
    return (
        f"{result.final_text}\n"
        f"-- stop reason: {result.stop_reason}{flags}; iterations: {result.iterations}; "
        f"model calls: {result.model_calls}; tool calls: {len(result.tool_calls)}; "
        f"tokens: {usage.input_tokens} in / {usage.output_tokens} out"
    )


async def start(client: Client, args: argparse.Namespace) -> None:
    try:
        conversation = ConversationInput(
            prompt=args.prompt,
            agent=args.agent,
            max_iterations=args.max_iterations,
            on_limit=args.on_limit,
            model=args.model,
            chat=True if args.chat else None,
        )
    except ValidationError as e:
        raise CommandError(f"invalid input: {_brief(e)}") from e
    workflow_id = args.id or f"agent-{args.agent}-{uuid.uuid4().hex[:8]}"
    try:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            conversation,
            id=workflow_id,
            task_queue=args.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            static_summary=conversation_summary(args.agent, args.prompt),
        )
    except WorkflowAlreadyStartedError as e:
        raise CommandError(f"a conversation with id {workflow_id!r} already exists") from e
    print(f"Started {workflow_id}")
    print(f"Web UI: {ui_link(workflow_id)}")
    if args.wait:
        print(format_result(await handle.result()))


async def send(client: Client, args: argparse.Namespace) -> None:
    """Send a follow-up message and print the reply (the whole loop, approvals included, runs first)."""
    handle = client.get_workflow_handle(args.workflow_id)
    print((await send_message(handle, args.text)).text)


async def send_message(handle: WorkflowHandle, text: str, attempts: int = 50) -> Reply:
    """The reply to ``text``; a message refused while the conversation continues as new is sent again."""
    for attempt in range(attempts):
        try:
            return await handle.execute_update(AgentWorkflow.send_message, _message(text), result_type=Reply)
        except WorkflowUpdateFailedError as e:
            cause = e.cause
            if isinstance(cause, ApplicationError) and cause.type == ROLLING_OVER and attempt + 1 < attempts:
                await asyncio.sleep(0.2)
                continue
            raise CommandError(f"not sent: {getattr(cause, 'message', cause)}") from e
    raise AssertionError("unreachable")


async def end(client: Client, args: argparse.Namespace) -> None:
    await client.get_workflow_handle(args.workflow_id).signal(AgentWorkflow.end)
    print(f"{args.workflow_id} will close after its current turn.")


async def refresh_tools(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle(args.workflow_id)
    try:
        names = await handle.execute_update(AgentWorkflow.refresh_tools)
    except WorkflowUpdateFailedError as e:
        raise CommandError(f"not refreshed: {getattr(e.cause, 'message', e.cause)}") from e
    print(f"{args.workflow_id} now offers: {', '.join(names)}")


async def cancel(client: Client, args: argparse.Namespace) -> None:
    await client.get_workflow_handle(args.workflow_id).cancel(reason=args.reason)
    print(f"Cancellation requested for {args.workflow_id}.")


async def chat(client: Client, args: argparse.Namespace) -> None:
    """An interactive chat; tool calls that need approval are asked about inline. End of input leaves."""
    with contextlib.suppress(EOFError):
        await _chat(client, args)


async def _chat(client: Client, args: argparse.Namespace) -> None:
    if args.workflow_id:
        handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
        first = None
    else:
        first = _message(await asyncio.to_thread(input, "you> "))
        workflow_id = f"chat-{args.agent}-{uuid.uuid4().hex[:8]}"
        handle = await client.start_workflow(
            AgentWorkflow.run,
            ConversationInput(prompt=first.text, agent=args.agent, chat=True),
            id=workflow_id,
            task_queue=args.task_queue,
            static_summary=conversation_summary(args.agent, first.text),
        )
        print(f"(conversation {workflow_id}; /quit ends it, /leave leaves it open)")
    while True:
        if first is not None:
            reply = asyncio.create_task(_first_reply(handle))
            first = None
        else:
            text = (await asyncio.to_thread(input, "you> ")).strip()
            if text in ("/quit", "/leave"):
                if text == "/quit":
                    await handle.signal(AgentWorkflow.end)
                return
            if not text:
                continue
            reply = asyncio.create_task(send_message(handle, text))
        print(f"agent> {(await _answering_approvals(handle, reply)).text}")


async def _first_reply(handle: WorkflowHandle) -> Reply:
    while not (replies := await handle.query(AgentWorkflow.replies)):
        await asyncio.sleep(0.2)
    return replies[0]


async def _answering_approvals(handle: WorkflowHandle, reply: asyncio.Task[Reply]) -> Reply:
    """Wait for the reply, asking the operator about each tool call that needs approval."""
    asked: set[str] = set()
    while not reply.done():
        for record in await handle.query(AgentWorkflow.pending_approvals):
            if record.call_id in asked:
                continue
            asked.add(record.call_id)
            question = f"approve {record.tool}({json.dumps(record.arguments)})? [y/N] "
            answer = (await asyncio.to_thread(input, question)).strip().lower()
            decision = Decision(
                call_id=record.call_id,
                approve=answer in ("y", "yes"),
                by=getpass.getuser(),
                reason="answered in chat",
            )
            await handle.execute_update(AgentWorkflow.decide, decision)
        await asyncio.wait([reply], timeout=0.2)
    return reply.result()


def _message(text: str) -> MessageInput:
    try:
        return MessageInput(text=text)
    except ValidationError as e:
        raise CommandError(f"invalid message: {_brief(e)}") from e


async def result(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
    print(format_result(await handle.result()))


async def history(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
    if (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED:
        done = await handle.result()  # no worker needed
        found = ConversationHistory(
            messages=done.messages, tool_calls=done.tool_calls, approvals=done.approvals
        )
    else:
        found = await handle.query(AgentWorkflow.history)
    if args.json:
        print(found.model_dump_json(indent=2))
    else:
        print(format_transcript(found.messages))
        for record in found.approvals:
            print(format_approval(record))


async def status(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle(args.workflow_id)
    print((await handle.query(AgentWorkflow.status)).model_dump_json(indent=2))


async def pending(client: Client, args: argparse.Namespace) -> None:
    """Every tool call waiting for a person, across all conversations."""
    now = datetime.now(UTC)
    rows = []
    async for wf in client.list_workflows(
        'AgentStatus = "awaiting_approval" AND ExecutionStatus = "Running"'
    ):
        handle = client.get_workflow_handle(wf.id)
        for record in await handle.query(AgentWorkflow.pending_approvals):
            age = _duration(now - record.requested_at)
            deadline = f"{record.deadline:%Y-%m-%d %H:%M:%S}Z" if record.deadline else "none"
            rows.append((wf.id, record.call_id, record.tool, json.dumps(record.arguments), age, deadline))
    if not rows:
        print("No tool calls wait for approval.")
        return
    header = ("WORKFLOW ID", "CALL ID", "TOOL", "ARGUMENTS", "AGE", "DEADLINE")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(5)]
    for row in [header, *rows]:
        print(
            "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=False))
            + "  "
            + row[5]
        )


async def decide(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle(args.workflow_id)
    decision = Decision(
        call_id=args.call_id, approve=args.command == "approve", by=args.by, reason=args.reason
    )
    try:
        record = await handle.execute_update(AgentWorkflow.decide, decision)
    except WorkflowUpdateFailedError as e:
        raise CommandError(f"not {args.command.rstrip('e')}ed: {getattr(e.cause, 'message', e.cause)}") from e
    print(f"{record.tool} call {record.call_id} of {args.workflow_id}: {record.state} by {record.by}")


async def watch(client: Client, args: argparse.Namespace) -> None:
    """Follow a conversation live: new messages, approvals awaited and decided, until it ends."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
    shown_messages, shown_approvals, last_detail, last_partial = 0, {}, "", ""
    while True:
        finished = (await handle.describe()).status != WorkflowExecutionStatus.RUNNING
        found = await _conversation(handle)
        new = format_transcript(found.messages[shown_messages:])
        if new:
            print(new)
        shown_messages = len(found.messages)
        for record in found.approvals:
            if shown_approvals.get(record.call_id) != record.state:
                shown_approvals[record.call_id] = record.state
                print(format_approval(record))
                if record.state == "pending":
                    print(f"  approve: python starter.py approve {args.workflow_id} {record.call_id}")
        if finished:
            print(format_result(await handle.result()))
            return
        status = await handle.query(AgentWorkflow.status)
        if status.detail != last_detail:
            last_detail = status.detail
            print(f"... {status.detail}")
        partial = await partial_answer(client, handle)
        if partial and partial != last_partial:
            print(f"agent (typing)> {partial}")
            last_partial = partial
        await asyncio.sleep(args.interval)


async def partial_answer(client: Client, handle: WorkflowHandle) -> str:
    """The text a streaming model call has produced so far (from its heartbeat details), or ""."""
    described = await handle.describe()
    for pending in described.raw_description.pending_activities:
        if pending.activity_type.name == "call_model" and pending.heartbeat_details.payloads:
            [progress] = await client.data_converter.decode(
                list(pending.heartbeat_details.payloads), [ModelProgress]
            )
            return progress.partial_text
    return ""


async def _conversation(handle: WorkflowHandle) -> ConversationHistory:
    """Messages and audit trail; from the result once completed, so no worker is needed."""
    if (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED:
        done = await handle.result()
        return ConversationHistory(
            messages=done.messages, tool_calls=done.tool_calls, approvals=done.approvals
        )
    return await handle.query(AgentWorkflow.history)


def _duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


async def list_conversations(client: Client, args: argparse.Namespace) -> None:
    found = False
    async for wf in client.list_workflows("WorkflowType = 'AgentWorkflow'", limit=args.limit):
        found = True
        state = wf.status.name.lower() if wf.status else "unknown"
        print(f"{wf.id}  {state:<11}  {wf.start_time:%Y-%m-%d %H:%M:%S}")
    if not found:
        print("No conversations yet.")


def _brief(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in error.errors())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Durable agent conversations on Temporal.")
    p.add_argument("--task-queue", default=TASK_QUEUE)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("start", help="start a conversation")
    s.add_argument("prompt")
    s.add_argument("--agent", default="demo")
    s.add_argument("--id", help="workflow id (default: generated)")
    s.add_argument("--wait", action="store_true", help="wait and print the final answer")
    s.add_argument("--max-iterations", type=int)
    s.add_argument("--on-limit", choices=["final_answer", "stop", "fail"])
    s.add_argument("--model", help="another model name for the agent's provider")
    s.add_argument("--chat", action="store_true", help="stay open for follow-up messages")
    s.set_defaults(func=start)

    m = sub.add_parser("send", help="send a follow-up message and print the reply")
    m.add_argument("workflow_id")
    m.add_argument("text")
    m.set_defaults(func=send)

    c = sub.add_parser("chat", help="chat interactively (a new conversation, or an open one by id)")
    c.add_argument("workflow_id", nargs="?")
    c.add_argument("--agent", default="demo")
    c.set_defaults(func=chat)

    e = sub.add_parser("end", help="close a chat after its current turn")
    e.add_argument("workflow_id")
    e.set_defaults(func=end)

    r = sub.add_parser("refresh-tools", help="list the MCP servers' tools again for a running conversation")
    r.add_argument("workflow_id")
    r.set_defaults(func=refresh_tools)

    x = sub.add_parser("cancel", help="cancel a conversation; it ends with the conversation so far")
    x.add_argument("workflow_id")
    x.add_argument("--reason", default="cancelled from starter.py")
    x.set_defaults(func=cancel)

    for name, func, help_text in [
        ("result", result, "wait for and print a conversation's answer"),
        ("history", history, "print a conversation's messages"),
        ("status", status, "print a conversation's status"),
    ]:
        c = sub.add_parser(name, help=help_text)
        c.add_argument("workflow_id")
        c.set_defaults(func=func)
        if name == "history":
            c.add_argument("--json", action="store_true")

    for name in ("approve", "reject"):
        d = sub.add_parser(name, help=f"{name} a tool call that waits for a person (answers whether it took)")
        d.add_argument("workflow_id")
        d.add_argument("call_id")
        d.add_argument("--by", default=getpass.getuser())
        d.add_argument("--reason", default="")
        d.set_defaults(func=decide)

    pd = sub.add_parser("pending", help="tool calls waiting for approval, across all conversations")
    pd.set_defaults(func=pending)

    w = sub.add_parser("watch", help="follow a conversation live until it ends")
    w.add_argument("workflow_id")
    w.add_argument("--interval", type=float, default=0.5)
    w.set_defaults(func=watch)

    ls = sub.add_parser("list", help="recent conversations")
    ls.add_argument("--limit", type=int, default=20)
    ls.set_defaults(func=list_conversations)
    return p


async def run(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        data_converter()
    except ValueError as e:  # a bad AGENT_ENCRYPTION_KEY
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        client = await connect()
    except Exception as e:  # the Rust core's connection errors share no public type
        print(f"error: cannot connect to Temporal at {connect_config()['target_host']}: {e}", file=sys.stderr)
        print("hint: start a worker (python worker.py), which starts the embedded server", file=sys.stderr)
        return 1
    try:
        await args.func(client, args)
    except CommandError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except WorkflowFailureError as e:
        cause = e.cause
        while cause.__cause__ is not None:
            cause = cause.__cause__
        print(f"error: conversation failed: {getattr(cause, 'message', cause)}", file=sys.stderr)
        return 1
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            print(f"error: {getattr(args, 'workflow_id', '')}: {e.message}", file=sys.stderr)
        else:
            print(f"error: {e.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    code = asyncio.run(run())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the SDK can crash at interpreter exit; leave explicitly
