"""``starter.py chat``: a conversation at the terminal, turn after turn; what waits for the person
(approvals, a client tool's question) is asked inline. Also what a single ``send`` shares with it:
a message sent (again while the conversation continues as new) and the person who decides."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import uuid
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)

from durable_agents.activities.delta_channel import DeltaListener
from durable_agents.cli import CommandError, program, valid, versioning_of
from durable_agents.cli.display import (
    TypingLine,
    deadline_text,
    format_approval,
    format_event,
)
from durable_agents.client import decisions
from durable_agents.client.conversations import (
    agent_state,
    ask,
    refusal,
    resent_while_rolling_over,
    start_conversation,
)
from durable_agents.client.images import image
from durable_agents.client.live import listening, live, next_offset
from durable_agents.settings import Settings
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import (
    AgentOverrides,
    ConversationInput,
    MessageInput,
)
from durable_agents.workflows.events import (
    ApprovalRequested,
    ClientToolRequested,
    ModelCallFinished,
    ModelCallInterrupted,
    ReplySent,
    TextDelta,
)
from durable_agents.workflows.messages import Image
from durable_agents.workflows.records import (
    ApprovalRecord,
    ClientCall,
    ClientResult,
    Reply,
)


async def chat(client: Client, args: argparse.Namespace) -> None:
    """An interactive chat; tool calls that wait for a person are asked about inline, those waiting
    when it joins before it takes a message. ``/leave`` or end of input, at any prompt, leaves the
    conversation going and what waits in it undecided."""
    settings: Settings = args.settings
    async with listening(client, settings.database_url, settings.delta_dir) as deltas:
        await _chat(client, args, deltas)


async def _chat(client: Client, args: argparse.Namespace, deltas: DeltaListener | None) -> None:
    if args.workflow_id:
        handle = client.get_workflow_handle_for(AgentWorkflow.run, args.workflow_id)
        first = None
        described = await handle.describe()
        if described.status != WorkflowExecutionStatus.RUNNING:
            raise CommandError(
                f"{handle.id} has closed ({agent_state(described)}): nothing more comes on its stream;"
                " start a new chat with --agent NAME"
            )
        # What waits already, then what happens from now on.
        offset = await next_offset(client, handle.id)
        print(f"(joined {handle.id}: waiting for event {offset}, the next it publishes)", flush=True)
        events = _Events(client, handle.id, offset, deltas)
        task_queue = described.task_queue
        for record in await ask(client, handle, AgentWorkflow.pending_approvals, task_queue):
            arguments, digest = json.dumps(record.arguments), record.arguments_digest
            print(
                f"(waiting for approval: {record.call_id} {record.tool}({arguments}); digest {digest};"
                f" deadline {deadline_text(record.deadline)})"
            )
            events.approvals.put_nowait(record)
        for call in await ask(client, handle, AgentWorkflow.pending_client_calls, task_queue):
            print(
                f"(waiting for the client: {call.call_id} {call.tool}({json.dumps(call.arguments)});"
                f" deadline {deadline_text(call.deadline)})"
            )
            events.approvals.put_nowait(call)
    elif args.agent is None:
        raise CommandError("give --agent NAME to start a chat, or the id of one to join")
    else:
        typed = await _line("you> ")
        if typed is None:
            print("(end of input: no conversation started)")
            return
        first = message_input(typed)
        workflow_id = f"chat-{args.agent}-{uuid.uuid4().hex[:8]}"
        handle = await start_conversation(
            client,
            ConversationInput(prompt=first.text, agent=args.agent, overrides=AgentOverrides(chat=True)),
            id=workflow_id,
            task_queue=args.task_queue,
            versioning=versioning_of(args),
        )
        args.workflow_id = workflow_id  # what goes wrong from here names it (``run``)
        print(f"(conversation {workflow_id}; /quit ends it, /leave leaves it open)")
        events = _Events(client, handle.id, 0, deltas)
    try:
        await _chat_turns(handle, events, first, signer_of(args))
    finally:
        await events.close()


async def _chat_turns(
    handle: WorkflowHandle, events: _Events, first: MessageInput | None, signer: decisions.Signer
) -> None:
    """Turn after turn until the person leaves; what waits for them is asked before each message,
    so that an answer typed for a question never goes to the model."""
    while True:
        if first is not None:
            reply = asyncio.create_task(events.reply_to("m1"))
            first = None
        else:
            if not await _asking_what_waits(handle, events, signer):
                return
            text = await _line("you> ")
            if text == "/quit":
                await handle.signal(AgentWorkflow.end)
                return
            if text is None or text == "/leave":
                _print_left(handle.id, text)
                return
            if not text:
                continue
            reply = asyncio.create_task(send_message(handle, text))
        answer = await _answering_approvals(handle, events, reply, signer)
        if answer is None:
            return
        events.typing.finish()
        print(f"agent> {answer.text}", flush=True)


async def _line(prompt: str) -> str | None:
    """What the person typed at ``prompt``, stripped; None at end of input (piped stdin ran out)."""
    try:
        return (await asyncio.to_thread(input, prompt)).strip()
    except EOFError:
        print(flush=True)  # the prompt's line ends: nothing was typed to end it
        return None


def _print_left(workflow_id: str, typed: str | None, still: str = "") -> None:
    """The chat's last line when the person leaves: the conversation goes on, and what still waits."""
    why = "end of input: " if typed is None else ""
    print(
        f"({why}left {workflow_id}; the conversation goes on{still}:"
        f" {program()} chat {workflow_id} returns to it)",
        flush=True,
    )


