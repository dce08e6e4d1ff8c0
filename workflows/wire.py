"""Our names on the wire: every activity, signal, update and query of ``AgentWorkflow``.

The rule: each is ``durable_agents.<what it does>`` (``durable_agents.call_model``,
``durable_agents.approve``, ``durable_agents.pending_approvals``). ``AgentPlugin`` puts
``AgentWorkflow`` and its activities into a worker of the user's own, whose activities are likely
to be called ``call_model`` or ``run_tool`` too: a worker refuses two activities of one name.

Before this rule each went by its bare name (``OLD_NAMES``), and conversations started then still
do: their histories schedule ``call_model``, and Temporal checks an activity's type on replay. So
each run chooses once, at its start (``choose``), with ``versioning.since(PATCH)``: a new run uses
the namespaced names from then on, a run whose history lacks the marker the old ones
(``in_this_run``), for the activities it schedules and the signals it sends its sub-agents or its
parent. Workers register every activity under both names (``ActivityRef.under_old_name``; an old
name yields to an activity of the worker's own of that name, durable_agents/worker/plugin.py), and
``AgentWorkflow`` serves every signal, update and query under both (``serve_old_names``): a worker
of the previous release knows only the old ones, and so do clients and operators' commands written
for it. Clients of this release find out which names a conversation serves in one place,
durable_agents/wire.py. The workflow's type stays ``AgentWorkflow``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from temporalio import workflow

from durable_agents.workflows import versioning

NAMESPACE = "durable_agents."
PATCH = versioning.patch("durable-agents-wire-names", added=2)
"""Marks a run that schedules activities and sends signals under the namespaced names; runs
without it (started before it) keep the old ones for their whole run."""

C = TypeVar("C", bound=type)


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


def choose() -> bool:
    """In workflow code, first thing in a run: does it use the namespaced names? True for a new
    run; False for one whose history (recorded before ``PATCH``) is being replayed. The SDK keeps
    the answer for the rest of the run, so it must be asked before anything the run replays."""
    return versioning.since(PATCH)


def in_this_run(name: str) -> str:
    """In workflow code: ``name`` (namespaced) as this run sends it, the old name in a run from
    before the rule (``choose``)."""
    return name if choose() else OLD_NAMES.get(name, name)


def serve_old_names(cls: C) -> C:
    """Class decorator, under ``@workflow.defn``: each signal, update (with its validator) and query
    of ``cls`` declared under a namespaced name that had an old one is served under that one too,
    by the same method.

    The SDK has no public way to read a handler's name from its method (no SDK issue asks for one
    yet): its definition attributes are read here and nowhere else
    (tests/project/test_supported_routes.py)."""
    for attr, member in list(vars(cls).items()):
        signal = getattr(member, "__temporal_signal_definition", None)
        query = getattr(member, "__temporal_query_definition", None)
        update = getattr(member, "_defn", None) if hasattr(member, "validator") else None
        if signal is not None and (old := old_name(signal.name)):
            alias = workflow.signal(name=old, unfinished_policy=signal.unfinished_policy)(_again(member))
        elif query is not None and (old := old_name(query.name)):
            alias = workflow.query(name=old)(_again(member))
        elif update is not None and (old := old_name(update.name)):
            alias = workflow.update(name=old, unfinished_policy=update.unfinished_policy)(_again(member))
            if update.validator is not None:
                alias.validator(update.validator)
        else:
            continue
        setattr(cls, f"_{attr}_under_old_name", alias)
    return cls


def _again(method: Callable[..., Any]) -> Callable[..., Any]:
    """A function of its own that calls ``method`` (a handler holds one definition); sync or async
    as it is, with its signature and type hints."""
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method, updated=())
        async def again_async(self: Any, *args: Any) -> Any:
            return await method(self, *args)

        return again_async

    @functools.wraps(method, updated=())
    def again(self: Any, *args: Any) -> Any:
        return method(self, *args)

    return again
