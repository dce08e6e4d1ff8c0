"""Agent files as a folder that changes: its signature (what an added, removed or edited file
changes), and the names of its agents for a server that only needs those."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

from durable_agents.workflows.config import Versioning

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
    """A folder's agents by name, each with its ``versioning``, read again when its files change:
    for a client that starts conversations (the starter, ``serve``): it refuses an unknown agent
    before one starts and starts an ``auto_upgrade`` agent as its workflow type. It reads only each
    file's ``name`` (default: the file's stem) and ``versioning``, so a file naming tools of the
    worker's own registry is read as well; a file that is not TOML is left out (the worker says why)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._seen: Signature | None = None
        self._agents: dict[str, Versioning] = {}

    def current(self) -> Mapping[str, Versioning]:
        seen = signature(self.directory)
        if seen is not None and seen != self._seen:
            self._seen, self._agents = seen, dict(_agents_in(self.directory))
        return self._agents


def _agents_in(directory: Path) -> Iterator[tuple[str, Versioning]]:
    for path in directory.glob("*.toml"):
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        name, versioning = data.get("name", path.stem), data.get("versioning", "pinned")
        if isinstance(name, str):
            yield name, "auto_upgrade" if versioning == "auto_upgrade" else "pinned"
