"""Durable LLM agents on Temporal: the names users write.

    from durable_agents import AgentPlugin, Settings, tool, ToolContext

Everything listed in ``__all__`` is the public API; the modules under ``durable_agents``,
``activities``, ``stores`` and ``workflows`` are private by convention (they move between releases).
``durable_agents.testing`` holds what tests of your own tools and agents use. A name is imported
on first use, so a client that needs ``start_conversation`` does not load the worker's activities.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    # A worker of your own
    "AgentPlugin": "durable_agents.plugin",
    "build_worker": "durable_agents.plugin",
    "Settings": "durable_agents.settings",
    "WorkerTuning": "durable_agents.tuning",
    # Tools and hooks
    "tool": "activities.tools",
    "Tool": "activities.tools",
    "ToolContext": "activities.tools",
    "ToolError": "activities.tools",
    "ToolRegistry": "activities.tools",
    "default_registry": "activities.tools",
    "hook": "activities.hooks",
    "default_hooks": "activities.hooks",
    "HookContext": "workflows.activity_io",
    "HookDecision": "workflows.activity_io",
    # Agents
    "AgentSpec": "workflows.config",
    "ApprovalPolicy": "workflows.config",
    "CallPolicy": "workflows.config",
    "MCPServerConfig": "workflows.config",
    "ModelSettings": "workflows.messages",
    # The conversation workflow and what goes in and out of it
    "AgentWorkflow": "workflows.agent",
    "ConversationInput": "workflows.api",
    "MessageInput": "workflows.api",
    "ConversationResult": "workflows.api",
    "ConversationStatus": "workflows.api",
    "ConversationHistory": "workflows.records",
    "Decision": "workflows.records",
    # Clients
    "connect": "durable_agents.connection",
    "data_converter": "durable_agents.converter",
    "start_conversation": "durable_agents.conversations",
    "send_or_start": "durable_agents.conversations",
    "fork_conversation": "durable_agents.conversations",
    "conversation_history": "durable_agents.conversations",
    "conversation_result": "durable_agents.conversations",
    "ui_link": "durable_agents.conversations",
    "NoWorkerError": "durable_agents.conversations",
}

__all__ = [
    "AgentPlugin",
    "AgentSpec",
    "AgentWorkflow",
    "ApprovalPolicy",
    "CallPolicy",
    "ConversationHistory",
    "ConversationInput",
    "ConversationResult",
    "ConversationStatus",
    "Decision",
    "HookContext",
    "HookDecision",
    "MCPServerConfig",
    "MessageInput",
    "ModelSettings",
    "NoWorkerError",
    "Settings",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "WorkerTuning",
    "build_worker",
    "connect",
    "conversation_history",
    "conversation_result",
    "data_converter",
    "default_hooks",
    "default_registry",
    "fork_conversation",
    "hook",
    "send_or_start",
    "start_conversation",
    "tool",
    "ui_link",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'durable_agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from activities.hooks import default_hooks, hook
    from activities.tools import Tool, ToolContext, ToolError, ToolRegistry, default_registry, tool
    from durable_agents.connection import connect
    from durable_agents.conversations import (
        NoWorkerError,
        conversation_history,
        conversation_result,
        fork_conversation,
        send_or_start,
        start_conversation,
        ui_link,
    )
    from durable_agents.converter import data_converter
    from durable_agents.plugin import AgentPlugin, build_worker
    from durable_agents.settings import Settings
    from durable_agents.tuning import WorkerTuning
    from workflows.activity_io import HookContext, HookDecision
    from workflows.agent import AgentWorkflow
    from workflows.api import ConversationInput, ConversationResult, ConversationStatus, MessageInput
    from workflows.config import AgentSpec, ApprovalPolicy, CallPolicy, MCPServerConfig
    from workflows.messages import ModelSettings
    from workflows.records import ConversationHistory, Decision
