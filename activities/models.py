"""The models table: per model, its context window (for context compaction), its most output tokens
(the bound of an agent's ``max_tokens``) and its prices (for the cost budgets), from one TOML file
loaded at worker start: config/models.toml, or ``AGENT_MODELS``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field, TypeAdapter, model_validator

from durable_agents.activities.agent_files import read_toml
from durable_agents.workflows.config import Price

DEFAULT_MODELS = Path(__file__).resolve().parent.parent / "config" / "models.toml"
"""The project's own table: the default where the caller names no other file."""

DEFAULT_CONTEXT_WINDOW = 32_000
"""For a model the table gives no window: small enough for most local models; set an agent's
``model.context_window`` (or the table's) for yours."""


class ModelEntry(BaseModel):
    """One model's line in the table; each part may be left out."""

    model_config = {"extra": "forbid"}

    context_window: int | None = Field(default=None, ge=1)
    """Tokens the model takes in."""
    max_output_tokens: int | None = Field(default=None, ge=1)
    """Tokens the model writes at most in one answer: an agent's ``max_tokens`` may not ask for more."""
    input: float | None = Field(default=None, ge=0)
    """US dollars per million input tokens."""
    output: float | None = Field(default=None, ge=0)
    """US dollars per million output tokens."""
    cached_input: float | None = Field(default=None, ge=0)
    """US dollars per million input tokens read from the provider's prompt cache (default: ``input``)."""

    @model_validator(mode="after")
    def _both_prices_or_neither(self) -> ModelEntry:
        if (self.input is None) != (self.output is None):
            raise ValueError("give both prices, 'input' and 'output', or neither")
        if self.cached_input is not None and self.input is None:
            raise ValueError("'cached_input' needs the 'input' and 'output' prices too")
        return self

    @property
    def price(self) -> Price | None:
        if self.input is None or self.output is None:
            return None
        return Price(input=self.input, output=self.output, cached_input=self.cached_input)


_ENTRIES = TypeAdapter(dict[str, ModelEntry])


@dataclass(frozen=True)
class ModelTable:
    """By the model name agents use (their ``model``, or a conversation's model override)."""

    entries: Mapping[str, ModelEntry] = field(default_factory=dict)

    def price(self, model: str) -> Price | None:
        """None for a model the table does not price: a cost budget then has nothing to count."""
        entry = self.entries.get(model)
        return entry.price if entry else None

    def context_window(self, provider: str, model: str) -> int | None:
        """The window of ``model``, else ``DEFAULT_CONTEXT_WINDOW``; None for the offline scripted
        model, which takes in anything (its conversations compact only when the agent sets one)."""
        if provider == "scripted":
            return None
        entry = self.entries.get(model)
        return entry.context_window if entry and entry.context_window else DEFAULT_CONTEXT_WINDOW

    def max_output_tokens(self, model: str) -> int | None:
        """None for a model the table gives no limit: its ``max_tokens`` need only be positive."""
        entry = self.entries.get(model)
        return entry.max_output_tokens if entry else None

    def with_prices_of(self, other: ModelTable) -> ModelTable:
        """``other``'s prices instead of this table's (a model it does not price has none), and the
        context windows and output limits it gives instead of this table's: what ``AGENT_PRICES`` names."""
        entries: dict[str, ModelEntry] = {}
        for model in [*self.entries, *(m for m in other.entries if m not in self.entries)]:
            own, given = self.entries.get(model), other.entries.get(model)
            window = (given and given.context_window) or (own and own.context_window) or None
            most = (given and given.max_output_tokens) or (own and own.max_output_tokens) or None
            entries[model] = ModelEntry(
                context_window=window,
                max_output_tokens=most,
                input=given.input if given else None,
                output=given.output if given else None,
                cached_input=given.cached_input if given else None,
            )
        return ModelTable(entries)


def read_models(path: Path) -> ModelTable:
    """The table in ``path``. A file that cannot be read or has a bad entry raises ``AgentFileError``
    with one line naming the file, and the model and field."""
    return read_toml(path, "the models table", lambda data: ModelTable(_ENTRIES.validate_python(data)))


def load_models(models_file: Path | None = None, prices_file: Path | None = None) -> ModelTable:
    """The worker's table: ``models_file`` (``AGENT_MODELS``), else the project's config/models.toml
    (none if it is missing). ``prices_file`` (``AGENT_PRICES``, the setting of the days before the
    models table) is a file in the same format whose prices replace the table's: a price table of
    then (entries of ``input`` and ``output``) works as it did, context windows staying the table's."""
    if models_file is not None:
        table = read_models(models_file)
    else:
        table = read_models(DEFAULT_MODELS) if DEFAULT_MODELS.exists() else ModelTable()
    return table.with_prices_of(read_models(prices_file)) if prices_file is not None else table
