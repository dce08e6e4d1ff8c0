"""Effectively-once tool effects: a small persistent store of results by idempotency key.

Activities run at least once: a worker can die after a tool's side effect and
before Temporal hears the result, and the retry runs the tool again. A tool that
must not repeat an effect wraps it in ``ctx.once("step", fn)``: the first run
stores fn's result under ``<idempotency key>/step``; any later attempt returns
the stored result without calling fn.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from pydantic_core import to_jsonable_python

from activities.store import SQLiteFile

_MISSING = object()


class IdempotencyStore(Protocol):
    async def get(self, key: str) -> Any:
        """The stored result, or ``_MISSING``."""

    async def put(self, key: str, value: Any) -> None: ...


class SQLiteIdempotencyStore:
    """A SQLite file, persistent across worker restarts; shared by the worker processes of one machine."""

    def __init__(self, path: Path) -> None:
        self._file = SQLiteFile(
            path, "CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
        )

    async def get(self, key: str) -> Any:
        rows = await self._file.read("SELECT value FROM results WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else _MISSING

    async def put(self, key: str, value: Any) -> None:
        # The first result wins: a concurrent duplicate attempt cannot overwrite it.
        await self._file.write(
            "INSERT OR IGNORE INTO results VALUES (?, ?)", [(key, json.dumps(to_jsonable_python(value)))]
        )


async def run_once(store: IdempotencyStore, key: str, fn: Callable[[], Any | Awaitable[Any]]) -> Any:
    """fn's result, computed at most once per key (as far as the store can tell)."""
    found = await store.get(key)
    if found is not _MISSING:
        return found
    value = fn()
    if inspect.isawaitable(value):
        value = await value
    await store.put(key, value)
    return await store.get(key)
