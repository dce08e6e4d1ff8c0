"""Effectively-once tool effects: a small persistent store of results by idempotency key.

Activities run at least once: a worker can die after a tool's side effect and
before Temporal hears the result, and the retry runs the tool again. A tool that
must not repeat an effect wraps it in ``ctx.once("step", fn)``: the first run
stores fn's result under ``<idempotency key>/step``; any later attempt returns
the stored result without calling fn.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from pydantic_core import to_jsonable_python

_MISSING = object()


class IdempotencyStore(Protocol):
    async def get(self, key: str) -> Any:
        """The stored result, or ``_MISSING``."""

    async def put(self, key: str, value: Any) -> None: ...


class SQLiteIdempotencyStore:
    """A SQLite file, persistent across worker restarts; shared by the worker processes of one machine."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=30)
        self._lock = threading.Lock()
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    async def get(self, key: str) -> Any:
        row = await asyncio.to_thread(self._read, key)
        return _MISSING if row is None else json.loads(row)

    async def put(self, key: str, value: Any) -> None:
        await asyncio.to_thread(self._write, key, json.dumps(to_jsonable_python(value)))

    def _read(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM results WHERE key = ?", (key,)).fetchone()
            return row[0] if row else None

    def _write(self, key: str, value: str) -> None:
        with self._lock, self._db:
            # The first result wins: a concurrent duplicate attempt cannot overwrite it.
            self._db.execute("INSERT OR IGNORE INTO results VALUES (?, ?)", (key, value))


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
