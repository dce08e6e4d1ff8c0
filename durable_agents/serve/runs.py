"""Runs for frontends: a POST that sends a message (update-with-start underneath: the conversation
starts if it does not exist), answers approvals or delivers client tools' results, answered with
that turn's events in AG-UI or in the Vercel AI SDK's UI message stream protocol (``protocols.py``),
read from the same stream and the same per-process follower as the SSE endpoint (``fanout.Hub``).

A run ends where the frontend has to act: at the reply, at an approval (AG-UI), or at a client
tool's call (workflows/client_tools.py), which the frontend runs and whose result the next run
brings: AG-UI a ``tool`` message with its ``toolCallId`` last in ``messages``, useChat the tool
part's ``output`` in the assistant message it sends back (``addToolOutput``). An approval ends a
run too: AG-UI's ``resume`` answers it, useChat's tool part in state ``approval-responded``
(``addToolApprovalResponse``), both through ``_answer``. The result goes
through the ``deliver_client_result`` update: checked against the tool's result schema, a refusal
is the run's one-line error.

    POST /agents/AGENT/ag-ui       AG-UI RunAgentInput; threadId is the conversation id
    POST /agents/AGENT/chat        what useChat sends ({id, messages, trigger}); id is the conversation id
    GET  /agents/AGENT/chat/ID/messages   the chat's UI messages so far (a reloaded page's ``messages``)
    GET  /agents/AGENT/chat/ID/stream     the reply in progress from its start (``resume: true``), or 204
    POST /conversations/ID/decisions   {"call_id", "approve", "by", "reason", "arguments"}
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from temporalio.client import (
    Client,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from durable_agents.client import decisions
from durable_agents.client.conversations import refusal, rolling_over, send_or_start, start_message
from durable_agents.client.images import image
from durable_agents.client.live import next_offset, read_batches
from durable_agents.serve.fanout import Hub, Subscription
from durable_agents.serve.identities import Caller, caller_of, tenant_of
from durable_agents.serve.protocols import AgUi, Chunk, UiMessages, ag_ui_messages, ui_messages
from durable_agents.serve.streaming import EventStreamResponse
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import MessageInput
from durable_agents.workflows.config import Versioning
from durable_agents.workflows.events import (
    ApprovalDecided,
    ApprovalRequested,
    ClientToolRequested,
    Ended,
    Event,
    MessageAdded,
    ModelCallFinished,
    ModelCallInterrupted,
    ModelCallStarted,
    ReplySent,
    StateChanged,
    TextDelta,
    ToolCallFinished,
)
from durable_agents.workflows.messages import Image
from durable_agents.workflows.records import ApprovalRecord, ClientCall, ClientResult, Reply

UI_MESSAGE_STREAM_HEADERS = {"x-vercel-ai-ui-message-stream": "v1"}


@dataclass
class RunEnd:
    """How a run ended: the reply, approvals or a client tool's call it waits for, or why it failed."""

    reply: Reply | None = None
    approvals: list[ApprovalRecord] = field(default_factory=list)
    client_calls: list[ClientCall] = field(default_factory=list)
    error: str | None = None


