"""Agent files: one TOML file per agent, loaded and checked at worker start (a bad one stops it), and
read again when they change (``AgentFiles``): a new agent needs no restart."""

from __future__ import annotations

import functools
import json
import logging
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from durable_agents.activities.agent_names import Signature, signature
from durable_agents.activities.hooks import HookRegistry
from durable_agents.activities.tools import ToolRegistry
from durable_agents.workflows.answers import OUTPUT_NAME
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.handoffs import tool_name as handoff_tool_name
from durable_agents.workflows.subagents import tool_name

logger = logging.getLogger(__name__)

T = TypeVar("T")


class AgentFileError(ValueError):
    """A bad agent file: the message names the file and the field."""


MaxOutput = Callable[[str], int | None]
"""The most output tokens of a model, by its name (``ModelTable.max_output_tokens``); None: unknown."""


def no_limits(model: str) -> int | None:
    """Knows no model's limit: ``max_tokens`` need only be positive."""
    return None


def read_toml(path: Path, what: str, parse: Callable[[dict[str, Any]], T]) -> T:
    """``parse`` of the TOML file ``path`` (an agent file, the models table, the budgets):
    ``AgentFileError`` in one line naming the file, and the field ``parse`` refused."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise AgentFileError(f"{path}: cannot read {what}: {e}") from e
    try:
        return parse(data)
    except ValidationError as e:
        raise AgentFileError(f"{path}: {field_errors(e)}") from e


def load_agent_file(
    path: Path, registry: ToolRegistry, hooks: HookRegistry | None = None, max_output: MaxOutput = no_limits
) -> AgentSpec:
    spec = read_toml(path, "agent file", functools.partial(_agent_spec, path))
    check_agent(spec, registry, hooks, where=str(path))
    check_max_tokens(spec, max_output, where=str(path))
    return spec


def _agent_spec(path: Path, data: dict[str, Any]) -> AgentSpec:
    data.setdefault("name", path.stem)
    if isinstance(schema := data.get("output_schema"), str):
        data["output_schema"] = _schema_file(path, path.parent / schema)
    return AgentSpec.model_validate(data)


def _schema_file(path: Path, schema: Path) -> object:
    """``output_schema = "schemas/x.json"``: a JSON schema in a file beside the agent file."""
    try:
        return json.loads(schema.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AgentFileError(f"{path}: field 'output_schema': cannot read {schema}: {e}") from e


def field_errors(error: ValidationError, prefix: str = "") -> str:
    """``field 'a.b': message; ...``, one entry per field, the choices of a union joined by "or"."""
    by_field: dict[str, list[str]] = {}
    for err in error.errors():
        # Drop the names pydantic gives union branches ("constrained-float", "literal['none']").
        path = ".".join(str(p) for p in err["loc"] if not _is_branch_name(p))
        by_field.setdefault(prefix + path, []).append(err["msg"])
    return "; ".join(f"field '{path}': {', or '.join(msgs)}" for path, msgs in by_field.items())


_BRANCH_PREFIXES = ("constrained-", "function-", "literal[", "lax-", "json-or-python[")


def _is_branch_name(part: str | int) -> bool:
    return isinstance(part, str) and part.startswith(_BRANCH_PREFIXES)


def check_agent(spec: AgentSpec, registry: ToolRegistry, hooks: HookRegistry | None, *, where: str) -> None:
    """Every tool and hook the agent names must exist in this worker, hooks at the right event."""
    unknown = [name for name in spec.tools if name not in registry]
    if unknown:
        raise AgentFileError(
            f"{where}: field 'tools': unknown tool(s) {', '.join(unknown)}; "
            f"the worker has: {', '.join(registry.names)}"
        )
    if not_offered := [name for name in spec.local_tools if name not in spec.tools]:
        raise AgentFileError(
            f"{where}: field 'local_tools': {', '.join(not_offered)} not in the agent's 'tools'"
            " (MCP tools never run locally)"
        )
    if routed := [n for n in spec.local_tools if spec.tool_task_queue or n in spec.tool_task_queues]:
        raise AgentFileError(
            f"{where}: field 'local_tools': {', '.join(routed)} cannot run locally and on a tool task"
            " queue too; a local tool runs on the workflow's own worker"
        )
    if not_offered := [name for name in spec.at_most_once if name not in spec.tools]:
        raise AgentFileError(
            f"{where}: field 'at_most_once': {', '.join(not_offered)} not in the agent's 'tools'"
        )
    clients = [c.name for c in spec.client_tools]
    if clash := sorted({n for n in clients if clients.count(n) > 1 or n in spec.tools or n == OUTPUT_NAME}):
        raise AgentFileError(
            f"{where}: field 'client_tools': {', '.join(clash)} named twice (or also in 'tools')"
        )
    if spec.output_schema is not None and OUTPUT_NAME in spec.tools:
        raise AgentFileError(
            f"{where}: field 'tools': a tool named {OUTPUT_NAME!r} would clash with the typed answer"
            " (output_schema)"
        )
    for event, names in spec.hooks.model_dump().items():
        for name in names:
            found = hooks.event_of(name) if hooks else None
            if found != event:
                known = ", ".join(hooks.names) if hooks else "none"
                problem = f"is a {found} hook" if found else f"is unknown (the worker has: {known})"
                raise AgentFileError(f"{where}: field 'hooks.{event}': hook {name!r} {problem}")
    for stage in ("input", "output"):
        for guardrail in getattr(spec.guardrails, stage):
            if (
                guardrail.function is not None
                and (found := hooks and hooks.event_of(guardrail.function)) != "guardrail"
            ):
                problem = f"is a {found} hook" if found else "is not a guardrail function of this worker"
                raise AgentFileError(
                    f"{where}: field 'guardrails.{stage}': function {guardrail.function!r} {problem}"
                    ' (register it with @hook("guardrail"))'
                )


def check_max_tokens(spec: AgentSpec, max_output: MaxOutput, *, where: str, model: str | None = None) -> None:
    """Every model the agent may call (its own, or ``model`` instead; its fallbacks; its judges' and
    model guardrails') is
    asked for at least one output token and at most what the models table says it writes: the ledger
    reserves a call's ``max_tokens`` before it runs, so a negative one would slip past any budget."""
    fallbacks = [entry.partition(":")[2] for entry in spec.model.fallback]
    asked = [
        ("model.max_tokens", spec.model.max_tokens, name) for name in [model or spec.model.model, *fallbacks]
    ]
    checkers = {"approval.judges": spec.approval.judges, "guardrails.input": spec.guardrails.input}
    checkers["guardrails.output"] = spec.guardrails.output
    asked += [
        (f"{where_in}.{i}.model.max_tokens", checker.model.max_tokens, checker.model.model)
        for where_in, listed in checkers.items()
        for i, checker in enumerate(listed)
        if checker.model is not None
    ]
    for field, tokens, name in asked:
        if tokens < 1:
            raise AgentFileError(f"{where}: field '{field}': {tokens} is not a positive number of tokens")
        if (most := max_output(name)) is not None and tokens > most:
            raise AgentFileError(
                f"{where}: field '{field}': {tokens} is more than {name} writes"
                f" ({most} tokens at most, in the models table)"
            )


def load_agents(
    directory: Path,
    registry: ToolRegistry,
    hooks: HookRegistry | None = None,
    max_output: MaxOutput = no_limits,
) -> dict[str, AgentSpec]:
    """Every ``*.toml`` in ``directory``, by agent name; any bad file stops the worker. ``max_output``
    bounds their ``max_tokens`` (the models table's limits)."""
    agents: dict[str, AgentSpec] = {}
    paths: dict[str, str] = {}
    for path in sorted(directory.glob("*.toml")):
        spec = load_agent_file(path, registry, hooks, max_output)
        if spec.name in agents:
            raise AgentFileError(f"{path}: field 'name': agent {spec.name!r} is defined twice")
        agents[spec.name], paths[spec.name] = spec, str(path)
    check_subagents(agents, paths)
    return agents


_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_subagents(agents: Mapping[str, AgentSpec], where: Mapping[str, str] | None = None) -> None:
    """Each agent's ``subagents`` and ``handoffs`` are agents of this worker, usable as tool names,
    and no agent delegates to itself, directly or through others (a loop of conversations without end)."""
    for name, spec in agents.items():
        at = (where or {}).get(name, f"agent {name!r}")
        for field, named, as_tool in (
            ("subagents", spec.subagents, tool_name),
            ("handoffs", spec.handoffs, handoff_tool_name),
        ):
            if unknown := [n for n in named if n not in agents]:
                raise AgentFileError(
                    f"{at}: field '{field}': unknown agent(s) {', '.join(unknown)};"
                    f" the worker has: {', '.join(sorted(agents))}"
                )
            if bad := [n for n in named if not _TOOL_NAME.match(as_tool(n))]:
                raise AgentFileError(
                    f"{at}: field '{field}': {', '.join(bad)} cannot be a tool name"
                    " (letters, digits, '_' and '-', at most 60)"
                )
            if taken := [n for n in named if as_tool(n) in spec.tools]:
                raise AgentFileError(
                    f"{at}: field '{field}': {', '.join(as_tool(n) for n in taken)} is also in 'tools'"
                )
        if cycle := _cycle(agents, [name]):
            raise AgentFileError(
                f"{at}: field 'subagents': agent {name!r} delegates to itself ({' -> '.join(cycle)})"
            )


def _cycle(
    agents: Mapping[str, AgentSpec], path: list[str], seen: set[str] | None = None
) -> list[str] | None:
    """A way back to ``path[0]`` from the end of ``path``, through sub-agents (each looked at once)."""
    seen = seen if seen is not None else set(path)
    for sub in agents[path[-1]].subagents:
        if sub == path[0]:
            return [*path, sub]
        if sub not in seen:
            seen.add(sub)
            if found := _cycle(agents, [*path, sub], seen):
                return found
    return None


class AgentFiles:
    """The agent files of a folder as they are now: read again when the folder's mtime or a file's
    mtime or size changes (looked at each time an agent is resolved). A bad set is refused at start
    (``AgentFileError``); later, with a warning in the log, and the last good set stays."""

    def __init__(
        self,
        directory: Path,
        registry: ToolRegistry,
        hooks: HookRegistry | None = None,
        max_output: MaxOutput = no_limits,
    ) -> None:
        self.directory = directory
        self._load = functools.partial(load_agents, directory, registry, hooks, max_output)
        self._seen = self._signature()
        self._agents = self._load()

    def current(self) -> dict[str, AgentSpec]:
        seen = self._signature()
        if seen is None or seen == self._seen:  # None: a file went while it was looked at; next time
            return self._agents
        self._seen = seen
        try:
            self._agents = self._load()
        except AgentFileError as e:
            logger.warning("%s; keeping the agents read before: %s", e, ", ".join(sorted(self._agents)))
        else:
            logger.info("agents read again from %s: %s", self.directory, ", ".join(sorted(self._agents)))
        return self._agents

    def _signature(self) -> Signature | None:
        return signature(self.directory)
