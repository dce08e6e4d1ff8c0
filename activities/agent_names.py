"""Agent files as a folder that changes: its signature (what an added, removed or edited file
changes), and the names of its agents for a server that only needs those."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

DEFAULT_AGENTS_DIR = Path(__file__).resolve().parent.parent / "agents"

Signature = tuple[int, tuple[tuple[str, int, int], ...]]


def signature(directory: Path) -> Signature | None:
    """What an added, removed, renamed or edited agent file changes; None while a file goes."""
    try:
        files = []
        for path in sorted(directory.glob("*.toml")):
            stat = os.stat(path)
            files.append((path.name, stat.st_mtime_ns, stat.st_size))
        return os.stat(directory).st_mtime_ns, tuple(files)
    except OSError:
        return None


class AgentNames:
    """The names of a folder's agents, read again when its files change: for a server that starts
    conversations and refuses an unknown agent before one starts (``starter.py serve``). It reads
    only each file's ``name`` (default: the file's stem), so a file naming tools of the worker's
    own registry is read as well; a file that is not TOML is left out (the worker says why)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._seen: Signature | None = None
        self._names: frozenset[str] = frozenset()

    def current(self) -> frozenset[str]:
        seen = signature(self.directory)
        if seen is not None and seen != self._seen:
            self._seen, self._names = seen, frozenset(_names_in(self.directory))
        return self._names


def _names_in(directory: Path) -> Iterator[str]:
    for path in directory.glob("*.toml"):
        try:
            name = tomllib.loads(path.read_text()).get("name", path.stem)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        if isinstance(name, str):
            yield name
