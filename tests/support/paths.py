"""Where things are: the repository, the tests folder and its data. Tests and helpers name files
through these, wherever their own module lives under tests/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository: the working directory of the entry points the tests run (starter.py, worker.py)."""
TESTS = ROOT / "tests"
DATA = TESTS / "data"
"""Recorded provider replies and the pinned recorded defaults."""
