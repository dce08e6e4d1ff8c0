"""Hosts of their own: worker processes (``tests.support.host_worker``) each in its own folder,
sharing only Temporal and the database (AGENT_DATABASE_URL)."""

from __future__ import annotations

from pathlib import Path
from typing import IO

from durable_agents.workflows.config import ApprovalPolicy
from tests.support.processes import KillableWorker

TOOLS = ["add", "charge", "emit", "write_file", "read_file", "list_files"]
"""The host worker's tools an agent on the hosts uses."""
AUTO = ApprovalPolicy(auto=["write_file"])
"""write_file without a person."""


class Host(KillableWorker):
    """``python -m tests.support.host_worker`` in its own folder (its stderr in worker.log there),
    killed for real."""

    module = "tests.support.host_worker"

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        folder.mkdir(parents=True)
        self.folder = folder
        self.env = env
        super().__init__(
            env
            | {
                "AGENT_DATA_DIR": str(folder / "data"),
                "AGENT_STORE": str(folder / "data" / "conversations.db"),
                "AGENT_PAYLOAD_STORE": str(folder / "data" / "payloads.db"),
                "AGENT_IDEMPOTENCY_STORE": str(folder / "data" / "idempotency.db"),
                "AGENT_WORKSPACE": str(folder / "workspace"),
            },
            cwd=folder,
        )

    def _stderr(self) -> IO[str]:
        return (self.folder / "worker.log").open("a")
