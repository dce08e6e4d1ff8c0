"""Our events in the two protocols frontends speak, one run (one user message's turn) at a time:
AG-UI (CopilotKit and others) and the Vercel AI SDK's UI message stream (``useChat``). Pure
translation, no I/O: each translator takes the conversation's events in order and says what to
send (``sse.py``'s run endpoints send it).

Text: a model call's text is one message (AG-UI ``TEXT_MESSAGE_*``, UI ``text-*`` parts), streamed
by the dedupe rule of ``StreamedText``. A retried call that words its text otherwise closes the
partial message, says it was replaced (AG-UI: ``CUSTOM`` ``text_replaced``; UI: a transient
``data-text-replaced`` part) and streams the retry as a new one. A call that ends without an answer
ends its message and says why (AG-UI: ``CUSTOM`` ``model_call_interrupted``; UI: a transient
``data-model-call-interrupted`` part); so does an attempt that broke off. Tool calls: each starts
on its first ``tool_call_delta`` and takes its argument text as it comes (AG-UI ``TOOL_CALL_START``
and ``TOOL_CALL_ARGS``; UI ``tool-input-start`` and ``tool-input-delta``), by the same dedupe rule
per call; ``model_call_finished`` ends it (``TOOL_CALL_END``; ``tool-input-available``) and sends
whole the calls whose start never reached the run. A call a retry replaced with another ends as
such (AG-UI: ``CUSTOM`` ``tool_call_replaced``; UI: ``tool-input-error``). Approvals: AG-UI interrupts (the
run finishes with ``outcome: interrupt``, a run with ``resume`` answers them) and ``CUSTOM``
``approval_requested`` / ``approval_decided``; UI: the AI SDK's own ``tool-approval-request``
(the tool part's ``approval-requested`` state, answered with ``addToolApprovalResponse``: the run
ends there and the next request brings the answer), and a ``data-approval`` part per call, updated
in place as it is decided, for older clients. Client tools (workflows/client_tools.py): their
calls come as any tool call's; the run then ends (``runs.py``) without their result, so the
frontend runs them (AG-UI: a ``CUSTOM`` ``client_tool_requested`` first, with the call's deadline
and result schema; UI: the run finishes with ``tool-calls``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, assert_never

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
    StateChanged,
    StreamedText,
    TextDelta,
    ToolCallDelta,
    ToolCallFinished,
)
from durable_agents.workflows.messages import ToolCall
from durable_agents.workflows.records import ApprovalRecord

Chunk = dict[str, Any]

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean"},
        "reason": {"type": "string"},
        "arguments": {"type": "object", "description": "run the call with these arguments instead"},
        "arguments_digest": {
            "type": "string",
            "description": "the metadata's argumentsDigest: what was shown",
        },
        "remember": {"type": "boolean", "description": "allow the tool for the rest of the conversation"},
        "signature": {"type": "string", "description": "by the approver's key (docs/trust.md)"},
        "by": {"type": "string"},
    },
    "required": ["approve"],
    "additionalProperties": False,
}
"""The answer an approval interrupt expects (a ``resume`` entry's ``payload``): the fields of a
decision (durable_agents/client/decisions.py reads it as every door reads one)."""


def _approval(record: ApprovalRecord) -> dict[str, Any]:
    return record.model_dump(mode="json", exclude_none=True)


TextStep = Literal["start", "delta", "end", "replaced"]


class _Text:
    """A run's model call texts as messages, by the dedupe rule: ``chunks`` says, for each event,
    which message ends, is replaced, starts, and what text it adds, each step as the protocol's
    ``chunk`` of it."""

    def __init__(self, prefix: str, chunk: Callable[[TextStep, str, str], Chunk]) -> None:
        self._prefix = prefix
        self._chunk = chunk
        self._rule = StreamedText()
        self._open: dict[int, str] = {}
        self._replaced: dict[int, int] = {}
        self._over: set[int] = set()
        """Calls interrupted without an answer: a late delta opens no message for them."""

    def message_id(self, call: int) -> str:
        again = self._replaced.get(call, 0)
        return f"{self._prefix}-{call}" + (f"-{again}" if again else "")

    def chunks(self, event: TextDelta | ModelCallFinished) -> list[Chunk]:
        steps: list[tuple[TextStep, str, str]] = []
        call = event.model_call
        update = self._rule.add(event)
        if update is not None and call not in self._over:
            how, text = update
            if how == "restart" and call in self._open:
                replaced = self._open.pop(call)
                self._replaced[call] = self._replaced.get(call, 0) + 1
                steps += [("end", replaced, ""), ("replaced", replaced, "")]
            if call not in self._open:
                self._open[call] = self.message_id(call)
                steps.append(("start", self._open[call], ""))
            steps.append(("delta", self._open[call], text))
        if isinstance(event, ModelCallFinished) and call in self._open:
            steps.append(("end", self._open.pop(call), ""))
        return [self._chunk(*step) for step in steps]

    def interrupted(self, event: ModelCallInterrupted) -> list[Chunk]:
        """A call that is over without an answer ends its message (an attempt that broke off does
        not: its retry goes on with it, or replaces it)."""
        if event.attempt is not None:
            return []
        self._over.add(event.model_call)
        if event.model_call not in self._open:
            return []
        return [self._chunk("end", self._open.pop(event.model_call), "")]


class _CallStep(NamedTuple):
    """What a client is told of one tool call: it ``start``s, takes ``args`` text, ``end``s with
    ``call`` (the finished call), or ends without it because a retry ``replaced`` it or its model
    call was ``interrupted`` (``text``: the argument text it got)."""

    kind: Literal["start", "args", "end", "replaced", "interrupted"]
    id: str
    name: str
    text: str = ""
    call: ToolCall | None = None


@dataclass
class _Open:
    id: str
    name: str
    sent: str = ""
    """The argument text the client has."""
    diverged: bool = False
    """A retry wrote other arguments under the same id: what was sent cannot be taken back, so
    nothing more is sent until the call ends."""


class _ToolCalls:
    """A run's tool calls as the model writes them, each by the dedupe rule of ``StreamedText`` on its
    argument text (by model call and index): a call starts on its first delta and takes the text
    that extends what it was sent; ``model_call_finished`` ends it, or sends it whole when its start
    never reached the run."""

    def __init__(self) -> None:
        self._attempt: dict[int, int] = {}
        self._text: dict[tuple[int, int], str] = {}
        """Each call's argument text in its model call's latest attempt, as far as it reached the run."""
        self._open: dict[tuple[int, int], _Open] = {}
        self._over: set[int] = set()
        """Model calls that finished or were interrupted: a late delta starts nothing."""

    def streamed(self, event: ToolCallDelta) -> list[_CallStep]:
        call, key = event.model_call, (event.model_call, event.index)
        if call in self._over or event.attempt < self._attempt.get(call, 0):
            return []
        if event.attempt > self._attempt.get(call, 0):
            self._attempt[call] = event.attempt
            self._text = {k: v for k, v in self._text.items() if k[0] != call}
        known = self._text.get(key, "")
        if event.start > len(known):
            return []  # its earlier text never reached the run: model_call_finished sends it whole
        text = self._text[key] = known[: event.start] + event.text
        steps: list[_CallStep] = []
        opened = self._open.get(key)
        if opened is not None and opened.id != event.call_id:  # a retry's call in its place
            steps.append(self._end(key, "replaced"))
            opened = None
        if opened is None:
            opened = self._open[key] = _Open(event.call_id, event.name)
            steps.append(_CallStep("start", opened.id, opened.name))
        if opened.diverged:
            return steps
        if text.startswith(opened.sent):
            if len(text) > len(opened.sent):
                steps.append(_CallStep("args", opened.id, opened.name, text[len(opened.sent) :]))
                opened.sent = text
        elif not opened.sent.startswith(text):
            opened.diverged = True
        return steps

    def finished(self, event: ModelCallFinished) -> list[_CallStep]:
        """The call's open tool calls end (with what their text lacks); the others are sent whole."""
        self._over.add(event.model_call)
        mine = {k: o for k, o in self._open.items() if k[0] == event.model_call}
        final = {c.id for c in event.tool_calls}
        steps = [self._end(key, "replaced") for key, o in mine.items() if o.id not in final]
        by_id = {o.id: key for key, o in mine.items() if o.id in final}
        for call in event.tool_calls:
            whole = call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments)
            key = by_id.get(call.id)
            if key is None:
                steps += [
                    _CallStep("start", call.id, call.name),
                    _CallStep("args", call.id, call.name, whole),
                ]
            else:
                opened = self._open.pop(key)
                if not (opened.diverged or _same_arguments(opened.sent, call)) and whole.startswith(
                    opened.sent
                ):
                    steps.append(_CallStep("args", call.id, call.name, whole[len(opened.sent) :]))
            steps.append(_CallStep("end", call.id, call.name, call=call))
        return [s for s in steps if s.kind != "args" or s.text]

    def interrupted(self, event: ModelCallInterrupted) -> list[_CallStep]:
        """A model call that is over without an answer ends its tool calls (an attempt that broke
        off does not: its retry goes on with them, or replaces them)."""
        if event.attempt is not None:
            return []
        self._over.add(event.model_call)
        return [self._end(key, "interrupted") for key in list(self._open) if key[0] == event.model_call]

    def _end(self, key: tuple[int, int], how: Literal["replaced", "interrupted"]) -> _CallStep:
        opened = self._open.pop(key)
        return _CallStep(how, opened.id, opened.name, opened.sent)


