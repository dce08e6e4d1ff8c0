"""The model providers come from one place, ``ADAPTERS`` in workflows/providers.py: every name has an
adapter that answers to it and every adapter module a name; agent files, inline agents and fallback
entries take exactly these names; no other module keeps a list of its own or names one that is not."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from pydantic import ValidationError

from durable_agents.activities.agent_files import AgentFileError, load_agent_file
from durable_agents.activities.providers import PROVIDERS, provider_class
from durable_agents.activities.tools import default_registry
from durable_agents.workflows.config import AgentSpec
from durable_agents.workflows.messages import ModelSettings
from durable_agents.workflows.providers import ADAPTERS, PROVIDER_NAMES, Provider
from tests.support.paths import ROOT

ADAPTER_MODULES = ROOT / "activities" / "providers"
PRODUCT = ("workflows", "activities", "durable_agents", "bench")
"""The packages to search for lists of providers besides ``ADAPTERS`` (the tests may spell some out)."""

ONE_OF = ", ".join(f"'{name}'" for name in PROVIDER_NAMES[:-1]) + f" or '{PROVIDER_NAMES[-1]}'"
"""How pydantic lists the names an agent file may give."""


def test_the_names_are_the_adapters_keys_in_order() -> None:
    assert PROVIDER_NAMES == tuple(ADAPTERS) == ("openai", "anthropic", "openai_responses", "scripted")
    assert list(PROVIDERS) == list(PROVIDER_NAMES)


@pytest.mark.parametrize("name", PROVIDER_NAMES)
def test_every_name_has_an_adapter_that_answers_to_it(name: str) -> None:
    adapter = provider_class(name)
    assert adapter.__module__ == f"durable_agents.activities.providers.{ADAPTERS[name].partition(':')[0]}"
    assert adapter.name == name
    assert inspect.iscoroutinefunction(adapter.complete)
    assert inspect.iscoroutinefunction(adapter.aclose)


def test_every_adapter_module_has_a_name() -> None:
    modules = {path.stem for path in ADAPTER_MODULES.glob("*.py") if not path.stem.startswith("_")}
    assert {adapter.partition(":")[0] for adapter in ADAPTERS.values()} == modules


@pytest.mark.parametrize("name", PROVIDER_NAMES)
def test_an_agent_file_may_name_each_provider(tmp_path: Path, name: str) -> None:
    path = tmp_path / "a.toml"
    path.write_text(f'[model]\nprovider = "{name}"\nmodel = "m"\nfallback = ["{name}:n"]\n')
    spec = load_agent_file(path, default_registry())
    assert (spec.model.provider, spec.model.fallback) == (name, [f"{name}:n"])


def test_an_agent_file_naming_another_provider_is_told_the_names(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text('[model]\nprovider = "nope"\nmodel = "m"\n')
    with pytest.raises(AgentFileError) as info:
        load_agent_file(path, default_registry())
    assert str(info.value) == f"{path}: field 'model.provider': Input should be {ONE_OF}"


def test_inline_agents_and_fallback_entries_take_the_same_names() -> None:
    schema = AgentSpec.model_json_schema()["$defs"]["ModelSettings"]["properties"]["provider"]
    assert schema["enum"] == list(PROVIDER_NAMES)
    with pytest.raises(ValidationError, match="the provider one of " + ", ".join(PROVIDER_NAMES)):
        ModelSettings(provider="openai", model="m", fallback=["nope:m"])
    assert Provider.__args__ == PROVIDER_NAMES  # type: ignore[attr-defined]


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _offences(path: Path, root: Path = ROOT) -> list[str]:
    """Collections or ``Literal[...]`` of two provider names or more, and a ``provider`` compared with
    a name that is not one."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.List | ast.Tuple | ast.Set | ast.Dict):
            named = {s for s in _strings(node) if s in PROVIDER_NAMES}
            if len(named) > 1:
                found.append(f"{path.relative_to(root)}:{node.lineno} lists {', '.join(sorted(named))}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            about_provider = any(
                (isinstance(s, ast.Name) and s.id.endswith("provider"))
                or (isinstance(s, ast.Attribute) and s.attr.endswith("provider"))
                for s in sides
            )
            if about_provider:
                found += [
                    f"{path.relative_to(root)}:{node.lineno} names {value!r}"
                    for side in sides
                    for value in _strings(side)
                    if value not in PROVIDER_NAMES
                ]
    return found


def test_no_other_module_lists_providers_or_names_an_unknown_one() -> None:
    """The settings, the command lines, the fallback code and the activities take the names from
    ``ADAPTERS``; a module that needs one provider (the scripted model's window) names a real one."""
    paths = [p for package in PRODUCT for p in sorted((ROOT / package).rglob("*.py"))]
    paths += sorted(ROOT.glob("*.py"))
    assert ROOT / "workflows" / "providers.py" in paths
    offences = [o for p in paths if p != ROOT / "workflows" / "providers.py" for o in _offences(p)]
    assert offences == []


def test_the_check_finds_what_it_refuses(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        'KNOWN = ("openai", "scripted")\nif provider == "scripted" or s.provider != "opena":\n    pass\n'
    )
    assert _offences(bad, tmp_path) == ["bad.py:1 lists openai, scripted", "bad.py:2 names 'opena'"]
