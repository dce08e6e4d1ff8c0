"""The library as a user installs it: the wheel adds one import name, and the README's first agent
runs as written from a folder of the user's own, whose own ``workflows`` and ``activities`` packages
(the names Temporal's samples teach) run a workflow of theirs on the same worker."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import uuid
import zipfile
from pathlib import Path

from durable_agents.dev_server import EmbeddedServer
from tests.support.conversations import wait_for_pending
from tests.support.docs import README, ROOT, block_after

SOURCES = ("pyproject.toml", "README.md", "durable_agents", "workflows", "activities", "agents", "config")

USERS_WORKFLOWS = """
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities import greet


@workflow.defn
class Greeting:
    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(greet, name, start_to_close_timeout=timedelta(seconds=30))
"""

USERS_ACTIVITIES = """
from temporalio import activity


@activity.defn
async def greet(name: str) -> str:
    return f"hello, {name}"
"""


def build_wheel(folder: Path) -> Path:
    """The wheel of a copy of the repository's sources (a build leaves nothing in the checkout)."""
    source = folder / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(folder),
            ".",
        ],
        cwd=source,
        check=True,
        timeout=300,
    )
    (wheel,) = folder.glob("durable_agents-*.whl")
    return wheel


def install(wheel: Path, folder: Path) -> Path:
    """A fresh virtual environment with the wheel installed; its dependencies are this one's (the
    tests need no network), seen through a path file and nothing else of this environment."""
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(purelib) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    return venv


def test_the_wheel_adds_only_durable_agents_and_its_command(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")} == {
        "durable_agents"
    }
    (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    assert zipfile.ZipFile(wheel).read(entry_points).decode().split() == [
        "[console_scripts]",
        "durable-agents",
        "=",
        "durable_agents.cli:main",
    ]
    assert {"durable_agents/config/models.toml", "durable_agents/agents/demo.toml"} <= set(names)


async def test_the_readmes_first_agent_runs_installed_beside_the_users_own_packages(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """The agent file and the worker of "A first agent of your own" as written (the model made a
    scripted one that asks for the refund), in a folder that also holds the user's ``workflows`` and
    ``activities``; the worker registers the user's workflow too. ``durable-agents start --wait``
    says what waits and how to decide it; ``durable-agents approve`` decides; the answer follows."""
    venv = install(build_wheel(tmp_path), tmp_path)
    project = tmp_path / "project"
    (project / "my_agents").mkdir(parents=True)
    for package, code in (("workflows", USERS_WORKFLOWS), ("activities", USERS_ACTIVITIES)):
        (project / package).mkdir()
        (project / package / "__init__.py").write_text(code)

    readme = README.read_text()
    agent = block_after(readme, "## A first agent of your own", "toml")
    worker = block_after(readme, "## A first agent of your own", "python")
    assert agent.startswith("# my_agents/refunds.toml\n") and worker.startswith("# my_worker.py\n")
    scripted = re.sub(
        r'provider = "openai".*\nmodel = "gpt-4o-mini"\n', 'provider = "scripted"\nmodel = "script"\n', agent
    )
    steps = (
        '\n[[model.script]]\ntool_calls = [{ name = "refund",'
        ' arguments = { order_id = "1234", amount = 20 } }]\n'
        '\n[[model.script]]\ntext = "{last_result}"\n'
    )
    (project / "my_agents" / "refunds.toml").write_text(scripted + steps)
    task_queue = f"tq-installed-{uuid.uuid4().hex[:8]}"
    users_own = "from activities import greet\nfrom workflows import Greeting\n"
    code = worker.replace(
        'Worker(client, task_queue="agents")',
        f"Worker(client, task_queue={task_queue!r}, workflows=[Greeting], activities=[greet])",
    )
    assert code != worker
    (project / "my_worker.py").write_text(users_own + code)

    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTHON", "COVERAGE", "VIRTUAL_ENV"))
    } | {"AGENT_DATA_DIR": str(project / "data"), "AGENT_TASK_QUEUE": task_queue}
    env = {
        key: value
        for key, value in env.items()
        if key not in ("AGENT_STORE", "AGENT_WORKSPACE", "AGENT_PAYLOAD_STORE", "AGENT_IDEMPOTENCY_STORE")
    }
    log = (tmp_path / "worker.log").open("w")
    running = subprocess.Popen(
        [venv / "bin" / "python", "my_worker.py"], cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    workflow_id = f"installed-{uuid.uuid4().hex[:8]}"
    command = venv / "bin" / "durable-agents"
    starting = subprocess.Popen(
        [command, "start", "Please refund 20 EUR on order 1234", "--agent", "refunds", "--id", workflow_id,
         "--wait"],
        cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert starting.stdout is not None
        started = await asyncio.to_thread(starting.stdout.readline)
        handle = server.client.get_workflow_handle(workflow_id)
        [pending] = await wait_for_pending(handle, timeout=60)
        assert (pending.tool, pending.arguments) == ("refund", {"order_id": "1234", "amount": 20})
        approve = subprocess.run(
            [command, "approve", workflow_id, pending.call_id, "--by", "you"],
            cwd=project, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert approve.returncode == 0, approve.stderr
        out, err = starting.communicate(timeout=60)
        greeting = await server.client.execute_workflow(
            "Greeting", "ada", id=f"greeting-{uuid.uuid4().hex[:8]}", task_queue=task_queue, result_type=str
        )
    finally:
        starting.kill()
        running.terminate()
        running.wait(timeout=60)
        log.close()
    assert starting.returncode == 0, err
    lines = out.splitlines()
    assert started == f"Started {workflow_id}\n"
    digest = pending.arguments_digest
    assert (
        f'Waiting for a person: refund call {pending.call_id} {{"order_id": "1234", "amount": 20}}'
        f" (digest {digest}); decide with:"
        f" durable-agents approve {workflow_id} {pending.call_id} --digest {digest}"
        f" (or durable-agents reject {workflow_id} {pending.call_id})"
    ) in lines
    assert lines[-2:] == [
        "refunded 20.00 EUR on order 1234",
        "-- stop reason: completed; iterations: 2; model calls: 2; tool calls: 1; tokens: 20 in / 10 out",
    ]
    assert greeting == "hello, ada"
