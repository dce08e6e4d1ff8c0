"""The public API is what ``durable_agents.__all__`` lists: every name resolves to the object its
module defines, the list changes only here, and the README, docs and agents import only from it."""

from __future__ import annotations

import re
import subprocess
import sys

import durable_agents
from tests.support.paths import ROOT

PUBLIC = [
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


def test_the_public_names_are_the_declared_list() -> None:
    assert durable_agents.__all__ == PUBLIC
    assert sorted(durable_agents._WHERE) == PUBLIC


def test_every_public_name_resolves_to_its_definition() -> None:
    for name in PUBLIC:
        value = getattr(durable_agents, name)
        assert getattr(value, "__name__", name) == name, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        durable_agents.AgentPlugn  # noqa: B018
    except AttributeError as e:
        assert str(e) == "module 'durable_agents' has no attribute 'AgentPlugn'"
    else:
        raise AssertionError("no AttributeError")


def test_a_client_import_does_not_load_the_worker() -> None:
    code = (
        "import sys; from durable_agents import start_conversation, Settings; "
        "print(sorted(m for m in ('durable_agents.activities.assembly', 'durable_agents.worker.plugin',"
        " 'durable_agents.stores.postgres') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_docs_import_the_library_only_from_the_public_api() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    private = re.compile(
        r"^\s*(?:from|import) (activities|workflows|stores|durable_agents\.(?!testing)\w+)", re.M
    )
    offenders = {
        str(page.relative_to(ROOT)): sorted(set(private.findall(block)))
        for page in pages
        for block in python_blocks(page.read_text())
        if private.search(block)
    }
    assert offenders == {}
