"""An offline, deterministic model for the demo and tests.

It plays the agent's ``model.script`` in order, across all user messages: the
step index is the number of assistant turns so far. Step texts may contain
``{last_result}`` (the latest tool results) and ``{user}`` (the latest user
message). When tools are turned off, it answers with the next step that calls
no tools (or a summary). Asked to summarise the conversation (context compaction), it
writes a summary of its own that says how many turns it stands for, so the script goes on
where it was.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from functools import partial

from durable_agents.activities.errors import provider_error
from durable_agents.workflows.messages import (
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    OnText,
    ScriptStep,
    SummaryMessage,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from durable_agents.workflows.transcript import SUMMARY_INSTRUCTION

_SUMMARY = re.compile(r"^\(scripted summary of (\d+) model turns\)")


class ScriptedModel:
    name = "scripted"

    async def aclose(self) -> None:
        pass

    async def complete(
        self, request: ModelRequest, timeout: float, on_text: OnText | None = None
    ) -> ModelResponse:
        response, delay = respond(request)
        if not (on_text and request.settings.stream):
            await asyncio.sleep(delay)
            return response
        # Streamed word by word across the step's delay, as a model types: the text, then each
        # tool call's arguments (to ``on_text.tool_call`` when it has one, as ``ResponseBuilder``).
        message = response.message
        texts: list[tuple[Callable[[str], None], str]] = [(on_text, message.text)]
        if (on_call := getattr(on_text, "tool_call", None)) is not None:
            texts += [
                (partial(on_call, i, c.id, c.name), _arguments(c)) for i, c in enumerate(message.tool_calls)
            ]
        steps = [
            (report, words[:n])
            for report, text in texts
            for words in [_words(text)]
            for n in range(1, len(words) + 1)
        ]
        for report, words in steps:
            await asyncio.sleep(delay / len(steps))
            report("".join(words))
        if not steps:
            await asyncio.sleep(delay)
        return response
        # Streamed word by word across the step's delay, as a model types: the text, then each
        # tool call's arguments (to ``on_text.tool_call``, as ``ResponseBuilder`` reports them).
        on_call = getattr(on_text, "tool_call", None)
        pieces = [(None, "", w) for w in re.findall(r"\s*\S+", message.text)]
        for index, call in enumerate(message.tool_calls):
            raw = call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments)
            pieces += [(index, call, w) for w in re.findall(r"\s*\S+", raw)]
        so_far: dict[int | None, str] = {}
        for index, call, piece in pieces:
            await asyncio.sleep(delay / len(pieces))
            so_far[index] = so_far.get(index, "") + piece
            if index is None:
                on_text(so_far[index])
            elif on_call is not None:
                on_call(index, call.id, call.name, so_far[index])
        return response


def respond(request: ModelRequest) -> tuple[ModelResponse, float]:
    """The scripted answer, and how long the step says to think first."""
    messages = request.messages
    turn = _turns(messages)
    if messages and isinstance(messages[-1], UserMessage) and messages[-1].text == SUMMARY_INSTRUCTION:
        said = " / ".join(m.text for m in messages[:-1] if isinstance(m, UserMessage)) or "nothing new"
        text = f"(scripted summary of {turn} model turns) The user said: {said}"
        return ModelResponse(
            message=AssistantMessage(text=text),
            usage=Usage(input_tokens=10, output_tokens=5),
            model=request.settings.model,
        ), 0.0
    last_user = max((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), default=-1)
    results = [m.content for m in messages[last_user + 1 :] if isinstance(m, ToolResultMessage)]
    last_results = _last_results(messages)
    script = [s for s in request.settings.script for _ in range(s.repeat)]
    user = messages[last_user].text if last_user >= 0 else ""  # type: ignore[union-attr]

    step = script[turn] if turn < len(script) else None
    if not request.allow_tool_calls and (step is None or step.tool_calls):
        step = next((s for s in script[turn:] if not s.tool_calls), None) or ScriptStep(
            text=f"Stopping here after {len(results)} tool results. Latest: {last_results}"
        )
    if step is None:
        step = ScriptStep(text="(the script has no more steps)")
    if request.settings.model in step.fails_on:
        raise provider_error(
            "scripted", f"model {request.settings.model} fails this step by script", status=400
        )

    calls = [
        ToolCall.from_json(
            c.id if c.id is not None else f"call_{turn + 1}_{i}",
            c.name,
            c.raw_arguments if c.raw_arguments is not None else json.dumps(c.arguments),
        )
        for i, c in enumerate(step.tool_calls)
    ]
    response = ModelResponse(
        message=AssistantMessage(
            text=step.text.replace("{last_result}", last_results).replace("{user}", user), tool_calls=calls
        ),
        usage=Usage(input_tokens=step.input_tokens, output_tokens=step.output_tokens),
        finish_reason="tool_calls" if calls else "stop",
        model=request.settings.model,
    )
    return response, step.delay_seconds


def _words(text: str) -> list[str]:
    return re.findall(r"\s*\S+", text)


def _arguments(call: ToolCall) -> str:
    """The call's arguments as the model wrote them."""
    return call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments)


def _turns(messages: list) -> int:
    """Model turns so far: the assistant messages, and those its own summaries stand for."""
    summarised = (_SUMMARY.match(m.text) for m in messages if isinstance(m, SummaryMessage))
    return sum(isinstance(m, AssistantMessage) for m in messages) + sum(int(m[1]) for m in summarised if m)


def _last_results(messages: list) -> str:
    tail: list[str] = []
    for m in reversed(messages):
        if not isinstance(m, ToolResultMessage):
            break
        tail.append(m.content)
    return ", ".join(reversed(tail))
