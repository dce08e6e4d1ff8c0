"""Tools the worker can run, and the registry that runs them."""

from durable_agents.activities.tools.calculator import CALCULATOR_TOOLS
from durable_agents.activities.tools.files import FILE_TOOLS
from durable_agents.activities.tools.registry import Tool, ToolContext, ToolError, ToolRegistry, tool

__all__ = ["Tool", "ToolContext", "ToolError", "ToolRegistry", "default_registry", "tool"]


def default_registry(*extra: Tool) -> ToolRegistry:
    """The built-in tools plus ``extra`` (your own ``@tool`` functions)."""
    return ToolRegistry([*CALCULATOR_TOOLS, *FILE_TOOLS, *extra])
