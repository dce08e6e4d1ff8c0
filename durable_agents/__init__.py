"""Durable LLM agents on Temporal: the names users write.

    from durable_agents import AgentPlugin, Settings, tool, ToolContext

Everything listed in ``__all__`` is the public API; the modules under ``durable_agents`` are private
by convention (they move between releases).
``durable_agents.testing`` holds what tests of your own tools and agents use. A name is imported
on first use, so a client that needs ``start_conversation`` does not load the worker's activities.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "workflows" / "__init__.py").is_file():
    # Run from a checkout: durable_agents.workflows, .activities (and the example agents and config)
    # are its own top-level folders, as pyproject.toml maps them when it is installed. So a checkout
    # runs its own code, whichever checkout the environment installed (an older release's copy, a
    # worktree), and runs at all where nothing is installed.
    __path__.append(str(_CHECKOUT))

_WHERE = {
    # A worker of your own
    "AgentPlugin": "durable_agents.worker.plugin",
    "build_worker": "durable_agents.worker.plugin",
    "Settings": "durable_agents.settings",
    "WorkerTuning": "durable_agents.worker.tuning",
    # Tools and hooks
    "tool": "durable_agents.activities.tools",
    "Tool": "durable_agents.activities.tools",
    "ToolContext": "durable_agents.activities.tools",
    "ToolError": "durable_agents.activities.tools",
    "ToolRegistry": "durable_agents.activities.tools",
    "default_registry": "durable_agents.activities.tools",
    "hook": "durable_agents.activities.hooks",
    "default_hooks": "durable_agents.activities.hooks",
    "HookContext": "durable_agents.workflows.activity_io",
    "HookDecision": "durable_agents.workflows.activity_io",
    # Agents
    "AgentSpec": "durable_agents.workflows.config",
    "ApprovalPolicy": "durable_agents.workflows.config",
    "CallPolicy": "durable_agents.workflows.config",
    "MCPServerConfig": "durable_agents.workflows.config",
    "GuardrailConfig": "durable_agents.workflows.config",
    "GuardrailsConfig": "durable_agents.workflows.config",
    "Image": "durable_agents.workflows.messages",
    "ModelSettings": "durable_agents.workflows.messages",
    # The conversation workflow and what goes in and out of it
    "AgentWorkflow": "durable_agents.workflows.agent",
    "ConversationInput": "durable_agents.workflows.api",
    "MessageInput": "durable_agents.workflows.api",
    "ConversationResult": "durable_agents.workflows.api",
    "ConversationStatus": "durable_agents.workflows.api",
    "ConversationHistory": "durable_agents.workflows.records",
    "Decision": "durable_agents.workflows.records",
    # Clients
    "connect": "durable_agents.connection",
    "data_converter": "durable_agents.converter",
    "start_conversation": "durable_agents.client.conversations",
    "send_or_start": "durable_agents.client.conversations",
    "fork_conversation": "durable_agents.client.conversations",
    "conversation_history": "durable_agents.client.conversations",
    "conversation_result": "durable_agents.client.conversations",
    "ui_link": "durable_agents.client.conversations",
    "image": "durable_agents.client.images",
    "NoWorkerError": "durable_agents.client.conversations",
    "delete_conversation": "durable_agents.client.lifecycle",
    "export_conversation": "durable_agents.client.export",
    "forget_user": "durable_agents.client.lifecycle",
    "ErasureRefused": "durable_agents.client.lifecycle",
    "ErasureReport": "durable_agents.workflows.erasure",
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
    "ErasureRefused",
    "ErasureReport",
    "GuardrailConfig",
    "GuardrailsConfig",
    "HookContext",
    "HookDecision",
    "Image",
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
    "delete_conversation",
    "export_conversation",
    "forget_user",
    "fork_conversation",
    "hook",
    "image",
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
    from durable_agents.activities.hooks import default_hooks, hook
    from durable_agents.activities.tools import (
        Tool,
        ToolContext,
        ToolError,
        ToolRegistry,
        default_registry,
        tool,
    )
    from durable_agents.client.conversations import (
        NoWorkerError,
        conversation_history,
        conversation_result,
        fork_conversation,
        send_or_start,
        start_conversation,
        ui_link,
    )
    from durable_agents.client.export import export_conversation
    from durable_agents.client.lifecycle import ErasureRefused, delete_conversation, forget_user
    from durable_agents.connection import connect
    from durable_agents.converter import data_converter
    from durable_agents.settings import Settings
    from durable_agents.worker.plugin import AgentPlugin, build_worker
    from durable_agents.worker.tuning import WorkerTuning
    from durable_agents.workflows.activity_io import HookContext, HookDecision
    from durable_agents.workflows.agent import AgentWorkflow
    from durable_agents.workflows.api import (
        ConversationInput,
        ConversationResult,
        ConversationStatus,
        MessageInput,
    )
    from durable_agents.workflows.config import AgentSpec, ApprovalPolicy, CallPolicy, MCPServerConfig
    from durable_agents.workflows.erasure import ErasureReport
    from durable_agents.workflows.messages import ModelSettings
    from durable_agents.workflows.records import ConversationHistory, Decision
