"""The starter's commands (``python starter.py start "prompt" --agent demo --wait``); what they print
of a conversation is ``display``'s."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import sys
import time
import traceback
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn, get_args

from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
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
    CancelledError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)
from temporalio.service import RPCError, RPCStatusCode

from durable_agents.activities.agent_names import AgentNames
from durable_agents.cli import CommandError, program, valid, versioning_of
from durable_agents.cli.chat import chat, images_of, message_input, send_message, signer_of
from durable_agents.cli.display import (
    deadline_text,
    format_approval,
    format_guardrail,
    format_handoff,
    format_reply,
    format_result,
    format_transcript,
    show_live,
)
from durable_agents.client import decisions
from durable_agents.client.conversations import (
    NoWorkerError,
    agent_state,
    ask,
    ask_or_why,
    conversation_history,
    conversation_result,
    edited_arguments,
    fork_conversation,
    interrupt_turn,
    newest_conversations,
    one_line,
    refusal,
    send_or_start,
    shown_once,
    start_conversation,
    ui_link,
)
from durable_agents.client.export import export_conversation
from durable_agents.client.lifecycle import (
    ErasureRefused,
    delete_conversation,
    forget_user,
    run_retention,
    schedule_retention,
)
from durable_agents.client.live import follow, listening
from durable_agents.connection import connect, connect_config
from durable_agents.converter import PayloadStoreMismatchError, data_converter
from durable_agents.encryption import ENCODING, ENV_VAR, EncryptionKeyError
from durable_agents.serve.app import (
    DEFAULT_PORT,
    Access,
    ConsoleOptions,
    ServeOptions,
    check_exposure,
    plain_http_warning,
    serve,
)
from durable_agents.serve.identities import Tokens, new_token, token_hash
from durable_agents.settings import Settings
from durable_agents.stores.conversations import PayloadMissingError
from durable_agents.stores.errors import StoreDown
from durable_agents.stores.ledger import Spend
from durable_agents.worker.fleet import releases_polling
from durable_agents.worker.versioning import cannot_replay, releases_in
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import (
    AGENT_NAME,
    AGENT_TENANT,
    AGENT_USER,
    ConversationInput,
    ConversationResult,
    ConversationStatus,
)
from durable_agents.workflows.config import Versioning
from durable_agents.workflows.erasure import ErasureReport
from durable_agents.workflows.events import (
    ApprovalRequested,
    ClientToolRequested,
    ReplySent,
    StateChanged,
)
from durable_agents.workflows.inputs import first_error
from durable_agents.workflows.records import (
    ApprovalRecord,
    ClientCall,
    ClientResult,
    Decision,
    Revocation,
)
from durable_agents.workflows.waiting import waiting_line

IMAGE_HELP = "an image sent with the message: a .png/.jpg/.gif/.webp file or an http(s) URL (repeatable)"


async def start(client: Client, args: argparse.Namespace) -> None:
    prompt = _text(args.prompt, args.file, "prompt")
    try:
        conversation = ConversationInput(
            prompt=prompt,
            images=images_of(args.image),
            agent=args.agent,
            overrides={  # validated with the rest, so the first error is the first field's
                "max_iterations": args.max_iterations,
                "on_limit": args.on_limit,
                "model": args.model,
                "chat": True if args.chat else None,
            },
            tenant=args.tenant,
            user=args.user,
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
            priority=args.priority,
            versioning=versioning_of(args),
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError as e:
        raise CommandError(f"a conversation with id {workflow_id!r} already exists") from e
    await _started(client, args, handle, f"Started {workflow_id}")


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
    origin = f"fork of {args.workflow_id} at message {args.at}"
    await _started(client, args, handle, f"Started {handle.id} ({origin})")


async def _started(client: Client, args: argparse.Namespace, handle: WorkflowHandle, line: str) -> None:
    """Say what started and where to see it; with ``--wait``, its first answer."""
    print(line)
    print(f"Web UI: {ui_link(handle.id, client.namespace, args.settings.ui_url)}", flush=True)
    if args.wait:
        print(await _first_answer(client, handle))


async def _first_answer(client: Client, handle: WorkflowHandle) -> str:
    """The result once the conversation closes; a chat stays open after its reply (it goes idle
    instead), so then that reply. Whether it is a chat the agent's settings say, which only the
    worker reads: the event stream tells. Meanwhile each call that waits for a person or a client
    is said once, with the command that ends its wait: the wait may be long, and nothing else moves."""
    reply = None
    told: set[str] = set()
    async for _, event in follow(client, handle.id):
        match event:
            case ApprovalRequested(record=waiting) | ClientToolRequested(call=waiting) if (
                waiting.call_id not in told
            ):
                told.add(waiting.call_id)
                print(waiting_line(handle.id, waiting, program=program()), flush=True)
            case ReplySent() if reply is None:
                reply = event.reply
            case StateChanged(state="idle") if reply is not None:
                return format_reply(reply, handle.id)
    return format_result(await conversation_result(client, handle))


async def send(client: Client, args: argparse.Namespace) -> None:
    """Send a follow-up message and print the reply (the whole loop, approvals included, runs first)."""
    text = _text(args.text, args.file, "message")
    if args.agent:  # start the conversation with this agent if it is not running (update-with-start)
        await _refuse_another_agent(client.get_workflow_handle(args.workflow_id), args.agent)
        try:
            reply = await send_or_start(
                client,
                args.workflow_id,
                message_input(text, args.image),
                agent=args.agent,
                task_queue=args.task_queue,
                versioning=versioning_of(args),
            )
        except WorkflowUpdateFailedError as e:
            if isinstance(e.cause, ApplicationError) and e.cause.type == "AcceptedUpdateCompletedWorkflow":
                await client.get_workflow_handle(args.workflow_id).result()  # a failure says why
            raise CommandError(f"not sent: {refusal(e)}") from e
        except WorkflowAlreadyStartedError as e:
            raise CommandError(f"{args.workflow_id} has closed; send to a new id") from e
        print(reply.text)
        return
    handle = client.get_workflow_handle(args.workflow_id)
    print((await send_message(handle, text, args.image)).text)


async def _refuse_another_agent(handle: WorkflowHandle, agent: str) -> None:
    """``send --agent`` to a running conversation of another agent would send it to that agent, with
    ``--agent`` silently ignored: refused instead. (An unknown id is started with ``agent``; a closed
    one is refused by the send.)"""
    try:
        described = await handle.describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return
        raise
    running = described.typed_search_attributes.get(AGENT_NAME)
    if described.status == WorkflowExecutionStatus.RUNNING and running not in (None, agent):
        raise CommandError(
            f"not sent: {handle.id} is a conversation with agent {running}, not {agent};"
            " send without --agent, or to a new id"
        )


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


async def end(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle(args.workflow_id)
    await _require_running(handle, "nothing to end")
    await handle.signal(AgentWorkflow.end)
    print(f"{args.workflow_id} will close after its current turn.")


async def interrupt(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle(args.workflow_id)
    described = await _require_running(handle, "nothing to interrupt")
    try:
        print(f"{handle.id}: {await interrupt_turn(client, handle, described.task_queue)}")
    except ValueError as e:
        raise CommandError(f"{handle.id} {e}") from None


async def refresh_tools(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle(args.workflow_id)
    names = await _update(handle, AgentWorkflow.refresh_tools, None, "not refreshed")
    print(f"{args.workflow_id} now offers: {', '.join(names)}")


async def cancel(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle(args.workflow_id)
    await _require_running(handle, "nothing to cancel")
    await handle.cancel(reason=args.reason)
    print(f"Cancellation requested for {args.workflow_id}.")


async def _require_running(handle: WorkflowHandle, consequence: str) -> WorkflowExecutionDescription:
    """Refuse when the conversation has closed: Temporal would accept a cancel and do nothing."""
    described = await handle.describe()
    if described.status != WorkflowExecutionStatus.RUNNING:
        raise CommandError(f"{handle.id} is already closed ({agent_state(described)}); {consequence}")
    return described


async def result(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
    print(format_result(await conversation_result(client, handle)))


async def history(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
    found = await conversation_history(client, handle)
    if args.json:
        print(found.model_dump_json(indent=2))
    else:
        print(format_transcript(found.messages))
        for record in found.approvals:
            print(format_approval(record))
        for check in found.guardrails:
            print(format_guardrail(check))
        for handoff in found.handoffs:
            print(format_handoff(handoff))
        for attempt in found.model_attempts:
            outcome = f"failed: {attempt.error}" if attempt.error else "answered"
            print(f"[model call {attempt.model_call}] {attempt.model} {outcome}")


async def status(client: Client, args: argparse.Namespace) -> None:
    """The status query while the conversation runs, or once cancelled (Canceled keeps no result);
    once otherwise closed, its result and Temporal's record of it say the same without a worker."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
    described = await handle.describe()
    if described.status in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CANCELED):
        found = await ask(client, handle, AgentWorkflow.status, described.task_queue)
    else:
        found = await _closed_status(handle, described)
    known = described.typed_search_attributes
    found = found.model_copy(update={"tenant": known.get(AGENT_TENANT), "user": known.get(AGENT_USER)})
    # A conversation without a tenant or user shows neither (as before they existed).
    print(
        found.model_dump_json(indent=2, exclude={k for k in ("tenant", "user") if getattr(found, k) is None})
    )


