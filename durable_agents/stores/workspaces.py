"""A conversation's files: one folder per conversation, on local disk or in a shared database.

Every workspace applies the same path rules (``relative``): paths are relative to the
workspace, ``..`` may not climb out of it, and absolute paths are refused. A local
workspace also refuses symlinks that lead out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import posixpath
import shutil
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Protocol

from temporalio import activity

from durable_agents.stores.errors import DEFAULT_OUTAGE_SECONDS, StoreDown, outage, patiently
from durable_agents.stores.layouts import EarlierWorkspaces, folder_name

logger = logging.getLogger(__name__)


class WorkspaceError(Exception):
    """What went wrong with a path, told to the model as an error tool result."""


def relative(path: str) -> str:
    """``path`` normalised inside the workspace ("" for the workspace itself); escapes are refused."""
    normalized = posixpath.normpath(path) if path else "."
    if normalized.startswith("/") or normalized == ".." or normalized.startswith("../"):
        raise WorkspaceError(f"Path {path!r} is outside the workspace; use a path relative to it.")
    return "" if normalized == "." else normalized


class Workspace(Protocol):
    """One conversation's files; the file tools reach them through ``ToolContext.workspace``."""

    name: str
    """Names the workspace (a folder name), for logs."""

    async def read(self, path: str) -> bytes:
        """The file's bytes; ``WorkspaceError`` when there is no file at ``path``."""

    async def list(self, path: str) -> list[str]:
        """Names in the folder, sorted, folders ending with '/'; [] when nothing is there."""

    async def write(self, path: str, data: bytes) -> None:
        """Create or replace the file (and its folders)."""


class Workspaces(Protocol):
    """Where the worker keeps every conversation's workspace."""

    def open(self, conversation_key: str) -> Workspace:
        """The workspace of the conversation ``<workflow id>/<first run id>``."""

    async def forget(self, conversation_key: str) -> int:
        """Remove the conversation's workspace; how many files it held."""


class LocalWorkspace:
    """A folder on this host's disk. A full disk (or quota, or an I/O error) is a ``StoreDown``,
    waited out: the tool's effect is not refused for a fault of the host."""

    def __init__(
        self,
        root: Path,
        outage_seconds: float = DEFAULT_OUTAGE_SECONDS,
        gather: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.root = root
        self.name = root.name
        self._outage_seconds = outage_seconds
        self._gather = gather
        """Brings what earlier releases kept elsewhere into ``root``, before the first use."""

    async def _ready(self) -> None:
        if self._gather is not None:
            gather, self._gather = self._gather, None
            await gather()

    def _target(self, path: str) -> Path:
        root = self.root.resolve()
        target = (root / relative(path)).resolve()
        if not target.is_relative_to(root):  # a symlink that leads out
            raise WorkspaceError(f"Path {path!r} is outside the workspace; use a path relative to it.")
        return target

    async def read(self, path: str) -> bytes:
        await self._ready()
        return await asyncio.to_thread(self._read, path)

    async def list(self, path: str) -> list[str]:
        await self._ready()
        return await asyncio.to_thread(self._list, path)

    async def write(self, path: str, data: bytes) -> None:
        await self._ready()
        await patiently(lambda: self._on_disk(self._write, path, data), self._outage_seconds)

    async def _on_disk(self, fn: Callable[..., None], *args: object) -> None:
        try:
            await asyncio.to_thread(fn, *args)
        except OSError as e:
            if (reason := outage(e)) is None:
                raise
            raise StoreDown(f"the workspace folder {self.root.parent}", reason) from e

    def _read(self, path: str) -> bytes:
        target = self._target(path)
        if not target.is_file():
            raise WorkspaceError(f"No file {path!r} in the workspace.")
        return target.read_bytes()

    def _list(self, path: str) -> list[str]:
        target = self._target(path)
        if not target.exists():
            return []
        if not target.is_dir():
            raise WorkspaceError(f"{path!r} is not a folder.")
        return sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir())

    def _write(self, path: str, data: bytes) -> None:
        target = self._target(path)
        if target == self.root.resolve() or target.is_dir():
            raise WorkspaceError(f"{path!r} is a folder.")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise WorkspaceError(f"Cannot write {path!r}: a folder on its path is a file.") from None
        target.write_bytes(data)


async def first_run_started(conversation_key: str) -> datetime | None:
    """When the conversation's first run started, asked of Temporal by the activity; None outside one.
    A tenant's key (``tenants/<tenant>/<workflow id>/<run id>``) names no run: Temporal's refusal
    then keeps the tenant from the first release's folders, which predate tenants."""
    if not activity.in_activity():
        return None
    workflow_id, _, run_id = conversation_key.rpartition("/")
    handle = activity.client().get_workflow_handle(workflow_id, run_id=run_id)
    return (await handle.describe()).start_time


