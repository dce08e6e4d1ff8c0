"""File tools confined to the conversation's own workspace (a local folder or a shared database)."""

from __future__ import annotations

from durable_agents.activities.tools.registry import ToolContext, tool

MAX_READ_BYTES = 100_000


@tool
async def read_file(path: str, ctx: ToolContext) -> str:
    """Read a text file from the workspace.

    Args:
        path: File path relative to the workspace.
    """
    data = await ctx.workspace.read(path)
    text = data[:MAX_READ_BYTES].decode("utf-8", errors="replace")
    if len(data) > MAX_READ_BYTES:
        text += f"\n[truncated: {len(data)} bytes, first {MAX_READ_BYTES} shown]"
    return text


@tool
async def list_files(ctx: ToolContext, path: str = ".") -> list[str]:
    """List files and folders in a workspace folder (folders end with '/').

    Args:
        path: Folder path relative to the workspace.
    """
    return await ctx.workspace.list(path)


@tool(requires_approval=True)
async def write_file(path: str, content: str, ctx: ToolContext) -> str:
    """Write a text file in the workspace, replacing it if it exists.

    Args:
        path: File path relative to the workspace.
        content: The whole new content of the file.
    """
    data = content.encode()
    # Same content on a retried attempt gives the same file: the write is idempotent.
    await ctx.workspace.write(path, data)
    return f"Wrote {len(data)} bytes to {path}."


FILE_TOOLS = [read_file, list_files, write_file]
