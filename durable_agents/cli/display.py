"""What the command line shows of a conversation: its transcript, approvals and result, and its
events live as they come (``starter.py watch``, ``chat``, the demo)."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TextIO

from temporalio.client import Client

from durable_agents.activities.delta_channel import DeltaListener
from durable_agents.cli import program
from durable_agents.client.live import live, next_offset
from durable_agents.workflows.api import ConversationResult
from durable_agents.workflows.events import (
    ApprovalDecided,
    ApprovalJudged,
    ApprovalRequested,
    ClientToolRequested,
    Event,
    GuardrailChecked,
    HandedOff,
    HookDecided,
    MessageAdded,
    ModelCallFinished,
    ModelCallInterrupted,
    StateChanged,
    StreamedText,
    SummaryAdded,
    TextDelta,
    ToolCallFinished,
)
from durable_agents.workflows.messages import (
    AssistantMessage,
    Message,
    SummaryMessage,
    SystemMessage,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from durable_agents.workflows.records import ApprovalRecord, GuardrailRecord, HandoffRecord, Reply


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
    if record.edited_arguments is not None:
        why += f" (edited to {json.dumps(record.edited_arguments)})"
    if record.remember:
        why += f" ({record.tool} allowed for the conversation)"
    by = record.by if record.verdict is None else f"{record.by} ({record.verdict.approver})"
    return f"[approval {record.call_id}] {record.tool} {record.state} by {by} via {record.via}{why}"


def format_guardrail(record: GuardrailRecord) -> str:
    """One guardrail check, as ``watch`` and ``history`` print it."""
    head = f"[guardrail {record.guardrail}] {record.stage} of {record.message_id}"
    if record.passed:
        return f"{head} passed"
    then = {"retry": "; the model answers again", "end_turn": "; the turn ends", "none": ""}[record.action]
    return f"{head} failed: {record.reason}{then}"


def format_handoff(record: HandoffRecord) -> str:
    """One handoff, as ``watch`` and ``history`` print it."""
    return f"[handoff {record.call_id}] {record.from_agent} -> {record.to_agent}: {record.reason}"


def format_result(result: ConversationResult) -> str:
    usage = result.usage
    flags = " (truncated at max_tokens)" if result.truncated else ""
    return (
        f"{result.final_text}\n"
        f"-- stop reason: {result.stop_reason}{flags}; iterations: {result.iterations}; "
        f"model calls: {result.model_calls}; tool calls: {len(result.tool_calls)}; "
        f"tokens: {usage.input_tokens} in{cached(usage)} / {usage.output_tokens} out"
    )


def cached(usage: Usage) -> str:
    """The input tokens read from the prompt cache, when some were."""
    return f" ({usage.cached_input_tokens} cached)" if usage.cached_input_tokens else ""


def format_reply(reply: Reply, workflow_id: str) -> str:
    """A chat's reply, and how to go on: the chat stays open."""
    flags = " (truncated at max_tokens)" if reply.truncated else ""
    return (
        f"{reply.text}\n"
        f"-- stop reason: {reply.stop_reason}{flags}; iterations: {reply.iterations}; the chat stays open:"
        f" {program()} send {workflow_id} TEXT (end {workflow_id} closes it)"
    )


async def show_live(
    client: Client,
    workflow_id: str,
    from_offset: int = 0,
    *,
    approve_hints: bool = True,
    deltas: DeltaListener | None = None,
) -> None:
    """Print a conversation's events as they come: the transcript as it grows, approvals awaited
        and decided, a streamed answer as it is typed, what the loop is doing; until it ends. Asked to
        start past the stream's end, it says what it waits for first (on stderr). ``deltas``: streamed
    text from the fast channel as it comes."""
    typing, last_detail, offset = TypingLine(), "", from_offset - 1
    end = await next_offset(client, workflow_id) if from_offset else 0
    if from_offset > end:
        print(f"({waiting_for(from_offset, end)})", file=sys.stderr, flush=True)
    try:
        async for at, event in live(client, workflow_id, from_offset, deltas):
            if at is not None:
                offset = at
            if isinstance(event, TextDelta | ModelCallFinished):
                typing.add(event)
            if isinstance(event, StateChanged):
                if event.detail == last_detail:
                    continue
                last_detail = event.detail
            if isinstance(event, ModelCallInterrupted):
                typing.interrupted(event)
            if lines := format_event(event):
                typing.print(*lines)
            if isinstance(event, ApprovalRequested) and approve_hints:
                record = event.record
                typing.print(
                    f"  approve: {program()} approve {workflow_id} {record.call_id}"
                    f" --digest {record.arguments_digest}"
                )
    except asyncio.CancelledError:  # Ctrl-C
        typing.close()
        resume = f"{program()} watch {workflow_id} --from {offset + 1}"
        print(f"(left after event {offset}; resume with: {resume})", file=sys.stderr)
        raise
    typing.close()
    if offset < from_offset:
        print(f"(the conversation closed: {_held(end)}, before event {from_offset})", file=sys.stderr)


def waiting_for(offset: int, end: int) -> str:
    """What a reader asked to start at ``offset`` waits for, the stream's next offset being ``end``."""
    return f"waiting for event {offset}: {_held(end)} so far"


def _held(end: int) -> str:
    return f"the stream's last event is {end - 1}" if end else "the stream has no event"


