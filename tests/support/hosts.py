"""Hosts of their own: worker processes (``tests.support.host_worker``) each in its own folder,
sharing only Temporal and the database (AGENT_DATABASE_URL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.paths import ROOT
from workflows.config import ApprovalPolicy

TOOLS = ["add", "charge", "emit", "write_file", "read_file", "list_files"]
"""The host worker's tools an agent on the hosts uses."""


AUTO = ApprovalPolicy(auto=["write_file"])
"""write_file without a person."""


class Host:
    """``python -m tests.support.host_worker`` in its own folder, killed for real."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        folder.mkdir(parents=True)
        self.folder = folder
        self.env = env
        self._env = os.environ | env | {
            "AGENT_DATA_DIR": str(folder / "data"),
            "AGENT_STORE": str(folder / "data" / "conversations.db"),
            "AGENT_PAYLOAD_STORE": str(folder / "data" / "payloads.db"),
            "AGENT_IDEMPOTENCY_STORE": str(folder / "data" / "idempotency.db"),
            "AGENT_WORKSPACE": str(folder / "workspace"),
            "PYTHONPATH": str(ROOT),
        }  # fmt: skip
        self.proc: subprocess.Popen[str] | None = None

    def start(self, **env: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.host_worker"],
            cwd=self.folder,
            env=self._env | env,
            stdout=subprocess.PIPE,
            stderr=(self.folder / "worker.log").open("a"),
            text=True,
        )
        ready = threading.Event()
        threading.Thread(target=lambda: self.proc.stdout.readline() and ready.set(), daemon=True).start()  # type: ignore[union-attr]
        if not ready.wait(60):
            self.kill()
            raise AssertionError("the host's worker did not start")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()
