"""Calculator tools: the smallest useful tool set, for the demo and the provider agents.

They are ``async`` only so that they run on the worker's event loop: a plain function tool runs in
a thread (it may block on files or a network), a hop that costs more than the arithmetic."""

from __future__ import annotations

import math

from durable_agents.activities.tools.registry import ToolError, tool


def _number(x: float) -> int | float:
    """42 rather than 42.0: models quote what they are given."""
    return int(x) if x.is_integer() and abs(x) < 2**53 else x


@tool
async def add(a: float, b: float) -> int | float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return _number(a + b)


@tool
async def subtract(a: float, b: float) -> int | float:
    """Subtract b from a.

    Args:
        a: The number to subtract from.
        b: The number to subtract.
    """
    return _number(a - b)


@tool
async def multiply(a: float, b: float) -> int | float:
    """Multiply two numbers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return _number(a * b)


@tool
async def divide(a: float, b: float) -> int | float:
    """Divide a by b.

    Args:
        a: The dividend.
        b: The divisor; must not be zero.
    """
    if b == 0:
        raise ToolError("Cannot divide by zero.")
    return _number(a / b)


@tool
async def sqrt(x: float) -> int | float:
    """Square root of a non-negative number.

    Args:
        x: The number.
    """
    if x < 0:
        raise ToolError("Cannot take the square root of a negative number.")
    return _number(math.sqrt(x))


CALCULATOR_TOOLS = [add, subtract, multiply, divide, sqrt]