class _Events:
    """What a chat needs of the conversation's event stream, read by one task: the tool calls that
    wait for approval, in order, and the replies; a streamed answer shows as it is typed
    (``typing``), and a model call that ends without an answer says so."""

    def __init__(
        self, client: Client, workflow_id: str, from_offset: int, deltas: DeltaListener | None
    ) -> None:
        self.approvals: asyncio.Queue[ApprovalRecord | ClientCall] = asyncio.Queue()
        """Tool calls that wait for a person: approvals, and client tools' calls (``ask_user``)."""
        self.asked: set[str] = set()
        """The calls asked about: the join's query and the stream may both name one."""
        self.typing = TypingLine()
        self._replies: dict[str, asyncio.Future[Reply]] = {}
        self._reader = asyncio.create_task(self._read(client, workflow_id, from_offset, deltas))

    async def _read(
        self, client: Client, workflow_id: str, from_offset: int, deltas: DeltaListener | None
    ) -> None:
        try:
            async for _, event in live(client, workflow_id, from_offset, deltas):
                match event:
                    case ApprovalRequested(record=record):
                        self.approvals.put_nowait(record)
                    case ClientToolRequested(call=call):
                        self.approvals.put_nowait(call)
                    case ReplySent(reply=reply) if not self._reply(reply.message_id).done():
                        self._reply(reply.message_id).set_result(reply)
                    case TextDelta() | ModelCallFinished():
                        self.typing.add(event)
                    case ModelCallInterrupted():
                        self.typing.interrupted(event)
                        self.typing.print(*format_event(event))
        finally:
            for waiting in self._replies.values():
                if not waiting.done():
                    waiting.set_exception(CommandError("the conversation ended without a reply"))

    def _reply(self, message_id: str) -> asyncio.Future[Reply]:
        return self._replies.setdefault(message_id, asyncio.get_running_loop().create_future())

    async def reply_to(self, message_id: str) -> Reply:
        waiting = self._reply(message_id)
        if self._reader.done() and not waiting.done():
            raise CommandError("the conversation ended without a reply")
        return await waiting

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


async def _answering_approvals(
    handle: WorkflowHandle, events: _Events, reply: asyncio.Task[Reply], signer: decisions.Signer
) -> Reply | None:
    """The reply, asking about each tool call that waits for a person as the stream says it does;
    None when the person left at a question (the turn goes on without them)."""
    try:
        while not reply.done():
            waiting = asyncio.ensure_future(events.approvals.get())
            await asyncio.wait([reply, waiting], return_when=asyncio.FIRST_COMPLETED)
            if not waiting.done():
                waiting.cancel()
                break
            if not await _ask(handle, events, waiting.result(), signer):
                return None
        return await reply
    finally:
        await _stop_waiting(reply)


async def _stop_waiting(task: asyncio.Task[Reply]) -> None:
    """``task`` ended, its outcome taken: a chat that leaves or fails mid-turn ends with its own one
    line, not the SDK's traceback of an update it stopped waiting for."""
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()


async def _asking_what_waits(handle: WorkflowHandle, events: _Events, signer: decisions.Signer) -> bool:
    """Ask about each call already waiting (as the chat joined, or since its last turn) before the
    next message; False when the person left at a question."""
    while not events.approvals.empty():
        if not await _ask(handle, events, events.approvals.get_nowait(), signer):
            return False
    return True


