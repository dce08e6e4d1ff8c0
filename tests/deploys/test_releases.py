"""Releases without ceremony: a new conversation records no marker of ours (the build id of its first
task names its release), one of a worker's own build records its release's; ``RELEASE`` moves
whenever the workflow changed since the previous release (tests/upgrade/BASE); every compatibility
branch names the release that added it and goes when its window closes."""

from __future__ import annotations

import ast
import json
import re
import subprocess
from collections import Counter

import pytest
from temporalio.api.enums.v1 import EventType

from durable_agents.testing import conversation, scripted_agent, step
from durable_agents.worker.fleet import built, release_in, tagged
from durable_agents.workflows import versioning
from durable_agents.workflows.activity_io import brief
from tests.support.paths import ROOT, TESTS
from tests.support.workers import Env

BASE = (TESTS / "upgrade" / "BASE").read_text().split()[0]
"""The previous release's commit."""

BENCH_CONVERSATION = conversation(
    scripted_agent(
        step("", ("add", {"a": 1, "b": 2})), step("", ("add", {"a": 3, "b": 4})), step("done"), tools=["add"]
    )
)
"""The peers benchmark's conversation (bench/peers): three model calls and two tool calls."""


async def test_a_new_conversation_records_no_marker_of_ours_its_build_id_names_its_release(env: Env) -> None:
    handle = await env.start(BENCH_CONVERSATION)
    assert (await handle.result()).final_text == "done"
    events = (await handle.fetch_history()).events
    kinds = Counter(EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in events)
    patches = [
        json.loads(e.marker_recorded_event_attributes.details["patch-data"].payloads[0].data)["id"]
        for e in events
        if e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]
    assert patches == []
    assert dict(kinds) == {
        "WORKFLOW_EXECUTION_STARTED": 1,
        "WORKFLOW_TASK_SCHEDULED": 6,  # the start, then after each model and tool call but the last
        "WORKFLOW_TASK_STARTED": 6,
        "WORKFLOW_TASK_COMPLETED": 6,
        "MARKER_RECORDED": 1,  # resolve_agent, a local activity
        "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES": 2,  # AgentName and AgentStatus; completed
        "ACTIVITY_TASK_SCHEDULED": 5,
        "ACTIVITY_TASK_STARTED": 5,
        "ACTIVITY_TASK_COMPLETED": 5,
        "WORKFLOW_EXECUTION_COMPLETED": 1,
    }
    assert len(events) == 38
    headers = [
        dict(e.activity_task_scheduled_event_attributes.header.fields)
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert headers == [{}] * 5  # no metrics' labels where no metrics are exported: nobody reads them
    inputs = [
        json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    # lean calls: what the activity can tell from its own run stays out, the stores go in brief
    assert [sorted({"conversation_key", "conversation_id", "idempotency_key"} & set(i)) for i in inputs] == [
        []
    ] * 5
    [resolved] = [
        json.loads(e.marker_recorded_event_attributes.details["result"].payloads[0].data)
        for e in events
        if e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    assert {i["stores"] for i in inputs} == {brief(resolved["stores"])}
    tasks = [
        e.workflow_task_started_event_attributes
        for e in events
        if e.HasField("workflow_task_started_event_attributes")
    ]
    # the release in the build id, as long as the SDK's own; the identity says only who
    assert {(t.worker_version.build_id[:17], len(t.worker_version.build_id)) for t in tasks} == {
        (f"durable-agents-{versioning.RELEASE}-", 32)
    }
    assert [t.identity for t in tasks if "durable-agents" in t.identity] == []


def _fingerprint(sources: dict[str, str]) -> str:
    """The workflow's code as Python reads it: docstrings and comments are not commands."""
    parts = []
    for name, text in sorted(sources.items()):
        tree = ast.parse(text)
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            first = body[0] if isinstance(body, list) and body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                body[0] = ast.Pass()  # type: ignore[index]
        parts.append(f"{name}\n{ast.dump(tree)}")
    return "\n".join(parts)


def _workflows_at(commit: str) -> dict[str, str]:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", commit, "workflows/"],
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        pytest.skip(f"git history lacks the previous release {commit} (tests/upgrade/BASE)")
    return {
        name: subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{commit}:{name}"], capture_output=True, text=True, check=True
        ).stdout
        for name in listed.stdout.split()
        if name.endswith(".py")
    }


def test_release_moves_whenever_the_workflow_changed_since_the_previous_release() -> None:
    then = _workflows_at(BASE)
    now = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "workflows").glob("*.py")}
    released = re.search(r"^RELEASE = (\d+)$", then.get("workflows/versioning.py", ""), re.M)
    before = int(released[1]) if released else 1
    if _fingerprint(then) != _fingerprint(now):
        assert before < versioning.RELEASE, (
            f"the workflow changed since release {before} ({BASE}, tests/upgrade/BASE): bump RELEASE in"
            " workflows/versioning.py (docs/production.md, Releasing)"
        )


def test_every_compatibility_branch_lives_within_its_window() -> None:
    """A branch added in release N serves histories of releases before N: ``since`` while one of
    them is in the window, ``retired`` (its other way gone) after."""
    sources = "\n".join(p.read_text() for p in (ROOT / "workflows").glob("*.py"))
    declared = dict(re.findall(r'^(\w+) = versioning\.patch\("([^"]+)"', sources, re.M))
    live = {
        patch.id: patch.retires
        for patch in versioning.PATCHES
        if re.search(
            rf"versioning\.since\(({'|'.join(n for n, i in declared.items() if i == patch.id)})\b", sources
        )
    }
    retired = {
        patch.id
        for patch in versioning.PATCHES
        if re.search(
            rf"versioning\.retired\(({'|'.join(n for n, i in declared.items() if i == patch.id)})\b", sources
        )
    }
    assert {patch.id for patch in versioning.PATCHES} == set(declared.values()) == set(live) | retired
    assert live == {
        "cancelled-ends-canceled": 5,
        "notify-when-a-call-waits": 5,
        "lean-calls": 5,
    }
    assert all(retires > versioning.RELEASE for retires in live.values())
    assert retired == {
        "agent-lean-start",
        "approvals-bind-to-pending-calls",
        "interrupted-call-failure",
        "subagent-stop-reason-errors",
        "refuse-carried-input-from-callers",
        "operator-input-known-fields-and-bounds",
        "decisions-verified-by-the-worker",
        "client-wait-status",
        "agent-cost-search-attribute",
        "model-call-interrupted-event",
        "subagent-decide-bound",
        "subagent-report-key",
        "durable-agents-wire-names",
    }
    assert all(p.retires <= versioning.RELEASE for p in versioning.PATCHES if p.id in retired)


def test_a_worker_names_its_release_in_its_build_id_or_else_in_its_identity() -> None:
    sdks = "3a62406d9598fc1cf86eb363cfb19cc8"  # the SDK's default: a digest of the loaded code
    assert release_in("12345@host", built()) == versioning.RELEASE
    assert release_in(tagged("12345@host"), "their-build-7") == versioning.RELEASE  # a build id of theirs
    assert release_in("12345@host", sdks) == versioning.FIRST_LEAN - 1  # neither: an earlier release
