"""Inputs of the workflow's start, signals and updates, checked by the workflow itself.

The handlers take ``*args`` so that no input, ``null``, two inputs or the wrong shape reach our
code instead of failing the workflow task (the SDK calls a handler with whatever payloads arrived,
and a ``TypeError`` there would fail every later task: a wedged conversation). Here they become a
``ValueError`` with a one-line reason: a refused update, a dropped signal, a failed start.

What an operator sends (a ``Payload``) refuses fields it does not know: a misspelt ``argument``
must not approve the model's own arguments while the sender believes they were edited. What our
own code sent (a continued run's or a sub-agent's start input) is read with ``strict=False``: a
field it does not know was added by newer code, and a rollback must not fail the conversation.
"""

from __future__ import annotations

import difflib
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ValidationError, ValidationInfo, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

M = TypeVar("M", bound=BaseModel)

_TOLERANT = {"tolerant": True}
"""Validation context in which a ``Payload`` ignores the fields it does not know."""
_MAX_LOCATION = 60
"""Characters of a field name an error repeats: the name came from the caller, of any size."""


class Payload(BaseModel):
    """A payload a caller sends: a field it does not know is refused, naming the closest known one,
    unless it is validated with ``strict=False`` (``one_input``), which ignores it."""

    model_config = {"extra": "ignore"}

    ALSO_KNOWN: ClassVar[frozenset[str]] = frozenset()
    """Names it takes besides its fields (moved into a field by a validator of its own)."""

    @model_validator(mode="before")
    @classmethod
    def _known_fields_only(cls, data: Any, info: ValidationInfo) -> Any:
        if info.context == _TOLERANT or not isinstance(data, dict):
            return data
        known = sorted(cls.model_fields.keys() | cls.ALSO_KNOWN)
        for name in data:
            if name not in known:
                closest = difflib.get_close_matches(str(name), known, n=1, cutoff=0.0)[0]
                error = PydanticCustomError(
                    "unknown_field", "unknown field; did you mean {closest}?", {"closest": repr(closest)}
                )
                raise ValidationError.from_exception_data(
                    cls.__name__, [InitErrorDetails(type=error, loc=(name,), input=data[name])]
                )
        return data


def one_input(model: type[M], args: tuple[Any, ...], what: str, example: str, *, strict: bool = True) -> M:
    """The single input of ``what``, validated as ``model``; ``ValueError`` with a one-line reason.
    ``strict=False``: fields a ``Payload`` does not know are ignored (a payload our own code sent)."""
    if len(args) != 1 or args[0] is None:
        given = "no input" if not args or args == (None,) else f"{len(args)} inputs"
        raise ValueError(f"{what} takes one JSON object such as {example}; got {given}")
    try:
        return model.model_validate(args[0], context=None if strict else _TOLERANT)
    except ValidationError as e:
        raise ValueError(f"{what}: {first_error(e)}") from None


def first_error(error: ValidationError) -> str:
    """Pydantic's first complaint on one line: ``field.path: reason`` (and how many more there are)."""
    errors = error.errors()
    first = errors[0]
    where = ".".join(_shown(part) for part in first["loc"]) or "input"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


def _shown(part: str | int) -> str:
    """A location's part on one line, cut to a readable size."""
    text = " ".join(str(part).split()) or "''"
    return text if len(text) <= _MAX_LOCATION else text[: _MAX_LOCATION - 1] + "…"
