"""A conversation's files: one folder per conversation, on local disk or in a shared database.

Every workspace applies the same path rules (``relative``): paths are relative to the
workspace, ``..`` may not climb out of it, and absolute paths are refused. A local
workspace also refuses symlinks that lead out.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import posixpath
import re
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from activities.outages import DEFAULT_OUTAGE_SECONDS, StoreDown, patiently

_DISK_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})
"""Faults of the disk, not of the path the model chose."""


class WorkspaceError(Exception):
    """What went wrong with a path, told to the model as an error tool result."""


def relative(path: str) -> str:
    """``path`` normalised inside the workspace ("" for the workspace itself); escapes are refused."""
    normalized = posixpath.normpath(path) if path else "."
    if normalized.startswith("/") or normalized == ".." or normalized.startswith("../"):
        raise WorkspaceError(f"Path {path!r} is outside the workspace; use a path relative to it.")
    return "" if normalized == "." else normalized


def folder_name(conversation_key: str) -> str:
    """A folder name for a conversation key (``<workflow id>/<first run id>``) that no other key gets,
    on any file system (case-insensitive ones too): the workflow id made safe and cut short for
    people to read, then a hash of the exact key."""
    workflow_id = conversation_key.rpartition("/")[0] or conversation_key
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", workflow_id)[:40].lstrip(".")
    return f"{readable}-{hashlib.sha256(conversation_key.encode()).hexdigest()[:16]}"


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


class LocalWorkspace:
    """A folder on this host's disk. A full disk (or quota, or an I/O error) is a ``StoreDown``,
    waited out: the tool's effect is not refused for a fault of the host."""

    def __init__(self, root: Path, outage_seconds: float = DEFAULT_OUTAGE_SECONDS) -> None:
        self.root = root
        self.name = root.name
        self._outage_seconds = outage_seconds

    def _target(self, path: str) -> Path:
        root = self.root.resolve()
        target = (root / relative(path)).resolve()
        if not target.is_relative_to(root):  # a symlink that leads out
            raise WorkspaceError(f"Path {path!r} is outside the workspace; use a path relative to it.")
        return target

    async def read(self, path: str) -> bytes:
        return await asyncio.to_thread(self._read, path)

    async def list(self, path: str) -> list[str]:
        return await asyncio.to_thread(self._list, path)

    async def write(self, path: str, data: bytes) -> None:
        await patiently(lambda: self._on_disk(self._write, path, data), self._outage_seconds)

    async def _on_disk(self, fn: Callable[..., None], *args: object) -> None:
        try:
            await asyncio.to_thread(fn, *args)
        except OSError as e:
            if e.errno not in _DISK_FAULTS:
                raise
            raise StoreDown(f"the workspace folder {self.root.parent}", e.strerror or str(e)) from e

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


class LocalWorkspaces:
    """Folders under one root on this host: the default for one machine."""

    def __init__(self, root: Path, outage_seconds: float = DEFAULT_OUTAGE_SECONDS) -> None:
        self.root = root
        self._outage_seconds = outage_seconds

    def open(self, conversation_key: str) -> LocalWorkspace:
        return LocalWorkspace(self.root / folder_name(conversation_key), self._outage_seconds)

    def __str__(self) -> str:
        return f"folders under {self.root}"
