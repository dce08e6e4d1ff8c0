"""Inputs of the workflow's start, signals and updates, checked by the workflow itself.

The handlers take ``*args`` so that no input, ``null``, two inputs or the wrong shape reach our
code instead of failing the workflow task (the SDK calls a handler with whatever payloads arrived,
and a ``TypeError`` there would fail every later task: a wedged conversation). Here they become a
``ValueError`` with a one-line reason: a refused update, a dropped signal, a failed start.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def one_input(model: type[M], args: tuple[Any, ...], what: str, example: str) -> M:
    """The single input of ``what``, validated as ``model``; ``ValueError`` with a one-line reason."""
    if len(args) != 1 or args[0] is None:
        given = "no input" if not args or args == (None,) else f"{len(args)} inputs"
        raise ValueError(f"{what} takes one JSON object such as {example}; got {given}")
    try:
        return model.model_validate(args[0])
    except ValidationError as e:
        raise ValueError(f"{what}: {first_error(e)}") from None


def first_error(error: ValidationError) -> str:
    """Pydantic's first complaint on one line: ``field.path: reason`` (and how many more there are)."""
    errors = error.errors()
    first = errors[0]
    where = ".".join(map(str, first["loc"])) or "input"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"
