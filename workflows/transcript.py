"""Shapes of a transcript: what the model sees of it, how big that is, and where it may be cut.

Context compaction and forks both cut a transcript, and neither may cut between a tool call and
its result. These are pure functions of the messages: the workflow decides from recorded data
only (so replay decides the same), and the model activity builds the model's view with them.
"""

from __future__ import annotations

from collections.abc import Sequence

from durable_agents.workflows.messages import (
    AssistantMessage,
    Message,
    SummaryMessage,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)

SUMMARY_INSTRUCTION = (
    "The conversation above is getting too long for your context window. Write a summary that will"
    " replace it: the user's requests and goals, what you found out and did (tool calls and results"
    " that still matter), decisions made and open questions. Keep names, numbers, identifiers and"
    " file paths exact. Answer with the summary only."
)
"""The last message of a summarisation call (tools off)."""

CHARS_PER_TOKEN = 4


IMAGE_TOKENS = 1_600
"""An image's tokens in the estimate (a large one, as both providers count them)."""
LATER_FIELDS = {"images", "handoff"}
"""Fields added after the estimate's rule: left out of its JSON, so that a recorded conversation's
estimates (and the compaction decided on them) stay what they were; images count as ``IMAGE_TOKENS``."""


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A rough token count (JSON characters / 4) for messages no model has counted yet."""
    chars = sum(len(m.model_dump_json(exclude=LATER_FIELDS)) for m in messages)
    images = sum(len(m.images) for m in messages if isinstance(m, UserMessage))
    return chars // CHARS_PER_TOKEN + images * IMAGE_TOKENS


def view_start(messages: Sequence[Message]) -> int:
    """Where the part the model sees after the system prompt begins: the latest summary, or the
    first message after the leading system messages."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], SummaryMessage):
            return index
    return _system_end(messages)


def model_view(messages: Sequence[Message]) -> list[Message]:
    """What the model is sent: the leading system messages, then everything from the latest summary.
    After a handoff the prompt of the agent handed to stands first instead (workflows/handoffs.py)."""
    prompts = [m for m in messages if isinstance(m, SystemMessage) and m.handoff]
    rest = [m for m in messages[view_start(messages) :] if not (isinstance(m, SystemMessage) and m.handoff)]
    return [*(prompts[-1:] or messages[: _system_end(messages)]), *rest]


def summary_request(messages: Sequence[Message]) -> list[Message]:
    """A summarisation call's messages: the model's view of ``messages`` and the instruction."""
    return [*model_view(messages), UserMessage(text=SUMMARY_INSTRUCTION)]


def input_tokens(messages: Sequence[Message], counted: int, counted_messages: int) -> int:
    """The next call's input: ``counted`` tokens (the last call's input and output, as the provider
    reported them) for the first ``counted_messages`` messages, plus an estimate for the rest."""
    if not counted:
        return estimate_tokens(model_view(messages))
    return counted + estimate_tokens(messages[counted_messages:])


def compaction_cut(messages: Sequence[Message]) -> int | None:
    """Where to cut for a summary: before the last user message (the current turn stays whole), or,
    when nothing before it is left to summarise, before the last model response (kept with its tool
    results). None when there is nothing to summarise."""
    start = view_start(messages)
    # An earlier summary alone is nothing new to summarise.
    first = start + 1 if start < len(messages) and isinstance(messages[start], SummaryMessage) else start
    for kind in (UserMessage, AssistantMessage):
        cut = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], kind)), None)
        if cut is not None and cut > first:
            return cut
    return None


def cut_error(messages: Sequence[Message], count: int) -> str | None:
    """Why keeping only the first ``count`` messages would split a tool call from its result (None
    if it would not)."""
    kept = messages[count - 1] if count > 0 else None
    if isinstance(kept, AssistantMessage) and kept.tool_calls:
        call = kept.tool_calls[0]
        return f"message {count} asks for tool call {call.id} ({call.name}) and its result would be cut off"
    following = messages[count] if count < len(messages) else None
    if isinstance(following, ToolResultMessage):
        return f"message {count + 1} is the result of tool call {following.call_id}, whose call would be kept"
    return None


def history_error(messages: Sequence[Message]) -> str | None:
    """What is wrong with a transcript given to start from (None if nothing): system messages only at
    the start, every tool result right after the call that asked for it, every call answered."""
    open_calls: set[str] = set()
    system_end = _system_end(messages)
    for number, message in enumerate(messages, start=1):
        if isinstance(message, SystemMessage) and number > system_end:
            return f"message {number}: system messages only at the start"
        if isinstance(message, ToolResultMessage):
            if message.call_id not in open_calls:
                return (
                    f"message {number}: result of tool call {message.call_id}, which nothing before asks for"
                )
            open_calls.discard(message.call_id)
            continue
        if open_calls:
            return f"message {number}: tool call(s) {', '.join(sorted(open_calls))} have no result before it"
        if isinstance(message, AssistantMessage):
            open_calls = {call.id for call in message.tool_calls}
    if open_calls:
        return f"tool call(s) {', '.join(sorted(open_calls))} of the last message have no result"
    return None


def _system_end(messages: Sequence[Message]) -> int:
    index = 0
    while index < len(messages) and isinstance(messages[index], SystemMessage):
        index += 1
    return index
