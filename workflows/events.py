"""A conversation's live event stream: one offset-addressed log (Temporal's Workflow Streams) that
watchers follow from any offset, across continue-as-new.

The workflow publishes every event but ``text_delta`` in memory (no command, no history event).
A streamed model call's activity sends its text and tool-call arguments as they come over a fast
channel outside Temporal (``activities/delta_channel.py``: not in the log, not in history), or,
when no channel reaches a reader, publishes its text in batches (a signal each). A subscriber
that reconnects asks for the offset after the last event it has and gets exactly the rest.

Text deltas and retries: each ``text_delta`` names its model call, the activity attempt that
streamed it and where its text starts in that attempt's answer. A retried call streams again
from the start under a higher attempt, and ``model_call_finished`` carries the whole answer. The
dedupe rule (``StreamedText``): the text of a model call is the latest attempt's text; a client
shows only what extends the text it already shows, and starts the line again only when the
retry's words differ from it. A delta whose earlier text never arrived (a reader that joined the
fast channel mid-answer) is not shown: ``model_call_finished`` brings the whole text.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field
from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState

from durable_agents.workflows.messages import Tagged, ToolCall, Usage
from durable_agents.workflows.records import (
    ApprovalRecord,
    ClientCall,
    GuardrailRecord,
    HandoffRecord,
    HookRecord,
    Reply,
)
from durable_agents.workflows.telemetry import observe

EVENTS_TOPIC = "events"
"""The one topic of a conversation's stream."""


class _Event(Tagged):
    TAG: ClassVar[str] = "type"

    type: str
    """The event's kind: each event narrows it to its own name."""


class MessageAdded(_Event):
    """The transcript took a system prompt or a user message (as hooks left it)."""

    type: Literal["message"] = "message"
    role: Literal["system", "user"]
    text: str
    message_id: str | None = None


class SummaryAdded(_Event):
    """Context compaction: a model call summarised the ``replaces`` messages before the recent ones;
    the model sees this summary instead of them from now on (``history`` keeps them all)."""

    type: Literal["summary"] = "summary"
    text: str
    replaces: int
    usage: Usage = Field(default_factory=Usage)


class ModelCallStarted(_Event):
    type: Literal["model_call_started"] = "model_call_started"
    model_call: int
    """The request's number in the conversation (1, 2, ...), across runs: each model request has its
    own (a fallback model's too), so streamed text never mixes two requests."""
    model: str
    iteration: int
    tools: bool = True
    """False for a final-answer call with the tools turned off."""


class TextDelta(_Event):
    """Text a streamed model call produced: ``text`` starts at ``start`` in the answer of ``attempt``."""

    type: Literal["text_delta"] = "text_delta"
    model_call: int
    attempt: int
    start: int
    text: str


class ToolCallDelta(_Event):
    """Argument text of a tool call a streamed model call is writing (fast channel only, never in the
    log): ``text`` starts at ``start`` in the JSON text of call ``index`` of ``attempt``'s answer;
    ``model_call_finished`` carries the parsed arguments."""

    type: Literal["tool_call_delta"] = "tool_call_delta"
    model_call: int
    attempt: int
    index: int
    call_id: str = ""
    name: str = ""
    start: int
    text: str


class ModelCallInterrupted(_Event):
    """A model call, or one attempt of it, ended without an answer. With ``attempt``: that attempt
    broke off (its activity says so; Temporal may try again, and the retry streams from the start).
    Without it, the call is over: ``interrupted`` by a newer message, ``failed`` for good (a
    fallback model may be asked next, as a new call), or ``cancelled`` with the conversation."""

    type: Literal["model_call_interrupted"] = "model_call_interrupted"
    model_call: int
    reason: Literal["attempt_failed", "interrupted", "failed", "cancelled"]
    attempt: int | None = None
    detail: str = ""


class TextReplaced(_Event):
    """Never in the log: what the SSE endpoint sends before a retried attempt's text that words the
    call otherwise than the text it streamed so far. A client that renders text as it comes
    replaces the call's partial text with the text that follows."""

    type: Literal["text_replaced"] = "text_replaced"
    model_call: int
    attempt: int


class ModelCallFinished(_Event):
    """The model's whole answer: the text every delta of the call adds up to, and its tool calls."""

    LATER = ("reasoning",)

    type: Literal["model_call_finished"] = "model_call_finished"
    model_call: int
    text: str
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str = "stop"
    reasoning: str = ""
    """The summary of the model's reasoning, when its agent asked for one (``reasoning_summary``)."""


class ToolCallStarted(_Event):
    type: Literal["tool_call_started"] = "tool_call_started"
    call_id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCallFinished(_Event):
    """What goes back to the model: the tool's result, or an error (unknown tool, rejection, ...)."""

    type: Literal["tool_call_finished"] = "tool_call_finished"
    call_id: str
    tool: str
    content: str
    is_error: bool = False


class _ApprovalEvent(_Event):
    """A waiting call's approval record, as it is when the event is published."""

    record: ApprovalRecord


class ApprovalRequested(_ApprovalEvent):
    type: Literal["approval_requested"] = "approval_requested"


