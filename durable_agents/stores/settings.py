"""Where the state beside Temporal lives: files on this host (the default), or one PostgreSQL
database (``AGENT_DATABASE_URL``) that every worker host and the starter share.

Temporal runs any step of a conversation on any worker. The conversation store, the
idempotency store, large payloads and the file tools' workspaces must then be one truth for
all the workers: local files are, only while every worker runs on the same machine.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.converter import StorageDriver

from durable_agents.stores.conversations import (
    ConversationStore,
    SQLiteConversationStore,
    SQLitePayloadDriver,
    masked,
)
from durable_agents.stores.errors import DEFAULT_OUTAGE_SECONDS
from durable_agents.stores.idempotency import IdempotencyStore, SQLiteIdempotencyStore
from durable_agents.stores.layouts import EarlierWorkspaces
from durable_agents.stores.ledger import Ledger, SQLiteLedger
from durable_agents.stores.workspaces import LocalWorkspaces, Workspaces

DATABASE_URL = "AGENT_DATABASE_URL"


@dataclass(frozen=True)
class StoreSettings:
    """Where each store is (``durable_agents.settings.Settings.stores`` builds it from the settings)."""

    database_url: str | None
    """A ``postgresql://`` URL: every store on that database. None: files on this host."""
    conversations: Path
    """SQLite file of the conversation store (``AGENT_STORE``)."""
    idempotency: Path
    """SQLite file of ``ctx.once`` results (``AGENT_IDEMPOTENCY_STORE``)."""
    payloads: Path
    """SQLite file of large payloads (``AGENT_PAYLOAD_STORE``, default under ``AGENT_DATA_DIR``)."""
    workspace: Path
    """Folder of the file tools' workspaces (``AGENT_WORKSPACE``)."""
    outage_seconds: float = DEFAULT_OUTAGE_SECONDS
    """How long a call waits for a store that does not answer (``AGENT_STORE_OUTAGE_SECONDS``)."""
    ledger_file: Path | None = None
    """SQLite file of the shared ledger (durable_agents/stores/ledger.py); default: ``ledger.db`` beside the
    conversation store."""
    earlier_workspaces: EarlierWorkspaces | None = None
    """Where earlier releases kept workspaces (``durable_agents/stores/layouts.py``): a conversation in flight
    across an upgrade finds its files there, moved into today's folder."""

    @property
    def shared(self) -> bool:
        """Can workers on several hosts share these stores?"""
        return self.database_url is not None

    def conversation_store(self) -> ConversationStore:
        return self._on_database("PostgresConversationStore") or SQLiteConversationStore(
            self.conversations, self.outage_seconds
        )

    def idempotency_store(self) -> IdempotencyStore:
        return self._on_database("PostgresIdempotencyStore") or SQLiteIdempotencyStore(
            self.idempotency, self.outage_seconds
        )

    def workspaces(self) -> Workspaces:
        return self._on_database("PostgresWorkspaces") or LocalWorkspaces(
            self.workspace, self.outage_seconds, self.earlier_workspaces
        )

    def ledger(self) -> Ledger:
        """The spend and rate ledger every worker shares (docs/tenants.md)."""
        return self._on_database("PostgresLedger") or SQLiteLedger(
            self.ledger_file or self.conversations.parent / "ledger.db", self.outage_seconds
        )

    def payload_driver(self) -> StorageDriver:
        return self._on_database("PostgresPayloadDriver") or SQLitePayloadDriver(
            self.payloads, self.outage_seconds
        )

    def _on_database(self, kind: str) -> Any:
        """``stores.postgres.<kind>`` on the database, or None for local files. Imported only
        then: a worker with local stores does not load asyncpg."""
        if not self.database_url:
            return None
        from durable_agents.stores import postgres

        return getattr(postgres, kind)(postgres.database(self.database_url, self.outage_seconds))

    async def open(self) -> None:
        """Reach the database and create its tables (worker start); ``RuntimeError`` in one line if not."""
        if self.database_url:
            from durable_agents.stores.postgres import database

            await database(self.database_url, self.outage_seconds).open()

    def describe(self) -> str:
        """What the worker prints at start: which store is where."""
        if self.database_url:
            return (
                f"Stores: conversations, idempotency, payloads and workspaces on PostgreSQL "
                f"{masked(self.database_url)} (shared by every host)."
            )
        return (
            f"Stores on this host: conversations {self.conversations}, idempotency {self.idempotency}, "
            f"payloads {self.payloads}, workspaces {self.workspace}."
        )

    def several_hosts_warning(self, temporal_address: str) -> str | None:
        """A warning when the stores are this host's files but Temporal is elsewhere: other workers
        of the task queue, on other hosts, would not see them."""
        if self.shared or is_this_host(temporal_address.rpartition(":")[0] or temporal_address):
            return None
        return (
            f"Warning: Temporal at {temporal_address} is not on this machine, but the stores are this "
            f"host's files: workers on several hosts need {DATABASE_URL} (a postgresql:// URL) to share "
            "conversations, payloads, idempotency results and workspaces."
        )


def is_this_host(host: str) -> bool:
    """Loopback addresses and this machine's own name (no DNS lookup)."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback or host == "0.0.0.0"
    except ValueError:
        return host.lower() in ("localhost", socket.gethostname().lower())
