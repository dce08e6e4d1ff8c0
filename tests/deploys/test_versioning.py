"""Worker Deployment Versioning, step by step on the dev server: docs/production.md "Deploying a new version".

Builds are real ``worker.py`` processes given ``AGENT_DEPLOYMENT_NAME`` and ``AGENT_BUILD_ID``; the
deployment is promoted and rolled back with the ``temporal`` CLI. Which build ran a conversation is
read from its history: each completed workflow task records the build that completed it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import UnsandboxedWorkflowRunner, WorkerDeploymentConfig

from durable_agents.activities.agent_names import AgentNames
from durable_agents.cli import versioning_of
from durable_agents.client.conversations import conversation_type, start_conversation
from durable_agents.dev_server import EmbeddedServer, temporal_cli
from durable_agents.settings import Settings
from durable_agents.testing import scripted_agent, step
from durable_agents.worker.versioning import deployment_config, version_config
from durable_agents.workflows.agent import AgentWorkflow
from durable_agents.workflows.api import ConversationInput, MessageInput
from durable_agents.workflows.behaviors import (
    AutoUpgradingAgentWorkflow,
    UnversionedAutoUpgradingAgentWorkflow,
)
from durable_agents.workflows.config import Versioning
from durable_agents.workflows.versioning import WORKFLOW_TYPES
from tests.support.paths import ROOT
from tests.support.workers import Env

CHAT = """
name = "{name}"
chat = true
versioning = "{versioning}"
{more}

[model]
provider = "scripted"
model = "scripted-echo"

[[model.script]]
text = "you said: {{user}}"
repeat = 50
"""


# -- settings and worker configuration -------------------------------------------------------------


def test_the_deployment_comes_from_our_variables_or_from_temporals() -> None:
    ours = {"AGENT_DEPLOYMENT_NAME": "agents", "AGENT_BUILD_ID": "v2"}
    controller = {"TEMPORAL_DEPLOYMENT_NAME": "k8s-agents", "TEMPORAL_WORKER_BUILD_ID": "abc123"}
    assert (Settings.from_env(ours).deployment_name, Settings.from_env(ours).build_id) == ("agents", "v2")
    assert (Settings.from_env(controller).deployment_name, Settings.from_env(controller).build_id) == (
        "k8s-agents",
        "abc123",
    )
    both = Settings.from_env(controller | ours)
    assert (both.deployment_name, both.build_id) == ("agents", "v2")
    assert (Settings.from_env({}).deployment_name, Settings.from_env({}).build_id) == (None, None)


@pytest.mark.parametrize(
    ("environ", "error"),
    [
        (
            {"AGENT_BUILD_ID": "v2"},
            "AGENT_BUILD_ID is set but AGENT_DEPLOYMENT_NAME is not: a versioned worker needs both"
            " (or neither)",
        ),
        (
            {"AGENT_DEPLOYMENT_NAME": "agents"},
            "AGENT_DEPLOYMENT_NAME is set but AGENT_BUILD_ID is not: a versioned worker needs both"
            " (or neither)",
        ),
        (
            {"AGENT_DEPLOYMENT_NAME": "agents.prod", "AGENT_BUILD_ID": "v2"},
            "AGENT_DEPLOYMENT_NAME must not contain '.', not 'agents.prod'",
        ),
    ],
)
def test_half_a_deployment_is_refused_naming_the_variables(environ: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError) as raised:
        Settings.from_env(environ)
    assert str(raised.value) == error


def test_a_worker_without_a_build_is_unversioned_as_before() -> None:
    assert deployment_config(Settings()) is None
    runner = UnsandboxedWorkflowRunner()
    config = {"unsandboxed_workflow_runner": runner}
    assert version_config(config) == {"unsandboxed_workflow_runner": runner}  # type: ignore[arg-type]
    # The auto-upgrading type names no behavior here: the server refuses one from an unversioned worker.
    config = version_config({"workflows": [AgentWorkflow]})  # type: ignore[typeddict-item]
    assert config["workflows"] == [AgentWorkflow, UnversionedAutoUpgradingAgentWorkflow]


def test_a_versioned_worker_pins_conversations_unless_their_agent_says_otherwise() -> None:
    built = deployment_config(Settings(deployment_name="agents", build_id="v2"))
    assert built == WorkerDeploymentConfig(
        version=WorkerDeploymentVersion("agents", "v2"),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )
    # A worker of one's own that names no default behavior: AgentWorkflow's defn names none either.
    own = WorkerDeploymentConfig(version=WorkerDeploymentVersion("agents", "v2"), use_worker_versioning=True)
    config = version_config({"deployment_config": own, "workflows": [AgentWorkflow]})  # type: ignore[arg-type]
    assert config["deployment_config"].default_versioning_behavior == VersioningBehavior.PINNED
    assert config["workflows"] == [AgentWorkflow, AutoUpgradingAgentWorkflow]
    # One workflow type per behavior: the agent's ``versioning`` names the type its conversations start as.
    assert WORKFLOW_TYPES == {"pinned": "AgentWorkflow", "auto_upgrade": "AgentWorkflowAutoUpgrade"}
    assert set(WORKFLOW_TYPES) == set(get_args(Versioning))


# -- the deploy and the rollback, on the dev server --------------------------------------------------


class Build:
    """``python worker.py`` as one build of a Worker Deployment."""

    def __init__(
        self, server: EmbeddedServer, folder: Path, task_queue: str, deployment: str, build: str
    ) -> None:
        env = os.environ | {
            "TEMPORAL_ADDRESS": server.address,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_DEPLOYMENT_NAME": deployment,
            "AGENT_BUILD_ID": build,
            "PYTHONPATH": str(ROOT),
        }
        self.lines: list[str] = []
        self._announced = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, "worker.py", "--agents-dir", str(folder)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        if not self._announced.wait(90):
            self.stop()
            raise AssertionError(f"build {build} did not start:\n" + "".join(self.lines))

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.lines.append(line)
            if line.startswith("Build "):
                self._announced.set()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


def temporal(server: EmbeddedServer, *args: str) -> subprocess.CompletedProcess[str]:
    """``temporal worker deployment ARGS`` against the test server: the commands of docs/production.md."""
    return subprocess.run(
        [temporal_cli(), "worker", "deployment", *args, "--address", server.address],
        capture_output=True,
        text=True,
    )


async def until_done(server: EmbeddedServer, *args: str, shows: str = "") -> str:
    """Runs the command until it succeeds (and its output shows ``shows``): the server learns of a
    build from its pollers, a moment after the worker says it runs."""
    for _ in range(200):
        done = await asyncio.to_thread(temporal, server, *args)
        if done.returncode == 0 and shows in done.stdout:
            return done.stdout
        await asyncio.sleep(0.2)
    raise AssertionError(f"temporal worker deployment {' '.join(args)}: {done.stdout}{done.stderr}")


async def builds(handle: WorkflowHandle) -> list[str]:
    """The build of each completed workflow task of the handle's run, in order."""
    history = await handle.fetch_history()
    return [
        e.workflow_task_completed_event_attributes.deployment_version.build_id
        for e in history.events
        if e.HasField("workflow_task_completed_event_attributes")
    ]


