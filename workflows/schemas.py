"""A JSON Schema validator for the workflow: an agent's ``output_schema`` (workflows/answers.py)
and a tool's parameters, against which a person's edited arguments are checked (workflows/decisions.py).

Both checks run in the workflow and decide what the conversation does next, so they must judge a
value the same way on every replay: it is this small validator of the keywords agents and tools use
(pydantic's schemas among them), versioned with the workflow code, rather than a library whose next
release might judge a recorded value differently. ``check`` refuses any keyword it would not
enforce, so no part of a schema is silently ignored.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

_ASSERTIONS = frozenset(
    {
        "$ref", "type", "enum", "const", "properties", "patternProperties", "propertyNames", "required",
        "dependentRequired", "additionalProperties", "minProperties", "maxProperties", "items",
        "prefixItems", "contains", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength",
        "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "allOf",
        "anyOf", "oneOf", "not",
    }
)  # fmt: skip
_ANNOTATIONS = frozenset(
    {
        "$schema", "$id", "$comment", "$defs", "definitions", "title", "description", "default",
        "examples", "format", "readOnly", "writeOnly", "deprecated", "discriminator", "contentEncoding",
        "contentMediaType",
    }
)  # fmt: skip
_NUMBERS = frozenset(
    {
        "minProperties", "maxProperties", "minItems", "maxItems", "minLength", "maxLength", "minimum",
        "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    }
)  # fmt: skip
_OBJECTS = frozenset({"properties", "patternProperties", "dependentRequired", "$defs", "definitions"})
_ARRAYS = frozenset({"required", "enum", "prefixItems", "allOf", "anyOf", "oneOf"})
_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})


def check(schema: Any, where: str) -> None:
    """Refuse (``ValueError``, a line that starts with ``where`` and the path in the schema) a schema
    this module cannot enforce in full."""
    _check(schema, schema, where)


def problems(value: Any, schema: Any) -> Iterator[str]:
    """Each way ``value`` fails a ``check``-ed ``schema``, one line each (``$.path ...``); nothing
    when it matches."""
    return _errors(value, schema, schema, "$")


def _check(schema: Any, root: dict[str, Any], where: str) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise ValueError(f"{where}: a schema must be an object or true/false")
    if unknown := sorted(schema.keys() - _ASSERTIONS - _ANNOTATIONS):
        raise ValueError(f"{where}: unsupported keyword(s) {', '.join(unknown)}")
    kinds = [schema["type"]] if isinstance(schema.get("type"), str) else schema.get("type", [])
    if not isinstance(kinds, list) or any(kind not in _TYPES for kind in kinds):
        raise ValueError(f"{where}: unknown type {json.dumps(schema['type'])}")
    for keys, kind in ((_NUMBERS, "number"), (_OBJECTS, "object"), (_ARRAYS, "array")):
        if bad := sorted(key for key in keys & schema.keys() if not _is(schema[key], kind)):
            raise ValueError(f"{where}: {', '.join(bad)} must be of type {kind}")
    if schema.get("multipleOf", 1) <= 0:
        raise ValueError(f"{where}: multipleOf must be above 0")
    if "$ref" in schema:
        _resolve(schema["$ref"], root, where)
    patterns = [schema["pattern"]] if "pattern" in schema else []
    for pattern in [*patterns, *schema.get("patternProperties", {})]:
        try:
            re.compile(pattern)
        except (re.error, TypeError) as e:
            raise ValueError(f"{where}: bad pattern: {e}") from e
    for key in ("properties", "patternProperties", "$defs", "definitions"):
        for name, sub in schema.get(key, {}).items():
            _check(sub, root, f"{where}.{key}.{name}")
    for key in ("additionalProperties", "propertyNames", "items", "contains", "not"):
        if key in schema:
            _check(schema[key], root, f"{where}.{key}")
    for key in ("prefixItems", "allOf", "anyOf", "oneOf"):
        for index, sub in enumerate(schema.get(key, [])):
            _check(sub, root, f"{where}.{key}[{index}]")


def _resolve(ref: Any, root: dict[str, Any], where: str) -> Any:
    """A reference within the schema itself (``#/$defs/Name``); others are refused."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise ValueError(f"{where}: only references within the schema (#/...) are supported")
    target: Any = root
    for part in filter(None, ref[1:].split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            raise ValueError(f"{where}: reference {ref} leads nowhere")
        target = target[part]
    return target


def _is(value: Any, kind: str) -> bool:
    match kind:
        case "object":
            return isinstance(value, dict)
        case "array":
            return isinstance(value, list)
        case "string":
            return isinstance(value, str)
        case "boolean":
            return isinstance(value, bool)
        case "null":
            return value is None
        case "integer":
            if not _is(value, "number"):
                return False
            return isinstance(value, int) or (math.isfinite(value) and value.is_integer())
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
    return False


def _errors(value: Any, schema: Any, root: dict[str, Any], at: str) -> Iterator[str]:
    """Each way ``value`` (at JSON path ``at``) fails ``schema``; nothing when it matches."""
    if schema is True:
        return
    if schema is False:
        yield f"{at} is not allowed"
        return
    if "$ref" in schema:
        yield from _errors(value, _resolve(schema["$ref"], root, ""), root, at)
    if "type" in schema:
        kinds = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
        if not any(_is(value, kind) for kind in kinds):
            yield f"{at} must be of type {' or '.join(kinds)}, not {_name(value)}"
            return
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        yield f"{at} must be one of {json.dumps(schema['enum'])}"
    if "const" in schema and not _same(value, schema["const"]):
        yield f"{at} must be {json.dumps(schema['const'])}"
    if isinstance(value, dict):
        yield from _object_errors(value, schema, root, at)
    elif isinstance(value, list):
        yield from _array_errors(value, schema, root, at)
    elif isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            yield f"{at} must have at least {schema['minLength']} characters"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            yield f"{at} must have at most {schema['maxLength']} characters"
        if "pattern" in schema and not re.search(schema["pattern"], value):
            yield f"{at} must match the pattern {schema['pattern']}"
    elif _is(value, "number"):
        yield from _number_errors(value, schema, at)
    for index, sub in enumerate(schema.get("allOf", [])):
        for problem in _errors(value, sub, root, at):
            yield f"{problem} (allOf[{index}])"
    if "anyOf" in schema and not any(_matches(value, s, root, at) for s in schema["anyOf"]):
        yield f"{at} matches none of the allowed shapes (anyOf)"
    if "oneOf" in schema and sum(_matches(value, s, root, at) for s in schema["oneOf"]) != 1:
        yield f"{at} must match exactly one of the allowed shapes (oneOf)"
    if "not" in schema and _matches(value, schema["not"], root, at):
        yield f"{at} matches a shape that is not allowed (not)"


def _object_errors(
    value: dict[str, Any], schema: dict[str, Any], root: dict[str, Any], at: str
) -> Iterator[str]:
    properties, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    for name in schema.get("required", []):
        if name not in value:
            yield f"{at} lacks the required property {name!r}"
    for name, needs in schema.get("dependentRequired", {}).items():
        if name in value:
            for other in needs:
                if other not in value:
                    yield f"{at} has {name!r} but lacks {other!r}, which goes with it"
    for name, item in value.items():
        if "propertyNames" in schema:
            yield from _errors(name, schema["propertyNames"], root, f"the property name {name!r} of {at}")
        subs = [properties[name]] if name in properties else []
        subs += [sub for pattern, sub in patterns.items() if re.search(pattern, name)]
        if not subs and schema.get("additionalProperties") is False:
            yield f"{at} has the unexpected property {name!r}"
            continue
        for sub in subs or [schema.get("additionalProperties", True)]:
            yield from _errors(item, sub, root, f"{at}.{name}")
    if len(value) < schema.get("minProperties", 0):
        yield f"{at} must have at least {schema['minProperties']} properties"
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        yield f"{at} must have at most {schema['maxProperties']} properties"


def _array_errors(value: list[Any], schema: dict[str, Any], root: dict[str, Any], at: str) -> Iterator[str]:
    prefix = schema.get("prefixItems", [])
    for index, item in enumerate(value):
        sub = prefix[index] if index < len(prefix) else schema.get("items", True)
        yield from _errors(item, sub, root, f"{at}[{index}]")
    if len(value) < schema.get("minItems", 0):
        yield f"{at} must have at least {schema['minItems']} items"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        yield f"{at} must have at most {schema['maxItems']} items"
    if "contains" in schema and not any(_matches(item, schema["contains"], root, at) for item in value):
        yield f"{at} has no item of the required shape (contains)"
    if schema.get("uniqueItems") and any(_same(a, b) for i, a in enumerate(value) for b in value[i + 1 :]):
        yield f"{at} must not repeat items"


def _number_errors(value: float, schema: dict[str, Any], at: str) -> Iterator[str]:
    if "minimum" in schema and value < schema["minimum"]:
        yield f"{at} must be at least {schema['minimum']}"
    if "maximum" in schema and value > schema["maximum"]:
        yield f"{at} must be at most {schema['maximum']}"
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        yield f"{at} must be above {schema['exclusiveMinimum']}"
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        yield f"{at} must be below {schema['exclusiveMaximum']}"
    if "multipleOf" in schema and not (value / schema["multipleOf"]).is_integer():
        yield f"{at} must be a multiple of {schema['multipleOf']}"


def _matches(value: Any, schema: Any, root: dict[str, Any], at: str) -> bool:
    return next(_errors(value, schema, root, at), None) is None


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 and 1.0 are the same number, but true is not 1."""
    return _canonical(a) == _canonical(b)


def _canonical(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if _is(value, "number"):
        return ("number", float(value))
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    return value


def _name(value: Any) -> str:
    for kind in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _is(value, kind):
            return kind
    return type(value).__name__
