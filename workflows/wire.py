"""Our names on the wire: every activity, signal, update and query of ``AgentWorkflow``.

The rule: each is ``durable_agents.<what it does>`` (``durable_agents.call_model``,
``durable_agents.approve``, ``durable_agents.pending_approvals``). ``AgentPlugin`` puts
``AgentWorkflow`` and its activities into a worker of the user's own, whose activities are likely
to be called ``call_model`` or ``run_tool`` too: a worker refuses two activities of one name.

Before this rule each went by its bare name (``OLD_NAMES``), and conversations started then did:
their histories schedule ``call_model``, and Temporal checks an activity's type on replay. Every
run in the support window uses the namespaced names (``PATCH`` is retired, ``choose``), for the
activities it schedules and the signals it sends its sub-agents or its parent. Workers
still register every activity under both names (``ActivityRef.under_old_name``; an old name yields
to an activity of the worker's own of that name, durable_agents/worker/plugin.py), and
``AgentWorkflow`` serves every signal, update and query under both (``serve_old_names``), for
clients and operators' commands written before the rule. Clients of this release find out which
names a conversation serves in one place, durable_agents/wire.py. The workflow's type stays ``AgentWorkflow``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RawValue

from durable_agents.workflows import versioning

NAMESPACE = "durable_agents."
PATCH = versioning.patch("durable-agents-wire-names", added=2)
"""Marks a run that schedules activities and sends signals under the namespaced names; runs
without it (started before it) keep the old ones for their whole run."""

C = TypeVar("C", bound=type)
T = TypeVar("T")


def namespaced(name: str) -> str:
    """``name`` under our namespace: ``durable_agents.<name>``."""
    return NAMESPACE + name


# Activities
RESOLVE_AGENT = namespaced("resolve_agent")
LIST_MCP_TOOLS = namespaced("list_mcp_tools")
CALL_MODEL = namespaced("call_model")
RUN_TOOL = namespaced("run_tool")
RUN_HOOK = namespaced("run_hook")
VERIFY_DECISION = namespaced("verify_decision")
JUDGE = namespaced("judge")
NOTIFY = namespaced("notify")
"""Tell a webhook that a call waits (workflows/notifications.py); new with the namespace: no old name."""
# Signals
POST_MESSAGE = namespaced("post_message")
END = namespaced("end")
APPROVE = namespaced("approve")
REJECT = namespaced("reject")
SUBAGENT_APPROVALS = namespaced("subagent_approvals")
"""A sub-agent's report of its approvals to its parent (workflows/subagents.py)."""
INTERRUPT = namespaced("interrupt")
"""Interrupt the running turn (workflows/interrupts.py); new with the namespace: no old name."""
# Updates
SEND_MESSAGE = namespaced("send_message")
DECIDE = namespaced("decide")
REVOKE = namespaced("revoke")
REFRESH_TOOLS = namespaced("refresh_tools")
DELIVER_CLIENT_RESULT = namespaced("deliver_client_result")
# Queries
HISTORY = namespaced("history")
STATUS = namespaced("status")
PENDING_APPROVALS = namespaced("pending_approvals")
REPLIES = namespaced("replies")
PENDING_CLIENT_CALLS = namespaced("pending_client_calls")

OLD_NAMES: dict[str, str] = {
    name: name.removeprefix(NAMESPACE)
    for name in (
        RESOLVE_AGENT, LIST_MCP_TOOLS, CALL_MODEL, RUN_TOOL, RUN_HOOK, VERIFY_DECISION,
        POST_MESSAGE, END, APPROVE, REJECT, SUBAGENT_APPROVALS,
        SEND_MESSAGE, DECIDE, REVOKE, REFRESH_TOOLS,
        HISTORY, STATUS, PENDING_APPROVALS, REPLIES,
    )
}  # fmt: skip
"""Each namespaced name's name before the rule, still served. A name added later has none."""


