"""The README and the docs pages, for the tests that read them: where they are, their code blocks."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def docs_page(name: str) -> str:
    """The text of ``docs/<name>.md``."""
    return (DOCS / f"{name}.md").read_text()


def pages() -> dict[str, str]:
    """The README and every docs page, by their path in the repository."""
    return {str(path.relative_to(ROOT)): path.read_text() for path in [README, *sorted(DOCS.glob("*.md"))]}


def code_blocks(text: str, language: str) -> list[str]:
    """The bodies of the fenced blocks of ``language`` (``python``, ``sh``, ``toml``, ``js``)."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def block_after(text: str, line: str, language: str = "sh") -> str:
    """The first ``language`` block after the line ``line``."""
    return code_blocks(text[text.index(line) :], language)[0]


def commands(block: str) -> list[str]:
    """The commands of a shell block, one per command: continuation lines joined, spaces collapsed,
    comment lines left out."""
    joined = block.replace("\\\n", " ")
    return [
        " ".join(line.split()) for line in joined.splitlines() if line.strip() and not line.startswith("#")
    ]


def prose(text: str) -> str:
    """``text`` without its fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
