"""The session's real PostgreSQL server (``durable_agents.testing.postgres``), started once, stopped
at the end. Without the binaries the tests that need it skip, except in CI (``CI=true``), where
they fail: CI installs the package (``.ci/run``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

import pytest

from durable_agents.testing.postgres import USER, Postgres, find_binaries

__all__ = ["PASSWORD", "USER", "Postgres", "find_binaries", "postgres"]

PASSWORD = "s3cret-pw"
"""The test server's password, a literal so the tests can assert it never shows."""


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    binaries = find_binaries()
    if binaries is None:
        reason = "PostgreSQL server binaries (initdb, pg_ctl) are missing: apt-get install postgresql"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    server = Postgres(binaries, password=PASSWORD)
    try:
        server.init()
        server.start()
        yield server
    finally:
        with contextlib.suppress(RuntimeError):  # never started, or already stopped
            server.stop("immediate")
        shutil.rmtree(server.root, ignore_errors=True)