async def _closed_status(
    handle: WorkflowHandle[AgentWorkflow, ConversationResult], described: WorkflowExecutionDescription
) -> ConversationStatus:
    agent = described.typed_search_attributes.get(AGENT_NAME) or ""
    try:
        done = await handle.result()
    except WorkflowFailureError as e:  # failed, terminated or timed out: no result to read
        state = agent_state(described)
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
    """Every tool call waiting for a person, across all conversations; then every client tool's call
    waiting for its client (``answer`` delivers a result).

    Asked of all at once; one whose worker does not answer gets a warning, not the whole list lost.
    """
    now = datetime.now(UTC)
    query = 'AgentStatus IN ("awaiting_approval", "waiting_for_client") AND ExecutionStatus = "Running"'
    listed = [wf async for wf in client.list_workflows(query)]
    waiting = shown_once(listed)
    answers = await asyncio.gather(
        *(ask_or_why(client, wf, AgentWorkflow.pending_approvals) for wf in waiting),
        *(ask_or_why(client, wf, AgentWorkflow.pending_client_calls) for wf in listed),
    )
    answers, asked = answers[: len(waiting)], answers[len(waiting) :]
    rows = []
    for workflow_id, records in zip((wf.id for wf in waiting), answers, strict=True):
        if isinstance(records, str):
            print(f"warning: {workflow_id}: no answer: {one_line(records)}", file=sys.stderr)
            continue
        for record in records:
            age = _duration(now - record.requested_at)
            deadline = deadline_text(record.deadline)
            digest, arguments = record.arguments_digest, json.dumps(record.arguments)
            allowed = ",".join(record.allowed_decisions)
            rows.append((workflow_id, record.call_id, record.tool, digest, age, deadline, allowed, arguments))
    client_rows = [
        (
            workflow_id,
            c.call_id,
            c.tool,
            _duration(now - c.requested_at),
            deadline_text(c.deadline),
            json.dumps(c.arguments),
        )
        for workflow_id, calls in zip((wf.id for wf in listed), asked, strict=True)
        for c in (calls if not isinstance(calls, str) else [])
    ]
    if not rows:
        print("No tool calls wait for approval.")
    else:
        header = ("WORKFLOW ID", "CALL ID", "TOOL", "DIGEST", "AGE", "DEADLINE", "DECISIONS", "ARGUMENTS")
        _print_table(header, rows)
        for workflow_id, records in zip((wf.id for wf in waiting), answers, strict=True):
            for record in records if not isinstance(records, str) else []:
                for line in _opinions(record):
                    print(f"{record.call_id} of {workflow_id}: {line}")
    if client_rows:
        print("\nWaiting for the client (starter.py answer ID CALL_ID TEXT):")
        _print_table(("WORKFLOW ID", "CALL ID", "TOOL", "AGE", "DEADLINE", "ARGUMENTS"), client_rows)


