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
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pydantic_core import to_jsonable_python

from stores.conversations import SQLiteFile
from stores.errors import DEFAULT_OUTAGE_SECONDS, UNSTORED


class IdempotencyStore(Protocol):
    """Results as JSON text by key; the first ``put`` for a key wins."""

    async def get(self, key: str) -> str | None:
        """The stored JSON text, or None when nothing is stored under ``key``."""

    async def put(self, key: str, value: str) -> None:
        """Store ``value`` unless ``key`` already holds one."""


class SQLiteIdempotencyStore:
    """A SQLite file, persistent across worker restarts; shared by the worker processes of one machine."""

    def __init__(self, path: Path, outage_seconds: float = DEFAULT_OUTAGE_SECONDS) -> None:
        self._file = SQLiteFile(
            path,
            "CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            outage_seconds,
        )

    async def get(self, key: str) -> str | None:
        rows = await self._file.read("SELECT value FROM results WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    async def put(self, key: str, value: str) -> None:
        # INSERT OR IGNORE: a concurrent duplicate attempt cannot overwrite the first result.
        await self._file.write("INSERT OR IGNORE INTO results VALUES (?, ?)", [(key, value)])


async def run_once(
    store: IdempotencyStore,
    key: str,
    fn: Callable[[], Any | Awaitable[Any]],
    kept: Mapping[str, str] | None = None,
) -> Any:
    """fn's result (as JSON data), computed at most once per key (as far as the store can tell).

    The value is serialised before it is stored, so a result that cannot be stored fails before
    anything is recorded. ``kept`` holds results an earlier try of the call had when its store went
    out: such a result is stored now instead of running fn again. While a result waits for its
    store, the attempt holds it (``UNSTORED``), so an attempt that gives up hands it on.
    """
    found = kept.get(key) if kept else None
    if found is None:
        stored = await store.get(key)
        if stored is not None:  # an earlier attempt ran fn and its result is recorded
            return json.loads(stored)
        value = fn()
        if inspect.isawaitable(value):
            value = await value
        found = json.dumps(to_jsonable_python(value))
    unstored = UNSTORED.get()
    if unstored is None:
        unstored = {}
        UNSTORED.set(unstored)
    unstored[key] = found
    await store.put(key, found)
    del unstored[key]
    stored = await store.get(key)
    assert stored is not None, f"idempotency store lost {key!r} right after storing it"
    return json.loads(stored)