def routes(
    client: Client, hub: Hub, task_queue: str, agents: Callable[[], Mapping[str, Versioning]] | None = None
) -> list[Route]:
    """The runs' routes; ``agents`` (the names a run may start, read when asked) refuses any other
    with a 404 before a conversation starts (None: any name goes to the workers)."""

    async def ag_ui(request: Request) -> Response:
        body = await _body(request, AgUiInput)
        if isinstance(body, Response):
            return body
        thread_id = body.threadId or str(uuid.uuid4())
        caller = caller_of(request.scope)
        resume = [entry.model_dump(exclude_unset=True) for entry in body.resume or []]
        by = caller.user or str((body.forwardedProps or {}).get("by") or "ag-ui")
        messages = body.messages or []
        results = [] if resume else _ag_ui_results(messages)
        try:
            said = None if resume or results else _last_user_message(messages)
        except ValueError as e:  # an image it cannot send
            return PlainTextResponse(f"{e}\n", status_code=400)
        if not resume and not results and said is None:
            if body.threadId is None:
                why = "the last message must be the user's or a tool's (or give a threadId to reconnect)\n"
                return PlainTextResponse(why, status_code=400)
            if refused := await _refused(client, caller, thread_id):
                return refused
            return await _reconnect(client, hub, AgUi(thread_id, body.runId or str(uuid.uuid4())))
        agent = request.path_params["agent"] if said is not None else None
        if refused := await _refused(
            client, caller, thread_id, agent=agent, deciding=bool(resume), agents=agents
        ):
            return refused
        offset = await _offset_now(client, thread_id)
        run = AgUi(thread_id, body.runId or str(uuid.uuid4()), answered={r.call_id for r in results})
        subscription = hub.subscribe(thread_id, offset)

        async def chunks() -> AsyncIterator[Chunk | list[Chunk]]:
            yield (run.started())
            with _deltas(hub, thread_id) as deltas:
                if resume:
                    reply, error = None, await _answer(client, thread_id, resume, by, caller.user is not None)
                elif results:
                    reply, error = None, await _deliver(client, thread_id, results)
                else:
                    assert said is not None and agent is not None
                    reply, error = await _send(client, thread_id, said, agent, task_queue, caller, agents)
                if error is not None:
                    yield (run.failed(error))
                    return
                async for chunks in _ag_ui_run(run, _run(subscription, reply, deltas, interrupt=True)):
                    yield chunks

        return EventStreamResponse(_frames(_flat(chunks())), subscription.dropped, failed=_error_frame)  # type: ignore[return-value]

    async def chat(request: Request) -> Response:
        body = await _body(request, ChatInput)
        if isinstance(body, Response):
            return body
        workflow_id = body.id or str(uuid.uuid4())
        if body.trigger != "submit-message":
            return PlainTextResponse("only trigger submit-message is supported\n", status_code=400)
        messages = body.messages or []
        results, responses = _ui_results(messages), _ui_approvals(messages)
        try:
            said = None if results or responses else _last_user_message(messages)
        except ValueError as e:  # an image it cannot send
            return PlainTextResponse(f"{e}\n", status_code=400)
        if not results and not responses and said is None:
            return PlainTextResponse(
                "the last message must be the user's, or the assistant's with a tool's output or an"
                " approval's response\n",
                status_code=400,
            )
        caller = caller_of(request.scope)
        agent = request.path_params["agent"]
        continued = bool(results or responses)
        if refused := await _refused(
            client,
            caller,
            workflow_id,
            agent=None if continued else agent,
            deciding=bool(responses),
            agents=agents,
        ):
            return refused
        offset = await _offset_now(client, workflow_id)
        # a tool's output or an approval's response continues the assistant message it is part of
        message = UiMessages(str(messages[-1].id) if continued else None, workflow_id)
        subscription = hub.subscribe(workflow_id, offset)

        async def send() -> tuple[Awaitable[Reply] | None, str | None]:
            if responses:
                return None, await _answer(
                    client, workflow_id, responses, caller.user or "web", caller.user is not None
                )
            if results:
                return None, await _deliver(client, workflow_id, results)
            assert said is not None
            return await _send(client, workflow_id, said, agent, task_queue, caller, agents)

        return _ui_stream(hub, workflow_id, message, subscription, send)

    async def chat_messages(request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        if refused := await _refused(client, caller_of(request.scope), workflow_id):
            return refused
        events = await _log(client, workflow_id)
        return JSONResponse(
            ui_messages(workflow_id, [*(e for _, e in events), *hub.text_so_far.of(workflow_id)])
        )

    async def chat_stream(request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        if refused := await _refused(client, caller_of(request.scope), workflow_id):
            return refused
        turn = _last_turn(await _log(client, workflow_id))
        if turn is None or not turn.running:
            return Response(status_code=204)
        subscription = hub.subscribe(workflow_id, turn.start)

        async def nothing() -> tuple[Awaitable[Reply] | None, str | None]:
            return None, None

        resumed = UiMessages(None, workflow_id)
        so_far = hub.text_so_far.of(workflow_id)
        return _ui_stream(
            hub, workflow_id, resumed, subscription, nothing, so_far=so_far, decided=frozenset(turn.decided)
        )

    async def decide(request: Request) -> Response:
        body = await _json(request)
        if isinstance(body, Response):
            return body
        handle = client.get_workflow_handle(request.path_params["workflow_id"])
        caller = caller_of(request.scope)
        if refused := await _refused(client, caller, handle.id, deciding=True):
            return refused
        try:
            given = {"by": "web", **body} if isinstance(body, dict) else body
            decision = decisions.decision_from(given, by=caller.user)
        except decisions.Refused as e:
            return PlainTextResponse(f"not decided: {e}\n", status_code=400)
        try:
            record = await decisions.decide(handle, decision)
        except decisions.Refused as e:
            return PlainTextResponse(f"not decided: {e}\n", status_code=409)
        except RPCError as e:
            status = 404 if e.status == RPCStatusCode.NOT_FOUND else 409
            return PlainTextResponse(f"not decided: {handle.id}: {e.message}\n", status_code=status)
        return JSONResponse(record.model_dump(mode="json"))

    return [
        Route("/agents/{agent}/ag-ui", ag_ui, methods=["POST"]),
        Route("/agents/{agent}/chat", chat, methods=["POST"]),
        Route("/agents/{agent}/chat/{workflow_id:path}/messages", chat_messages),
        Route("/agents/{agent}/chat/{workflow_id:path}/stream", chat_stream),
        Route("/conversations/{workflow_id:path}/decisions", decide, methods=["POST"]),
    ]


Send = Callable[[], Awaitable[tuple[Awaitable[Reply] | None, str | None]]]
"""What a run does first: send a message (its reply's update) or deliver, answer, or nothing; or why not."""


def _ui_stream(
    hub: Hub,
    workflow_id: str,
    message: UiMessages,
    subscription: Subscription,
    send: Send,
    *,
    so_far: list[TextDelta] | None = None,
    decided: frozenset[str] = frozenset(),
) -> Response:
    """A useChat run's response: ``send``, then the conversation's events as the UI message's parts
    until the reply, an approval or a client tool's call (for a stream that resumes: ``so_far``,
    the running call's text before the subscription's deltas, and ``decided``, the approvals it
    replays that were decided)."""

    async def chunks() -> AsyncIterator[Chunk | list[Chunk]]:
        yield (message.started())
        with _deltas(hub, workflow_id) as deltas:
            reply, error = await send()
            if error is not None:
                yield (message.failed(error))
                return
            async for item in _run(
                subscription, reply, deltas, interrupt=True, so_far=so_far, decided=decided
            ):
                if isinstance(item, RunEnd):
                    if item.error is not None:
                        yield (message.failed(item.error))
                    waits = item.client_calls or item.approvals
                    yield (message.finished("tool-calls" if waits else "stop"))
                    return
                yield message.translate(item)

    return EventStreamResponse(
        _frames(_flat(chunks()), done=True),
        subscription.dropped,
        failed=_error_frame,
        headers=UI_MESSAGE_STREAM_HEADERS,
    )  # type: ignore[return-value]


async def _reconnect(client: Client, hub: Hub, run: AgUi) -> Response:
    """An AG-UI run that sends nothing (a page that reloaded): ``MESSAGES_SNAPSHOT`` of the thread
    so far and ``STATE_SNAPSHOT`` first, then the turn that runs, from its running model call (that
    call's text so far, then as it comes) to its end; or, when none runs, the interrupts it waits
    for."""
    thread_id = run.thread_id
    events = await _log(client, thread_id)
    turn = _last_turn(events)
    running = turn is not None and turn.running
    cut = turn.model_call if turn is not None and turn.running and turn.model_call is not None else None
    shown = [e for at, e in events if cut is None or at < cut]
    states = [e for e in shown if isinstance(e, StateChanged)]
    state = {"state": states[-1].state, "detail": states[-1].detail} if states else {}
    snapshots = [
        {"type": "MESSAGES_SNAPSHOT", "messages": ag_ui_messages(thread_id, shown)},
        {"type": "STATE_SNAPSHOT", "snapshot": state},
    ]
    start = cut if cut is not None else (events[-1][0] + 1 if events else 0)
    subscription = hub.subscribe(thread_id, start)

    async def chunks() -> AsyncIterator[Chunk | list[Chunk]]:
        yield [*run.started(), *snapshots]
        if not running:
            yield (run.finished(interrupts=list(turn.approvals.values()) if turn else []))
            return
        assert turn is not None
        with _deltas(hub, thread_id) as deltas:
            so_far = hub.text_so_far.of(thread_id)
            decided = frozenset(turn.decided)
            rest = _run(subscription, None, deltas, interrupt=True, so_far=so_far, decided=decided)
            async for chunks in _ag_ui_run(run, rest):
                yield chunks

    return EventStreamResponse(_frames(_flat(chunks())), subscription.dropped, failed=_error_frame)  # type: ignore[return-value]


async def _ag_ui_run(run: AgUi, items: AsyncIterator[Event | RunEnd]) -> AsyncIterator[list[Chunk]]:
    """A run's events as AG-UI's, then how it ended: ``RUN_FINISHED`` (a result, or interrupts) or
    ``RUN_ERROR``."""
    async for item in items:
        if isinstance(item, RunEnd):
            result = item.reply.model_dump(mode="json") if item.reply else None
            yield run.failed(item.error) if item.error is not None else run.finished(result, item.approvals)
            return
        yield run.translate(item)


async def _log(client: Client, workflow_id: str) -> list[tuple[int, Event]]:
    """The events the conversation's log keeps (none for one that does not exist)."""
    try:
        return await read_batches(client, client.get_workflow_handle(workflow_id), 0)
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return []
        raise


@dataclass
class LastTurn:
    """The turn of the conversation's last user message, as its log has it."""

    start: int
    """The offset of its user message."""
    over: bool = False
    """Replied, or the conversation ended."""
    approvals: dict[str, ApprovalRecord] = field(default_factory=dict)
    """The approvals it waits for."""
    client_calls: set[str] = field(default_factory=set)
    """The client tools' calls it waits for."""
    decided: set[str] = field(default_factory=set)
    """The approvals decided in it."""
    model_call: int | None = None
    """The offset of its model call that runs now, if one does."""

    @property
    def running(self) -> bool:
        """Its reply is being made: it is not over, and waits for no person and no client."""
        return not (self.over or self.approvals or self.client_calls)


def _last_turn(events: list[tuple[int, Event]]) -> LastTurn | None:
    turns = [i for i, (_, e) in enumerate(events) if isinstance(e, MessageAdded) and e.role == "user"]
    if not turns:
        return None
    turn = LastTurn(events[turns[-1]][0])
    for offset, event in events[turns[-1] :]:
        match event:
            case ReplySent() | Ended():
                turn.over = True
            case ModelCallStarted():
                turn.model_call = offset
            case ModelCallFinished() | ModelCallInterrupted(attempt=None):
                turn.model_call = None
            case ApprovalRequested(record=record):
                turn.approvals[record.call_id] = record
            case ClientToolRequested(call=call):
                turn.client_calls.add(call.call_id)
            case ApprovalDecided(record=record):
                turn.approvals.pop(record.call_id, None)
                turn.decided.add(record.call_id)
            case ToolCallFinished(call_id=call_id):
                turn.client_calls.discard(call_id)
    return turn


async def _flat(items: AsyncIterator[Chunk | list[Chunk]]) -> AsyncIterator[Chunk]:
    async for item in items:
        if isinstance(item, list):
            for chunk in item:
                yield chunk
        else:
            yield item


async def _frames(chunks: AsyncIterator[Chunk], *, done: bool = False) -> AsyncIterator[bytes]:
    """SSE ``data:`` frames (and ``[DONE]`` last, for the UI message stream)."""
    async for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    if done:
        yield b"data: [DONE]\n\n"


def _error_frame(error: Exception) -> bytes:
    return f"data: {json.dumps({'type': 'error', 'errorText': str(error)})}\n\n".encode()


@contextlib.contextmanager
def _deltas(hub: Hub, workflow_id: str) -> Iterator[asyncio.Queue[Event] | None]:
    """The conversation's deltas from the fast channel, taken from before the run sends anything:
    the subscription to its events starts with the response, and would miss the first model
    call's opening deltas (its text would then come whole at ``model_call_finished``)."""
    if hub.deltas is None:
        yield None
        return
    queue: asyncio.Queue[Event] = asyncio.Queue()
    unsubscribe = hub.deltas.subscribe(workflow_id, queue.put_nowait)
    try:
        yield queue
    finally:
        unsubscribe()


async def _run(
    subscription: Subscription,
    reply: Awaitable[Reply] | None,
    deltas: asyncio.Queue[Event] | None,
    *,
    interrupt: bool,
    so_far: list[TextDelta] | None = None,
    decided: frozenset[str] = frozenset(),
) -> AsyncIterator[Event | RunEnd]:
    """The conversation's events from the subscription's offset, with ``deltas`` as they come once
    their model call has started (the subscription's own deltas are the same, later), then how
    the run ended: at the reply to the message sent (``reply``; without one, at the next reply),
    at an approval awaited when ``interrupt`` (unless ``decided`` has it), or when the conversation
    ended. ``so_far``: deltas that come first, once their model call has started."""
    events = subscription.events()
    waiting = asyncio.ensure_future(reply) if reply is not None else None
    replied: dict[str, Reply] = {}
    following: asyncio.Future[Any] = asyncio.ensure_future(anext(events))
    delta = asyncio.ensure_future(deltas.get()) if deltas is not None else None
    started: set[int] = set()
    held: dict[int, list[Event]] = {}
    for early in so_far or []:
        held.setdefault(early.model_call, []).append(early)
    """Deltas of model calls whose ``model_call_started`` the run has not reached: they wait for
    it, so a call's deltas come after what the log has before the call (a previous call's tool
    results), as the log's own order would have them."""
    try:
        while True:
            pending = {following} | ({waiting} if waiting is not None and not waiting.done() else set())
            await asyncio.wait(pending | ({delta} if delta else set()), return_when=asyncio.FIRST_COMPLETED)
            if deltas is not None and delta is not None and delta.done():
                early = delta.result()
                call = getattr(early, "model_call", None)
                if call in started:
                    yield early
                elif call is not None:
                    held.setdefault(call, []).append(early)
                delta = asyncio.ensure_future(deltas.get())
            if following.done():
                try:
                    entry = following.result()
                except StopAsyncIteration:
                    yield RunEnd(error="the conversation closed")
                    return
                event = entry.event
                if entry.offset is not None or deltas is None:
                    yield event
                match event:
                    case ModelCallStarted(model_call=call):
                        started.add(call)
                        for early in held.pop(call, []):
                            yield early
                    case (
                        ModelCallFinished(model_call=call)
                        | ModelCallInterrupted(model_call=call, attempt=None)
                    ):
                        held.pop(call, None)  # what it held, the event has
                    case ReplySent(reply=answer):
                        replied[answer.message_id] = answer
                        if waiting is None:
                            yield RunEnd(reply=answer)
                            return
                    case ApprovalRequested(record=record) if interrupt and record.call_id not in decided:
                        yield RunEnd(approvals=[record])
                        return
                    case ClientToolRequested(call=call):
                        yield RunEnd(client_calls=[call])
                        return
                    case Ended(outcome=outcome, detail=detail):
                        yield RunEnd(error=None if outcome == "completed" else detail)
                        return
                following = asyncio.ensure_future(anext(events))
            if waiting is not None and waiting.done():
                if (failure := waiting.exception()) is not None:
                    yield RunEnd(error=refusal(failure))
                    return
                if waiting.result().message_id in replied:
                    yield RunEnd(reply=waiting.result())
                    return
    finally:
        following.cancel()
        if waiting is not None:
            waiting.cancel()  # the message's turn goes on; this run stops waiting for it
        if delta is not None:
            delta.cancel()
        others = [f for f in (waiting, delta) if f is not None]
        await asyncio.gather(following, *others, return_exceptions=True)
        await events.aclose()  # type: ignore[attr-defined]


# -- what the bodies may hold ------------------------------------------------------------------------


class Part(BaseModel):
    """A part of a message (AG-UI's content parts, a UI message's parts): the fields a run reads, and
    the others kept (a tool's result passes on as it came)."""

    model_config = ConfigDict(extra="allow")

    type: str = ""
    text: str = ""
    toolCallId: str = ""
    state: str | None = None
    output: Any = None
    errorText: str | None = None
    approval: dict[str, Any] | None = None


class AgUiMessage(BaseModel):
    """An AG-UI message: the user's text, or a frontend tool's result (``tool``); an ``activity``
    message's content is an object."""

    role: str | None = None
    content: str | list[Part] | dict[str, Any] | None = None
    toolCallId: str = ""
    error: str | None = None


class ResumeEntry(BaseModel):
    """An AG-UI ``resume`` entry: the answer to an interrupt (an approval). Read as the JSON object it
    came as (``_answer``); here only its shape is checked."""

    model_config = ConfigDict(extra="allow")

    interruptId: str = ""
    status: str | None = None
    payload: dict[str, Any] | None = None


class AgUiInput(BaseModel):
    """What a run reads of AG-UI's ``RunAgentInput`` (the rest is the frontend's own)."""

    threadId: str | None = None
    runId: str | None = None
    messages: list[AgUiMessage] | None = None
    resume: list[ResumeEntry] | None = None
    forwardedProps: dict[str, Any] | None = None


class UiMessage(BaseModel):
    """A UI message of the Vercel AI SDK (``useChat``)."""

    id: str | None = None
    role: str | None = None
    parts: list[Part] | None = None


class ChatInput(BaseModel):
    """What a run reads of what ``useChat`` sends."""

    id: str | None = None
    trigger: str | None = "submit-message"
    messages: list[UiMessage] | None = None


Body = TypeVar("Body", bound=BaseModel)


async def _body(request: Request, model: type[Body]) -> Body | Response:
    """The body as ``model``, or the one-line answer why not (400 naming the field)."""
    body = await _json(request)
    if isinstance(body, Response):
        return body
    try:
        return model.model_validate(body)
    except ValidationError as e:
        first = e.errors()[0]
        why = "Input should be a valid dictionary" if first["type"] == "model_type" else first["msg"]
        return PlainTextResponse(f"invalid body: {_where(first['loc'], body)}: {why}\n", status_code=400)


def _where(loc: tuple[int | str, ...], body: Any) -> str:
    """The field a validation error is about, as the body spells it (without the names pydantic adds
    for the alternatives of a field that may be one of several types)."""
    path: list[str] = []
    for key in loc:
        if (isinstance(body, dict) and key in body) or (isinstance(body, list) and isinstance(key, int)):
            path.append(str(key))
            body = body[key]
        else:
            break
    return ".".join(path)


async def _json(request: Request) -> dict[str, Any] | Response:
    """The body as a JSON object, or the one-line answer why not. Only ``application/json``: a page
    of another site can send text/plain or a form without the browser asking first (415)."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        return PlainTextResponse(
            "send the body as JSON, with Content-Type: application/json\n", status_code=415
        )
    try:
        body = json.loads((await request.body()).decode())
    except UnicodeDecodeError:
        return PlainTextResponse("the body must be UTF-8\n", status_code=400)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to parse
        return PlainTextResponse("the body must be JSON\n", status_code=400)
    if not isinstance(body, dict):
        return PlainTextResponse("the body must be a JSON object\n", status_code=400)
    return body


@dataclass(frozen=True)
class ToolResult:
    """A client tool's result as a frontend sent it."""

    call_id: str
    value: Any
    is_error: bool = False


def _ag_ui_results(messages: list[AgUiMessage]) -> list[ToolResult]:
    """The ``tool`` messages the messages end with (AG-UI: a frontend tool's result is one)."""
    found: list[ToolResult] = []
    for m in reversed(messages):
        if m.role != "tool":
            break
        c = m.content
        content = [p.model_dump(exclude_unset=True) for p in c] if isinstance(c, list) else c
        found.insert(0, ToolResult(m.toolCallId, m.error or content, bool(m.error)))
    return found


def _ui_results(messages: list[UiMessage]) -> list[ToolResult]:
    """The tool outputs of the last message when it is the assistant's (useChat's ``addToolOutput``
    then sends it back)."""
    if not messages or messages[-1].role != "assistant":
        return []
    return [
        ToolResult(p.toolCallId, p.errorText, True)
        if p.state == "output-error"
        else ToolResult(p.toolCallId, p.output)
        for p in messages[-1].parts or []
        if (p.type == "dynamic-tool" or p.type.startswith("tool-"))
        and p.state in ("output-available", "output-error")
    ]


def _ui_approvals(messages: list[UiMessage]) -> list[dict[str, Any]]:
    """The approval responses of the last message when it is the assistant's (useChat's
    ``addToolApprovalResponse`` then sends it back), as the ``resume`` entries ``_answer`` takes."""
    if not messages or messages[-1].role != "assistant":
        return []
    return [
        {
            "interruptId": str(p.approval.get("id", "")),
            "status": "resolved",
            "payload": {
                "approve": p.approval.get("approved") is True,
                "reason": p.approval.get("reason") or "",
            },
        }
        for p in messages[-1].parts or []
        if p.state == "approval-responded" and p.approval is not None
    ]


async def _deliver(client: Client, workflow_id: str, results: list[ToolResult]) -> str | None:
    """Deliver the results of the client tool calls that wait (the messages also hold the results of
    the calls the server ran; when none waits, the last, to be refused); why one was not, or None."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        waiting = {c.call_id: c for c in await handle.query(AgentWorkflow.pending_client_calls)}
    except (RPCError, WorkflowQueryFailedError) as e:
        return f"not delivered: {refusal(e)}"
    for result in [r for r in results if r.call_id in waiting] or results[-1:]:
        value = result.value
        call = waiting.get(result.call_id)
        if isinstance(value, str) and call is not None and call.result_schema.get("type") != "string":
            with contextlib.suppress(ValueError):  # AG-UI's content is text: JSON for other results
                value = json.loads(value)
        try:
            delivered = ClientResult(call_id=result.call_id, result=value, is_error=result.is_error)
            await handle.execute_update(AgentWorkflow.deliver_client_result, delivered)
        except ValidationError as e:
            return f"not delivered: {e.errors()[0]['msg']}"
        except WorkflowUpdateFailedError as e:
            return f"not delivered: {refusal(e)}"
    return None


def _last_user_message(messages: list[AgUiMessage] | list[UiMessage]) -> tuple[str, list[Image]] | None:
    """The last message if it is the user's and says something: its text (AG-UI's ``content``, a
    string or parts, or a UI message's ``parts``) and its images (AG-UI's ``binary`` parts, a UI
    message's ``file`` parts, of an image type); ``ValueError`` for an image it cannot send."""
    if not messages or messages[-1].role != "user":
        return None
    last = messages[-1]
    content = last.content if isinstance(last, AgUiMessage) else last.parts
    if isinstance(content, str):
        return (content, []) if content else None
    parts = content if isinstance(content, list) else []
    text = "".join(p.text for p in parts if p.type == "text")
    if not text:
        return None
    return text, [image(url) for p in parts if (url := _image_url(p)) is not None]


def _image_url(part: Part) -> str | None:
    """An image part's URL (a ``data:`` URL when it came whole): AG-UI's ``binary`` part
    (``mimeType``, ``url`` or ``data``), the AI SDK's ``file`` part (``mediaType``, ``url``)."""
    extra = part.model_extra or {}
    if part.type == "binary" and str(extra.get("mimeType", "")).startswith("image/"):
        return extra.get("url") or f"data:{extra['mimeType']};base64,{extra.get('data', '')}"
    if part.type == "file" and str(extra.get("mediaType", "")).startswith("image/"):
        return extra.get("url")
    return None


async def _offset_now(client: Client, workflow_id: str) -> int:
    """Where the run's events start: the conversation's next offset (0 for one not started)."""
    try:
        return await next_offset(client, workflow_id)
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return 0
        raise


async def _refused(
    client: Client,
    caller: Caller,
    workflow_id: str,
    *,
    agent: str | None = None,
    deciding: bool = False,
    agents: Callable[[], Mapping[str, Versioning]] | None = None,
) -> Response | None:
    """Why ``caller`` may not run ``agent`` in, or decide in, conversation ``workflow_id`` (403), or
    reach it at all (404: another tenant's is as one that does not exist, and an agent not among
    ``agents``); None when it may."""
    if agent is not None and agents is not None and agent not in (known := agents()):
        return PlainTextResponse(
            f"unknown agent {agent!r}; this server knows: {', '.join(sorted(known)) or 'none'}\n",
            status_code=404,
        )
    if deciding and not caller.decide:
        return PlainTextResponse(f"the token {caller.name} may not decide\n", status_code=403)
    if agent is not None and not caller.may_run(agent):
        return PlainTextResponse(f"the token {caller.name} may not run agent {agent!r}\n", status_code=403)
    if caller.tenant is not None:
        exists, tenant = await tenant_of(client, workflow_id)
        if (exists and not caller.reaches(tenant)) or (deciding and not exists):
            return PlainTextResponse(f"{workflow_id}: workflow not found\n", status_code=404)
    return None


async def _send(
    client: Client,
    workflow_id: str,
    said: tuple[str, list[Image]],
    agent: str,
    task_queue: str,
    caller: Caller,
    agents: Callable[[], Mapping[str, Versioning]] | None = None,
) -> tuple[Awaitable[Reply] | None, str | None]:
    """The reply to the accepted message, or why it was not sent; a conversation it starts belongs
    to the caller's tenant and user, as the workflow type of its agent's ``versioning`` (``agents``)."""
    text, images = said
    message = MessageInput(text=text, images=images)
    options: dict[str, Any] = {
        "agent": agent,
        "task_queue": task_queue,
        "tenant": caller.tenant,
        "user": caller.user,
        "versioning": agents().get(agent) if agents is not None else None,
    }
    try:
        sent = await start_message(client, workflow_id, message, **options)
        return _reply(sent, functools.partial(send_or_start, client, workflow_id, message, **options)), None
    except WorkflowAlreadyStartedError:
        return None, f"{workflow_id} has closed; send to a new id"
    except WorkflowUpdateFailedError as e:
        return None, f"not sent: {refusal(e)}"
    except ValidationError as e:
        return None, f"not sent: {e.errors()[0]['msg']}"


async def _reply(sent: WorkflowUpdateHandle[Reply], again: Callable[[], Awaitable[Reply]]) -> Reply:
    """The reply to the message ``sent``; sent ``again`` (and waited for) when the conversation refused
    it for its continue-as-new, which the SDK hands back as an answered update, not as an error of
    the start (a message refused at once is no different from one accepted until ``result()``)."""
    try:
        return await sent.result()
    except WorkflowUpdateFailedError as e:
        if not rolling_over(e):
            raise
    return await again()


async def _answer(
    client: Client, workflow_id: str, resume: list[Any], by: str, by_token: bool = False
) -> str | None:
    """Decide each approval a resume entry answers (its ``payload``: the decision's fields, such as
    ``approve``, ``reason``, ``arguments_digest``, ``signature``); why one was not taken, or None."""
    handle = client.get_workflow_handle(workflow_id)
    for entry in resume:
        payload = entry.get("payload") or {}
        resolved = entry.get("status") == "resolved"
        try:
            if not isinstance(payload, dict):
                raise decisions.Refused("a resume entry's payload is a JSON object of the decision's fields")
            given = {"by": by, "reason": "" if resolved else "cancelled", **payload}
            approve = resolved and bool(payload.get("approve"))
            decision = decisions.decision_from(
                given, call_id=entry.get("interruptId", ""), approve=approve, by=by if by_token else None
            )
            await decisions.decide(handle, decision)
        except decisions.Refused as e:
            return f"not decided: {e}"
        except RPCError as e:
            return f"not decided: {workflow_id}: {e.message}"
    return None
