"""Hooks: user code that runs durably at fixed points of the loop, in activities.

- ``pre_tool_use(tool, arguments, ctx)``: before a call (and before any approval);
  may allow, block (the model gets an error with the reason) or rewrite the arguments.
- ``post_tool_use(tool, arguments, content, is_error, ctx)``: runs inside the tool's
  activity, so it may redact the output before it ever enters history.
- ``user_prompt_submit(text, ctx)``: once per user message; may block or rewrite it.
- ``guardrail(text, ctx)``: a function guardrail (workflows/guardrails.py): blocks to fail.

A hook returns ``None`` to allow, or a ``HookDecision``. Agents name their hooks
in their file; every decision is recorded in history and in the result.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from durable_agents.activities.named import NamedRegistry
from durable_agents.workflows.activity_io import HookContext, HookDecision, HookInvocation, ToolOutcome
from durable_agents.workflows.activity_refs import RUN_HOOK
from durable_agents.workflows.config import HookEvent


@dataclass(frozen=True)
class Hook:
    name: str
    event: HookEvent
    function: Callable[..., Any]


def hook(event: HookEvent, *, name: str | None = None) -> Callable[[Callable[..., Any]], Hook]:
    """``@hook("pre_tool_use")`` makes a hook of a function."""

    def make(fn: Callable[..., Any]) -> Hook:
        return Hook(name=name or fn.__name__, event=event, function=fn)

    return make


class HookRegistry(NamedRegistry[Hook]):
    """All hooks a worker can run, by name; built once at worker start."""

    def __init__(self, hooks: Iterable[Hook]) -> None:
        super().__init__(hooks, "hook")

    def event_of(self, name: str) -> HookEvent | None:
        found = self.get(name)
        return found.event if found else None

    async def run(self, invocation: HookInvocation) -> HookDecision:
        """One hook's decision. A hook that raises, or answers with something other than
        None or a ``HookDecision``, is treated as a block: hooks guard things."""
        name = invocation.hook
        h = self.get(name)
        try:
            if h is None:
                raise LookupError(f"no hook named {name!r} on this worker")
            decision = await _call(h, invocation)
            if decision is None:
                decision = HookDecision()
            elif not isinstance(decision, HookDecision):
                raise TypeError(f"returned {type(decision).__name__}, expected HookDecision or None")
        except Exception as e:
            return HookDecision(
                hook=name, action="block", reason=f"hook {name} failed: {type(e).__name__}: {e}"
            )
        return decision.model_copy(update={"hook": name})

    async def redact(self, names: list[str], invocation: HookInvocation, outcome: ToolOutcome) -> ToolOutcome:
        """Apply the post_tool_use hooks in order to a tool's outcome.

        The decisions returned for the record keep what was decided and why, never
        the content: a redacting hook's output must not reach history twice.
        """
        decisions: list[HookDecision] = []
        for name in names:
            decision = await self.run(
                invocation.model_copy(
                    update={"hook": name, "content": outcome.content, "is_error": outcome.is_error}
                )
            )
            decisions.append(HookDecision(hook=decision.hook, action=decision.action, reason=decision.reason))
            if decision.action == "rewrite" and decision.content is not None:
                outcome = outcome.model_copy(update={"content": decision.content})
            elif decision.action == "block":
                outcome = ToolOutcome(
                    content=f"[output withheld by hook {name}: {decision.reason}]", is_error=True
                )
        return outcome.model_copy(update={"hooks": decisions})


class HookActivities:
    """``run_hook``: one pre_tool_use or user_prompt_submit hook, in its own activity (post_tool_use
    hooks run inside the tool's)."""

    def __init__(self, hooks: HookRegistry) -> None:
        self._hooks = hooks

    @RUN_HOOK.defn
    async def run_hook(self, invocation: HookInvocation) -> HookDecision:
        return await self._hooks.run(invocation)


async def _call(h: Hook, invocation: HookInvocation) -> Any:
    args: dict[str, Any] = {"ctx": invocation.context or HookContext(conversation_id="")}
    match h.event:
        case "pre_tool_use":
            args |= {"tool": invocation.tool, "arguments": invocation.arguments}
        case "post_tool_use":
            args |= {
                "tool": invocation.tool,
                "arguments": invocation.arguments,
                "content": invocation.content,
                "is_error": invocation.is_error,
            }
        case "user_prompt_submit" | "guardrail":
            args |= {"text": invocation.text}
    if inspect.iscoroutinefunction(h.function):
        return await h.function(**args)
    return await asyncio.to_thread(h.function, **args)


_SECRET = re.compile(r"\b(sk-[A-Za-z0-9_-]{8,}|AKIA[0-9A-Z]{16}|ghp_[A-Za-z0-9]{20,})\b")


@hook("post_tool_use")
def redact_secrets(
    tool: str, arguments: dict, content: str, is_error: bool, ctx: HookContext
) -> HookDecision | None:
    """Replace API keys and tokens in tool output before the model or history sees them."""
    redacted, count = _SECRET.subn("[REDACTED]", content)
    if not count:
        return None
    return HookDecision(action="rewrite", content=redacted, reason=f"redacted {count} secret(s)")


@hook("pre_tool_use")
def protect_dotfiles(tool: str, arguments: dict, ctx: HookContext) -> HookDecision | None:
    """Refuse file writes to hidden files such as .env or .git/config."""
    path = str(arguments.get("path", ""))
    if tool == "write_file" and any(
        part.startswith(".") and part not in (".", "..") for part in path.split("/")
    ):
        return HookDecision(action="block", reason=f"writing hidden files ({path}) is not allowed")
    return None


@hook("user_prompt_submit")
def refuse_empty_prompt(text: str, ctx: HookContext) -> HookDecision | None:
    """Refuse messages that are only whitespace, and tidy the others."""
    if not text.strip():
        return HookDecision(action="block", reason="the message is empty")
    tidy = " ".join(text.split())
    return HookDecision(action="rewrite", text=tidy, reason="whitespace tidied") if tidy != text else None


BUILTIN_HOOKS = [redact_secrets, protect_dotfiles, refuse_empty_prompt]


def default_hooks(*extra: Hook) -> HookRegistry:
    """The built-in hooks plus ``extra`` (your own ``@hook`` functions)."""
    return HookRegistry([*BUILTIN_HOOKS, *extra])
