"""File tools confined to the conversation's own workspace folder."""

from __future__ import annotations

from pathlib import Path

from activities.tools.registry import ToolContext, ToolError, tool

MAX_READ_BYTES = 100_000


def _inside(workspace: Path, path: str) -> Path:
    """Resolve ``path`` inside the workspace; escapes (``..``, absolute paths, symlinks) are refused."""
    root = workspace.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise ToolError(f"Path {path!r} is outside the workspace; use a path relative to it.")
    return target


@tool
def read_file(path: str, ctx: ToolContext) -> str:
    """Read a text file from the workspace.

    Args:
        path: File path relative to the workspace.
    """
    target = _inside(ctx.workspace, path)
    if not target.is_file():
        raise ToolError(f"No file {path!r} in the workspace.")
    data = target.read_bytes()
    text = data[:MAX_READ_BYTES].decode("utf-8", errors="replace")
    if len(data) > MAX_READ_BYTES:
        text += f"\n[truncated: {len(data)} bytes, first {MAX_READ_BYTES} shown]"
    return text


@tool
def list_files(ctx: ToolContext, path: str = ".") -> list[str]:
    """List files and folders in a workspace folder (folders end with '/').

    Args:
        path: Folder path relative to the workspace.
    """
    target = _inside(ctx.workspace, path)
    if not target.exists():
        return []
    if not target.is_dir():
        raise ToolError(f"{path!r} is not a folder.")
    return sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir())


@tool(requires_approval=True)
def write_file(path: str, content: str, ctx: ToolContext) -> str:
    """Write a text file in the workspace, replacing it if it exists.

    Args:
        path: File path relative to the workspace.
        content: The whole new content of the file.
    """
    target = _inside(ctx.workspace, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Same content on a retried attempt gives the same file: the write is idempotent.
    target.write_text(content, encoding="utf-8")
    return f"Wrote {len(content.encode())} bytes to {path}."


FILE_TOOLS = [read_file, list_files, write_file]
