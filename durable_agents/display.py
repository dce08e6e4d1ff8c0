"""What the command line shows of a conversation: its transcript, approvals and result, and its
events live as they come (``starter.py watch``, ``chat``, the demo)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence

from temporalio.client import Client

from durable_agents.live import follow
from workflows.api import ConversationResult
from workflows.events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    HookDecided,
    MessageAdded,
    ModelCallFinished,
    StateChanged,
    StreamedText,
    SummaryAdded,
    TextDelta,
    ToolCallFinished,
)
from workflows.messages import (
    AssistantMessage,
    Message,
    SummaryMessage,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)
from workflows.records import ApprovalRecord, Reply


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


def format_result(result: ConversationResult) -> str:
    usage = result.usage
    flags = " (truncated at max_tokens)" if result.truncated else ""
    return (
        f"{result.final_text}\n"
        f"-- stop reason: {result.stop_reason}{flags}; iterations: {result.iterations}; "
        f"model calls: {result.model_calls}; tool calls: {len(result.tool_calls)}; "
        f"tokens: {usage.input_tokens} in / {usage.output_tokens} out"
    )


def format_reply(reply: Reply, workflow_id: str) -> str:
    """A chat's reply, and how to go on: the chat stays open."""
    flags = " (truncated at max_tokens)" if reply.truncated else ""
    return (
        f"{reply.text}\n"
        f"-- stop reason: {reply.stop_reason}{flags}; iterations: {reply.iterations}; the chat stays open:"
        f" python starter.py send {workflow_id} TEXT (end {workflow_id} closes it)"
    )


async def show_live(
    client: Client,
    workflow_id: str,
    from_offset: int = 0,
    *,
    approve_hints: bool = True,
) -> None:
    """Print a conversation's events as they come: the transcript as it grows, approvals awaited
    and decided, a streamed answer as it is typed, what the loop is doing; until it ends."""
    typing, last_detail, offset = TypingLine(), "", from_offset - 1
    try:
        async for at, event in follow(client, workflow_id, from_offset):
            offset = at
            if isinstance(event, TextDelta | ModelCallFinished):
                typing.add(event)
            if isinstance(event, StateChanged):
                if event.detail == last_detail:
                    continue
                last_detail = event.detail
            if lines := format_event(event):
                typing.close()
                print("\n".join(lines), flush=True)
            if isinstance(event, ApprovalRequested) and approve_hints:
                record = event.record
                print(
                    f"  approve: python starter.py approve {workflow_id} {record.call_id}"
                    f" --digest {record.arguments_digest}"
                )
    except asyncio.CancelledError:  # Ctrl-C
        typing.close()
        resume = f"python starter.py watch {workflow_id} --from {offset + 1}"
        print(f"(left after event {offset}; resume with: {resume})", file=sys.stderr)
        raise
    typing.close()


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
        case ModelCallFinished(text=text, tool_calls=calls):
            found = format_transcript([AssistantMessage(text=text, tool_calls=calls)])
            return found.splitlines() if found else []
        case ToolCallFinished(call_id=call_id, tool=tool, content=content, is_error=is_error):
            return [
                format_transcript(
                    [ToolResultMessage(call_id=call_id, name=tool, content=content, is_error=is_error)]
                )
            ]
        case ApprovalRequested(record=record) | ApprovalDecided(record=record):
            return [format_approval(record)]
        case HookDecided(record=record):
            why = f": {record.reason}" if record.reason else ""
            return [f"[hook {record.hook}] {record.action} ({record.event} {record.target}){why}"]
        case StateChanged(detail=detail) if detail:
            return [f"... {detail}"]
    return []


class TypingLine:
    """A streamed answer on one growing line, printing only what is new: by the dedupe rule of
    ``StreamedText``, a retried model call repeats nothing already shown."""

    def __init__(self) -> None:
        self._text = StreamedText()
        self._open = False

    def add(self, event: TextDelta | ModelCallFinished) -> None:
        update = self._text.add(event)
        if isinstance(event, ModelCallFinished):
            self.close()  # the whole answer follows as the transcript's line
        elif update is not None:
            how, text = update
            if how == "restart" or not self._open:
                self.close()
                print("agent (typing)> ", end="")
                self._open = True
            print(text, end="", flush=True)

    def close(self) -> None:
        """End the line before anything else is printed."""
        if self._open:
            print()
            self._open = False
