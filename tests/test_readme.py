"""The README's promises point at tests that exist: a renamed or deleted test breaks the build."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_test_the_readme_names_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    named = re.findall(r"`(test_\w+)::(test_\w+)`", readme)
    assert len(named) > 30
    missing = [
        f"{module}::{name}"
        for module, name in named
        if f"def {name}(" not in (ROOT / "tests" / f"{module}.py").read_text()
    ]
    assert missing == []
