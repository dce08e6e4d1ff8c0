"""What the data-lifecycle tests of this folder share (test_erasure.py, test_retention.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from durable_agents.dev_server import EmbeddedServer
from tests.support.lifecycle import Stores, lifecycle_worker
from tests.support.workers import Env


@pytest.fixture(params=["sqlite", "postgresql"])
async def lifecycle(
    request: pytest.FixtureRequest, server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> AsyncIterator[tuple[Env, Stores]]:
    """A worker on fresh stores: SQLite files of its own, or a fresh PostgreSQL database."""
    url = await request.getfixturevalue("postgres").new_database() if request.param == "postgresql" else None
    async with lifecycle_worker(url, server, monkeypatch, tmp_path) as worker:
        yield worker
