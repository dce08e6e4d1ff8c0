"""The activities the workflow calls: one definition of each name (its identity in history: never
change it) with its input and output types. The workflow calls them by these; the activities are
declared with ``@CALL_MODEL.defn``; the starter and the benchmarks read ``.name``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio import activity

from workflows.activity_io import (
    AgentRef,
    HookDecision,
    HookInvocation,
    ModelCallInput,
    ResolvedAgent,
    ToolInvocation,
    ToolOutcome,
    ToolSpec,
)
from workflows.config import MCPServerConfig
from workflows.messages import ModelResponse

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ActivityRef:
    name: str
    input: type
    output: Any
    """The result type the workflow decodes (a type or an alias such as ``list[ToolSpec]``)."""

    def defn(self, fn: F) -> F:
        """``activity.defn`` under this name: ``@CALL_MODEL.defn``."""
        return activity.defn(name=self.name)(fn)


RESOLVE_AGENT = ActivityRef("resolve_agent", AgentRef, ResolvedAgent)
LIST_MCP_TOOLS = ActivityRef("list_mcp_tools", MCPServerConfig, list[ToolSpec])
CALL_MODEL = ActivityRef("call_model", ModelCallInput, ModelResponse)
RUN_TOOL = ActivityRef("run_tool", ToolInvocation, ToolOutcome)
RUN_HOOK = ActivityRef("run_hook", HookInvocation, HookDecision)
