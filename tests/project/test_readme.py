"""The README's promises point at tests that exist: a renamed or deleted test breaks the build."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import ROOT, TESTS


def _test_module(name: str) -> Path | None:
    """``tests/**/NAME.py``: test modules live in folders by the part they test, their names unique."""
    found = sorted(TESTS.rglob(f"{name}.py"))
    assert len(found) <= 1, f"{name}.py is in more than one folder: {found}"
    return found[0] if found else None


def test_every_test_the_readme_names_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    named = re.findall(r"`(test_\w+)::(test_\w+)`", readme)
    assert len(named) > 30
    missing = [
        f"{module}::{name}"
        for module, name in named
        if (path := _test_module(module)) is None or f"def {name}(" not in path.read_text()
    ]
    assert missing == []
