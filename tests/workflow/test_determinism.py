"""Workflow code stays deterministic without the sandbox (``AgentWorkflow`` runs unsandboxed): no
module of ``workflows/`` imports or calls what could differ between a run and its replay (clocks,
randomness, the environment, files, threads, the network). Time, randomness and ids come from
``workflow.now()``, ``workflow.random()`` and ``workflow.uuid4()``; everything else from activities."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import ROOT

WORKFLOWS = ROOT / "workflows"

FORBIDDEN_MODULES = {
    "time", "random", "secrets", "uuid", "os", "sys", "socket", "ssl", "subprocess", "threading",
    "multiprocessing", "concurrent", "pathlib", "shutil", "tempfile", "glob", "io", "sqlite3",
    "urllib", "http", "httpx", "requests", "openai", "anthropic", "logging", "signal",
}  # fmt: skip
"""Modules workflow code must not import (``logging``: ``workflow.logger`` knows replay); of the
project's own, only ``durable_agents.workflows``."""


def _forbidden(name: str) -> bool:
    top = name.split(".")[0]
    return top in FORBIDDEN_MODULES or (
        top == "durable_agents" and not name.startswith("durable_agents.workflows")
    )


FORBIDDEN_CALLS = {
    "now", "utcnow", "today", "fromtimestamp", "open", "input", "print", "getenv", "urandom",
    "run_in_executor", "to_thread", "get_event_loop", "new_event_loop",
}  # fmt: skip
"""Calls that read the clock, the environment or files, or leave the workflow's event loop."""

ALLOWED = {("workflow", "now")}
"""``workflow.now()`` is the replay-safe clock."""


def _offences(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            names = []
        found += [f"{path.name}:{node.lineno} imports {n}" for n in names if _forbidden(n)]
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = (
                func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            )
            if name in FORBIDDEN_CALLS and (owner, name) not in ALLOWED:
                found.append(f"{path.name}:{node.lineno} calls {owner + '.' if owner else ''}{name}()")
    return found


@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.py")), ids=lambda p: p.name)
def test_workflow_code_reads_no_clock_randomness_environment_or_files(path: Path) -> None:
    assert _offences(path) == []


def test_the_check_finds_what_it_refuses(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import time\nfrom datetime import datetime\nfrom uuid import uuid4\n"
        "def f(workflow):\n    workflow.now()\n    datetime.now()\n    open('x')\n    time.time()\n"
    )
    assert _offences(bad) == [
        "bad.py:1 imports time",
        "bad.py:3 imports uuid",
        "bad.py:6 calls datetime.now()",
        "bad.py:7 calls open()",
    ]
