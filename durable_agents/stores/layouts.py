"""Every layout an earlier release left data in, oldest first: the one place that says where a
conversation in flight across an upgrade keeps what it wrote, so today's worker finds it.

Only the file tools' workspaces ever moved. The stores did not: the conversation store
(``<data dir>/conversations.db``, ``AGENT_STORE``), the idempotency store (``idempotency.db``) and
the payload store (``payloads.db``) have had these files, tables and keys in every release (tables
gained since are made beside the old ones), and a conversation's carried state only ever gained
fields with defaults (``tests/deploys/test_upgrade.py`` holds both).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


def folder_name(conversation_key: str) -> str:
    """A folder name for a conversation key (``<workflow id>/<first run id>``) that no other key gets,
    on any file system (case-insensitive ones too): the workflow id made safe and cut short for
    people to read, then a hash of the exact key."""
    workflow_id = conversation_key.rpartition("/")[0] or conversation_key
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", workflow_id)[:40].lstrip(".")
    return f"{readable}-{hashlib.sha256(conversation_key.encode()).hexdigest()[:16]}"


_KEYED_NAME = re.compile(r"[A-Za-z0-9._-]{0,40}-[0-9a-fA-F]{16}")
"""The shape of ``folder_name``'s names, case aside (file systems that ignore it find them so)."""


def workflow_id_folder(conversation_key: str) -> str:
    """The first release's folder name: the workflow id made safe, nothing else (a later
    conversation reusing the id shared the folder)."""
    workflow_id = conversation_key.rpartition("/")[0] or conversation_key
    return re.sub(r"[^A-Za-z0-9._-]", "_", workflow_id).lstrip(".") or "_"


@dataclass(frozen=True)
class WorkspaceLayout:
    """Where one range of releases kept a conversation's files."""

    name: str
    written_by: str
    """The commits whose workers wrote it."""
    default_root: str
    """The workspaces' folder when ``AGENT_WORKSPACE`` is unset: relative to the worker's working
    directory, ``<data dir>`` standing for ``AGENT_DATA_DIR``."""
    folder: Callable[[str], str]
    """The folder name of the conversation ``<workflow id>/<first run id>``."""
    keyed: bool
    """The name holds a hash of the key: the folder is that conversation's alone. A name without
    one records only a workflow id, which any caller may choose."""

    def root(self, configured: Path | None, data_dir: Path) -> Path:
        if configured is not None:
            return configured.resolve()
        return Path(self.default_root.replace("<data dir>", str(data_dir))).resolve()


WORKSPACE_LAYOUTS = (
    WorkspaceLayout("by workflow id", "92178d8 (first) to 731b7f8", "workspace", workflow_id_folder, False),
    WorkspaceLayout("keyed", "731b7f8 to fbff694", "workspace", folder_name, True),
    WorkspaceLayout("keyed, under the data dir", "fbff694 on", "<data dir>/workspace", folder_name, True),
)  # fmt: skip
CURRENT_WORKSPACES = WORKSPACE_LAYOUTS[-1]


@dataclass(frozen=True)
class EarlierWorkspaces:
    """The earlier layouts' roots on this worker, to look a conversation's files up in."""

    roots: tuple[tuple[WorkspaceLayout, Path], ...]

    @classmethod
    def of(cls, configured: Path | None, data_dir: Path) -> EarlierWorkspaces:
        """The roots of every earlier layout, given ``AGENT_WORKSPACE`` (None: unset) and the data dir."""
        return cls(tuple((layout, layout.root(configured, data_dir)) for layout in WORKSPACE_LAYOUTS[:-1]))

    def folders(self, conversation_key: str, current: Path) -> list[tuple[Path, bool]]:
        """Folders an earlier release may have given the conversation, newest layout first, each
        with whether it is the conversation's alone (``WorkspaceLayout.keyed``); never ``current``,
        and never a name by workflow id that has a keyed name's shape: the keyed layouts share its
        root, so such a folder may be another conversation's, whose id a caller copied."""
        found: list[tuple[Path, bool]] = []
        for layout, root in reversed(self.roots):
            folder = root / layout.folder(conversation_key)
            if not layout.keyed and _KEYED_NAME.fullmatch(folder.name):
                continue
            if folder != current and folder not in [f for f, _ in found]:
                found.append((folder, layout.keyed))
        return found