class ApprovalDecided(_ApprovalEvent):
    """Approved, rejected, timed out or cancelled (``record.state``), by whom and how."""

    type: Literal["approval_decided"] = "approval_decided"


class ApprovalJudged(_ApprovalEvent):
    """A judge gave its opinion of a waiting call and left it to a person (``record.judgements``)."""

    type: Literal["approval_judged"] = "approval_judged"


class ClientToolRequested(_Event):
    """The conversation waits for the client to run a client tool and deliver its result
    (``deliver_client_result``, ``starter.py answer``) before ``deadline``."""

    type: Literal["client_tool_requested"] = "client_tool_requested"
    call: ClientCall


class HookDecided(_Event):
    type: Literal["hook_decided"] = "hook_decided"
    record: HookRecord


class GuardrailChecked(_Event):
    type: Literal["guardrail_checked"] = "guardrail_checked"
    record: GuardrailRecord


class HandedOff(_Event):
    type: Literal["handed_off"] = "handed_off"
    record: HandoffRecord


class ReplySent(_Event):
    """The answer to a user message."""

    type: Literal["reply"] = "reply"
    reply: Reply


class StateChanged(_Event):
    """What the status query says now (state and detail line)."""

    type: Literal["state"] = "state"
    state: str
    detail: str = ""


class Ended(_Event):
    """The conversation closed: the last event of the stream."""

    type: Literal["end"] = "end"
    outcome: Literal["completed", "cancelled", "failed"]
    detail: str = ""


Event = Annotated[
    MessageAdded
    | SummaryAdded
    | ModelCallStarted
    | TextDelta
    | ToolCallDelta
    | ModelCallInterrupted
    | TextReplaced
    | ModelCallFinished
    | ToolCallStarted
    | ToolCallFinished
    | ApprovalRequested
    | ApprovalDecided
    | ApprovalJudged
    | ClientToolRequested
    | HookDecided
    | GuardrailChecked
    | HandedOff
    | ReplySent
    | StateChanged
    | Ended,
    Field(discriminator="type"),
]


class ConversationEvents:
    """The workflow's side of the stream. Made in the workflow's ``__init__`` (it registers the
    stream's signal, update and query handlers there); publishing is in memory."""

    def __init__(self, carried: WorkflowStreamState | None) -> None:
        self._stream = WorkflowStream(prior_state=carried)
        self._topic = self._stream.topic(EVENTS_TOPIC)

    def publish(self, event: Event) -> None:
        """Appended to the log as it is now (serialized at once: later changes to it do not show),
        and told to the worker's telemetry."""
        self._topic.publish(event)
        observe(event)

    def approvals_decided(self, were_pending: list[ApprovalRecord]) -> None:
        """An ``approval_decided`` for each of ``were_pending`` that is no longer pending."""
        for record in were_pending:
            if record.state != "pending":
                self.publish(ApprovalDecided(record=record))

    async def hand_over(self, keep: int) -> WorkflowStreamState:
        """Release the subscribers' waiting polls (they follow to the next run, or read the closed
        run's log), wait for every handler to finish, and return what the next run carries: the
        newest ``keep`` events, so the carried state stays bounded however long the conversation
        lives (offsets stay as they were)."""
        self._stream.detach_pollers()
        if not workflow.all_handlers_finished():
            await workflow.wait_condition(workflow.all_handlers_finished)
        state = self._stream.get_state()
        end = state.base_offset + len(state.log)
        if end - state.base_offset > keep:
            self._stream.truncate(end - keep)
            state = self._stream.get_state()
        return state

    def release(self) -> None:
        """The run is closing: waiting polls return now, and new ones wait for the closed run."""
        self._stream.detach_pollers()


class StreamedText:
    """The dedupe rule for a model call's streamed text, for a client that shows it as it comes.

    ``add`` takes a call's deltas (any attempt) and its final text, in stream order, and says what
    to show: ``("append", text)`` to extend what is shown, ``("restart", text)`` when a retried
    attempt said something else (show ``text`` afresh), or ``None`` when there is nothing new.
    """

    def __init__(self) -> None:
        self._attempt: dict[int, int] = {}
        self._attempt_text: dict[int, str] = {}
        self._shown: dict[int, str] = {}

    def add(self, event: TextDelta | ModelCallFinished) -> tuple[str, str] | None:
        call = event.model_call
        if isinstance(event, TextDelta):
            if event.attempt < self._attempt.get(call, 0):
                return None  # a late batch of an attempt that has been retried
            if event.attempt > self._attempt.get(call, 0):
                self._attempt[call], self._attempt_text[call] = event.attempt, ""
            known = self._attempt_text[call]
            if event.start > len(known):
                return None  # its earlier text never reached this reader: the final event brings it
            text = known[: event.start] + event.text  # a repeated batch (same start) replaces itself
            self._attempt_text[call] = text
        else:
            text = event.text
        shown = self._shown.get(call, "")
        if text.startswith(shown):
            self._shown[call] = text
            return ("append", text[len(shown) :]) if len(text) > len(shown) else None
        if shown.startswith(text):
            return None  # a retry that has not caught up with what is shown yet
        self._shown[call] = text
        return "restart", text