def _opinions(record: ApprovalRecord) -> list[str]:
    """What people deciding ``record`` should know besides its arguments: an unknown outcome, and
    what the judges said."""
    lines = []
    if record.asked == "outcome_unknown":
        lines.append(
            f"outcome unknown ({record.reason}): approve runs it again, approve --result TEXT records"
            " its result, reject fails it"
        )
    for j in record.judgements:
        by = f"judge {j.judge} ({j.model})" if j.model else f"judge {j.judge}"
        lines.append(f"{by}: {j.verdict}: {j.reason}")
    return lines


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns padded to their widest cell; not the last, so that long arguments pad no other line."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)), row[-1]]))


async def decide(client: Client, args: argparse.Namespace) -> None:
    handle = client.get_workflow_handle(args.workflow_id)
    decision = _decision(args)
    signer = signer_of(args)
    waiting = await _pending(client, handle)  # first: a decision its worker cannot load would wait
    if signer.secret is not None:  # the signature names the call as it waits: its conversation, digest
        _must_wait(waiting, args.call_id)
    try:
        record = await decisions.decide(handle, decision, signer=signer, waiting=waiting)
    except decisions.Refused as e:
        raise CommandError(f"not {args.command.rstrip('e')}ed: {e}") from e
    extra = f" (signed with key {record.verdict.key})" if record.verdict and record.verdict.key else ""
    extra += " with edited arguments" if record.edited_arguments is not None else ""
    extra += f"; {record.tool} allowed for the conversation" if record.remember else ""
    print(f"{record.tool} call {record.call_id} of {args.workflow_id}: {record.state} by {record.by}{extra}")


def _decision(args: argparse.Namespace) -> Decision:
    """The decision ``approve``/``reject``/``sign`` describe, read as every door reads one."""
    given = {
        "call_id": args.call_id,
        "approve": args.approve,
        "by": args.by,
        "reason": args.reason,
        "arguments_digest": args.digest,
        "arguments": _edited_arguments(getattr(args, "arguments", None)),
        "remember": getattr(args, "remember", False) or None,
        "result": getattr(args, "result", None),
        "wait_seconds": args.settings.decide_timeout,
    }
    try:
        return decisions.decision_from({k: v for k, v in given.items() if v is not None})
    except decisions.Refused as e:
        raise CommandError(f"invalid decision: {str(e).removeprefix('decide: ')}") from e


