"""Payloads leave out fields at their defaults (durable_agents/converter.py), so a history recorded
today is read back with the defaults of the code that replays it. This test pins every default of
every model under workflows/: changing one fails here. Add a new field (or a ``workflow.patched``
branch) instead; only a new default may be added to tests/data/recorded_defaults.json."""

from __future__ import annotations

import importlib
import inspect
import json
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined, to_jsonable_python

from durable_agents.converter import PayloadConverter
from durable_agents.workflows.messages import AssistantMessage, Tagged, ToolCall, UserMessage
from tests.support.paths import DATA, ROOT

PINNED = DATA / "recorded_defaults.json"


def recorded_defaults() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for path in sorted((ROOT / "workflows").glob("*.py")):
        module = importlib.import_module(f"durable_agents.workflows.{path.stem}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if not issubclass(cls, BaseModel) or cls.__module__ != module.__name__:
                continue
            for field_name, field in cls.model_fields.items():
                if field.default is not PydanticUndefined:
                    value = field.default
                elif field.default_factory is not None:
                    value = field.default_factory()  # type: ignore[call-arg]
                else:
                    continue
                if isinstance(value, BaseModel):  # its own fields are pinned with its class
                    value = value.model_dump(exclude_defaults=True)
                found[f"{module.__name__}.{name}.{field_name}"] = to_jsonable_python(value)
    return found


def test_no_default_of_a_recorded_model_changed() -> None:
    pinned = json.loads(PINNED.read_text())
    now = recorded_defaults()
    changed = {key: (pinned[key], now[key]) for key in pinned.keys() & now.keys() if pinned[key] != now[key]}
    assert changed == {}, "defaults changed (old, new): histories would replay with the new ones"


def test_every_default_is_pinned() -> None:
    """A new field's default is pinned too: ``python -m tests.workflow.test_recorded_defaults`` adds it."""
    pinned = json.loads(PINNED.read_text())
    assert {key: value for key, value in recorded_defaults().items() if key not in pinned} == {}


def test_every_union_tag_is_written_even_at_its_default() -> None:
    """A field of one literal value with that value as default tells union members apart: left out as
    a default, the member could not be told when read back. Each such field is a ``Tagged`` model's TAG."""
    untagged = []
    for path in sorted((ROOT / "workflows").glob("*.py")):
        module = importlib.import_module(f"durable_agents.workflows.{path.stem}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if not issubclass(cls, BaseModel) or cls.__module__ != module.__name__:
                continue
            for field_name, field in cls.model_fields.items():
                tag = get_origin(field.annotation) is Literal and get_args(field.annotation) == (
                    field.default,
                )
                if tag and not (issubclass(cls, Tagged) and field_name == cls.TAG):
                    untagged.append(f"{name}.{field_name}")
    assert untagged == []


def test_payloads_leave_out_defaults_and_read_back_the_same() -> None:
    message = AssistantMessage(tool_calls=[ToolCall(id="c1", name="add", arguments={"a": 1, "b": None})])
    converter = PayloadConverter()
    [payload] = converter.to_payloads([message])
    call = b'{"id":"c1","name":"add","arguments":{"a":1,"b":null}}'
    assert payload.data == b'{"kind":"assistant","tool_calls":[' + call + b"]}"
    assert converter.from_payloads([payload], [AssistantMessage]) == [message]
    [payload] = converter.to_payloads([UserMessage(text="hi")])
    assert payload.data == b'{"kind":"user","text":"hi"}'


if __name__ == "__main__":  # pins the defaults of new fields; a changed one stays as it was
    pinned = {**recorded_defaults(), **json.loads(PINNED.read_text())}
    PINNED.write_text(json.dumps(pinned, indent=2, sort_keys=True) + "\n")
