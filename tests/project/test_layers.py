"""The import graph keeps its layers: entry points are imported by nothing; workflow code imports
only workflow code (deterministic, tests/workflow/test_determinism.py); the stores import only workflow
types, the activities the stores, the library the activities; nothing imports the benchmarks or
the tests, and the benchmarks never import the tests; tests share code only through tests/support/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import ROOT

ENTRY_POINTS = {"worker", "starter", "demo", "codec"}
PACKAGES = ("workflows", "stores", "activities", "durable_agents", "bench", "tests")


def imports_of(path: Path) -> set[str]:
    """Every project module ``path`` imports (absolute imports only: the project uses no other)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] in ENTRY_POINTS | set(PACKAGES)}


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")) + [
        ROOT / f"{name}.py" for name in sorted(ENTRY_POINTS)
    ]


def test_no_module_imports_an_entry_point() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(i for i in imports_of(path) if i.split(".")[0] in ENTRY_POINTS)
        for path in modules()
    }
    assert {path: names for path, names in offenders.items() if names} == {}


@pytest.mark.parametrize(
    ("package", "may_import"),
    [
        ("workflows", {"workflows"}),
        ("stores", {"stores", "workflows"}),
        ("activities", {"activities", "stores", "workflows"}),
        ("durable_agents", {"durable_agents", "activities", "stores", "workflows"}),
        ("bench", {"bench", "durable_agents", "activities", "stores", "workflows"}),
    ],
)
def test_each_layer_imports_only_the_layers_beneath(package: str, may_import: set[str]) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(i for i in imports_of(path) if i.split(".")[0] not in may_import)
        for path in (ROOT / package).rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_tests_share_code_only_through_tests_support() -> None:
    """No test module imports another test module or a conftest.py: what tests share lives in
    tests/support/ (fixtures in conftest.py files, which pytest finds by itself)."""
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in imports_of(path) if name.startswith("tests.") and name.split(".")[1] != "support"
        )
        for path in (ROOT / "tests").rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_test_modules_live_in_the_folder_of_the_part_they_test() -> None:
    """One scheme: tests/<part>/test_*.py, each module name once (README cites tests by it)."""
    modules = sorted((ROOT / "tests").rglob("test_*.py"))
    misplaced = [p for p in modules if p.parent.parent != ROOT / "tests" or p.parent.name == "support"]
    assert [str(p.relative_to(ROOT)) for p in misplaced] == []
    names = [p.name for p in modules]
    assert sorted({name for name in names if names.count(name) > 1}) == []
