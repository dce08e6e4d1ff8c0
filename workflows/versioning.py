"""Worker Deployment Versioning, the workflow's side: the agent's behavior, and where the next run starts.

A conversation's versioning behavior is its workflow type (``WORKFLOW_TYPES``, workflows/behaviors.py):
the SDK fixes a behavior per type, so whoever starts a conversation picks the type its agent's
``versioning`` names (``workflow_type``). A conversation of the other type says so in the worker's log
(``check``); the behavior is not a command, so histories replay the same either way.

Each run learns its way once, at its start (``begin``), and asks nothing else for any branch an
earlier release added (``since``). A new run of this release records no marker: the build id of its
first workflow task names the release (``BUILD``), and a replay reads it there. A run written the
previous release's way, while a worker of it polls, records that release's marker. A worker that
meets a history it cannot replay says which release wrote it (durable_agents/worker/versioning.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from temporalio import workflow

from durable_agents.workflows.config import AgentSpec, Versioning

WORKFLOW_TYPES: dict[Versioning, str] = {
    "pinned": "AgentWorkflow",
    "auto_upgrade": "AgentWorkflowAutoUpgrade",
}
"""The workflow type of a conversation whose agent says each ``versioning`` (workflows/behaviors.py):
``AgentWorkflow`` names no behavior, so a versioned worker's default (PINNED) holds."""
RELEASE = 4
"""This code's release, bumped with every release that changes what the workflow commands
(docs/production.md, "Releasing"; tests/deploys/test_releases.py fails when it was not): 1 is the
release before releases were recorded."""
RELEASE_MARKER = "durable-agents-release-"
"""The id of a release's marker, before the release's number."""
FIRST_LEAN = 3
"""The first release whose runs learn their way from one marker, their release's (``begin``);
earlier ones asked a patch of its own for each branch."""
FIRST_UNMARKED = 4
"""The first release whose new runs record no marker: the build id of their first workflow task
names the release (``BUILD``)."""
BUILD = re.compile(r"^durable-agents-(\d+)-")
"""A build id that names its release, as our workers' are by default (durable_agents/worker/fleet.py,
``built``): ``durable-agents-4-<digest>``. History keeps each workflow task's build id."""
WAY = "durable_agents.way"
"""The worker's extern function (durable_agents/worker/fleet.py) that says whose way a new run is
written: ``RELEASE``, or the previous release's while a worker of it polls the queue. A worker
without one (a replayer, a worker without our plugin) writes this release's way."""
WINDOW = 2
"""The releases before this one whose conversations this one carries on (docs/production.md)."""


@dataclass(frozen=True)
class Patch:
    """A branch of the workflow that runs of earlier releases do not take: ``added`` names the release
    that added it (histories of earlier releases lack its marker)."""

    id: str
    added: int

    @property
    def retires(self) -> int:
        """The release from which no conversation in the window lacks the marker: its other way goes
        (``retired``), and with the release that no longer carries runs written the old way, the call."""
        return self.added + WINDOW


PATCHES: list[Patch] = []
"""Every patch the workflow asks, as its modules declare them (``patch``)."""


def patch(id: str, added: int) -> Patch:
    """Declare a branch (``since``): ``id`` its marker, ``added`` the release that added it."""
    declared = Patch(id, added)
    PATCHES.append(declared)
    return declared


def marker(release: int) -> str:
    return f"{RELEASE_MARKER}{release}"


def begin() -> int:
    """The release whose way this run follows, decided first thing in it. A new run follows the way
    its worker's fleet allows (``WAY``): this release's records nothing when the build id of the
    task names this release, else its marker; an earlier release's, its marker. A replay reads the
    same back: a release's marker, newest first, else the release the first task's build id names
    (from ``FIRST_UNMARKED``), else, for a run written before releases had markers, the way of
    ``FIRST_LEAN - 1``: a patch for each branch. A run of a later release's way is refused
    (``NondeterminismError``: its workflow task fails, and is retried until a worker of that release
    takes it), as a history with a later release's marker is by the SDK."""
    named = built_release()
    if not workflow.unsafe.is_replaying():
        way = workflow.extern_functions().get(WAY, lambda: RELEASE)()
        if way != named:
            workflow.patched(marker(way))
        return way
    for release in range(RELEASE, FIRST_LEAN - 1, -1):
        if workflow.patched(marker(release)):
            return release
    if named is None:
        return FIRST_LEAN - 1
    if named > RELEASE:  # a later release's way: what it changed may not show in the commands
        raise workflow.NondeterminismError(
            f"this run was written by release {named}; this worker is release {RELEASE} and cannot replay it"
        )
    return named