def _same_arguments(sent: str, call: ToolCall) -> bool:
    """Whether the text sent is the call's whole arguments (the model's spacing may differ from ours)."""
    if call.raw_arguments is not None:
        return sent == call.raw_arguments
    try:
        return json.loads(sent) == call.arguments
    except ValueError:
        return False


def _interruption(event: ModelCallInterrupted) -> dict[str, Any]:
    found: dict[str, Any] = {"modelCall": event.model_call, "reason": event.reason, "detail": event.detail}
    if event.attempt is not None:
        found["attempt"] = event.attempt
    return found


def _ag_ui_text(step: TextStep, message_id: str, text: str) -> Chunk:
    match step:
        case "start":
            return {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"}
        case "delta":
            return {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": text}
        case "end":
            return {"type": "TEXT_MESSAGE_END", "messageId": message_id}
        case "replaced":
            return {"type": "CUSTOM", "name": "text_replaced", "value": {"messageId": message_id}}
        case _:
            assert_never(step)


class AgUi:
    """AG-UI events (``@ag-ui/core`` 1.0) for one run of a thread (a conversation)."""

    def __init__(self, thread_id: str, run_id: str, answered: set[str] | None = None) -> None:
        """``answered``: client tool calls whose results this run brought (the frontend has them:
        no ``TOOL_CALL_RESULT`` for them)."""
        self.thread_id, self.run_id = thread_id, run_id
        self._answered = answered or set()
        self._text = _Text(f"{thread_id}-m", _ag_ui_text)
        self._calls = _ToolCalls()

    def started(self) -> list[Chunk]:
        return [{"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id}]

    def finished(self, result: Any = None, interrupts: list[ApprovalRecord] | None = None) -> list[Chunk]:
        done: Chunk = {"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id}
        if interrupts:
            done["outcome"] = {"type": "interrupt", "interrupts": [self._interrupt(r) for r in interrupts]}
        else:
            done["outcome"] = {"type": "success"}
            if result is not None:
                done["result"] = result
        return [done]

    def failed(self, message: str) -> list[Chunk]:
        return [{"type": "RUN_ERROR", "message": message}]

    def _interrupt(self, record: ApprovalRecord) -> Chunk:
        interrupt: Chunk = {
            "id": record.call_id,
            "reason": "tool_approval",
            "message": f"approve {record.tool}({json.dumps(record.arguments)})?",
            "toolCallId": record.call_id,
            "responseSchema": APPROVAL_SCHEMA,
            "metadata": {
                "tool": record.tool,
                "argumentsDigest": record.arguments_digest,
                "conversation": record.conversation,
            },
        }
        if record.deadline is not None:
            interrupt["expiresAt"] = record.deadline.isoformat()
        return interrupt

    def translate(self, event: Event) -> list[Chunk]:
        match event:
            case TextDelta():
                return self._text.chunks(event)
            case ToolCallDelta():
                return self._call_chunks(event.model_call, self._calls.streamed(event))
            case ModelCallFinished():
                return [
                    *self._text.chunks(event),
                    *self._call_chunks(event.model_call, self._calls.finished(event)),
                ]
            case ModelCallInterrupted():
                return [
                    *self._text.interrupted(event),
                    *self._call_chunks(event.model_call, self._calls.interrupted(event)),
                    {"type": "CUSTOM", "name": "model_call_interrupted", "value": _interruption(event)},
                ]
            case ToolCallFinished(call_id=call_id) if call_id in self._answered:
                return []
            case ToolCallFinished(call_id=call_id, content=content):
                return [
                    {
                        "type": "TOOL_CALL_RESULT",
                        "messageId": f"{call_id}-result",
                        "toolCallId": call_id,
                        "content": content,
                        "role": "tool",
                    }
                ]
            case StateChanged(state=state, detail=detail):
                return [{"type": "STATE_SNAPSHOT", "snapshot": {"state": state, "detail": detail}}]
            case ApprovalRequested(record=record):
                return [{"type": "CUSTOM", "name": "approval_requested", "value": _approval(record)}]
            case ApprovalDecided(record=record):
                return [{"type": "CUSTOM", "name": "approval_decided", "value": _approval(record)}]
            case ClientToolRequested(call=call):
                value = call.model_dump(mode="json", exclude_none=True, exclude={"result", "is_error"})
                return [{"type": "CUSTOM", "name": "client_tool_requested", "value": value}]
        return []

    def _call_chunks(self, model_call: int, steps: list[_CallStep]) -> list[Chunk]:
        chunks: list[Chunk] = []
        for step in steps:
            match step.kind:
                case "start":
                    chunks.append(
                        {
                            "type": "TOOL_CALL_START",
                            "toolCallId": step.id,
                            "toolCallName": step.name,
                            "parentMessageId": self._text.message_id(model_call),
                        }
                    )
                case "args":
                    chunks.append({"type": "TOOL_CALL_ARGS", "toolCallId": step.id, "delta": step.text})
                case "end" | "interrupted":
                    chunks.append({"type": "TOOL_CALL_END", "toolCallId": step.id})
                case "replaced":
                    chunks += [
                        {"type": "TOOL_CALL_END", "toolCallId": step.id},
                        {"type": "CUSTOM", "name": "tool_call_replaced", "value": {"toolCallId": step.id}},
                    ]
        return chunks


def reply_id(workflow_id: str, message_id: str) -> str:
    """The id of the assistant's UI message that answers user message ``message_id`` (``m1``, ...):
    the same in a run's stream, in a resumed stream and in the messages a reloaded page reads."""
    return f"{workflow_id}-{message_id}-reply"


def _ui_text(step: TextStep, text_id: str, text: str) -> Chunk:
    match step:
        case "start":
            return {"type": "text-start", "id": text_id}
        case "delta":
            return {"type": "text-delta", "id": text_id, "delta": text}
        case "end":
            return {"type": "text-end", "id": text_id}
        case "replaced":
            return {"type": "data-text-replaced", "data": {"id": text_id}, "transient": True}
        case _:
            assert_never(step)


class UiMessages:
    """UI message stream parts (``x-vercel-ai-ui-message-stream: v1``) of one assistant message: the
    reply to one user message, its steps, tool calls and approvals. Without a ``message_id`` (a
    run that sends a message), the ``start`` part comes with the user message's ``message`` event,
    named by ``reply_id``."""

    def __init__(self, message_id: str | None, workflow_id: str = "") -> None:
        self.message_id, self._workflow_id = message_id, workflow_id
        self._text = _Text(f"{message_id or workflow_id}-t", _ui_text)
        self._calls = _ToolCalls()
        self._stepped: set[int] = set()
        """Calls whose step has started: a delta from the fast channel may come before the log's
        ``model_call_started``, and starts the step itself."""
        self._tools: set[str] = set()
        """The tool calls this message has as tool parts (an approval of another's has none)."""

    def started(self) -> list[Chunk]:
        return [{"type": "start", "messageId": self.message_id}] if self.message_id else []

    def finished(self, reason: str = "stop") -> list[Chunk]:
        return [{"type": "finish", "finishReason": reason}]

    def failed(self, message: str) -> list[Chunk]:
        return [{"type": "error", "errorText": message}]

    def translate(self, event: Event) -> list[Chunk]:
        match event:
            case MessageAdded(role="user", message_id=message) if self.message_id is None:
                self.message_id = reply_id(self._workflow_id, message or "")
                self._text = _Text(f"{self.message_id}-t", _ui_text)
                return self.started()
            case ModelCallStarted():
                return self._step(event.model_call)
            case TextDelta():
                chunks = self._text.chunks(event)
                return [*self._step(event.model_call), *chunks] if chunks else []
            case ToolCallDelta():
                chunks = self._call_chunks(self._calls.streamed(event))
                return [*self._step(event.model_call), *chunks] if chunks else []
            case ModelCallFinished():
                return [
                    *self._text.chunks(event),
                    *self._call_chunks(self._calls.finished(event)),
                    {"type": "finish-step"},
                ]
            case ModelCallInterrupted(attempt=attempt):
                mark: Chunk = {"type": "data-model-call-interrupted", "data": _interruption(event)}
                mark["transient"] = True
                ended = [{"type": "finish-step"}] if attempt is None else []
                return [
                    *self._text.interrupted(event),
                    *self._call_chunks(self._calls.interrupted(event)),
                    mark,
                    *ended,
                ]
            case ToolCallFinished(call_id=call_id, content=content, is_error=True):
                return [
                    {
                        "type": "tool-output-error",
                        "toolCallId": call_id,
                        "errorText": content,
                        "dynamic": True,
                    }
                ]
            case ToolCallFinished(call_id=call_id, content=content):
                return [
                    {
                        "type": "tool-output-available",
                        "toolCallId": call_id,
                        "output": content,
                        "dynamic": True,
                    }
                ]
            case ApprovalRequested(record=record):
                asked: list[Chunk] = []
                if record.call_id in self._tools:
                    asked = [
                        {
                            "type": "tool-approval-request",
                            "approvalId": record.call_id,
                            "toolCallId": record.call_id,
                        }
                    ]
                return [*asked, {"type": "data-approval", "id": record.call_id, "data": _approval(record)}]
            case ApprovalDecided(record=record):
                return [{"type": "data-approval", "id": record.call_id, "data": _approval(record)}]
            case StateChanged(state=state, detail=detail):
                return [
                    {
                        "type": "data-state",
                        "id": "state",
                        "data": {"state": state, "detail": detail},
                        "transient": True,
                    }
                ]
            case Ended(outcome="failed", detail=detail):
                return self.failed(detail)
        return []

    def _step(self, call: int) -> list[Chunk]:
        if call in self._stepped:
            return []
        self._stepped.add(call)
        return [{"type": "start-step"}]

    def _call_chunks(self, steps: list[_CallStep]) -> list[Chunk]:
        chunks: list[Chunk] = []
        for step in steps:
            match step:
                case _CallStep(kind="start"):
                    chunks.append(
                        {
                            "type": "tool-input-start",
                            "toolCallId": step.id,
                            "toolName": step.name,
                            "dynamic": True,
                        }
                    )
                case _CallStep(kind="args"):
                    chunks.append(
                        {"type": "tool-input-delta", "toolCallId": step.id, "inputTextDelta": step.text}
                    )
                case _CallStep(kind="end", call=ToolCall() as call):
                    self._tools.add(call.id)
                    chunks.append(
                        {
                            "type": "tool-input-available",
                            "toolCallId": call.id,
                            "toolName": call.name,
                            "input": call.arguments,
                            "dynamic": True,
                        }
                    )
                case _CallStep(kind="replaced" | "interrupted" as how):
                    reason = (
                        "a retry of the model call replaced it"
                        if how == "replaced"
                        else "the model call ended"
                    )
                    chunks.append(
                        {
                            "type": "tool-input-error",
                            "toolCallId": step.id,
                            "toolName": step.name,
                            "input": step.text,
                            "errorText": f"not called: {reason}",
                            "dynamic": True,
                        }
                    )
        return chunks


class UiMessageFold:
    """UI message stream parts folded into the assistant's UI message they make, as the AI SDK's
    client folds them (``processUIMessageStream``), for the parts ``UiMessages`` sends."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {"id": "", "role": "assistant", "parts": []}
        self._texts: dict[str, dict[str, Any]] = {}
        self._tools: dict[str, dict[str, Any]] = {}

    def add(self, chunk: Chunk) -> None:
        parts: list[dict[str, Any]] = self.message["parts"]
        kind: str = chunk["type"]
        match kind:
            case "start":
                self.message["id"] = chunk["messageId"]
            case "start-step":
                parts.append({"type": "step-start"})
            case "text-start":
                self._texts[chunk["id"]] = {"type": "text", "text": "", "state": "streaming"}
                parts.append(self._texts[chunk["id"]])
            case "text-delta":
                self._texts[chunk["id"]]["text"] += chunk["delta"]
            case "text-end":
                self._texts.pop(chunk["id"])["state"] = "done"
            case "tool-input-start" | "tool-input-error" if chunk["toolCallId"] not in self._tools:
                self._tools[chunk["toolCallId"]] = tool = {
                    "type": "dynamic-tool",
                    "toolName": chunk["toolName"],
                    "toolCallId": chunk["toolCallId"],
                    "state": "input-streaming",
                }
                parts.append(tool)
                self.add(chunk)
            case "tool-input-available":
                self._tools[chunk["toolCallId"]].update(state="input-available", input=chunk["input"])
            case "tool-input-error":
                tool = self._tools[chunk["toolCallId"]]
                tool.update(state="output-error", input=chunk["input"], errorText=chunk["errorText"])
            case "tool-approval-request":
                tool = self._tools[chunk["toolCallId"]]
                tool.update(state="approval-requested", approval={"id": chunk["approvalId"]})
            case "tool-output-available":
                self._tools[chunk["toolCallId"]].update(state="output-available", output=chunk["output"])
            case "tool-output-error":
                self._tools[chunk["toolCallId"]].update(state="output-error", errorText=chunk["errorText"])
            case _ if kind.startswith("data-") and not chunk.get("transient"):
                data = {"type": kind, "id": chunk.get("id"), "data": chunk["data"]}
                at = next(
                    (i for i, p in enumerate(parts) if (p["type"], p.get("id")) == (kind, data["id"])), None
                )
                if at is None:
                    parts.append(data)
                else:
                    parts[at] = data


def ui_messages(workflow_id: str, events: list[Event]) -> list[dict[str, Any]]:
    """A conversation's events as the UI messages ``useChat`` shows: each user message, then the
    assistant's message its turn made so far (``GET .../chat/ID/messages``)."""
    messages: list[dict[str, Any]] = []
    reply: tuple[UiMessages, UiMessageFold] | None = None
    for event in events:
        if isinstance(event, MessageAdded) and event.role == "user":
            if reply is not None and reply[1].message["parts"]:
                messages.append(reply[1].message)
            message = event.message_id or ""
            text = [{"type": "text", "text": event.text}]
            messages.append({"id": f"{workflow_id}-{message}", "role": "user", "parts": text})
            reply = UiMessages(None, workflow_id), UiMessageFold()
        if reply is not None:
            for chunk in reply[0].translate(event):
                reply[1].add(chunk)
    if reply is not None and reply[1].message["parts"]:
        messages.append(reply[1].message)
    return messages


class AgUiMessageFold:
    """AG-UI events folded into the messages they make, as ``@ag-ui/client`` folds them, for the
    events ``AgUi`` sends."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._by_id: dict[str, dict[str, Any]] = {}
        self._calls: dict[str, dict[str, Any]] = {}

    def append(self, message: dict[str, Any]) -> dict[str, Any]:
        self.messages.append(message)
        self._by_id[message["id"]] = message
        return message

    def add(self, chunk: Chunk) -> None:
        match chunk["type"]:
            case "TEXT_MESSAGE_START":
                self.append({"id": chunk["messageId"], "role": "assistant", "content": ""})
            case "TEXT_MESSAGE_CONTENT":
                self._by_id[chunk["messageId"]]["content"] += chunk["delta"]
            case "TOOL_CALL_START":
                parent = self._by_id.get(chunk["parentMessageId"]) or self.append(
                    {"id": chunk["parentMessageId"], "role": "assistant"}
                )
                function = {"name": chunk["toolCallName"], "arguments": ""}
                call = self._calls[chunk["toolCallId"]] = {"id": chunk["toolCallId"], "type": "function"}
                call["function"] = function
                parent.setdefault("toolCalls", []).append(call)
            case "TOOL_CALL_ARGS":
                self._calls[chunk["toolCallId"]]["function"]["arguments"] += chunk["delta"]
            case "TOOL_CALL_RESULT":
                result = {"id": chunk["messageId"], "role": "tool", "toolCallId": chunk["toolCallId"]}
                self.append({**result, "content": chunk["content"]})


def ag_ui_messages(thread_id: str, events: list[Event]) -> list[dict[str, Any]]:
    """A thread's events as the AG-UI messages a client that followed it holds (a reconnect's
    ``MESSAGES_SNAPSHOT``)."""
    run, fold = AgUi(thread_id, ""), AgUiMessageFold()
    for event in events:
        if isinstance(event, MessageAdded) and event.role == "user":
            fold.append({"id": f"{thread_id}-{event.message_id}", "role": "user", "content": event.text})
        for chunk in run.translate(event):
            fold.add(chunk)
    return fold.messages
