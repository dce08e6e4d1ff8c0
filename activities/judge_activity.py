"""The judge activity: a model's opinion of a tool call that waits for approval (workflows/judges.py).

The model is told the tool, its description, the arguments and the latest messages, and asked for
one JSON object, ``{"verdict": "approve" | "deny" | "escalate", "reason": "..."}`` (natively, as a
typed answer, where the provider can). An answer that is not such an object escalates: the judge
was not understood, so a person decides.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import activity

from activities.heartbeat import heartbeating
from activities.providers import ModelProvider
from workflows.activity_io import JudgeAnswer, JudgeInput
from workflows.activity_refs import JUDGE
from workflows.messages import (
    AssistantMessage,
    Message,
    ModelRequest,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)

INSTRUCTIONS = """You judge whether a tool call that an AI agent wants to make may run, before a \
person looks at it. Approve what is clearly fine, deny what is clearly wrong, and escalate to a \
person whenever you are unsure. Answer with one JSON object and nothing else: \
{"verdict": "approve" or "deny" or "escalate", "reason": "one sentence"}."""

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["verdict", "reason"],
    "properties": {
        "verdict": {"type": "string", "enum": ["approve", "deny", "escalate"]},
        "reason": {"type": "string"},
    },
}


class JudgeActivities:
    """``judge``, over the providers of the worker's model activity."""

    def __init__(self, provider: Callable[[str], Awaitable[ModelProvider]]) -> None:
        self._provider = provider

    @JUDGE.defn
    async def judge(self, input: JudgeInput) -> JudgeAnswer:
        assert input.judge.model is not None
        settings = input.judge.model
        provider = await self._provider(settings.provider)
        request = ModelRequest(
            settings=settings.model_copy(update={"stream": False}),
            messages=[
                SystemMessage(text="\n\n".join(filter(None, [INSTRUCTIONS, input.judge.instructions]))),
                UserMessage(text=question(input)),
            ],
            allow_tool_calls=False,
            output_schema=VERDICT_SCHEMA,
        )
        async with heartbeating():
            response = await provider.complete(request, timeout=input.judge.call.timeout_seconds)
        verdict, reason = parse_verdict(response.message.text)
        activity.logger.info("judge %s: %s (%s)", input.judge.name, verdict, reason)
        return JudgeAnswer(verdict=verdict, reason=reason, model=settings.label, usage=response.usage)  # type: ignore[arg-type]


def question(input: JudgeInput) -> str:
    lines = [
        f"Tool: {input.tool}",
        f"What it does: {input.description or '(not described)'}",
        f"Arguments: {json.dumps(input.arguments, ensure_ascii=False)}",
        "",
        "The latest messages of the conversation:" if input.transcript else "(no messages yet)",
    ]
    lines += [f"- {_said(m)}" for m in input.transcript]
    return "\n".join(lines)


def _said(message: Message) -> str:
    match message:
        case UserMessage(text=text):
            return f"user: {text}"
        case AssistantMessage(text=text, tool_calls=calls):
            asked = "; ".join(f"calls {c.name}({json.dumps(c.arguments)})" for c in calls)
            return f"assistant: {text} {asked}".strip()
        case ToolResultMessage(name=name, content=content):
            return f"result of {name}: {content}"
        case SystemMessage(text=text):
            return f"system: {text}"
    return f"{message.kind}: ..."


def parse_verdict(text: str) -> tuple[str, str]:
    """The verdict and reason in the model's answer; ``escalate`` when it is not understood."""
    found = re.search(r"\{.*\}", text, re.DOTALL)
    try:
        value = json.loads(found.group(0)) if found else None
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or value.get("verdict") not in ("approve", "deny", "escalate"):
        return "escalate", f"the judge's answer was not understood: {text[:200]!r}"
    return value["verdict"], str(value.get("reason", ""))[:2000]
