"""Tools are typed Python functions; their JSON schema comes from type hints and docstrings."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import to_jsonable_python
from temporalio import activity
from temporalio.exceptions import TemporalError

from durable_agents.activities.named import NamedRegistry
from durable_agents.stores.idempotency import IdempotencyStore, run_once
from durable_agents.stores.workspaces import LocalWorkspace, Workspace, WorkspaceError
from durable_agents.workflows.activity_io import ToolInvocation, ToolOutcome, ToolSpec
from durable_agents.workflows.config import CallPolicy
from durable_agents.workflows.messages import ToolDefinition


@dataclass(frozen=True)
class ToolContext:
    """What a tool may want to know about the call; declare a parameter of this type to get it."""

    conversation_id: str
    call_id: str
    idempotency_key: str
    """Stable across retries and crashes: hand it to external systems to make effects once-only."""
    workspace: Workspace
    """This conversation's own files (a local folder, or shared by every host: see ``Workspace``)."""
    store: IdempotencyStore | None = None
    kept: Mapping[str, str] = field(default_factory=dict)
    """Results of ``once`` that an earlier try had when its store went out (``ToolInvocation.kept``)."""

    async def once(self, step: str, fn: Callable[[], Any] | Callable[[str], Any]) -> Any:
        """Run ``fn`` (sync or async) at most once for this call and ``step``; a retried attempt
        gets the stored (JSON) result instead of repeating the effect, or waits while the step is
        claimed by an attempt still within the call's timeout
        (``durable_agents/stores/idempotency.py``). A ``fn``
        that takes one argument gets the step's own key (``<idempotency_key>/<step>``, the same on
        every attempt): hand it to an outside service that accepts one, for a crash mid-effect."""
        if self.store is None:
            raise RuntimeError("this worker has no idempotency store")
        key = f"{self.idempotency_key}/{step}"
        return await run_once(self.store, key, fn, self.kept, claim_seconds=_call_timeout())


def _call_timeout() -> float:
    """How long a claim holds: the attempt's own timeout, after which Temporal has given up on it."""
    if activity.in_activity() and (timeout := activity.info().start_to_close_timeout):
        return timeout.total_seconds()
    return DEFAULT_CLAIM_SECONDS


DEFAULT_CLAIM_SECONDS = 30.0
"""A claim's life outside an activity (a tool called directly, as in a test): ``@tool``'s default timeout."""


class ToolError(Exception):
    """Raised by a tool to tell the model something went wrong; the loop continues."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    function: Callable[..., Any]
    arguments: type[BaseModel]
    call: CallPolicy
    context_parameter: str | None
    requires_approval: bool = False
    local: bool = False
    at_most_once: bool = False

    @functools.cached_property
    def definition(self) -> ToolDefinition:
        """What the model is told of the tool (built once: every model call that offers it reads it)."""
        schema = self.arguments.model_json_schema()
        schema.pop("title", None)
        return ToolDefinition(name=self.name, description=self.description, parameters=schema)

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            definition=self.definition,
            call=self.call,
            requires_approval=self.requires_approval,
            local=self.local,
            at_most_once=self.at_most_once,
        )


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    call: CallPolicy | None = None,
    requires_approval: bool = False,
    local: bool = False,
    at_most_once: bool = False,
) -> Any:
    """Make a ``Tool`` of a typed function: ``@tool``, or ``@tool(name=..., call=CallPolicy(...),
    requires_approval=True)`` for a tool that should wait for a person unless an agent says otherwise.
    ``local=True`` runs a quick tool without side effects as a local activity, in the workflow task
    (unless the agent sends it to a tool task queue). ``at_most_once=True``: never retried once an
    attempt may have started; an attempt whose outcome is unknown waits for a person's decision."""

    def make(fn: Callable[..., Any]) -> Tool:
        policy = call or CallPolicy(timeout_seconds=30, max_attempts=3, heartbeat_seconds=3)
        built = _build(fn, name or fn.__name__, policy, requires_approval, local and not at_most_once)
        return dataclasses.replace(built, at_most_once=at_most_once)

    return make(function) if function is not None else make


def _build(fn: Callable[..., Any], name: str, call: CallPolicy, requires_approval: bool, local: bool) -> Tool:
    doc = inspect.getdoc(fn)
    if not doc:
        raise ValueError(f"tool {name!r} needs a docstring: it is the model's description of the tool")
    hints = get_type_hints(fn)
    descriptions = _arg_descriptions(doc)
    fields: dict[str, Any] = {}
    context_parameter = None
    for param in inspect.signature(fn).parameters.values():
        annotation = hints.get(param.name)
        if annotation is None:
            raise ValueError(f"tool {name!r}: parameter {param.name!r} needs a type hint")
        if annotation is ToolContext:
            context_parameter = param.name
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, Field(default, description=descriptions.get(param.name)))
    arguments = create_model(  # type: ignore[call-overload]
        f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )
    return Tool(
        name=name,
        description=doc.split("\n\n")[0].replace("\n", " "),
        function=fn,
        arguments=arguments,
        call=call,
        context_parameter=context_parameter,
        requires_approval=requires_approval,
        local=local,
    )


def _arg_descriptions(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section."""
    section = re.search(r"^Args:\n((?:[ \t]+.*\n?)+)", doc, re.MULTILINE)
    if not section:
        return {}
    return dict(re.findall(r"^\s+(\w+)(?:\s*\(.*?\))?:\s*(.+)$", section.group(1), re.MULTILINE))


class ToolRegistry(NamedRegistry[Tool]):
    """All tools a worker can run, by name; built once at worker start."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        super().__init__(tools, "tool")

    async def run(
        self, invocation: ToolInvocation, workspace: Workspace | Path, store: IdempotencyStore | None = None
    ) -> ToolOutcome:
        """Run one call. Bad arguments and tool exceptions become error outcomes for the model;
        Temporal's own errors (e.g. a tool raising ``ApplicationError`` to ask for a retry) propagate.
        A ``Path`` is a local workspace folder."""
        t = self.get(invocation.name)
        if t is None:
            return ToolOutcome(content=f"Unknown tool '{invocation.name}'.", is_error=True)
        try:
            parsed = t.arguments.model_validate(invocation.arguments)
        except ValidationError as e:
            return ToolOutcome(content=f"Invalid arguments for '{t.name}': {_brief(e)}", is_error=True)
        kwargs = dict(parsed)
        if t.context_parameter:
            kwargs[t.context_parameter] = ToolContext(
                conversation_id=invocation.conversation_id,
                call_id=invocation.call_id,
                idempotency_key=invocation.idempotency_key,
                workspace=LocalWorkspace(workspace) if isinstance(workspace, Path) else workspace,
                store=store,
                kept=invocation.kept,
            )
        try:
            if inspect.iscoroutinefunction(t.function):
                value = await t.function(**kwargs)
            else:
                value = await asyncio.to_thread(t.function, **kwargs)
        except TemporalError:
            raise
        except (ToolError, WorkspaceError) as e:
            return ToolOutcome(content=str(e), is_error=True)
        except Exception as e:
            return ToolOutcome(content=f"{type(e).__name__}: {e}", is_error=True)
        return _outcome(t.name, value)


def _outcome(name: str, value: Any) -> ToolOutcome:
    if isinstance(value, str):
        return ToolOutcome(content=value)
    try:
        return ToolOutcome(content=json.dumps(to_jsonable_python(value)))
    except Exception as e:  # pydantic raises its own error types for unknown objects
        return ToolOutcome(
            content=f"Tool '{name}' returned a value that cannot be serialised: {e}", is_error=True
        )


def _brief(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in error.errors()
    )
