"""Typed answers: an agent with an ``output_schema`` answers in JSON that must match it.

The check runs in the workflow, with the workflow's own validator (workflows/schemas.py), which
refuses when the agent is loaded a schema it could not enforce in full.
"""

from __future__ import annotations

import json
from itertools import islice
from typing import Any

from durable_agents.workflows.schemas import check, problems

OUTPUT_NAME = "final_answer"
"""What the answer is called on the wire: OpenAI's ``json_schema`` name, Anthropic's forced tool."""

_MAX_ERRORS = 5
"""At most this many problems go back to the model, so a wild answer gives a short message."""


def check_schema(schema: Any) -> None:
    """Refuse (``ValueError``) a schema the validator cannot enforce in full, or one whose answer is
    not a JSON object (Anthropic's tool input, and OpenAI's structured output, must be one)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ValueError('the output schema must describe a JSON object ("type": "object")')
    check(schema, "output schema")


def parse_answer(text: str, schema: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The answer as an object, or why it does not match ``schema`` (in words the model reads)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"the answer is not valid JSON ({e.msg} at position {e.pos})"
    if found := list(islice(problems(value, schema), _MAX_ERRORS)):
        return None, "; ".join(found)
    return value, None


def correction(problem: str) -> str:
    """The message that sends an answer that does not match back to the model."""
    return (
        f"Your answer does not match the required output schema: {problem}. "
        "Answer again with only a JSON object that matches the schema."
    )
