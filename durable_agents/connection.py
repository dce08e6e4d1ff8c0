"""How every process reaches Temporal: the address and namespace (Temporal's env config), the
client with our data converter and our names on the wire, and the namespace's search attributes."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client, Interceptor, Plugin
from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from durable_agents.converter import data_converter
from durable_agents.settings import Settings
from durable_agents.workflows.api import (
    AGENT_COST,
    AGENT_FORK_OF,
    AGENT_NAME,
    AGENT_PARENT,
    AGENT_STATUS,
    AGENT_TENANT,
    AGENT_USER,
)

DEFAULT_ADDRESS = "localhost:7233"
_log = logging.getLogger(__name__)

AGENT_PROMPT = SearchAttributeKey.for_keyword_list("AgentPromptWords")
"""The words of the start of a conversation's first prompt (a KeywordList: a query matches whole
words), set by the client that starts it (``durable_agents.client.search``), never by the workflow:
a namespace without it loses only the search by prompt."""
SEARCH_ATTRIBUTES = (
    AGENT_STATUS,
    AGENT_NAME,
    AGENT_PARENT,
    AGENT_FORK_OF,
    AGENT_TENANT,
    AGENT_USER,
    AGENT_COST,
    AGENT_PROMPT,
)
"""Keywords, but AgentCost (a Double) and AgentPromptWords (a KeywordList)."""
OPTIONAL_SEARCH_ATTRIBUTES = (AGENT_PROMPT,)
"""Those a worker starts without when it may not register them: no workflow writes them."""
CLI_TYPES = {
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}
"""Each type of ours as ``temporal operator search-attribute create --type`` names it."""


def connect_config() -> dict:
    """Address, namespace, TLS and API key from Temporal's env config (TEMPORAL_* and profiles)."""
    config = dict(ClientConfig.load_client_connect_config())
    config.setdefault("target_host", DEFAULT_ADDRESS)
    return config


def address_is_explicit() -> bool:
    """Did the user name a server (env var or config file), rather than fall back on the default?"""
    return connect_config()["target_host"] != DEFAULT_ADDRESS or "TEMPORAL_ADDRESS" in os.environ


async def connect(
    settings: Settings | None = None,
    *,
    runtime: Runtime | None = None,
    interceptors: Sequence[Interceptor] = (),
    plugins: Sequence[Plugin] = (),
) -> Client:
    """A client of the server Temporal's env config names (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``,
    profiles, TLS, API key; ``localhost:7233`` when nothing names one), with our data converter for
    ``settings`` (default: the environment's) and ``plugins`` (an ``AgentPlugin`` makes its worker)."""
    return await Client.connect(
        **connect_config(),
        data_converter=data_converter(settings),
        runtime=runtime,
        interceptors=list(interceptors),
        plugins=list(plugins),
    )


async def ensure_search_attributes(client: Client) -> None:
    """Register AgentStatus, AgentName, AgentParent, AgentForkOf, AgentTenant, AgentUser, AgentCost and
    AgentPromptWords if the namespace lacks them.

    Without the first seven every status change would fail the workflow task: ``RuntimeError`` with
    the commands to run when this client may not register them. Without AgentPromptWords only the search
    by prompt is lost: a warning with the command.
    """
    namespace = client.namespace
    wanted = {key.name: IndexedValueType.ValueType(key.indexed_value_type) for key in SEARCH_ATTRIBUTES}
    types = {key.name: CLI_TYPES[key.indexed_value_type] for key in SEARCH_ATTRIBUTES}
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
        missing = {name: kind for name, kind in wanted.items() if name not in listed.custom_attributes}
    except RPCError as e:
        if e.status != RPCStatusCode.UNIMPLEMENTED:  # the time-skipping test server cannot list
            raise
        missing = wanted
    if not missing:
        return
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
        )
    except RPCError as e:
        if e.status == RPCStatusCode.ALREADY_EXISTS:
            return
        create = f"  temporal operator search-attribute create --namespace {namespace}"
        commands = "\n".join(f"{create} --type {types[name]} --name {name}" for name in missing)
        told = (
            f"the namespace {namespace!r} lacks the search attributes {', '.join(missing)} and this worker "
            f"may not add them ({e.message}). Ask an operator to run:\n{commands}"
        )
        if set(missing) <= {key.name for key in OPTIONAL_SEARCH_ATTRIBUTES}:
            _log.warning("%s\n(until then conversations start without them)", told)
            return
        raise RuntimeError(
            f"{told}\n(on Temporal Cloud: tcld namespace search-attributes add, or the Cloud UI)"
        ) from e


def reachable(address: str, timeout: float = 0.5) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "localhost", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False