async def _pending(client: Client, handle: WorkflowHandle) -> list[ApprovalRecord] | None:
    """The calls a running conversation waits for, as its worker says: none once it has closed (the
    update says so), None when the worker did not answer for another reason (the update will say
    why). A conversation whose workflow task fails, or whose query fails while a worker of a release
    older than its history's polls its queue (say, after a rollback), is a ``CommandError`` naming
    the release that wrote it: a decision sent would wait until a worker that can polls, and the person
    with it."""
    described = await handle.describe()
    if described.status != WorkflowExecutionStatus.RUNNING:
        return []
    if described.raw_description.pending_workflow_task.attempt > 1:  # a query would wait for it
        why = ""
    else:
        try:
            return await ask(client, handle, AgentWorkflow.pending_approvals, described.task_queue)
        except WorkflowQueryFailedError as e:
            why = e.message  # shown as the worker gave it; the history and the pollers tell why
    events = (await handle.fetch_history()).events
    if why:  # a worker older than the history's release polls: it cannot load it (fleet.py)
        written = max(releases_in(events), default=1)
        if min((await releases_polling(client, described.task_queue)).values(), default=written) >= written:
            return None
    failures = [
        e.workflow_task_failed_event_attributes.failure.message
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    why = why or (failures[-1] if failures else "its workflow task fails")
    raise CommandError(
        f"{handle.id} cannot take a decision now: {cannot_replay(releases_in(events), described.task_queue)};"
        f" nothing was sent (the worker: {one_line(why)})"
    )


def _must_wait(waiting: list[ApprovalRecord] | None, call_id: str) -> None:
    """``CommandError`` unless call ``call_id`` is among the calls ``pending_approvals`` showed: a
    signature is made over the call as it waits."""
    if waiting is None:
        raise CommandError(
            f"the conversation's worker does not say which calls wait, so {call_id} cannot be signed for;"
            " try again, or sign with starter.py sign --digest D --conversation RUN_ID"
        )
    if not any(r.call_id == call_id for r in waiting):
        pending = ", ".join(r.call_id for r in waiting) or "none"
        raise CommandError(f"no approval is pending for call {call_id!r} (pending: {pending})")


async def make_token(client: Client | None, args: argparse.Namespace) -> None:
    """``starter.py new-token NAME``: a fresh token for ``serve``, and its entry for AGENT_SERVE_TOKENS."""
    token = new_token()
    entry = [f"[tokens.{json.dumps(args.name)}]", f'sha256 = "{token_hash(token)}"']
    entry += [f"user = {json.dumps(args.user)}"] if args.user else []
    entry += [f"tenant = {json.dumps(args.tenant)}"] if args.tenant else []
    entry += [f"decide = {'true' if args.decide else 'false'}"]
    entry += [f"agents = {json.dumps(args.agent)}"] if args.agent else []
    print(f"# the token (give it to its holder; it is not kept anywhere): {token}")
    print("\n".join(entry))


async def sign_decision(client: Client | None, args: argparse.Namespace) -> None:
    """``starter.py sign``: the signature of a decision, for another tool to send (the temporal CLI)."""
    signer = signer_of(args)
    if signer.secret is None:
        raise CommandError("set AGENT_APPROVER_KEY to the approver's key (base64) to sign")
    print(signer.signature(args.workflow_id, args.conversation, args.digest, _decision(args)))


def _edited_arguments(text: str | None) -> dict | None:
    try:
        return edited_arguments(text)
    except ValueError as e:
        raise CommandError(f"--arguments: {e}") from e


async def answer(client: Client, args: argparse.Namespace) -> None:
    """Deliver a client tool's result (the built-in ``ask_user``: the user's answer)."""
    handle = client.get_workflow_handle(args.workflow_id)
    try:
        value = json.loads(args.text) if args.json else args.text
    except json.JSONDecodeError as e:
        raise CommandError(f"--json: the result is not JSON ({e.msg} at position {e.pos})") from e
    result = valid("result", lambda: ClientResult(call_id=args.call_id, result=value))
    call: ClientCall = await _update(handle, AgentWorkflow.deliver_client_result, result, "not delivered")
    print(f"{call.tool} call {call.call_id} of {args.workflow_id}: {call.state}")


async def revoke(client: Client, args: argparse.Namespace) -> None:
    """Take back a tool allowed for the conversation: its later calls wait for a person again."""
    handle = client.get_workflow_handle(args.workflow_id)
    revocation = valid("revocation", lambda: Revocation(tool=args.tool, by=args.by))
    allowance = await _update(handle, AgentWorkflow.revoke, revocation, "not revoked")
    print(
        f"{allowance.tool} of {args.workflow_id}: asks for approval again (revoked by {allowance.revoked_by})"
    )


async def watch(client: Client, args: argparse.Namespace) -> None:
    """Follow a conversation live on its event stream until it ends; Ctrl-C says where to resume."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
    await handle.describe()  # an unknown id is one line, not a wait
    settings: Settings = args.settings
    async with listening(client, settings.database_url, settings.delta_dir) as deltas:
        await show_live(client, args.workflow_id, args.from_offset, deltas=deltas)
    print(format_result(await conversation_result(client, handle)))


def _offset(given: str) -> int:
    if not given.isdigit():
        raise argparse.ArgumentTypeError(f"an event offset is 0, 1, 2, ..., not {given!r}")
    return int(given)


async def serve_events(client: Client, args: argparse.Namespace) -> None:
    settings: Settings = args.settings
    try:
        tokens = Tokens.load(settings.serve_tokens) if settings.serve_tokens else None
        access = Access(
            token=settings.serve_token,
            origins=settings.serve_origins,
            hosts=settings.serve_hosts,
            max_body=settings.serve_max_body,
            tokens=tokens,
        )
        check_exposure(args.host, access)
    except ValueError as e:
        raise CommandError(str(e)) from e
    if (warning := plain_http_warning(args.host)) is not None:
        print(warning, file=sys.stderr)
    url = f"http://{args.host}:{args.port}/conversations/WORKFLOW_ID/events"
    token = "token required" if access.needs_token else "no token"
    origins = ", ".join(access.origins) or "none"
    print(f"Serving conversation events on {url} ({token}; origins: {origins}; Ctrl-C stops)")
    print(f"The operator console: http://{args.host}:{args.port}/console/", flush=True)
    console = ConsoleOptions(settings.approver_key, settings.ui_url, settings.decide_timeout)
    async with listening(client, settings.database_url, settings.delta_dir) as deltas:
        agents = AgentNames(args.agents_dir or settings.agents_dir).current
        options = ServeOptions(args.task_queue, access, console, agents)
        await serve(client, args.host, args.port, options, deltas)


def _folder(given: str) -> Path:
    """``--agents-dir``: a folder that exists (a typo would refuse every agent)."""
    if not Path(given).is_dir():
        raise argparse.ArgumentTypeError(f"no such folder: {given}")
    return Path(given)


def _duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


async def list_conversations(client: Client, args: argparse.Namespace) -> None:
    """Newest first; a conversation that continued as new shows once, as its current run."""
    rows = [
        (
            wf.id,
            agent_state(wf),
            wf.typed_search_attributes.get(AGENT_NAME) or "-",
            wf.typed_search_attributes.get(AGENT_TENANT) or "-",
            wf.typed_search_attributes.get(AGENT_USER) or "-",
            f"{wf.start_time:%Y-%m-%d %H:%M:%S}Z",
        )
        for wf in await newest_conversations(client, args.limit)
    ]
    if not rows:
        print("No conversations yet.")
        return
    _print_table(("WORKFLOW ID", "STATUS", "AGENT", "TENANT", "USER", "STARTED"), rows)


async def usage(client: Client | None, args: argparse.Namespace) -> None:
    """Spend of this day or month from the shared ledger (durable_agents/stores/ledger.py), by tenant
    and user."""
    spent = await args.settings.stores.ledger().usage(
        period=args.period, now=time.time(), tenant=args.tenant, user=args.user
    )
    if not spent:
        print(f"No model calls recorded this {args.period}.")
        return
    rows = [(s.tenant or ("(no tenant)" if not s.user else "-"), s.user or "-", *_spent([s])) for s in spent]
    header = ("TENANT", "USER", "CALLS", "INPUT", "CACHED", "OUTPUT", "TOKENS", "COST USD")
    _print_table(header, [*rows, ("TOTAL", "", *_spent(spent))])


def _spent(spends: list[Spend]) -> list[str]:
    """``usage``'s columns of one row, or of the total: calls, input (of it cached), output and all
    tokens, and US dollars."""
    counts = ("calls", "input_tokens", "cached_input_tokens", "output_tokens", "tokens")
    sums = [sum(getattr(s, name) for s in spends) for name in counts]
    return [*map(str, sums), f"{sum(s.cost for s in spends):.6f}"]


async def export(client: Client, args: argparse.Namespace) -> None:
    """The conversation and its sub-agents as JSON Lines (``durable_agents/client/export.py``)."""
    for line in await export_conversation(client, args.workflow_id):
        print(json.dumps(line, ensure_ascii=False))


async def delete(client: Client, args: argparse.Namespace) -> None:
    """A conversation and its sub-agents, from Temporal and every store (a worker removes it)."""
    try:
        report = await delete_conversation(
            client, args.workflow_id, cancel=args.cancel, task_queue=args.task_queue
        )
    except ErasureRefused as e:
        raise CommandError(f"not deleted: {e}") from e
    _print_erased(f"Deleted {args.workflow_id}", report)


async def forget(client: Client, args: argparse.Namespace) -> None:
    """Every conversation of a user, and the user's name in the ledger."""
    try:
        report = await forget_user(client, args.user, tenant=args.tenant, task_queue=args.task_queue)
    except ErasureRefused as e:
        raise CommandError(f"not forgotten: {e}") from e
    whose = f"user {args.user}" + (f" of tenant {args.tenant}" if args.tenant is not None else "")
    _print_erased(f"Forgot {whose}", report)


async def retention(client: Client, args: argparse.Namespace) -> None:
    """One retention pass now, or (``--every``) the Schedule of passes, created or updated."""
    days = args.days if args.days is not None else args.settings.retention_days
    kept = f"{days:g} day(s)" if days is not None else "the namespace's retention"
    keep = timedelta(days=days) if days is not None else None
    if args.every is not None:
        await schedule_retention(
            client, every=timedelta(hours=args.every), retention=keep, task_queue=args.task_queue
        )
        print(f"Retention: a pass every {args.every:g} hour(s), keeping closed conversations' data {kept}.")
        return
    done = await run_retention(client, retention=keep, task_queue=args.task_queue)
    print(f"Retention pass (keeping {kept}): {done.conversations} conversation(s) removed.")
    _print_table(("STORE", "REMOVED"), [(store, str(count)) for store, count in done.removed.items()])


def _print_erased(line: str, report: ErasureReport) -> None:
    names = ", ".join(report.conversations)
    print(f"{line}: {len(report.conversations)} conversation(s){f' ({names})' if names else ''}.")
    _print_table(("STORE", "REMOVED"), [(store, str(count)) for store, count in report.removed.items()])


def _failure_message(error: WorkflowFailureError) -> str:
    """Past the wrappers to the first error that says what went wrong, not the SDK's raw one below it."""
    cause = error.cause
    while isinstance(cause, ActivityError | ChildWorkflowError) and cause.__cause__ is not None:
        cause = cause.__cause__
    return str(getattr(cause, "message", cause))


async def _update(handle: WorkflowHandle, update: Any, arg: Any, refused: str) -> Any:
    """An update's result, or the worker's reason for refusing it as one line: ``<refused>: ...``."""
    try:
        return await (handle.execute_update(update) if arg is None else handle.execute_update(update, arg))
    except WorkflowUpdateFailedError as e:
        raise CommandError(f"{refused}: {refusal(e)}") from e


def _unreadable(error: Exception) -> str | None:
    """Why what the worker wrote cannot be read here (its key, its payload store), or None."""
    if isinstance(error, EncryptionKeyError):
        return f"cannot decrypt: {error}"
    if isinstance(error, PayloadStoreMismatchError):
        return str(error)
    if isinstance(error, KeyError) and ENCODING.decode() in str(error):
        return f"cannot decrypt: the conversation is encrypted; set {ENV_VAR} to the worker's keys"
    if isinstance(error, PayloadMissingError | StoreDown):
        return f"{error}; use the worker's payload store (AGENT_PAYLOAD_STORE or AGENT_DATABASE_URL)"
    return None


def _fail(message: str) -> int:
    print(f"error: {one_line(message)}", file=sys.stderr)
    return 1


class _Parser(argparse.ArgumentParser):
    """argparse whose refusals are one line, as the starter's other errors (exit code 2, argparse's)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog.removeprefix('starter.py ')}: {message} (see --help)\n")


def _positive(given: str) -> int:
    """``--limit``: 0 or less would list nothing and look like an empty namespace."""
    if not given.isdigit() or int(given) == 0:
        raise argparse.ArgumentTypeError(f"give a whole number from 1 on, not {given!r}")
    return int(given)


def _versioning_option(command: argparse.ArgumentParser) -> None:
    """A new conversation's versioning behavior on versioned workers: its workflow type
    (workflows/behaviors.py), which the starter cannot read from the agent file on the workers."""
    command.add_argument(
        "--versioning",
        choices=get_args(Versioning),
        help="a new conversation's behavior on versioned workers, as its agent file says (default: pinned)",
    )


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=program().removeprefix("python "), description="Durable agent conversations on Temporal."
    )
    p.add_argument("--task-queue", help="default: AGENT_TASK_QUEUE, or agents")
    p.add_argument("--traceback", action="store_true", help="an unexpected error prints its traceback")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("start", help="start a conversation")
    s.add_argument("prompt", nargs="?", help="the first message (or --file)")
    s.add_argument("--file", metavar="PATH", help="read the prompt from a file; - reads stdin")
    s.add_argument("--image", action="append", metavar="PATH_OR_URL", help=IMAGE_HELP)
    s.add_argument("--agent", required=True, help="the agent's name (agents/NAME.toml), such as demo")
    s.add_argument("--id", help="workflow id (default: generated)")
    s.add_argument("--wait", action="store_true", help="wait and print the answer (a chat's first reply)")
    s.add_argument("--max-iterations", type=int)
    s.add_argument("--on-limit", choices=["final_answer", "stop", "fail"])
    s.add_argument("--model", help="another model name for the agent's provider")
    s.add_argument("--chat", action="store_true", help="stay open for follow-up messages")
    s.add_argument("--tenant", help="the tenant the conversation belongs to (budgets, fairness)")
    s.add_argument("--user", help="the user within the tenant (budgets)")
    s.add_argument("--priority", type=int, choices=range(1, 6), help="1 (first) to 5 (last); default 3")
    _versioning_option(s)
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
    f.add_argument("--wait", action="store_true", help="wait and print the answer (a chat's first reply)")
    f.set_defaults(func=fork)

    m = sub.add_parser("send", help="send a follow-up message and print the reply")
    m.add_argument("workflow_id")
    m.add_argument("text", nargs="?", help="the message (or --file)")
    m.add_argument("--file", metavar="PATH", help="read the message from a file; - reads stdin")
    m.add_argument("--image", action="append", metavar="PATH_OR_URL", help=IMAGE_HELP)
    m.add_argument(
        "--agent", help="start the conversation with this agent if it does not exist (refused if another's)"
    )
    _versioning_option(m)
    m.set_defaults(func=send)

    c = sub.add_parser("chat", help="chat interactively (a new conversation, or an open one by id)")
    c.add_argument("workflow_id", nargs="?")
    c.add_argument("--agent", help="the agent of a new chat")
    c.add_argument("--by", default=getpass.getuser(), help="who decides the approvals asked in the chat")
    _versioning_option(c)
    c.set_defaults(func=chat)

    for name, func, help_text in [
        ("end", end, "close a chat after its current turn"),
        ("interrupt", interrupt, "end the running turn now: its model call is cancelled; a chat stays open"),
        ("refresh-tools", refresh_tools, "list the MCP servers' tools again for a running conversation"),
        ("result", result, "wait for and print a conversation's answer"),
        ("history", history, "print a conversation's messages"),
        ("status", status, "print a conversation's status"),
        ("export", export, "a conversation and its sub-agents as JSON Lines, for an audit"),
    ]:
        c = sub.add_parser(name, help=help_text)
        c.add_argument("workflow_id")
        c.set_defaults(func=func)
        if name == "history":
            c.add_argument("--json", action="store_true")

    x = sub.add_parser("cancel", help="cancel a conversation; it ends with the conversation so far")
    x.add_argument("workflow_id")
    x.add_argument("--reason", default="cancelled from starter.py")
    x.set_defaults(func=cancel)

    for name in ("approve", "reject"):
        d = sub.add_parser(name, help=f"{name} a tool call that waits for a person (answers whether it took)")
        d.add_argument("workflow_id")
        d.add_argument("call_id")
        d.add_argument("--by", default=getpass.getuser())
        d.add_argument("--reason", default="")
        d.add_argument(
            "--digest", help="the arguments digest `pending` showed: refused if the call's arguments differ"
        )
        if name == "approve":
            d.add_argument("--arguments", metavar="JSON", help="run the call with these arguments instead")
            d.add_argument(
                "--remember", action="store_true", help="also allow the tool for the rest of the conversation"
            )
            d.add_argument(
                "--result",
                metavar="TEXT",
                help="for a call whose outcome is unknown: record TEXT as its result",
            )
        d.set_defaults(func=decide, approve=name == "approve")

    sg = sub.add_parser(
        "sign", help="print a decision's signature with AGENT_APPROVER_KEY, for the temporal CLI to send"
    )
    sg.add_argument("workflow_id")
    sg.add_argument("call_id")
    kind = sg.add_mutually_exclusive_group(required=True)
    kind.add_argument("--approve", dest="approve", action="store_true", default=None)
    kind.add_argument("--reject", dest="approve", action="store_false")
    sg.add_argument("--by", required=True, help="the approver: the name of the key")
    sg.add_argument("--digest", required=True, help="the call's arguments digest, as `pending` shows it")
    sg.add_argument(
        "--conversation",
        required=True,
        metavar="RUN_ID",
        help="the conversation that asked: the first run id of its chain (pending_approvals' `conversation`)",
    )
    sg.add_argument("--reason", default="")
    sg.add_argument(
        "--arguments", metavar="JSON", help="edited arguments, exactly as the decision sends them"
    )
    sg.add_argument("--remember", action="store_true")
    sg.set_defaults(func=sign_decision, offline=True)

    nt = sub.add_parser(
        "new-token", help="a fresh token for serve, and its [tokens.NAME] entry for AGENT_SERVE_TOKENS"
    )
    nt.add_argument("name", help="the token's name in the file (shown in refusals and logs)")
    nt.add_argument("--user", help="runs it starts belong to this user; its decisions are taken as them")
    nt.add_argument("--tenant", help="it reaches this tenant's conversations only (default: every tenant's)")
    nt.add_argument("--decide", action="store_true", help="it may decide waiting calls")
    nt.add_argument("--agent", action="append", help="an agent it may run (repeat; default: every agent)")
    nt.set_defaults(func=make_token, offline=True)

    an = sub.add_parser("answer", help="deliver the result of a client tool call (ask_user: the answer)")
    an.add_argument("workflow_id")
    an.add_argument("call_id")
    an.add_argument("text", help="the result: text, or JSON with --json")
    an.add_argument(
        "--json", action="store_true", help="the result is JSON (for a tool whose result is not text)"
    )
    an.set_defaults(func=answer)

    rv = sub.add_parser("revoke", help="make a tool allowed with --remember ask for approval again")
    rv.add_argument("workflow_id")
    rv.add_argument("tool")
    rv.add_argument("--by", default=getpass.getuser())
    rv.set_defaults(func=revoke)

    pd = sub.add_parser("pending", help="tool calls waiting for approval, across all conversations")
    pd.set_defaults(func=pending)

    w = sub.add_parser("watch", help="follow a conversation live until it ends")
    w.add_argument("workflow_id")
    w.add_argument("--from", dest="from_offset", type=_offset, default=0, help="the event offset to start at")
    w.set_defaults(func=watch)

    sv = sub.add_parser(
        "serve", help="serve conversations' event streams as Server-Sent Events, and the operator console"
    )
    sv.add_argument("--port", type=int, default=DEFAULT_PORT)
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument(
        "--agents-dir",
        type=_folder,
        help="the workers' agent files (default: AGENT_AGENTS_DIR, or agents/): a run for another"
        " agent is refused (404) before it starts",
    )
    sv.set_defaults(func=serve_events)

    ls = sub.add_parser("list", help="recent conversations")
    ls.add_argument("--limit", type=_positive, default=20, help="how many (default 20)")
    ls.set_defaults(func=list_conversations)

    dl = sub.add_parser(
        "delete", help="remove a conversation and its sub-agents from Temporal and every store"
    )
    dl.add_argument("workflow_id")
    dl.add_argument("--cancel", action="store_true", help="cancel it first if it is running (else refused)")
    dl.set_defaults(func=delete)

    fg = sub.add_parser(
        "forget", help="erase every conversation of a user; the ledger keeps anonymous totals"
    )
    fg.add_argument("--user", required=True, help="the user (AgentUser)")
    fg.add_argument("--tenant", help="only the user's conversations in this tenant (default: every tenant)")
    fg.set_defaults(func=forget)

    rt = sub.add_parser(
        "retention", help="remove closed conversations' data past the retention, now or on a schedule"
    )
    rt.add_argument(
        "--days",
        type=float,
        help="keep closed conversations' data this long (default: AGENT_RETENTION_DAYS, else Temporal's)",
    )
    rt.add_argument(
        "--every", type=float, metavar="HOURS", help="create or update the Schedule of passes, not one now"
    )
    rt.set_defaults(func=retention)

    us = sub.add_parser("usage", help="spend of tenants and users this day or month (the shared ledger)")
    us.add_argument("--tenant", help="only this tenant")
    us.add_argument("--user", help="only this user")
    us.add_argument("--period", choices=["day", "month"], default="day", help="the period (default: day)")
    us.set_defaults(func=usage, offline=True)
    return p


async def run(argv: Sequence[str] | None = None) -> int:
    """The command's exit code; whatever goes wrong is one line on stderr, ``error: ...``."""
    args = parser().parse_args(argv)
    try:
        await _command(args)
    except CommandError as e:
        return _fail(str(e))
    except NoWorkerError as e:
        return _fail(f"{args.workflow_id}: {e}")
    except WorkflowFailureError as e:
        if isinstance(e.cause, CancelledError):
            return _fail(f"{getattr(args, 'workflow_id', '')}: the conversation was cancelled")
        return _fail(f"conversation failed: {_failure_message(e)}")
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return _fail(f"{getattr(args, 'workflow_id', '')}: {e.message}")
        return _fail(e.message)
    except BrokenPipeError:
        raise  # the reader left: nothing to say (``main``)
    except Exception as e:
        if (reason := _unreadable(e)) is not None:
            return _fail(reason)
        if args.traceback:
            raise
        return _fail(f"unexpected {type(e).__name__}: {e} (--traceback shows where)")
    return 0


async def _command(args: argparse.Namespace) -> None:
    """Settings, connection, then the command; what stops the first two is a ``CommandError``."""
    try:
        args.settings = Settings.from_env()
        data_converter(args.settings)
    except ValueError as e:  # a bad AGENT_ENCRYPTION_KEY, AGENT_DATABASE_URL or AGENT_UI_URL
        raise CommandError(str(e)) from e
    args.task_queue = args.task_queue or args.settings.task_queue
    if getattr(args, "offline", False):
        await args.func(None, args)
        return
    try:
        client = await connect(args.settings)
    except Exception as e:  # the Rust core's connection errors share no public type
        raise CommandError(
            f"cannot connect to Temporal at {connect_config()['target_host']}; start a worker"
            f" (python worker.py), which starts the embedded server ({e})"
        ) from e
    await args.func(client, args)


def main(argv: Sequence[str] | None = None) -> int:
    """``python starter.py ...``: the exit code. Output cut by a reader that left (``| head``) ends
    quietly with 141, as a process killed by SIGPIPE; with ``--traceback``, an unexpected error
    prints its traceback and gives 1."""
    try:
        code = asyncio.run(run(argv))
        sys.stdout.flush()  # here, not at exit: a reader that left is heard while it can be handled
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what was left to print goes nowhere
        return 141
    except KeyboardInterrupt:  # how `watch` is left
        return 130
    except Exception:
        traceback.print_exc()
        return 1