_APPROVES = {"y": True, "yes": True, "n": False, "no": False, "": False}
"""What an answer to ``[y/N]`` decides: no more, so that a typo asks again instead of rejecting."""


async def _ask(
    handle: WorkflowHandle, events: _Events, waiting: ApprovalRecord | ClientCall, signer: decisions.Signer
) -> bool:
    """Ask the person about one call, once unless a refused decision leaves it waiting. ``/leave``
    or end of input decides nothing: the call keeps waiting, and the chat leaves (False)."""
    if waiting.call_id in events.asked:
        return True
    events.asked.add(waiting.call_id)
    events.typing.close()
    if isinstance(waiting, ClientCall):
        return await _answer_in_chat(handle, waiting)
    question = f"approve {waiting.tool}({json.dumps(waiting.arguments)})? [y/N] "
    while (typed := await _line(question)) not in (None, "/leave") and typed.lower() not in _APPROVES:
        print(f"(answer y or n, or /leave to leave it waiting; {typed!r} decides nothing)", flush=True)
    if typed is None or typed == "/leave":
        _print_left(handle.id, typed, f", its {waiting.tool} call {waiting.call_id} waiting for a decision")
        return False
    try:
        record = await _decide_in_chat(handle, waiting, _APPROVES[typed.lower()], signer)
    except decisions.Refused as e:
        print(f"(not decided: {e})", flush=True)
        for still in await handle.query(AgentWorkflow.pending_approvals):
            if still.call_id == waiting.call_id:
                events.asked.discard(still.call_id)
                events.approvals.put_nowait(still)
        return True
    print(format_approval(record), flush=True)
    return True


async def _decide_in_chat(
    handle: WorkflowHandle, record: ApprovalRecord, approve: bool, signer: decisions.Signer
) -> ApprovalRecord:
    """The decision typed for ``record``, as the signer (``--by``, its key if any) over the arguments
    it was asked with; ``decisions.Refused`` with the reason."""
    decision = decisions.decision_from(
        {"call_id": record.call_id, "approve": approve, "by": signer.by},
        reason="answered in chat",
        arguments_digest=record.arguments_digest,
    )
    return await decisions.decide(handle, decision, signer=signer, waiting=[record])


async def _answer_in_chat(handle: WorkflowHandle, call: ClientCall) -> bool:
    """A client tool's call, answered at the prompt: ``ask_user``'s question, or any tool's JSON result.
    ``/leave`` or end of input answers nothing: the call keeps waiting, and the chat leaves (False)."""
    if call.tool == "ask_user":
        print(f"agent asks> {call.arguments.get('question', '')}", flush=True)
        typed = await _line("answer> ")
    else:
        typed = await _line(f"result of {call.tool}({json.dumps(call.arguments)}) as JSON> ")
    if typed is None or typed == "/leave":
        _print_left(handle.id, typed, f", its {call.tool} call {call.call_id} waiting for its result")
        return False
    value: Any = typed
    if call.tool != "ask_user":
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(typed)
    try:
        await handle.execute_update(
            AgentWorkflow.deliver_client_result, ClientResult(call_id=call.call_id, result=value)
        )
    except WorkflowUpdateFailedError as e:
        print(f"(not delivered: {refusal(e)})", flush=True)
    return True


def message_input(text: str, images: list[str] | None = None) -> MessageInput:
    return valid("message", lambda: MessageInput(text=text, images=images_of(images)))


def images_of(given: list[str] | None) -> list[Image]:
    """``--image`` values: files or URLs (durable_agents/client/images.py), each refused in one line."""
    try:
        return [image(each) for each in given or []]
    except ValueError as e:
        raise CommandError(f"--image: {e}") from e


async def send_message(handle: WorkflowHandle, text: str, images: list[str] | None = None) -> Reply:
    """The reply to ``text`` (and ``images``, paths or URLs); a message refused while the conversation
    continues as new is sent again."""
    message = message_input(text, images)
    try:
        return await resent_while_rolling_over(
            lambda: handle.execute_update(AgentWorkflow.send_message, message, result_type=Reply)
        )
    except WorkflowUpdateFailedError as e:
        raise CommandError(f"not sent: {refusal(e)}") from e


def signer_of(args: argparse.Namespace) -> decisions.Signer:
    """``--by``, signing with ``AGENT_APPROVER_KEY`` when set."""
    try:
        return decisions.Signer.of(args.by, args.settings.approver_key)
    except ValueError as e:
        raise CommandError(str(e)) from e
