"""Worker Deployment Versioning, the workflow's side: the agent's behavior, and where the next run starts.

Temporal fixes a workflow type's versioning behavior in ``@workflow.defn`` (per execution only for a
dynamic workflow's ``@workflow.dynamic_config``), and the server refuses a behavior from a worker that
is not versioned. ``AgentWorkflow`` is one named type for every agent and must run on unversioned
workers as before, so its ``defn`` names none: a versioned worker's deployment config makes ``PINNED``
the default, and the plugin's workflow runner (durable_agents/versioning.py) offers each conversation
the extern function ``BEHAVIOR_EXTERN``, through which it declares its agent's ``versioning``; the
runner reports that behavior on every workflow task the conversation completes. A replayer, an
unversioned worker or a worker without the plugin offers none, and nothing changes: the behavior is
not a command, so histories replay the same either way.

Each run also records the release of the code that runs it (``record_release``): a worker that meets
a history it cannot replay says which release wrote it (durable_agents/versioning.py).
"""

from __future__ import annotations

from temporalio import workflow

from workflows.config import AgentSpec

BEHAVIOR_EXTERN = "durable_agents.versioning_behavior"
RELEASE = 2
"""This code's release, bumped with every release (docs/production.md, "Upgrading"): 1 is the release before
releases were recorded (tests/upgrade/BASE when this one was cut)."""
RELEASE_MARKER = "durable-agents-release-"
"""The id of the marker ``record_release`` leaves, before the release's number."""


def declare(spec: AgentSpec) -> None:
    """The conversation's workflow tasks carry ``spec.versioning`` from now on, if the worker is versioned."""
    declare_behavior = workflow.extern_functions().get(BEHAVIOR_EXTERN)
    if declare_behavior is not None:
        declare_behavior(spec.versioning)


def next_run() -> workflow.ContinueAsNewVersioningBehavior | None:
    """Upgrade on continue-as-new: a versioned conversation's next run starts on the deployment's
    current build, whatever the agent's behavior (a pinned run would otherwise hand its build on to
    the next, for ever); an unversioned one continues as it always did."""
    if workflow.info().get_current_deployment_version() is None:
        return None
    return workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE


def record_release() -> None:
    """A marker in the run's history naming ``RELEASE``, once per run and release: at the run's start,
    and where a release that took the run over (replayed it, then went on) calls this next. It is a
    deprecated patch: any release replays a history with another release's marker, or none, as if it
    were not there; a worker still sees it (``NotifyHasPatch``), so one that cannot replay the run
    can say who wrote it. Not while replaying: the SDK would remember the marker as absent."""
    if not workflow.unsafe.is_replaying():
        workflow.deprecate_patch(f"{RELEASE_MARKER}{RELEASE}")


def release_of(marker: str) -> int | None:
    """The release a ``record_release`` marker names; None for any other patch id."""
    number = marker.removeprefix(RELEASE_MARKER)
    return int(number) if number != marker and number.isdigit() else None