def format_event(event: Event) -> list[str]:
    """An event's lines as ``watch`` prints them (the transcript's own format); none for the events
    that only say what starts (the status line says it), and for text deltas (``TypingLine``)."""
    match event:
        case MessageAdded(role="system", text=text):
            return [format_transcript([SystemMessage(text=text)])]
        case MessageAdded(text=text):
            return [format_transcript([UserMessage(text=text)])]
        case SummaryAdded(text=text, replaces=replaces):
            return [format_transcript([SummaryMessage(text=text, replaces=replaces)])]
        case ModelCallFinished(text=text, tool_calls=calls, reasoning=reasoning):
            found = format_transcript([AssistantMessage(text=text, tool_calls=calls)])
            thought = [f"[reasoning] {line}" for line in reasoning.splitlines() if line]
            return thought + (found.splitlines() if found else [])
        case ToolCallFinished(call_id=call_id, tool=tool, content=content, is_error=is_error):
            return [
                format_transcript(
                    [ToolResultMessage(call_id=call_id, name=tool, content=content, is_error=is_error)]
                )
            ]
        case ApprovalRequested(record=record) | ApprovalDecided(record=record):
            return [format_approval(record)]
        case ApprovalJudged(record=record) if record.judgements:
            j = record.judgements[-1]
            return [f"[judge {j.judge}] {j.verdict} {record.tool} ({record.call_id}): {j.reason}"]
        case ClientToolRequested(call=call):
            return [
                f"[client tool {call.tool} ({call.call_id})] waits for the client:"
                f" {json.dumps(call.arguments)}"
            ]
        case GuardrailChecked(record=record):
            return [format_guardrail(record)]
        case HandedOff(record=record):
            return [format_handoff(record)]
        case HookDecided(record=record):
            why = f": {record.reason}" if record.reason else ""
            return [f"[hook {record.hook}] {record.action} ({record.event} {record.target}){why}"]
        case StateChanged(detail=detail) if detail:
            return [f"... {detail}"]
        case ModelCallInterrupted(model_call=call, attempt=int(attempt), detail=detail):
            return [f"[model call {call}, attempt {attempt} broke off: {detail}]"]
        case ModelCallInterrupted(model_call=call, reason=reason, detail=detail):
            return [f"[model call {call} {reason}: {detail}]"]
    return []


class TypingLine:
    """A streamed answer as it is typed, printing only what is new (by the dedupe rule of
    ``StreamedText``, a retried model call repeats nothing already shown), and every other line
    through ``print``.

    On a terminal the partial answer is the bottom line: other lines print above it, a retry that
    words it otherwise redraws it, and the answer's final line replaces it. Elsewhere (a pipe, a
    log) nothing printed can be taken back: a retry's text starts a new line that says it
    replaces the one above."""

    PREFIX = "agent (typing)> "
    REPLACING = "agent (typing, replaces the line above)> "

    def __init__(self, out: TextIO | None = None, columns: int | None = None) -> None:
        self._out = out or sys.stdout
        self._terminal = self._out.isatty()
        self._columns = columns
        self._rule = StreamedText()
        self._open: str | None = None
        """The typing line as it shows (prefix and text), while one is open."""
        self._done: set[int] = set()
        """Model calls whose answer has been shown whole: their late deltas show nothing."""

    def add(self, event: TextDelta | ModelCallFinished) -> None:
        update = self._rule.add(event)
        if isinstance(event, ModelCallFinished):
            self.finish()  # the whole answer follows as its own line
            self._done.add(event.model_call)
            return
        if update is None or event.model_call in self._done:
            return
        how, text = update
        if how == "append" and self._open is not None:
            self._write(text)
            self._open += text
        elif how == "append":
            self._show(self.PREFIX + text)
        elif self._terminal:
            self._erase()
            self._show(self.PREFIX + text)
        else:
            self.close()
            self._show(self.REPLACING + text)

    def interrupted(self, event: ModelCallInterrupted) -> None:
        """A call that is over without an answer keeps its partial line (and says so below it); an
        attempt that broke off keeps it open for the retry."""
        if event.attempt is None:
            self._done.add(event.model_call)
            self.close()

    def print(self, *lines: str) -> None:
        """Lines of their own, above the typing line."""
        typing = self._open
        if self._terminal:
            self._erase()
        else:
            self.close()
        self._out.write("".join(f"{line}\n" for line in lines))
        if typing is not None and self._terminal:
            self._show(typing)
        self._out.flush()

    def finish(self) -> None:
        """The answer shows whole next: on a terminal the typing line goes, elsewhere it ends."""
        if self._terminal:
            self._erase()
        self.close()

    def close(self) -> None:
        """End the typing line where it is."""
        if self._open is not None:
            self._out.write("\n")
            self._out.flush()
            self._open = None

    def _show(self, line: str) -> None:
        self._write(line)
        self._open = line

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def _erase(self) -> None:
        """Take the typing line off a terminal: back to its first row, then clear to the end."""
        if self._open is None:
            return
        columns = self._columns or shutil.get_terminal_size().columns
        rows = sum(max(1, -(-len(part) // columns)) for part in self._open.split("\n"))
        self._write("\r" + (f"\x1b[{rows - 1}A" if rows > 1 else "") + "\x1b[J")
        self._open = None


def deadline_text(at: datetime | None) -> str:
    """A deadline as the command line shows it (UTC), or ``none``."""
    return f"{at:%Y-%m-%d %H:%M:%S}Z" if at else "none"