def old_name(name: str) -> str | None:
    """The name before the rule of a namespaced ``name``; None for any other."""
    return OLD_NAMES.get(name)


def choose() -> None:
    """In workflow code, first thing in a run: every run in the support window uses the namespaced
    names (``PATCH`` is retired); a run written the patch-per-branch way still asks its patch here,
    where its history holds the marker."""
    versioning.retired(PATCH)


def serve_old_names(cls: C) -> C:
    """Class decorator, under ``@workflow.defn``: each signal, update (with its validator) and query
    of ``cls`` declared under a namespaced name that had an old one is served under that one too, by
    the same method, through one dynamic handler of each kind: Temporal's Web UI lists each name
    once, and the old ones as one unnamed entry saying what it serves. A name neither knows is
    refused (an update, a query) or dropped with a warning (a signal).

    The SDK has no public way to read a handler's name from its method (no SDK issue asks for one
    yet): its definition attributes are read here and nowhere else
    (tests/project/test_supported_routes.py)."""
    signals: dict[str, Callable[..., Any]] = {}
    queries: dict[str, Callable[..., Any]] = {}
    updates: dict[str, tuple[Callable[..., Any], Callable[..., Any] | None]] = {}
    for member in vars(cls).values():
        signal = getattr(member, "__temporal_signal_definition", None)
        query = getattr(member, "__temporal_query_definition", None)
        update = getattr(member, "_defn", None) if hasattr(member, "validator") else None
        if signal is not None and (old := old_name(signal.name)):
            signals[old] = member
        elif query is not None and (old := old_name(query.name)):
            queries[old] = member
        elif update is not None and (old := old_name(update.name)):
            updates[old] = (update.fn, update.validator)
    served = "; ".join(
        f"{kind}: {', '.join(sorted(names))}" for kind, names in (("signals", signals), ("queries", queries),
                                                                  ("updates", updates))
    )  # fmt: skip
    why = f"Names from before durable_agents.*, for clients and commands written for them ({served})"

    @workflow.signal(dynamic=True, description=why)
    async def signal_under_old_name(self, name: str, args: Sequence[RawValue]) -> None:
        if (method := signals.get(name)) is None:
            workflow.logger.warning("signal %r dropped: no signal of that name", name)
            return
        await _call(method, self, args)

    @workflow.query(dynamic=True, description=why)
    def query_under_old_name(self, name: str, args: Sequence[RawValue]) -> Any:
        return _known(queries, name, "query")(self, *_values(args))

    @workflow.update(dynamic=True, description=why)
    async def update_under_old_name(self, name: str, args: Sequence[RawValue]) -> Any:
        return await _call(updates[name][0], self, args)

    @update_under_old_name.validator
    def _check_under_old_name(self, name: str, args: Sequence[RawValue]) -> None:
        validator = _known(updates, name, "update")[1]
        if validator is not None:
            validator(self, *_values(args))

    cls.signal_under_old_name = signal_under_old_name  # type: ignore[attr-defined]
    cls.query_under_old_name = query_under_old_name  # type: ignore[attr-defined]
    cls.update_under_old_name = update_under_old_name  # type: ignore[attr-defined]
    return cls


def _known(handlers: dict[str, T], name: str, kind: str) -> T:
    if name not in handlers:
        raise ValueError(f"no {kind} named {name!r}: this conversation serves durable_agents.* names")
    return handlers[name]


def _values(args: Sequence[RawValue]) -> list[Any]:
    """The arguments as a named handler of ours takes them (``*args: Any``: plain JSON values)."""
    converter = workflow.payload_converter()
    return [converter.from_payload(arg.payload) for arg in args]


async def _call(method: Callable[..., Any], self: Any, args: Sequence[RawValue]) -> Any:
    """``method``'s answer, sync or async as it is."""
    answer = method(self, *_values(args))
    return await answer if inspect.isawaitable(answer) else answer
