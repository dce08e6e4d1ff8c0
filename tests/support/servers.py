"""Temporal dev servers of a test's own, for what the session's server (tests/conftest.py) must not
change for everyone: when it suggests continue-as-new, say."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.common import SearchAttributeKey
from temporalio.testing import WorkflowEnvironment

from durable_agents.connection import SEARCH_ATTRIBUTES
from durable_agents.converter import data_converter
from durable_agents.dev_server import dev_server_flags, temporal_cli

HISTORY_LENGTH = "limit.historyCount.suggestContinueAsNew"
"""History events from which the server suggests continue-as-new (Temporal's default: 4096)."""
HISTORY_SIZE = "limit.historySize.suggestContinueAsNew"
"""History bytes from which the server suggests continue-as-new (Temporal's default: 4 MiB)."""


async def start_dev_server(
    *dynamic_config: tuple[str, int], search_attributes: Sequence[SearchAttributeKey] = SEARCH_ATTRIBUTES
) -> WorkflowEnvironment:
    """A dev server of its own, on loopback, with this project's search attributes (or those given),
    flags and data converter, and each (setting, value) of ``dynamic_config``; the caller shuts it
    down."""
    return await WorkflowEnvironment.start_local(
        data_converter=data_converter(),
        ip="127.0.0.1",
        ui=False,
        search_attributes=search_attributes,
        dev_server_existing_path=temporal_cli(),
        dev_server_extra_args=[
            *dev_server_flags(),
            *[
                arg
                for setting, value in dynamic_config
                for arg in ("--dynamic-config-value", f"{setting}={value}")
            ],
        ],
    )