def built_release() -> int | None:
    """The release the build id of the current workflow task names, if it is one whose runs record
    no marker (``unmarked_release``)."""
    version = workflow.info().get_current_deployment_version()
    return unmarked_release(version.build_id) if version is not None else None


def unmarked_release(build_id: str) -> int | None:
    """The release ``build_id`` names (``BUILD``) when it is ``FIRST_UNMARKED`` or later: for the first
    task of a run, the release whose way the run follows unless it records a marker."""
    release = release_built(build_id)
    return release if release is not None and release >= FIRST_UNMARKED else None


def release_built(build_id: str) -> int | None:
    """The release ``build_id`` names (``BUILD``); None for a build id that names none."""
    found = BUILD.match(build_id)
    return int(found[1]) if found else None


def since(branch: Patch, release: int | None = None) -> bool:
    """Does this run take ``branch``? Every run of a release that learns its way from its marker
    takes each branch added up to it, asking nothing; a run of the older way asks the branch's patch,
    as that way did. ``release``: the run's (``begin``), while the workflow object is being made."""
    if (release if release is not None else workflow.instance().release) >= FIRST_LEAN:
        return True
    return workflow.patched(branch.id)


def retired(branch: Patch, release: int | None = None) -> None:
    """``branch`` is past its window (``Patch.retires``): every conversation carried on takes it, so
    its other way is gone; a run of the older way still asks its patch here, where its history
    holds the marker (a replay must meet the same calls). ``release`` as for ``since``."""
    if (release if release is not None else workflow.instance().release) < FIRST_LEAN:
        workflow.patched(branch.id)


def workflow_type(versioning: Versioning) -> str:
    """The workflow type to start a conversation of an agent that says ``versioning`` as."""
    return WORKFLOW_TYPES[versioning]


def check(spec: AgentSpec) -> None:
    """Warn, on a versioned worker, when the conversation's workflow type is not the one its agent's
    ``versioning`` names (it was started by name, as ``AgentWorkflow``, by a caller that did not know
    the agent's): its type's behavior holds. Once, in its first run; a sub-agent's does not matter:
    it answers one task."""
    info = workflow.info()
    if info.parent or info.continued_run_id or not versioned():
        return
    if (wanted := workflow_type(spec.versioning)) != info.workflow_type:
        workflow.logger.warning(
            "agent %s says versioning = %r, but this conversation was started as %s, which keeps its"
            " own behavior; start its conversations as %s",
            spec.name,
            spec.versioning,
            info.workflow_type,
            wanted,
        )


def next_run() -> workflow.ContinueAsNewVersioningBehavior | None:
    """Upgrade on continue-as-new: a versioned conversation's next run starts on the deployment's
    current build, whatever the agent's behavior (a pinned run would otherwise hand its build on to
    the next, for ever); an unversioned one continues as it always did."""
    if not versioned():
        return None
    return workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE


def versioned() -> bool:
    """Is the current workflow task's worker part of a Worker Deployment? An unversioned worker's
    build id alone (``BUILD``) gives a version without a deployment."""
    version = workflow.info().get_current_deployment_version()
    return version is not None and bool(version.deployment_name)


def release_of(patch_id: str) -> int | None:
    """The release a release's marker names (``begin``; before release 3, a deprecated one at each
    run's start); None for any other patch id."""
    number = patch_id.removeprefix(RELEASE_MARKER)
    return int(number) if number != patch_id and number.isdigit() else None