async def behavior(handle: WorkflowHandle) -> str:
    described = await handle.describe()
    info = described.raw_description.workflow_execution_info.versioning_info
    return VersioningBehavior(info.behavior).name


async def say(handle: WorkflowHandle, text: str) -> str:
    return (await handle.execute_update(AgentWorkflow.send_message, MessageInput(text=text))).text


@pytest.fixture
def agents(tmp_path: Path) -> Path:
    folder = tmp_path / "agents"
    folder.mkdir()
    for name, versioning, more in (
        ("pinned-chat", "pinned", "continue_as_new_after = 3  # a long chat, in short"),
        ("upgrading-chat", "auto_upgrade", ""),
    ):
        (folder / f"{name}.toml").write_text(CHAT.format(name=name, versioning=versioning, more=more))
    return folder


@pytest.fixture
def running(server: EmbeddedServer, agents: Path) -> Iterator[list[Build]]:
    started: list[Build] = []
    yield started
    for build in started:
        build.stop()


async def test_a_new_build_takes_new_conversations_while_pinned_ones_stay_and_a_rollback_is_safe(
    server: EmbeddedServer, client: Client, agents: Path, running: list[Build]
) -> None:
    deployment, queue = f"agents-{uuid.uuid4().hex[:8]}", f"versions-{uuid.uuid4().hex[:8]}"

    async def start(agent: str) -> WorkflowHandle:
        versioning: Versioning = "auto_upgrade" if agent == "upgrading-chat" else "pinned"
        return await start_conversation(
            client,
            ConversationInput(agent=agent, prompt="hello"),
            id=f"{agent}-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            versioning=versioning,
        )

    # 1. The running build, made current.
    running.append(Build(server, agents, queue, deployment, "v1"))
    assert next(line for line in running[0].lines if line.startswith("Build ")) == (
        f"Build v1 of Worker Deployment {deployment}: it takes new conversations once current"
        f" (temporal worker deployment set-current-version --deployment-name {deployment} --build-id v1).\n"
    )
    await until_done(
        server, "set-current-version", "--deployment-name", deployment, "--build-id", "v1", "--yes"
    )
    pinned, upgrading = await start("pinned-chat"), await start("upgrading-chat")
    assert await say(pinned, "before") == "you said: before"
    assert await say(upgrading, "before") == "you said: before"
    assert set(await builds(pinned)) == set(await builds(upgrading)) == {"v1"}
    assert (await behavior(pinned), await behavior(upgrading)) == ("PINNED", "AUTO_UPGRADE")
    upgrading_before = len(await builds(upgrading))

    # 2. The new build beside it; 3. promoted.
    running.append(Build(server, agents, queue, deployment, "v2"))
    described = await until_done(
        server, "describe-version", "--deployment-name", deployment, "--build-id", "v2", shows=queue
    )
    assert "BuildID" in described and "v2" in described
    await until_done(
        server, "set-current-version", "--deployment-name", deployment, "--build-id", "v2", "--yes"
    )

    fresh = await start("pinned-chat")
    assert await say(fresh, "new") == "you said: new"
    assert set(await builds(fresh)) == {"v2"}  # new conversations start on the new build

    first_run = client.get_workflow_handle(pinned.id, run_id=pinned.result_run_id)
    assert await say(pinned, "after") == "you said: after"  # its third model call: it continues as new
    assert set(await builds(first_run)) == {"v1"}  # the pinned run stayed on the build that started it

    assert await say(upgrading, "after") == "you said: after"
    moved = (await builds(upgrading))[upgrading_before:]
    assert moved and set(moved) == {"v2"}  # an auto-upgrading chat moves at its next workflow task

    # The long chat moves at its continue-as-new: the next run is on the new build, pinned there.
    latest = client.get_workflow_handle(pinned.id)
    while (await latest.describe()).run_id == pinned.result_run_id:
        await asyncio.sleep(0.05)
    assert await say(latest, "later") == "you said: later"
    second_run = client.get_workflow_handle(pinned.id, run_id=(await latest.describe()).run_id)
    assert set(await builds(second_run)) == {"v2"}
    assert await behavior(second_run) == "PINNED"

    # 4. The deployment: v2 current, v1 still listed (draining while pinned conversations remain).
    described = await until_done(server, "describe", "--name", deployment)
    assert re.search(r"CurrentVersionBuildID\s+v2\n", described)
    assert re.search(rf"{deployment}\s+v1\s", described) and re.search(rf"{deployment}\s+v2\s", described)

    # Rollback: new conversations and auto-upgrading ones go back; pinned runs stay where they are.
    await until_done(
        server, "set-current-version", "--deployment-name", deployment, "--build-id", "v1", "--yes"
    )
    newest = await start("pinned-chat")
    assert await say(newest, "rolled back") == "you said: rolled back"
    assert set(await builds(newest)) == {"v1"}
    on_v2 = len(await builds(second_run))
    assert await say(second_run, "still") == "you said: still"
    assert set((await builds(second_run))[on_v2:]) == {"v2"}
    back = len(await builds(upgrading))
    assert await say(upgrading, "back") == "you said: back"
    assert set((await builds(upgrading))[back:]) == {"v1"}

    # What the server refuses, clearly: a build it never saw, and retiring the current one.
    unknown = temporal(
        server, "set-current-version", "--deployment-name", deployment, "--build-id", "v3", "--yes"
    )
    assert unknown.returncode == 1
    assert f"build ID 'v3' not found in Worker Deployment '{deployment}'" in unknown.stderr + unknown.stdout
    current = temporal(server, "delete-version", "--deployment-name", deployment, "--build-id", "v1")
    assert current.returncode == 1
    assert "cannot be deleted since it is current or ramping" in current.stderr + current.stdout


