"""The price table: what a model's tokens cost, for the conversations' cost budgets."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError

from activities.agent_files import AgentFileError, field_errors
from workflows.config import Price

DEFAULT_PRICES = Path(__file__).resolve().parent.parent / "config" / "prices.toml"
"""The project's own table: the default where the caller names no other file."""


def load_prices(path: Path = DEFAULT_PRICES) -> dict[str, Price]:
    """The price table, by model name; a bad file stops the worker, naming the model and field."""
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise AgentFileError(f"{path}: cannot read price table: {e}") from e
    prices: dict[str, Price] = {}
    for model, entry in data.items():
        try:
            prices[model] = Price.model_validate(entry)
        except ValidationError as e:
            raise AgentFileError(f"{path}: {field_errors(e, prefix=f'{model}.')}") from e
    return prices
