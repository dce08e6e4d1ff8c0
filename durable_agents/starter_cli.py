"""The starter's commands (``python starter.py start "prompt" --agent demo --wait``) and how it prints
conversations."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import re
import sys
import traceback
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)
from temporalio.service import RPCError, RPCStatusCode

from activities.store import PayloadMissingError
from durable_agents.codec import ENCODING, ENV_VAR, EncryptionKeyError
from durable_agents.connection import connect, connect_config
from durable_agents.conversations import conversation_history, fork_conversation, start_conversation, ui_link
from durable_agents.converter import data_converter
from durable_agents.settings import Settings
from workflows.activity_refs import CALL_MODEL
from workflows.agent import ROLLING_OVER, AgentWorkflow
from workflows.api import (
    AGENT_NAME,
    AGENT_STATUS,
    AgentOverrides,
    ConversationInput,
    ConversationResult,
    ConversationStatus,
    MessageInput,
)
from workflows.inputs import first_error
from workflows.messages import (
    AssistantMessage,
    Message,
    ModelProgress,
    SummaryMessage,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)
from workflows.records import ApprovalRecord, Decision, Reply

PENDING_QUERY_TIMEOUT = timedelta(seconds=10)
"""How long `pending` waits for each conversation's worker to answer."""


class CommandError(Exception):
    """Printed as one line, exit code 1."""


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
            case SummaryMessage(text=text, replaces=replaces):
                lines.append(f"[summary of the {replaces} messages before] {text}")
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
    prompt = _text(args.prompt, args.file, "prompt")
    try:
        conversation = ConversationInput(
            prompt=prompt,
            agent=args.agent,
            overrides={  # validated with the rest, so the first error is the first field's
                "max_iterations": args.max_iterations,
                "on_limit": args.on_limit,
                "model": args.model,
                "chat": True if args.chat else None,
            },
        )
    except ValidationError as e:
        raise CommandError(f"invalid input: {first_error(e)}") from e
    workflow_id = args.id or f"agent-{args.agent}-{uuid.uuid4().hex[:8]}"
    try:
        handle = await start_conversation(
            client,
            conversation,
            id=workflow_id,
            task_queue=args.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError as e:
        raise CommandError(f"a conversation with id {workflow_id!r} already exists") from e
    print(f"Started {workflow_id}")
    print(f"Web UI: {ui_link(workflow_id, client.namespace, args.settings.ui_url)}")
    if args.wait:
        print(format_result(await handle.result()))


async def fork(client: Client, args: argparse.Namespace) -> None:
    """A new conversation from the first N messages of another (same agent, a fresh budget)."""
    prompt = None if args.prompt is None and args.file is None else _text(args.prompt, args.file, "prompt")
    try:
        handle = await fork_conversation(
            client,
            args.workflow_id,
            args.at,
            id=args.id,
            prompt=prompt,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except ValueError as e:
        raise CommandError(str(e)) from e
    except WorkflowAlreadyStartedError as e:
        raise CommandError(f"a conversation with id {args.id!r} already exists") from e
    print(f"Started {handle.id} (fork of {args.workflow_id} at message {args.at})")
    print(f"Web UI: {ui_link(handle.id, client.namespace, args.settings.ui_url)}")
    if args.wait:
        print(format_result(await handle.result()))


async def send(client: Client, args: argparse.Namespace) -> None:
    """Send a follow-up message and print the reply (the whole loop, approvals included, runs first)."""
    text = _text(args.text, args.file, "message")
    handle = client.get_workflow_handle(args.workflow_id)
    print((await send_message(handle, text)).text)


def _text(given: str | None, path: str | None, what: str) -> str:
    """The text given as an argument or read from ``--file`` (``-``: stdin): exactly one of them.

    A file has no size limit of its own; an argument is capped by the OS (128 KiB on Linux).
    """
    if given is not None and path is not None:
        raise CommandError(f"give the {what} as an argument or with --file, not both")
    if path is None:
        if given is None:
            raise CommandError(f"give the {what} as an argument, or with --file PATH (--file - reads stdin)")
        return given
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as e:
        raise CommandError(f"cannot read --file {path}: {e.strerror or e}") from e
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        source = "stdin" if path == "-" else path
        raise CommandError(f"--file {source} is not UTF-8 text (byte {e.start})") from e


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
            raise CommandError(f"not sent: {_refusal(e)}") from e
    raise AssertionError("unreachable")


async def end(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle(args.workflow_id)
    await _require_running(handle, "nothing to end")
    await handle.signal(AgentWorkflow.end)
    print(f"{args.workflow_id} will close after its current turn.")


async def refresh_tools(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle(args.workflow_id)
    try:
        names = await handle.execute_update(AgentWorkflow.refresh_tools)
    except WorkflowUpdateFailedError as e:
        raise CommandError(f"not refreshed: {_refusal(e)}") from e
    print(f"{args.workflow_id} now offers: {', '.join(names)}")


async def cancel(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle(args.workflow_id)
    await _require_running(handle, "nothing to cancel")
    await handle.cancel(reason=args.reason)
    print(f"Cancellation requested for {args.workflow_id}.")


async def _require_running(handle: WorkflowHandle, consequence: str) -> None:
    """Refuse when the conversation has closed: Temporal would accept a cancel and do nothing."""
    described = await handle.describe()
    if described.status != WorkflowExecutionStatus.RUNNING:
        raise CommandError(f"{handle.id} is already closed ({_agent_state(described)}); {consequence}")


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
        handle = await start_conversation(
            client,
            ConversationInput(prompt=first.text, agent=args.agent, overrides=AgentOverrides(chat=True)),
            id=workflow_id,
            task_queue=args.task_queue,
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
                arguments_digest=record.arguments_digest,
            )
            await handle.execute_update(AgentWorkflow.decide, decision)
        await asyncio.wait([reply], timeout=0.2)
    return reply.result()


def _message(text: str) -> MessageInput:
    try:
        return MessageInput(text=text)
    except ValidationError as e:
        raise CommandError(f"invalid message: {first_error(e)}") from e


async def result(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
    print(format_result(await handle.result()))


async def history(client: Client, args: argparse.Namespace) -> None:
    found = await conversation_history(client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id))
    if args.json:
        print(found.model_dump_json(indent=2))
    else:
        print(format_transcript(found.messages))
        for record in found.approvals:
            print(format_approval(record))


async def status(client: Client, args: argparse.Namespace) -> None:
    """The status query while the conversation runs; once closed, its result and Temporal's record
    of it say the same without a worker."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
    described = await handle.describe()
    if described.status == WorkflowExecutionStatus.RUNNING:
        found = await handle.query(AgentWorkflow.status)
    else:
        found = await _closed_status(handle, described)
    print(found.model_dump_json(indent=2))


async def _closed_status(
    handle: WorkflowHandle[AgentWorkflow, ConversationResult], described: WorkflowExecutionDescription
) -> ConversationStatus:
    agent = described.typed_search_attributes.get(AGENT_NAME) or ""
    try:
        done = await handle.result()
    except WorkflowFailureError as e:  # failed, terminated or timed out: no result to read
        state = _agent_state(described)
        return ConversationStatus(
            state="cancelled" if state == "cancelled" else "failed",
            agent=agent,
            detail=f"{state.replace('_', ' ')}: {_failure_message(e)}",
        )
    return ConversationStatus(
        state="cancelled" if done.closed_by == "cancelled" else "completed",
        agent=agent,
        iteration=done.iterations,
        model_calls=done.model_calls,
        usage=done.usage,
        cost=done.cost,
        run=done.runs,
        detail=done.detail,
    )


async def pending(client: Client, args: argparse.Namespace) -> None:
    """Every tool call waiting for a person, across all conversations.

    Asked of all at once; one whose worker does not answer gets a warning, not the whole list lost.
    """
    now = datetime.now(UTC)
    query = 'AgentStatus = "awaiting_approval" AND ExecutionStatus = "Running"'
    waiting = [wf.id async for wf in client.list_workflows(query)]
    answers = await asyncio.gather(*(_pending_approvals(client, workflow_id) for workflow_id in waiting))
    rows = []
    for workflow_id, records in zip(waiting, answers, strict=True):
        if isinstance(records, str):
            print(f"warning: {workflow_id}: no answer: {_one_line(records)}", file=sys.stderr)
            continue
        for record in records:
            age = _duration(now - record.requested_at)
            deadline = f"{record.deadline:%Y-%m-%d %H:%M:%S}Z" if record.deadline else "none"
            digest, arguments = record.arguments_digest, json.dumps(record.arguments)
            rows.append((workflow_id, record.call_id, record.tool, digest, age, deadline, arguments))
    if not rows:
        print("No tool calls wait for approval.")
        return
    _print_table(("WORKFLOW ID", "CALL ID", "TOOL", "DIGEST", "AGE", "DEADLINE", "ARGUMENTS"), rows)


async def _pending_approvals(client: Client, workflow_id: str) -> list[ApprovalRecord] | str:
    """The conversation's pending approvals, or why it did not say (no worker answered in time)."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        return await handle.query(AgentWorkflow.pending_approvals, rpc_timeout=PENDING_QUERY_TIMEOUT)
    except (RPCError, WorkflowQueryFailedError) as e:
        return e.message


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns padded to their widest cell; not the last, so that long arguments pad no other line."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)), row[-1]]))


async def decide(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle(args.workflow_id)
    try:
        decision = Decision(
            call_id=args.call_id,
            approve=args.command == "approve",
            by=args.by,
            reason=args.reason,
            arguments_digest=args.digest,
        )
    except ValidationError as e:
        raise CommandError(f"invalid decision: {first_error(e)}") from e
    try:
        record = await handle.execute_update(AgentWorkflow.decide, decision)
    except WorkflowUpdateFailedError as e:
        raise CommandError(f"not {args.command.rstrip('e')}ed: {_refusal(e)}") from e
    print(f"{record.tool} call {record.call_id} of {args.workflow_id}: {record.state} by {record.by}")


async def watch(client: Client, args: argparse.Namespace) -> None:
    """Follow a conversation live: new messages, approvals awaited and decided, until it ends."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
    shown_messages, shown_summaries, shown_approvals, last_detail = 0, 0, dict[str, str](), ""
    typing = _TypingLine()
    while True:
        finished = (await handle.describe()).status != WorkflowExecutionStatus.RUNNING
        found = await conversation_history(handle)
        # A summary is inserted before the recent messages (context compaction): shown as it comes.
        summaries = [m for m in found.messages if isinstance(m, SummaryMessage)]
        messages = [m for m in found.messages if not isinstance(m, SummaryMessage)]
        new = format_transcript(summaries[shown_summaries:] + messages[shown_messages:])
        if new:
            typing.close()
            print(new)
        shown_messages, shown_summaries = len(messages), len(summaries)
        for record in found.approvals:
            if shown_approvals.get(record.call_id) != record.state:
                shown_approvals[record.call_id] = record.state
                typing.close()
                print(format_approval(record))
                if record.state == "pending":
                    print(
                        f"  approve: python starter.py approve {args.workflow_id} {record.call_id}"
                        f" --digest {record.arguments_digest}"
                    )
        if finished:
            typing.close()
            print(format_result(await handle.result()))
            return
        status = await handle.query(AgentWorkflow.status)
        if status.detail != last_detail:
            last_detail = status.detail
            typing.close()
            print(f"... {status.detail}")
        typing.show(await partial_answer(client, handle))
        await asyncio.sleep(args.interval)


class _TypingLine:
    """A streamed answer on one growing line: each poll prints only the text that is new."""

    def __init__(self) -> None:
        self._shown = ""

    def show(self, partial: str) -> None:
        if self._shown and partial.startswith(self._shown):
            print(partial[len(self._shown) :], end="", flush=True)
        else:  # another model call (or none): a line of its own
            self.close()
            if partial:
                print(f"agent (typing)> {partial}", end="", flush=True)
        self._shown = partial

    def close(self) -> None:
        """End the line before anything else is printed."""
        if self._shown:
            print()
            self._shown = ""


async def partial_answer(client: Client, handle: WorkflowHandle) -> str:
    """The text a streaming model call has produced so far (from its heartbeat details), or ""."""
    described = await handle.describe()
    for pending in described.raw_description.pending_activities:
        if pending.activity_type.name == CALL_MODEL.name and pending.heartbeat_details.payloads:
            [progress] = await client.data_converter.decode(
                list(pending.heartbeat_details.payloads), [ModelProgress]
            )
            return progress.partial_text
    return ""


def _duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


async def list_conversations(client: Client, args: argparse.Namespace) -> None:
    """Newest first; a conversation that continued as new shows once, as its current run."""
    query = "WorkflowType = 'AgentWorkflow' AND ExecutionStatus != 'ContinuedAsNew'"
    rows = [
        (
            wf.id,
            _agent_state(wf),
            wf.typed_search_attributes.get(AGENT_NAME) or "-",
            f"{wf.start_time:%Y-%m-%d %H:%M:%S}Z",
        )
        async for wf in client.list_workflows(query, limit=args.limit)
    ]
    if not rows:
        print("No conversations yet.")
        return
    _print_table(("WORKFLOW ID", "STATUS", "AGENT", "STARTED"), rows)


def _agent_state(wf: WorkflowExecution) -> str:
    """What a conversation is doing, or how it ended.

    The AgentStatus search attribute while it runs or once it completed (awaiting_approval, idle,
    cancelled...); otherwise Temporal's status (failed, terminated, timed_out), which the
    workflow may not have had the chance to record.
    """
    recorded = wf.typed_search_attributes.get(AGENT_STATUS)
    if recorded and wf.status in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.COMPLETED):
        return recorded
    if wf.status is None:
        return "unknown"
    return "cancelled" if wf.status == WorkflowExecutionStatus.CANCELED else wf.status.name.lower()


def _failure_message(error: WorkflowFailureError) -> str:
    """Past the wrappers to the first error that says what went wrong, not the SDK's raw one below it."""
    cause = error.cause
    while isinstance(cause, ActivityError | ChildWorkflowError) and cause.__cause__ is not None:
        cause = cause.__cause__
    return str(getattr(cause, "message", cause))


def _refusal(error: WorkflowUpdateFailedError) -> str:
    """The worker's reason. The innermost one: the SDK's "Failed decoding arguments" wraps what
    pydantic found wrong with an input the worker's version of the model refuses."""
    cause: BaseException = error.cause
    while cause.__cause__ is not None:
        cause = cause.__cause__
    return str(getattr(cause, "message", cause))


_PYDANTIC_REPORT = re.compile(r"(?P<lead>.*?)(?P<count>\d+) validation errors? for \S+")


def _one_line(message: str) -> str:
    """A reason on one line. Pydantic's report of several lines (an older worker sends it for a
    refused update) becomes its first error, ``field: reason``; other text keeps its first line."""
    lines = [line.rstrip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return message
    report = _PYDANTIC_REPORT.fullmatch(lines[0])
    if report is None or len(lines) < 2:
        return lines[0]
    if lines[1].startswith(" "):  # no field: the model's own check
        where, reason = "input", lines[1]
    else:
        where, reason = lines[1], lines[2] if len(lines) > 2 else ""
    reason = reason.strip().split(" [type=")[0]
    count = int(report["count"])
    more = f" (and {count - 1} more)" if count > 1 else ""
    return f"{report['lead']}{where}: {reason}{more}"


def _unreadable(error: Exception) -> str | None:
    """Why what the worker wrote cannot be read here (its key, its payload store), or None."""
    if isinstance(error, EncryptionKeyError):
        return f"cannot decrypt: {error}"
    if isinstance(error, KeyError) and ENCODING.decode() in str(error):
        return f"cannot decrypt: the conversation is encrypted; set {ENV_VAR} to the worker's keys"
    if isinstance(error, PayloadMissingError) or (
        isinstance(error, ApplicationError) and error.type == "DatabaseUnavailable"
    ):
        return f"{error}; use the worker's payload store (AGENT_PAYLOAD_STORE or AGENT_DATABASE_URL)"
    return None


def _fail(message: str) -> int:
    print(f"error: {_one_line(message)}", file=sys.stderr)
    return 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Durable agent conversations on Temporal.")
    p.add_argument("--task-queue", help="default: AGENT_TASK_QUEUE, or agents")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("start", help="start a conversation")
    s.add_argument("prompt", nargs="?", help="the first message (or --file)")
    s.add_argument("--file", metavar="PATH", help="read the prompt from a file; - reads stdin")
    s.add_argument("--agent", default="demo")
    s.add_argument("--id", help="workflow id (default: generated)")
    s.add_argument("--wait", action="store_true", help="wait and print the final answer")
    s.add_argument("--max-iterations", type=int)
    s.add_argument("--on-limit", choices=["final_answer", "stop", "fail"])
    s.add_argument("--model", help="another model name for the agent's provider")
    s.add_argument("--chat", action="store_true", help="stay open for follow-up messages")
    s.set_defaults(func=start)

    f = sub.add_parser("fork", help="start a new conversation from the first N messages of another")
    f.add_argument("workflow_id")
    f.add_argument(
        "--at",
        type=int,
        required=True,
        metavar="N",
        help="keep messages 1..N, as `history --json` lists them (the system prompt is 1)",
    )
    f.add_argument("--prompt", help="a new question after message N (default: ask message N again)")
    f.add_argument("--file", metavar="PATH", help="read the prompt from a file; - reads stdin")
    f.add_argument("--id", help="workflow id of the fork (default: generated)")
    f.add_argument("--wait", action="store_true", help="wait and print the final answer")
    f.set_defaults(func=fork)

    m = sub.add_parser("send", help="send a follow-up message and print the reply")
    m.add_argument("workflow_id")
    m.add_argument("text", nargs="?", help="the message (or --file)")
    m.add_argument("--file", metavar="PATH", help="read the message from a file; - reads stdin")
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
        d.add_argument(
            "--digest", help="the arguments digest `pending` showed: refused if the call's arguments differ"
        )
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
        args.settings = Settings.from_env()
        data_converter(args.settings)
    except ValueError as e:  # a bad AGENT_ENCRYPTION_KEY, AGENT_DATABASE_URL or AGENT_UI_URL
        return _fail(str(e))
    args.task_queue = args.task_queue or args.settings.task_queue
    try:
        client = await connect(args.settings)
    except Exception as e:  # the Rust core's connection errors share no public type
        print(f"error: cannot connect to Temporal at {connect_config()['target_host']}: {e}", file=sys.stderr)
        print("hint: start a worker (python worker.py), which starts the embedded server", file=sys.stderr)
        return 1
    try:
        await args.func(client, args)
    except CommandError as e:
        return _fail(str(e))
    except WorkflowFailureError as e:
        return _fail(f"conversation failed: {_failure_message(e)}")
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return _fail(f"{getattr(args, 'workflow_id', '')}: {e.message}")
        return _fail(e.message)
    except Exception as e:
        if (reason := _unreadable(e)) is None:
            raise
        return _fail(reason)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python starter.py ...``: the exit code; a bug prints its traceback and gives 1."""
    try:
        return asyncio.run(run(argv))
    except KeyboardInterrupt:  # how `watch` is left
        return 130
    except Exception:
        traceback.print_exc()
        return 1