class LocalWorkspaces:
    """Folders under one root on this host: the default for one machine.

    With ``earlier`` (``durable_agents/stores/layouts.py``), a conversation's first use of its workspace moves
    in what an earlier release kept in the folder that release gave it: a conversation in flight
    across an upgrade keeps its files, in one folder. A folder named by the workflow id alone (the
    first release's) is taken only if it changed after the conversation began (``started``): an
    older one is a finished conversation's that had the same id, and is left where it is, as is
    one whose conversation Temporal cannot name, and one named like a keyed folder
    (``EarlierWorkspaces.folders``)."""

    def __init__(
        self,
        root: Path,
        outage_seconds: float = DEFAULT_OUTAGE_SECONDS,
        earlier: EarlierWorkspaces | None = None,
        started: Callable[[str], Awaitable[datetime | None]] = first_run_started,
    ) -> None:
        self.root = root
        self._outage_seconds = outage_seconds
        self._earlier = earlier
        self._started = started
        self._moving = threading.Lock()

    def open(self, conversation_key: str) -> LocalWorkspace:
        folder = self.root / folder_name(conversation_key)
        gather = (lambda: self._gather(conversation_key, folder)) if self._earlier else None
        return LocalWorkspace(folder, self._outage_seconds, gather)

    async def _gather(self, conversation_key: str, folder: Path) -> None:
        assert self._earlier is not None
        for earlier, keyed in self._earlier.folders(conversation_key, folder):
            if not await asyncio.to_thread(earlier.is_dir):
                continue
            if not keyed and not await self._began_before(conversation_key, earlier):
                continue
            await asyncio.to_thread(self._move, earlier, folder)
            logger.info("workspace of %s: moved in the files of %s", conversation_key, earlier)

    async def _began_before(self, conversation_key: str, earlier: Path) -> bool:
        try:
            started = await self._started(conversation_key)
        except Exception as e:  # not shown to own it: left, and asked again at the next file call
            logger.warning("workspace of %s: start unknown (%s); leaving %s", conversation_key, e, earlier)
            return False
        changed = await asyncio.to_thread(last_change, earlier)
        return started is None or changed >= started.timestamp() - CLOCK_SLACK

    async def forget(self, conversation_key: str) -> int:
        """Its folder in today's layout; an earlier release's folder of it is left (``layouts.py``:
        a conversation that crossed an upgrade moved its files in at its first file call)."""
        return await asyncio.to_thread(remove_folder, self.root / folder_name(conversation_key))

    def _move(self, source: Path, target: Path) -> None:
        with self._moving:
            move_into(source, target)

    def __str__(self) -> str:
        return f"folders under {self.root}"


CLOCK_SLACK = 2.0
"""Seconds a folder's modification time may seem to precede the start it followed: file systems
that keep whole seconds, and the Temporal server's clock against this host's."""


def last_change(folder: Path) -> float:
    """The latest modification time of ``folder`` or anything in it (epoch seconds)."""
    latest = folder.lstat().st_mtime
    for parent, dirs, files in os.walk(folder):
        for name in dirs + files:
            latest = max(latest, (Path(parent) / name).lstat().st_mtime)
    return latest


def remove_folder(folder: Path) -> int:
    """Remove ``folder`` and everything in it; how many files it held (0: it was not there)."""
    files = sum(len(names) for _, _, names in os.walk(folder))
    shutil.rmtree(folder, ignore_errors=True)
    return files


def move_into(source: Path, target: Path) -> None:
    """Move every file under ``source`` to the same place under ``target`` (a file in both keeps the
    newer one), then remove ``source``. Safe to run again after a crash halfway."""
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(source, target)
        return
    for parent, dirs, files in os.walk(source, topdown=False):
        here = Path(parent)
        there = target / here.relative_to(source)
        for name in files:
            old, new = here / name, there / name
            try:
                if new.exists() and new.lstat().st_mtime >= old.lstat().st_mtime:
                    old.unlink()
                else:
                    there.mkdir(parents=True, exist_ok=True)
                    shutil.move(old, new)
            except FileNotFoundError:  # moved meanwhile by another worker process
                continue
            except (FileExistsError, NotADirectoryError):  # a file where a folder is: left in source
                logger.warning("workspace: %s not moved, %s is in the way", old, there)
        for name in dirs:
            with contextlib.suppress(OSError):
                (here / name).rmdir()
    with contextlib.suppress(OSError):
        source.rmdir()
