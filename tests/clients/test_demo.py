"""`make demo` as a newcomer runs it: the embedded server, a worker, approvals by an operator's signal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from durable_agents.dev_server import EmbeddedServer, temporal_cli
from tests.support.paths import ROOT

ANSWER = "(12 + 30) * 2 = 84. I saved it to answer.txt in this conversation's workspace."


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "AGENT_"))}
    return env | extra


def test_the_demo_runs_on_its_own_embedded_server(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "demo.py"), "--task-queue", f"demo-{uuid.uuid4().hex[:8]}"],
        cwd=tmp_path,  # its data/ (server history, stores, workspaces) lands here
        env=_env(PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Starting the embedded Temporal dev server" in out
    assert "The agent wants to run write_file(" in out
    assert "The demo sends that signal now." in out
    decided = "write_file approved by demo-operator (self-declared) via signal: approved by make demo"
    assert f"[approval call_3_0] {decided}" in out
    assert f"Final answer\n------------\n{ANSWER}\n" in out
    assert "(The embedded server has stopped; its history stays in data/." in out
    assert (tmp_path / "data").is_dir()


def test_the_manual_demo_waits_for_the_operator_and_takes_the_cli_signal(server: EmbeddedServer) -> None:
    demo = subprocess.Popen(
        [sys.executable, "demo.py", "--manual", "--task-queue", f"demo-{uuid.uuid4().hex[:8]}"],
        cwd=ROOT,
        env=_env(TEMPORAL_ADDRESS=server.address),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert demo.stdout is not None
        lines = []
        for line in demo.stdout:
            lines.append(line)
            if line.startswith("Waiting for your decision"):
                break
        assert lines[0] == f"Using the Temporal server at {server.address}.\n"
        [command] = [line.strip() for line in lines if line.strip().startswith("temporal workflow signal")]
        workflow_id = command.split("--workflow-id ")[1].split()[0]
        assert command.split("--name ")[1].split()[0] == "durable_agents.approve"
        payload = json.loads(command.split("--input ")[1].strip("'"))
        assert payload["call_id"] == "call_3_0" and len(payload["arguments_digest"]) == 12
        signal = [
            temporal_cli(), "workflow", "signal", "--address", server.address,
            "--workflow-id", workflow_id, "--name", "durable_agents.approve", "--input", json.dumps(payload),
        ]  # fmt: skip
        subprocess.run(signal, check=True, capture_output=True, timeout=60)
        rest, _ = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 0
    assert f"Final answer\n------------\n{ANSWER}\n" in rest
    assert f"Workflow id: {workflow_id}\n" in rest
