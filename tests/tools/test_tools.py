"""The tool registry and agent files, without Temporal."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_agents.activities.agent_files import AgentFileError, load_agent_file, load_agents
from durable_agents.activities.tools import ToolContext, ToolRegistry, default_registry, tool
from durable_agents.activities.tools.calculator import add
from durable_agents.workflows.activity_io import ToolInvocation, ToolOutcome
from durable_agents.workflows.messages import ToolCall


def test_schema_comes_from_type_hints_and_docstring() -> None:
    assert add.definition.model_dump() == {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "a": {"type": "number", "title": "A", "description": "The first number."},
                "b": {"type": "number", "title": "B", "description": "The second number."},
            },
            "required": ["a", "b"],
        },
    }


def test_context_parameter_is_hidden_from_the_model() -> None:
    registry = default_registry()
    assert "ctx" not in registry["write_file"].definition.parameters["properties"]


def test_duplicate_tool_names_are_rejected() -> None:
    @tool(name="add")
    def other_add(x: int) -> int:
        """Not the real add."""
        return x

    with pytest.raises(ValueError, match="duplicate tool name 'add': tool names must be unique"):
        default_registry(other_add)


def test_tool_without_docstring_is_rejected() -> None:
    def nameless(x: int) -> int:
        return x

    with pytest.raises(ValueError, match="tool 'nameless' needs a docstring"):
        tool(nameless)


def test_tool_without_type_hint_is_rejected() -> None:
    def loose(x):  # type: ignore[no-untyped-def]
        """No hints."""
        return x

    with pytest.raises(ValueError, match="tool 'loose': parameter 'x' needs a type hint"):
        tool(loose)


async def _run(
    name: str, arguments: dict, workspace: Path, registry: ToolRegistry | None = None
) -> ToolOutcome:
    invocation = ToolInvocation(
        name=name, arguments=arguments, call_id="c1", conversation_id="conv", idempotency_key="conv/c1"
    )
    return await (registry or default_registry()).run(invocation, workspace)


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "a/../../outside.txt"])
async def test_file_paths_that_escape_the_workspace_are_rejected(tmp_path: Path, path: str) -> None:
    workspace = tmp_path / "ws"
    outcome = await _run("write_file", {"path": path, "content": "x"}, workspace)
    assert outcome == ToolOutcome(
        content=f"Path {path!r} is outside the workspace; use a path relative to it.", is_error=True
    )
    assert not (tmp_path / "outside.txt").exists()


async def test_symlink_out_of_the_workspace_is_rejected(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "secret.txt").write_text("secret")
    (workspace / "link").symlink_to(tmp_path)
    outcome = await _run("read_file", {"path": "link/secret.txt"}, workspace)
    assert outcome.is_error and "outside the workspace" in outcome.content


async def test_unexpected_argument_is_rejected(tmp_path: Path) -> None:
    outcome = await _run("add", {"a": 1, "b": 2, "c": 3}, tmp_path)
    assert outcome == ToolOutcome(
        content="Invalid arguments for 'add': c: Extra inputs are not permitted", is_error=True
    )


async def test_async_tool_gets_its_context(tmp_path: Path) -> None:
    @tool
    async def whoami(ctx: ToolContext) -> dict:
        """Say which call this is."""
        return {"key": ctx.idempotency_key, "workspace": ctx.workspace.name}

    outcome = await _run("whoami", {}, tmp_path / "conv", default_registry(whoami))
    assert outcome == ToolOutcome(content='{"key": "conv/c1", "workspace": "conv"}')


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_bad_agent_file_error_names_file_and_field(tmp_path: Path) -> None:
    path = _write(tmp_path, "bad.toml", 'max_iterations = 0\n[model]\nprovider = "gemini"\nmodel = "x"\n')
    with pytest.raises(AgentFileError) as info:
        load_agent_file(path, default_registry())
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert (
        "field 'model.provider': Input should be 'openai', 'anthropic', 'openai_responses' or 'scripted'"
        in message
    )
    assert "field 'max_iterations': Input should be greater than or equal to 1" in message


def test_timeouts_and_deadlines_out_of_range_are_rejected(tmp_path: Path) -> None:
    body = (
        'idle_timeout_seconds = 0\n[model]\nprovider = "scripted"\nmodel = "x"\n'
        "[model_call]\ntimeout_seconds = -1\nmax_attempts = -2\n"
        "initial_retry_seconds = 10\nmax_retry_seconds = 5\n"
        "[approval]\ndeadline = 1e12\n"
    )
    with pytest.raises(AgentFileError) as info:
        load_agent_file(_write(tmp_path, "bad.toml", body), default_registry())
    message = str(info.value)
    for expected in (
        "field 'idle_timeout_seconds': Input should be greater than 0",
        "field 'model_call.timeout_seconds': Input should be greater than 0",
        "field 'model_call.max_attempts': Input should be greater than or equal to 0",
        "field 'approval.deadline': Input should be less than or equal to 31622400,"
        " or Input should be 'none'",
    ):
        assert expected in message


def test_retry_cap_below_first_interval_is_rejected(tmp_path: Path) -> None:
    body = (
        '[model]\nprovider = "scripted"\nmodel = "x"\n'
        "[model_call]\ninitial_retry_seconds = 10\nmax_retry_seconds = 5\n"
    )
    with pytest.raises(
        AgentFileError, match=r"max_retry_seconds \(5\) is below initial_retry_seconds \(10\)"
    ):
        load_agent_file(_write(tmp_path, "bad.toml", body), default_registry())


def test_agent_file_with_unknown_tool_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, "a.toml", 'tools = ["add", "rm"]\n[model]\nprovider = "scripted"\nmodel = "x"\n')
    with pytest.raises(
        AgentFileError, match=r"a.toml: field 'tools': unknown tool\(s\) rm; the worker has: add"
    ):
        load_agent_file(path, default_registry())


def test_agent_file_that_is_not_toml_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, "broken.toml", "name = \n")
    with pytest.raises(AgentFileError, match=r"broken\.toml: cannot read agent file: "):
        load_agent_file(path, default_registry())


def test_two_agent_files_with_one_name_are_rejected(tmp_path: Path) -> None:
    body = 'name = "same"\n[model]\nprovider = "scripted"\nmodel = "x"\n'
    _write(tmp_path, "a.toml", body)
    _write(tmp_path, "b.toml", body)
    with pytest.raises(AgentFileError, match=r"b\.toml: field 'name': agent 'same' is defined twice"):
        load_agents(tmp_path, default_registry())


def test_shipped_agent_files_load() -> None:
    from durable_agents.activities.agent_names import DEFAULT_AGENTS_DIR

    agents = load_agents(DEFAULT_AGENTS_DIR, default_registry())
    assert sorted(agents) == [
        "asker",
        "calculator-anthropic",
        "calculator-openai",
        "clock",
        "delegator",
        "demo",
        "judged",
        "ledger",
        "long-chat",
        "scribe",
        "triage",
    ]
    assert agents["calculator-anthropic"].model.provider == "anthropic"
    assert agents["calculator-openai"].tools == ["add", "subtract", "multiply", "divide", "sqrt"]


def test_a_tool_calls_conversation_key_travels_only_where_its_idempotency_key_does_not_say_it() -> None:
    call = ToolCall(id="call_1_0", name="add", arguments={"a": 1, "b": 2})
    invocation = ToolInvocation.of(call, "support-4711", "support-4711/run-a")
    assert (invocation.conversation_key, invocation.idempotency_key) == ("", "support-4711/run-a/call_1_0")
    assert invocation.stored_under == "support-4711/run-a"
    # An id holding '/' too.
    slashed = ToolInvocation.of(call, "team/a", "team/a/run-b")
    assert (slashed.conversation_key, slashed.stored_under) == ("", "team/a/run-b")
    # A tenant's conversation: read from the idempotency key too, unless its call id holds '/'.
    tenant = ToolInvocation.of(call, "support-4711", "tenants/acme/support-4711/run-a")
    assert (tenant.conversation_key, tenant.stored_under) == ("", "tenants/acme/support-4711/run-a")
    odd = call.model_copy(update={"id": "tool/7"})
    tenant_odd = ToolInvocation.of(odd, "support-4711", "tenants/acme/support-4711/run-a")
    assert (tenant_odd.conversation_key, tenant_odd.stored_under) == (
        "tenants/acme/support-4711/run-a",
        "tenants/acme/support-4711/run-a",
    )
