"""The import graph keeps its layers, and one import name: ``durable_agents``, whose parts live where
they run. Entry points are imported by nothing; workflow code imports only workflow code
(deterministic, tests/workflow/test_determinism.py); the stores import only workflow types, the
activities the stores; what every side shares (settings, the data converter, the connection) no
side of its own; the worker's runtime, the client and the HTTP server none of each other but the
server the client; the command lines anything. Nothing imports the benchmarks or the tests, the
benchmarks never import the tests; tests share code only through tests/support/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import ROOT

ENTRY_POINTS = {"worker", "starter", "demo", "codec"}
PACKAGES = ("durable_agents", "bench", "tests")

LAYERS = {
    "workflows": ROOT / "workflows",
    "stores": ROOT / "durable_agents" / "stores",
    "activities": ROOT / "activities",
    "worker": ROOT / "durable_agents" / "worker",
    "client": ROOT / "durable_agents" / "client",
    "serve": ROOT / "durable_agents" / "serve",
    "cli": ROOT / "durable_agents" / "cli",
    "testing": ROOT / "durable_agents" / "testing",
}
"""Each part of ``durable_agents`` and its folder; the modules directly in durable_agents/ are
``shared``, and the package's ``__init__.py`` (the public API) is ``api``."""

BENEATH = {"workflows", "stores", "activities", "shared"}
MAY_IMPORT = {
    "workflows": {"workflows"},
    "stores": {"stores", "workflows"},
    "activities": {"activities", "stores", "workflows"},
    "shared": BENEATH,
    "worker": BENEATH | {"worker"},
    "client": BENEATH | {"client"},
    "serve": BENEATH | {"client", "serve"},
    "testing": BENEATH | {"testing"},
    "api": BENEATH | {"worker", "client", "api"},
    "cli": BENEATH | {"worker", "client", "serve", "cli", "api"},
    "bench": BENEATH | {"worker", "client", "serve", "cli", "api", "testing", "bench"},
}


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


def layer_of_module(name: str) -> str:
    """The layer of an imported name: ``durable_agents.serve.app`` is ``serve``."""
    parts = name.split(".")
    if parts[0] != "durable_agents":
        return parts[0]
    if len(parts) == 1:
        return "api"
    return parts[1] if parts[1] in LAYERS else "api" if parts[1] in _PUBLIC_NAMES else "shared"


def layer_of_file(path: Path) -> str:
    for layer, folder in LAYERS.items():
        if folder in path.parents:
            return layer
    if path == ROOT / "durable_agents" / "__init__.py":
        return "api"
    return "shared" if path.parent == ROOT / "durable_agents" else path.relative_to(ROOT).parts[0]


_PUBLIC_NAMES = set(__import__("durable_agents").__all__)


def modules() -> list[Path]:
    folders = [ROOT / package for package in PACKAGES] + [LAYERS["workflows"], LAYERS["activities"]]
    return sorted(p for folder in folders for p in folder.rglob("*.py")) + [
        ROOT / f"{name}.py" for name in sorted(ENTRY_POINTS)
    ]


def test_no_module_imports_an_entry_point() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(i for i in imports_of(path) if i.split(".")[0] in ENTRY_POINTS)
        for path in modules()
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_distribution_adds_one_import_name() -> None:
    """The repository's top-level packages are mapped under ``durable_agents`` (pyproject.toml)."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {name.split(".")[0] for name in setuptools["packages"]} == {"durable_agents"}
    assert setuptools["package-dir"] == {
        "durable_agents.workflows": "workflows",
        "durable_agents.activities": "activities",
        "durable_agents.agents": "agents",
        "durable_agents.config": "config",
    }
    folders = {
        ".".join(("durable_agents", *p.parent.relative_to(ROOT / "durable_agents").parts))
        for p in (ROOT / "durable_agents").rglob("__init__.py")
    } | {
        ".".join(("durable_agents", *p.parent.relative_to(ROOT).parts))
        for top in ("workflows", "activities")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert folders <= set(setuptools["packages"])


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_each_layer_imports_only_the_layers_beneath(layer: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            i
            for i in imports_of(path)
            if i.split(".")[0] == "durable_agents" and layer_of_module(i) not in MAY_IMPORT[layer]
        )
        for path in modules()
        if layer_of_file(path) == layer
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
