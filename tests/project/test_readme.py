"""The README and the docs pages hold together: the README stays short and starts with the two
commands for a fresh machine and links every page (its first agent runs as written, installed:
test_install.py); every test, link, path, module, command, option and variable the pages name exists."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from durable_agents.cli.starter import parser as starter_parser
from durable_agents.workflows.config import AgentSpec
from tests.support.docs import DOCS, README, ROOT, block_after, code_blocks, commands, docs_page, pages, prose
from tests.support.paths import TESTS


def test_the_readme_is_at_most_300_lines() -> None:
    assert len(README.read_text().splitlines()) <= 300


def test_the_readme_starts_with_the_two_commands_for_a_fresh_machine_and_ci_runs_its_test_command() -> None:
    first_screen = README.read_text().splitlines()[:25]
    assert [line.split("#")[0].strip() for line in first_screen if line.startswith("make ")] == [
        "make demo",
        "make test",
    ]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert [line for line in ci if line.strip().endswith("make test")] == ["CI=true make test"]


def _test_modules() -> dict[str, Path]:
    """Test modules by name, wherever under tests/ they live."""
    return {path.stem: path for path in TESTS.rglob("test_*.py")}


def test_every_test_the_docs_name_exists() -> None:
    modules = _test_modules()
    every_test = {
        name
        for path in modules.values()
        for name in re.findall(r"^\s*(?:async )?def (test_\w+)\(", path.read_text(), re.M)
    }
    named = {page: re.findall(r"`(test_\w+)::(test_\w+)`", text) for page, text in pages().items()}
    assert sum(map(len, named.values())) > 30
    missing = [
        f"{page}: {module}::{name}"
        for page, tests in named.items()
        for module, name in tests
        if module not in modules or not re.search(rf"def {name}\(", modules[module].read_text())
    ]
    # A module named alone (`test_cancellation` (all)) or a test named alone after its module.
    alone = [
        f"{page}: {name}"
        for page, text in pages().items()
        for name in re.findall(r"`(test_\w+)`", text)
        if name not in modules and name not in every_test
    ]
    assert missing + alone == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)[)#]", README.read_text()))
    assert sorted(linked) == sorted(path.name for path in DOCS.glob("*.md"))


def _anchors(text: str) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, formatting and punctuation left out,
    spaces as hyphens, a repeated heading numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(text), re.M):
        words = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
        anchor = re.sub(r"[^\w\- ]", "", words).replace(" ", "-")
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        anchors.add(anchor if count == 0 else f"{anchor}-{count}")
    return anchors


def test_every_relative_link_resolves_to_a_file_and_its_anchor() -> None:
    broken = []
    for page, text in pages().items():
        here = (ROOT / page).parent
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`\n]*`", "", prose(text))):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            path = (here / file).resolve() if file else ROOT / page
            if not path.exists():
                broken.append(f"{page}: {target}")
            elif anchor and anchor not in _anchors(path.read_text()):
                broken.append(f"{page}: {target} (no such heading)")
    assert broken == []


def test_every_repository_path_the_docs_name_exists() -> None:
    """A path from the top (`durable_agents/stores/errors.py`) exists there; a file named alone
    (`app.py`), somewhere."""
    tops = "|".join(
        ["workflows", "stores", "activities", "durable_agents", "bench", "tests", "agents", "config", "docs"]
    )
    files = {path.name for path in ROOT.rglob("*.py") if ".git" not in path.parts}
    missing = [
        f"{page}: {path}"
        for page, text in pages().items()
        for path in re.findall(rf"`((?:{tops})/[\w./-]+|\w+\.py)`", text)
        if not ((ROOT / path).exists() if "/" in path else path in files)
    ]
    assert missing == []


def test_the_layout_names_every_module_and_only_modules_that_exist() -> None:
    modules = {
        str(path.relative_to(ROOT))
        for package in ("workflows", "activities", "durable_agents", "bench", "tests/support")
        for path in (ROOT / package).rglob("*.py")
    }
    named = set(re.findall(r"^- `([\w/]+\.py)`: ", docs_page("layout"), re.M))
    assert (sorted(modules - named), sorted(named - modules)) == ([], [])


def _options(help_text: str) -> set[str]:
    """The long options an argparse ``--help`` lists under "options"."""
    return set(re.findall(r"^ {2}(?:-\w, )?(--[a-z][a-z-]*)", help_text, re.M)) - {"--help"}


def _help(*argv: str) -> str:
    done = subprocess.run(
        [sys.executable, *argv, "--help"], capture_output=True, text=True, cwd=ROOT, check=True, timeout=60
    )
    return done.stdout


def test_the_cli_reference_names_every_command_option_and_variable() -> None:
    cli = docs_page("cli")
    sections = dict(re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", cli, re.M | re.S))
    missing = []
    starter = starter_parser()
    (commands_action,) = [a for a in starter._actions if a.choices and isinstance(a.choices, dict)]
    missing += [f"starter.py {o}" for o in _options(starter.format_help()) if o not in sections["starter.py"]]
    for name, sub in commands_action.choices.items():
        rows = [row for row in sections["starter.py"].splitlines() if re.match(rf"\| `{name}[ `]", row)]
        if not rows:
            missing.append(f"starter.py {name}")
        missing += [f"starter.py {name} {o}" for o in _options(sub.format_help()) if o not in "".join(rows)]
    for entry, argv in [
        ("worker.py", ["worker.py"]),
        ("codec.py", ["codec.py", "serve"]),
        ("demo.py", ["demo.py"]),
    ]:
        missing += [f"{entry} {o}" for o in _options(_help(*argv)) if o not in sections[entry]]
    for command in ("new-key", "serve"):
        if f"`codec.py {command}" not in sections["codec.py"]:
            missing.append(f"codec.py {command}")
    variables = set(re.findall(r"``(AGENT_[A-Z_]+)", (ROOT / "durable_agents" / "settings.py").read_text()))
    listed = set(re.findall(r"^\| `(AGENT_\w+)` \|", sections["Environment variables"], re.M))
    assert (missing, sorted(variables - listed), sorted(listed - variables)) == ([], [], [])


def test_the_temporal_cli_lines_name_signals_updates_and_queries_as_on_the_wire() -> None:
    old = []
    for page, text in pages().items():
        for command in (c for block in code_blocks(text, "sh") for c in commands(block)):
            if command.startswith("temporal workflow"):
                for name in re.findall(r"--(?:update-)?name (\S+)", command):
                    if not name.startswith(("durable_agents.", "__temporal_")):
                        old.append(f"{page}: {name}")
    assert old == []


def test_the_readmes_agent_streams_and_the_agent_file_reference_lists_stream() -> None:
    """Streaming is off unless an agent file asks (issue 44, finding 3): the README's agent asks, and
    the reference shows the key under ``[model]`` and says what it does."""
    readme_agent = tomllib.loads(block_after(README.read_text(), "## A first agent of your own", "toml"))
    assert AgentSpec.model_validate(readme_agent).model.stream is True
    reference = docs_page("agents-and-tools")
    assert tomllib.loads(block_after(reference, "## Agents", "toml"))["model"]["stream"] is True
    assert "**Streaming.** With `stream = true` under `[model]`" in reference
