"""The session's PostgreSQL server (the ``postgres`` fixture in tests/conftest.py) and what tests
assert about it."""

from __future__ import annotations

from durable_agents.testing.postgres import USER, Postgres, find_binaries

__all__ = ["PASSWORD", "USER", "Postgres", "find_binaries"]

PASSWORD = "s3cret-pw"
"""The test server's password, a literal so the tests can assert it never shows."""
