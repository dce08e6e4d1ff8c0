"""The product reaches the Temporal SDK through its supported routes only (issue 42): it writes no
protobuf the bridge sends to Core, reads no Temporal error's text to decide anything, and reads no
private SDK attribute except where the SDK has no public route (named, with the reason, beside it).
A rewrite of the bridge's completion or a regular expression over Core's message breaks at the next
SDK release without any other test noticing."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.paths import ROOT

PRODUCT = ("durable_agents", "workflows", "activities", "stores")

NO_PUBLIC_ROUTE = {
    ("durable_agents/worker/plugin.py", "_Definition"),
    ("workflows/wire.py", "__temporal_signal_definition"),
    ("workflows/wire.py", "__temporal_query_definition"),
    ("workflows/wire.py", "_defn"),
}
"""Private SDK attributes read where the SDK offers no public way (each says so where it is read)."""


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))


def _bridge_names(tree: ast.Module) -> set[str]:
    """Names a module binds to what it imports from ``temporalio.bridge``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("temporalio.bridge"):
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _names(annotation: ast.expr | None) -> set[str]:
    return {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)} if annotation else set()


def _annotated_bridge_variables(tree: ast.Module, bridge: set[str]) -> set[str]:
    """Variables and parameters annotated with a bridge type, or assigned a call in a function that
    returns one (what a runner's ``activate`` returns: a completion)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and _names(node.annotation) & bridge:
            found.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found |= {node.target.id} if _names(node.annotation) & bridge else set()
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _names(node.returns) & bridge:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Assign) and isinstance(inner.value, ast.Call):
                    found |= {t.id for t in inner.targets if isinstance(t, ast.Name)}
    return found


_WRITES = ("CopyFrom", "MergeFrom", "ClearField", "SetInParent", "append", "extend")


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def test_no_protobuf_the_bridge_sends_to_core_is_written() -> None:
    """Reading an activation is how a ``WorkflowRunner`` watches; writing a completion's field (as
    the versioning behavior once was) is changing what the SDK tells Core behind its back."""
    writes = []
    for where, tree in _sources():
        if not (bridge := _bridge_names(tree)):
            continue
        variables = _annotated_bridge_variables(tree, bridge)
        for node in ast.walk(tree):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign | ast.AnnAssign)
                else []
            )
            for target in targets:
                if isinstance(target, ast.Attribute) and _root_name(target) in variables:
                    writes.append(f"{where}:{node.lineno} {ast.unparse(target)}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr
                in ("CopyFrom", "MergeFrom", "ClearField", "SetInParent", "append", "extend")
                and _root_name(node.func.value) in variables
            ):
                writes.append(f"{where}:{node.lineno} {ast.unparse(node.func)}")
    assert writes == []


def test_no_temporal_error_text_is_parsed() -> None:
    """A decision taken on the words of a Temporal error (a regular expression over Core's message,
    ``"nondeterminism" in e.message``) breaks when the words change; what an error says is shown,
    as it is, never read."""
    parsed = []
    for where, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                module = node.func.value
                if isinstance(module, ast.Name) and module.id == "re" and node.args[1:]:
                    text = ast.unparse(node.args[1])
                    if text == "message" or text.endswith(".message") or text.startswith("str("):
                        parsed.append(f"{where}:{node.lineno} {ast.unparse(node)}")
            if isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
                text = ast.unparse(node.comparators[0])
                if text.endswith(".message") or text.endswith(".message.lower()"):
                    parsed.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    assert parsed == []


def test_no_private_sdk_attribute_is_read_but_where_the_sdk_has_no_route() -> None:
    private = set()
    for where, tree in _sources():
        temporal_modules = {
            alias.asname or alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            and ((node.module or "") if isinstance(node, ast.ImportFrom) else node.names[0].name).startswith(
                "temporalio"
            )
            for alias in node.names
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.endswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id in temporal_modules
            ):
                private.add((where, node.attr))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr")
                and node.args[1:]
                and isinstance(node.args[1], ast.Constant)
                and str(node.args[1].value).startswith("__temporal")
            ):
                private.add((where, str(node.args[1].value)))
            elif (
                isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("temporalio")
                and any(alias.name.startswith("_") for alias in node.names)
            ):
                private |= {(where, a.name) for a in node.names if a.name.startswith("_")}
        for node in ast.walk(tree):  # the wire module reads an update's definition by getattr too
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and node.args[1:]
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value == "_defn"
            ):
                private.add((where, "_defn"))
    assert private <= NO_PUBLIC_ROUTE, sorted(private - NO_PUBLIC_ROUTE)


def test_every_exception_to_the_supported_routes_says_why_where_it_is() -> None:
    for where, attribute in NO_PUBLIC_ROUTE:
        text = Path(ROOT / where).read_text()
        assert attribute in text and "no public way" in text, where