async def test_an_auto_upgrading_agent_runs_as_its_own_type_on_an_unversioned_worker_too(
    client: Client, env: Env
) -> None:
    """The caller picks the type from the inline agent's ``versioning``; an unversioned worker runs it
    declaring no behavior (the server would refuse one, and the conversation would never finish)."""
    agent = scripted_agent(step("done"), versioning="auto_upgrade")
    conversation = ConversationInput(prompt="go", agent_spec=agent)
    assert conversation_type(conversation) == "AgentWorkflowAutoUpgrade"
    assert (
        conversation_type(conversation.model_copy(update={"agent_spec": None}, deep=True)) == "AgentWorkflow"
    )
    assert conversation_type(conversation, "pinned") == "AgentWorkflow"
    handle = await start_conversation(
        client, conversation, id=f"upgrading-{uuid.uuid4().hex[:8]}", task_queue=env.task_queue
    )
    assert (await asyncio.wait_for(handle.result(), 30)).final_text == "done"
    assert (await handle.describe()).workflow_type == "AgentWorkflowAutoUpgrade"


def test_the_starter_starts_an_agent_as_the_type_its_file_names(tmp_path: Path) -> None:
    """Without ``--versioning`` the agent file says (``AGENT_AGENTS_DIR``): the client reads each
    file's name and ``versioning`` only, a file naming the worker's own tools included."""
    (tmp_path / "steady.toml").write_text('tools = ["my_own_tool"]\n')
    (tmp_path / "moving.toml").write_text('name = "mover"\nversioning = "auto_upgrade"\n')
    (tmp_path / "broken.toml").write_text("name = \n")
    settings = Settings(agents_dir=tmp_path)

    def chosen(agent: str, given: Versioning | None = None) -> str:
        args = argparse.Namespace(agent=agent, versioning=given, settings=settings)
        return conversation_type(ConversationInput(prompt="hi", agent=agent), versioning_of(args))

    assert AgentNames(tmp_path).current() == {"steady": "pinned", "mover": "auto_upgrade"}
    assert [chosen("steady"), chosen("mover"), chosen("elsewhere"), chosen("mover", "pinned")] == [
        "AgentWorkflow",
        "AgentWorkflowAutoUpgrade",
        "AgentWorkflow",
        "AgentWorkflow",
    ]
