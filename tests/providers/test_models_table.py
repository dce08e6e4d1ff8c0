"""The models table (config/models.toml, activities/models.py): each model's context window and prices
from one file; the older ``AGENT_PRICES`` still replaces the prices; a bad file is one clear line."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from durable_agents.activities.agent_files import AgentFileError, load_agents
from durable_agents.activities.agent_resolution import AgentResolver
from durable_agents.activities.hooks import HookRegistry
from durable_agents.activities.mcp_activity import LazyMCPPool
from durable_agents.activities.models import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MODELS,
    ModelEntry,
    ModelTable,
    load_models,
    read_models,
)
from durable_agents.activities.tools import default_registry
from durable_agents.settings import Settings
from durable_agents.stores.errors import StoreIdentity
from durable_agents.workflows.activity_io import AgentRef
from durable_agents.workflows.config import AgentSpec, Price
from durable_agents.workflows.messages import ModelSettings
from tests.support.paths import ROOT


def test_the_projects_table_loads_each_model_with_its_values() -> None:
    assert DEFAULT_MODELS == ROOT / "config" / "models.toml"
    assert dict(load_models().entries) == {
        "gpt-4o-mini": ModelEntry(
            context_window=128_000, max_output_tokens=16_384, input=0.15, output=0.60, cached_input=0.075
        ),
        "gpt-4o": ModelEntry(
            context_window=128_000, max_output_tokens=16_384, input=2.50, output=10.00, cached_input=1.25
        ),
        "gpt-5-mini": ModelEntry(
            context_window=400_000, max_output_tokens=128_000, input=0.25, output=2.00, cached_input=0.025
        ),
        "claude-haiku-4-5": ModelEntry(
            context_window=200_000, max_output_tokens=64_000, input=1.00, output=5.00, cached_input=0.10
        ),
        "claude-sonnet-4-5": ModelEntry(
            context_window=200_000, max_output_tokens=64_000, input=3.00, output=15.00, cached_input=0.30
        ),
        "scripted-demo": ModelEntry(input=1.00, output=2.00),
    }
    table = load_models()
    assert table.price("claude-sonnet-4-5") == Price(input=3.00, output=15.00, cached_input=0.30)
    assert (table.max_output_tokens("gpt-4o-mini"), table.max_output_tokens("scripted-demo")) == (
        16_384,
        None,
    )
    assert table.context_window("anthropic", "claude-sonnet-4-5") == 200_000
    assert table.context_window("openai", "gpt-4o-mini") == 128_000


def test_a_model_the_table_lacks_has_no_price_and_the_default_window() -> None:
    table = load_models()
    assert table.price("my-local-model") is None
    assert table.context_window("openai", "my-local-model") == DEFAULT_CONTEXT_WINDOW == 32_000
    # The scripted model takes in anything, listed or not; it may have a price.
    assert table.context_window("scripted", "scripted-demo") is None
    assert table.context_window("scripted", "gpt-4o") is None
    assert table.price("scripted-demo") == Price(input=1.00, output=2.00)
    # A line with a price and no window: the default window; a window and no price: no price.
    partial = ModelTable({"p": ModelEntry(input=1, output=1), "w": ModelEntry(context_window=9)})
    assert (partial.context_window("openai", "p"), partial.price("w")) == (32_000, None)


async def test_the_resolved_agent_carries_the_tables_price_and_window() -> None:
    async def identity() -> str:
        return "test-stores"

    table = ModelTable(
        {"main": ModelEntry(context_window=50_000, input=1, output=2), "spare": ModelEntry(input=3, output=4)}
    )
    resolver = AgentResolver(
        {}, table, default_registry(), HookRegistry([]), LazyMCPPool(tuple), StoreIdentity(identity)
    )
    settings = ModelSettings(provider="openai", model="main", fallback=["anthropic:spare", "openai:other"])
    agent = await resolver.resolve_agent(AgentRef(spec=AgentSpec(name="a", model=settings)))
    assert (agent.price, agent.fallback_prices, agent.context_window) == (
        Price(input=1, output=2),
        {"anthropic:spare": Price(input=3, output=4)},
        50_000,
    )
    other = await resolver.resolve_agent(AgentRef(spec=AgentSpec(name="a", model=settings), model="x"))
    assert (other.price, other.context_window) == (None, DEFAULT_CONTEXT_WINDOW)


def _resolver(agents: dict[str, AgentSpec] | None = None) -> AgentResolver:
    async def identity() -> str:
        return "test-stores"

    return AgentResolver(
        agents or {},
        load_models(),
        default_registry(),
        HookRegistry([]),
        LazyMCPPool(tuple),
        StoreIdentity(identity),
    )


_OPENAI_MINE = '[model]\nprovider = "openai"\nmodel = "mine"\n'
_JUDGE = '[[approval.judges]]\nname = "j"\nkind = "model"\ntools = ["add"]\n'


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            '[model]\nprovider = "scripted"\nmodel = "x"\nmax_tokens = -100_000\n',
            "field 'model.max_tokens': -100000 is not a positive number of tokens",
        ),
        (
            '[model]\nprovider = "openai"\nmodel = "gpt-4o-mini"\nmax_tokens = 16_385\n',
            "field 'model.max_tokens': 16385 is more than gpt-4o-mini writes (16384 tokens at most,"
            " in the models table)",
        ),
        (
            _OPENAI_MINE + 'max_tokens = 20_000\nfallback = ["openai:gpt-4o"]\n',
            "field 'model.max_tokens': 20000 is more than gpt-4o writes (16384 tokens at most,"
            " in the models table)",
        ),
        (
            _OPENAI_MINE
            + _JUDGE
            + 'model = { provider = "anthropic", model = "claude-haiku-4-5", max_tokens = 0 }\n',
            "field 'approval.judges.0.model.max_tokens': 0 is not a positive number of tokens",
        ),
        (
            _OPENAI_MINE
            + _JUDGE
            + 'model = { provider = "anthropic", model = "claude-haiku-4-5", max_tokens = 64_001 }\n',
            "field 'approval.judges.0.model.max_tokens': 64001 is more than claude-haiku-4-5 writes"
            " (64000 tokens at most, in the models table)",
        ),
    ],
    ids=["negative", "past-its-model", "past-a-fallback", "judge-zero", "judge-past-its-model"],
)
async def test_max_tokens_not_positive_or_past_the_models_limit_is_refused_in_one_line(
    tmp_path: Path, text: str, error: str
) -> None:
    spec = AgentSpec.model_validate({**tomllib.loads(text), "name": "a"})
    with pytest.raises(ApplicationError) as refused:  # an inline agent: the conversation fails at once
        await _resolver().resolve_agent(AgentRef(spec=spec))
    assert (refused.value.type, refused.value.message) == ("ConfigError", f"inline agent 'a': {error}")

    path = tmp_path / "a.toml"
    path.write_text(text)
    with pytest.raises(AgentFileError) as bad:  # an agent file: the worker does not start
        load_agents(tmp_path, default_registry(), max_output=load_models().max_output_tokens)
    assert str(bad.value) == f"{path}: {error}"


async def test_max_tokens_within_the_limit_passes_and_is_checked_against_the_starts_model() -> None:
    fits = AgentSpec(name="a", model=ModelSettings(provider="openai", model="gpt-4o-mini", max_tokens=16_384))
    unknown = AgentSpec(name="b", model=ModelSettings(provider="openai", model="mine", max_tokens=1_000_000))
    resolver = _resolver({"b": unknown})
    assert (await resolver.resolve_agent(AgentRef(spec=fits))).spec == fits
    assert (await resolver.resolve_agent(AgentRef(name="b"))).spec == unknown
    with pytest.raises(ApplicationError) as refused:  # the start's model instead of the agent's
        await resolver.resolve_agent(AgentRef(name="b", model="gpt-4o"))
    assert refused.value.message == (
        "agent 'b': field 'model.max_tokens': 1000000 is more than gpt-4o writes"
        " (16384 tokens at most, in the models table)"
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            '["gpt-x"]\ninput = "cheap"\noutput = 1\n',
            "field 'gpt-x.input': Input should be a valid number, unable to parse string as a number",
        ),
        (
            '["gpt-x"]\ncontext_window = 0\n',
            "field 'gpt-x.context_window': Input should be greater than or equal to 1",
        ),
        (
            '["gpt-x"]\ninput = 1\n',
            "field 'gpt-x': Value error, give both prices, 'input' and 'output', or neither",
        ),
        ('["gpt-x"]\ncontext = 1000\n', "field 'gpt-x.context': Extra inputs are not permitted"),
        ("gpt-x = 3\n", "field 'gpt-x': Input should be a valid dictionary or instance of ModelEntry"),
        (
            '["gpt-x"]\ninput = "a"\noutput = 1\n["gpt-y"]\noutput = -1\ninput = 0\n',
            "field 'gpt-x.input': Input should be a valid number, unable to parse string as a number; "
            "field 'gpt-y.output': Input should be greater than or equal to 0",
        ),
        (
            '["gpt-x"\ninput = 1\n',
            "cannot read the models table: "
            "Expected ']' at the end of a table declaration (at line 1, column 9)",
        ),
    ],
)
def test_a_bad_file_is_one_line_naming_the_file_model_and_field(
    tmp_path: Path, text: str, error: str
) -> None:
    path = tmp_path / "models.toml"
    path.write_text(text)
    with pytest.raises(AgentFileError) as info:
        load_models(path)
    assert str(info.value) == f"{path}: {error}"
    with pytest.raises(AgentFileError) as info:
        load_models(prices_file=path)  # the same through AGENT_PRICES
    assert str(info.value) == f"{path}: {error}"


def test_a_named_file_that_is_missing_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    with pytest.raises(AgentFileError) as info:
        load_models(missing)
    assert (
        str(info.value)
        == f"{missing}: cannot read the models table: [Errno 2] No such file or directory: '{missing}'"
    )


def test_a_table_of_ones_own_replaces_the_projects(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text('["local"]\ncontext_window = 8_192\n["gpt-4o"]\ninput = 1\noutput = 1\n')
    table = load_models(path)
    assert dict(table.entries) == {
        "local": ModelEntry(context_window=8_192),
        "gpt-4o": ModelEntry(input=1, output=1),
    }
    assert (table.context_window("openai", "gpt-4o"), table.price("gpt-4o-mini")) == (32_000, None)


def test_an_old_price_file_in_agent_prices_replaces_only_the_prices(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('["gpt-4o"]\ninput = 2.00\noutput = 8.00\n["mine"]\ninput = 0.1\noutput = 0.2\n')
    table = load_models(prices_file=prices)
    assert table.price("gpt-4o") == Price(input=2.00, output=8.00)
    assert table.price("mine") == Price(input=0.1, output=0.2)
    assert table.price("gpt-4o-mini") is None  # not in the price file: no price, as before
    assert table.context_window("openai", "gpt-4o-mini") == 128_000  # the windows stay the table's
    assert table.context_window("openai", "mine") == DEFAULT_CONTEXT_WINDOW
    # A file in the models table's format is taken too, with its windows.
    prices.write_text('["gpt-4o"]\ncontext_window = 64_000\ninput = 2.00\noutput = 8.00\n')
    table = load_models(prices_file=prices)
    assert (table.context_window("openai", "gpt-4o"), table.context_window("openai", "gpt-4o-mini")) == (
        64_000,
        128_000,
    )


def test_the_settings_name_the_files() -> None:
    settings = Settings.from_env({"AGENT_MODELS": "/etc/models.toml", "AGENT_PRICES": "/etc/prices.toml"})
    assert (settings.models_file, settings.prices_file) == (
        Path("/etc/models.toml"),
        Path("/etc/prices.toml"),
    )
    assert (Settings.from_env({}).models_file, Settings.from_env({}).prices_file) == (None, None)


def test_read_models_reads_the_projects_file() -> None:
    assert read_models(DEFAULT_MODELS) == load_models()
