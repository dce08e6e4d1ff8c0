"""Every ``AGENT_*`` setting, read once from the environment by an entry point and passed down.

docs/cli.md's "Environment variables" table lists the same variables with their defaults. Provider credentials
(``OPENAI_*``, ``ANTHROPIC_*``), MCP servers' ``${NAME}`` values and Temporal's own ``TEMPORAL_*``
are read where they are used: they never travel in an object that may be logged.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args
from urllib.parse import urlsplit

from durable_agents.activities.agent_names import DEFAULT_AGENTS_DIR
from durable_agents.activities.delta_channel import default_folder
from durable_agents.activities.notify import DEFAULT_CONSOLE_URL
from durable_agents.stores.conversations import masked
from durable_agents.stores.errors import DEFAULT_OUTAGE_SECONDS
from durable_agents.stores.layouts import EarlierWorkspaces
from durable_agents.stores.settings import StoreSettings

DEFAULT_TASK_QUEUE = "agents"
DEFAULT_UI_URL = "http://localhost:8233"
DEFAULT_SERVE_MAX_BODY = 1 << 20
ROLES = ("all", "workflows", "models", "tools")
LogFormat = Literal["text", "json"]
Trace = Literal["console", "otlp"]


REFRESH_SECONDS = 0.5
"""How often a worker says it is alive where its lease needs that (PostgreSQL)."""
LEASE_DEAD_SECONDS = 3.0
"""The default of ``AGENT_LEASE_DEAD_SECONDS``: a PostgreSQL lease not refreshed for this long, by
the database's clock, is a dead worker's. The refreshes run on the worker's event loop, so a stall of
that loop is a missed refresh, and a live host taken for dead stops after its calls ran again
elsewhere. The longest gap between two refreshes measured on a busy host was 1.43 s
(``bench.lease_stall``: 200 conversations at once on two hosts, a 2-core VM at load average 15;
docs/benchmarks.md); twice that, rounded up. With a sweep every 0.5 s a dead host is noticed within
3.5 s."""


@dataclass(frozen=True)
class Settings:
    """The defaults are what an empty environment gives; ``from_env`` reads the variables."""

    data_dir: Path = Path("data")
    """``AGENT_DATA_DIR``: every local file and folder below, unless its own variable says otherwise."""
    conversation_store: Path | None = None
    """``AGENT_STORE``: SQLite file of the transcripts (default ``<data dir>/conversations.db``)."""
    idempotency_store: Path | None = None
    """``AGENT_IDEMPOTENCY_STORE``: SQLite file of ``ctx.once`` results (``<data dir>/idempotency.db``)."""
    payload_store: Path | None = None
    """``AGENT_PAYLOAD_STORE``: SQLite file of large payloads (``<data dir>/payloads.db``)."""
    workspace: Path | None = None
    """``AGENT_WORKSPACE``: folder of the file tools' workspaces (``<data dir>/workspace``)."""
    database_url: str | None = None
    """``AGENT_DATABASE_URL``: a ``postgresql://`` URL puts every store above on that database,
    shared by workers on several hosts."""
    delta_dir: Path | None = None
    """``AGENT_DELTA_DIR``: the folder where this host's readers (``serve``, ``watch``, ``chat``) take
    streamed deltas from the model activities, without a database (``from_env``'s default: a private
    folder under ``$XDG_RUNTIME_DIR`` or the temp folder). With ``database_url`` they go by NOTIFY."""
    lease_dead_seconds: float = LEASE_DEAD_SECONDS
    """``AGENT_LEASE_DEAD_SECONDS``: with ``database_url``, a worker whose lease was not refreshed
    for this long is taken for dead and its calls retried elsewhere (above the longest stall of a
    busy worker's event loop: docs/benchmarks.md)."""
    store_outage_seconds: float = DEFAULT_OUTAGE_SECONDS
    """``AGENT_STORE_OUTAGE_SECONDS``: how long a model or tool call waits for a store that does not
    answer before the conversation says ``waiting_for_storage`` (it goes on waiting, never fails)."""
    shutdown_grace_seconds: float = 5.0
    """``AGENT_SHUTDOWN_GRACE_SECONDS``: how long a stopping worker lets its running calls finish
    before it cancels them; ``worker.py`` has exited half a second after (a call that ignores its
    cancellation is left to its retry). Keep it under the supervisor's stop timeout."""
    encryption_key: str = field(default="", repr=False)
    """``AGENT_ENCRYPTION_KEY``: ``base64key`` or ``id1:key1,id2:key2`` encrypts every payload."""
    codec_token: str | None = field(default=None, repr=False)
    """``AGENT_CODEC_TOKEN``: the codec server requires ``Authorization: Bearer <token>``."""
    codec_origins: tuple[str, ...] = (DEFAULT_UI_URL,)
    """``AGENT_CODEC_ORIGINS``: browser origins allowed to call the codec server (comma-separated)."""
    serve_token: str | None = field(default=None, repr=False)
    """``AGENT_SERVE_TOKEN``: ``starter.py serve`` requires ``Authorization: Bearer <token>`` or
    ``?token=<token>``; without it, ``serve`` binds only a loopback address."""
    serve_origins: tuple[str, ...] = ()
    """``AGENT_SERVE_ORIGINS``: browser origins allowed to read ``serve``'s streams and to send it runs
    and decisions (comma-separated)."""
    serve_hosts: tuple[str, ...] = ()
    """``AGENT_SERVE_HOSTS``: host names ``serve`` answers to (the ``Host`` header) besides loopback's
    and the address it binds (comma-separated, without ports)."""
    serve_max_body: int = DEFAULT_SERVE_MAX_BODY
    """``AGENT_SERVE_MAX_BODY``: bytes a request's body may have at ``serve`` (more: 413)."""
    serve_tokens: Path | None = None
    """``AGENT_SERVE_TOKENS``: a TOML file of ``serve``'s tokens that say who holds them (each a
    SHA-256, a user, a tenant, whether it decides, the agents it runs: durable_agents/serve/identities.py)."""
    approver_keys: Path | None = None
    """``AGENT_APPROVER_KEYS``: the workers' TOML file of approver keys (``name = "base64secret"``);
    set, every decision must be signed by the key of the approver it names."""
    approver_key: str = field(default="", repr=False)
    """``AGENT_APPROVER_KEY``: the starter's base64 secret, signing its decisions as ``--by``."""
    task_queue: str = DEFAULT_TASK_QUEUE
    """``AGENT_TASK_QUEUE``: the task queue of worker, starter and demo."""
    agents_dir: Path = DEFAULT_AGENTS_DIR
    """``AGENT_AGENTS_DIR``: the folder of agent files. The worker loads them; the starter and
    ``serve`` read each agent's name and ``versioning`` from them (a run for an agent without a file
    is refused at serve's door; an ``auto_upgrade`` agent starts as its workflow type)."""
    ui_url: str = DEFAULT_UI_URL
    """``AGENT_UI_URL``: where people open the Web UI, for the links the starter prints."""
    notify_url: str | None = None
    """``AGENT_NOTIFY_URL``: the webhook told when a call waits, for agents without ``[notify] url``."""
    notify_secret: str = field(default="", repr=False)
    """``AGENT_NOTIFY_SECRET``: the key the notifications' bodies are signed with (HMAC-SHA256)."""
    console_url: str = DEFAULT_CONSOLE_URL
    """``AGENT_CONSOLE_URL``: where people open the console, for the links notifications carry."""
    models_file: Path | None = None
    """``AGENT_MODELS``: the models table, a TOML file of each model's context window and prices
    (default: ``config/models.toml``)."""
    budgets_file: Path | None = None
    """``AGENT_BUDGETS``: the budgets file (limits per tenant and user, provider limits, fairness
    weights; default config/budgets.toml), read again by the workers when it changes."""
    prices_file: Path | None = None
    """``AGENT_PRICES`` (older than ``AGENT_MODELS``, still read): a file in the same format whose prices
    replace the models table's, such as a price file of old; the context windows stay the table's."""
    allow_inline_mcp: bool = False
    """``AGENT_ALLOW_INLINE_MCP=1``: inline agents may name MCP servers no agent file names."""
    log_format: LogFormat = "text"
    """``AGENT_LOG_FORMAT``: the worker's log lines (``--log-format``)."""
    max_cached_workflows: int | None = None
    """``AGENT_MAX_CACHED_WORKFLOWS``: conversations a worker keeps in memory (``--max-cached-workflows``)."""
    trace: Trace | None = None
    """``AGENT_TRACE``: OpenTelemetry tracing of the worker (``--trace``); default ``otlp`` when
    OpenTelemetry's own ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set."""
    trace_content: bool = False
    """``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``: spans carry what the model and the
    tools were sent and answered (durable_agents/worker/observer.py); off, they carry none of it."""
    trace_encrypted_content: bool = False
    """``AGENT_TRACE_ENCRYPTED_CONTENT=1``: with ``trace_content``, a worker that encrypts payloads
    (``AGENT_ENCRYPTION_KEY``) puts contents in spans too, in clear; without it, none."""
    search_encrypted_prompts: bool = False
    """``AGENT_SEARCH_ENCRYPTED_PROMPTS=1``: a client that encrypts payloads (``AGENT_ENCRYPTION_KEY``)
    sets AgentPromptWords too, in clear in Temporal's visibility store; without it, a conversation it
    starts cannot be searched by prompt."""
    rate_limit: float | None = None
    """``AGENT_RATE_LIMIT``: activities per second for the whole task queue (``--rate-limit``)."""
    role: str = "all"
    """``AGENT_WORKER_ROLE``: the worker's share of the work (``--role``)."""
    retention_days: float | None = None
    """``AGENT_RETENTION_DAYS``: days the stores keep a closed conversation's data (``starter.py
    retention``); unset: as long as Temporal keeps its history (the namespace's retention)."""
    decide_timeout: float = 10.0
    """``AGENT_DECIDE_TIMEOUT``: seconds the starter's ``approve``/``reject`` (the ``decide`` update)
    wait for a sub-agent to take a decision made at its parent before answering why not (0 < s <= 600)."""

    # Worker Deployment Versioning (durable_agents/worker/versioning.py)
    deployment_name: str | None = None
    """``AGENT_DEPLOYMENT_NAME`` (else ``TEMPORAL_DEPLOYMENT_NAME``, as Temporal's Worker Controller
    sets it): the Worker Deployment the worker joins; given with ``build_id`` or not at all."""
    build_id: str | None = None
    """``AGENT_BUILD_ID`` (else ``TEMPORAL_WORKER_BUILD_ID``): the build the worker runs as. Without
    both the worker is unversioned."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """Raises ``ValueError`` (one line naming the variable) for a value it cannot use."""

        def path(value: str | None) -> Path | None:
            return Path(value) if value else None

        def number(name: str, value: str | None, kind: type) -> float | int | None:
            try:
                return kind(value) if value else None
            except ValueError:
                raise ValueError(f"{name} must be a number, not {value!r}") from None

        def choice(name: str, value: str | None, allowed: tuple[str, ...]) -> str | None:
            if value and value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
            return value or None

        url = environ.get("AGENT_DATABASE_URL", "").strip() or None
        if url is not None and urlsplit(url).scheme not in ("postgresql", "postgres"):
            raise ValueError(f"AGENT_DATABASE_URL must be a postgresql:// URL, not {masked(url)!r}")

        def address(name: str, default: str | None) -> str | None:
            value = environ.get(name, "").strip().rstrip("/") or default
            if value is not None and (
                urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).netloc
            ):
                raise ValueError(f"{name} must be an http:// or https:// address, not {value!r}")
            return value

        ui_url = address("AGENT_UI_URL", DEFAULT_UI_URL)
        origins = environ.get("AGENT_CODEC_ORIGINS", "")
        serve_origins = environ.get("AGENT_SERVE_ORIGINS", "")
        max_body = number("AGENT_SERVE_MAX_BODY", environ.get("AGENT_SERVE_MAX_BODY"), int)
        if max_body is not None and max_body <= 0:
            raise ValueError(f"AGENT_SERVE_MAX_BODY must be a number of bytes above 0, not {max_body}")
        decide_timeout = number("AGENT_DECIDE_TIMEOUT", environ.get("AGENT_DECIDE_TIMEOUT"), float)
        retention_days = number("AGENT_RETENTION_DAYS", environ.get("AGENT_RETENTION_DAYS"), float)
        dead = number("AGENT_LEASE_DEAD_SECONDS", environ.get("AGENT_LEASE_DEAD_SECONDS"), float)
        if dead is not None and not dead > 2 * REFRESH_SECONDS:
            raise ValueError(
                f"AGENT_LEASE_DEAD_SECONDS must be above {2 * REFRESH_SECONDS:g} seconds (two lease"
                f" refreshes), not {dead:g}"
            )
        if decide_timeout is not None and not 0 < decide_timeout <= 600:
            raise ValueError(f"AGENT_DECIDE_TIMEOUT must be in (0, 600] seconds, not {decide_timeout:g}")
        grace = number("AGENT_SHUTDOWN_GRACE_SECONDS", environ.get("AGENT_SHUTDOWN_GRACE_SECONDS"), float)
        if grace is not None and grace < 0:
            raise ValueError(f"AGENT_SHUTDOWN_GRACE_SECONDS must be 0 or more seconds, not {grace:g}")
        return cls(
            data_dir=Path(environ.get("AGENT_DATA_DIR") or "data"),
            conversation_store=path(environ.get("AGENT_STORE")),
            idempotency_store=path(environ.get("AGENT_IDEMPOTENCY_STORE")),
            payload_store=path(environ.get("AGENT_PAYLOAD_STORE")),
            workspace=path(environ.get("AGENT_WORKSPACE")),
            database_url=url,
            delta_dir=path(environ.get("AGENT_DELTA_DIR")) or default_folder(environ.get("XDG_RUNTIME_DIR")),
            lease_dead_seconds=LEASE_DEAD_SECONDS if dead is None else dead,
            store_outage_seconds=number(
                "AGENT_STORE_OUTAGE_SECONDS", environ.get("AGENT_STORE_OUTAGE_SECONDS"), float
            )
            or DEFAULT_OUTAGE_SECONDS,
            shutdown_grace_seconds=5.0 if grace is None else grace,
            encryption_key=environ.get("AGENT_ENCRYPTION_KEY", ""),
            codec_token=environ.get("AGENT_CODEC_TOKEN") or None,
            codec_origins=tuple(o for o in origins.split(",") if o.strip()) or (DEFAULT_UI_URL,),
            serve_token=environ.get("AGENT_SERVE_TOKEN") or None,
            serve_origins=tuple(o.strip() for o in serve_origins.split(",") if o.strip()),
            serve_hosts=_host_names(environ.get("AGENT_SERVE_HOSTS", "")),
            serve_max_body=int(max_body or DEFAULT_SERVE_MAX_BODY),
            serve_tokens=path(environ.get("AGENT_SERVE_TOKENS")),
            approver_keys=path(environ.get("AGENT_APPROVER_KEYS")),
            approver_key=environ.get("AGENT_APPROVER_KEY", "").strip(),
            task_queue=environ.get("AGENT_TASK_QUEUE") or DEFAULT_TASK_QUEUE,
            agents_dir=path(environ.get("AGENT_AGENTS_DIR")) or DEFAULT_AGENTS_DIR,
            ui_url=ui_url,  # type: ignore[arg-type]
            notify_url=address("AGENT_NOTIFY_URL", None),
            notify_secret=environ.get("AGENT_NOTIFY_SECRET", "").strip(),
            console_url=address("AGENT_CONSOLE_URL", DEFAULT_CONSOLE_URL),  # type: ignore[arg-type]
            models_file=path(environ.get("AGENT_MODELS")),
            prices_file=path(environ.get("AGENT_PRICES")),
            budgets_file=path(environ.get("AGENT_BUDGETS")),
            allow_inline_mcp=environ.get("AGENT_ALLOW_INLINE_MCP") == "1",
            log_format=choice("AGENT_LOG_FORMAT", environ.get("AGENT_LOG_FORMAT"), get_args(LogFormat))  # type: ignore[arg-type]
            or "text",
            max_cached_workflows=number(  # type: ignore[arg-type]
                "AGENT_MAX_CACHED_WORKFLOWS", environ.get("AGENT_MAX_CACHED_WORKFLOWS"), int
            ),
            trace=choice("AGENT_TRACE", environ.get("AGENT_TRACE"), get_args(Trace)) or _otlp(environ),  # type: ignore[arg-type]
            trace_content=environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").lower()
            == "true",
            trace_encrypted_content=environ.get("AGENT_TRACE_ENCRYPTED_CONTENT") == "1",
            search_encrypted_prompts=environ.get("AGENT_SEARCH_ENCRYPTED_PROMPTS") == "1",
            rate_limit=number("AGENT_RATE_LIMIT", environ.get("AGENT_RATE_LIMIT"), float),
            role=choice("AGENT_WORKER_ROLE", environ.get("AGENT_WORKER_ROLE"), ROLES) or "all",
            decide_timeout=10.0 if decide_timeout is None else decide_timeout,
            retention_days=retention_days,
            **_deployment(environ),
        )

    @property
    def capture_content(self) -> bool:
        """Whether spans carry contents: asked for, and asked twice on a worker that encrypts."""
        return self.trace_content and (not self.encryption_key or self.trace_encrypted_content)

    @property
    def stores(self) -> StoreSettings:
        """Where the state beside Temporal lives: files under ``data_dir``, or the database."""
        return StoreSettings(
            database_url=self.database_url,
            conversations=self.conversation_store or self.data_dir / "conversations.db",
            idempotency=self.idempotency_store or self.data_dir / "idempotency.db",
            payloads=self.payload_store or self.data_dir / "payloads.db",
            workspace=(self.workspace or self.data_dir / "workspace").resolve(),
            outage_seconds=self.store_outage_seconds,
            earlier_workspaces=EarlierWorkspaces.of(self.workspace, self.data_dir),
        )

    @property
    def temporal_db(self) -> Path:
        """The embedded dev server's SQLite file."""
        return self.data_dir / "temporal.db"


def _host_names(value: str) -> tuple[str, ...]:
    """``AGENT_SERVE_HOSTS``'s names; ``ValueError`` for a URL or a name with a port, which no
    ``Host`` header's name would ever equal."""
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    for name in names:
        if "/" in name or (":" in name and not _ipv6(name.strip("[]"))):
            raise ValueError(f"AGENT_SERVE_HOSTS lists host names without scheme or port, not {name!r}")
    return names


def _ipv6(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).version == 6
    except ValueError:
        return False


def _otlp(environ: Mapping[str, str]) -> Trace | None:
    """``otlp`` when OpenTelemetry's environment names a collector and does not turn traces off."""
    named = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    off = (
        environ.get("OTEL_SDK_DISABLED", "").lower() == "true"
        or environ.get("OTEL_TRACES_EXPORTER") == "none"
    )
    return "otlp" if named and not off else None


def _deployment(environ: Mapping[str, str]) -> dict[str, str | None]:
    """``deployment_name`` and ``build_id``: ours, else the variables Temporal's Worker Controller sets;
    both or neither, and a name without "." (Temporal writes a version as ``<name>.<build id>``)."""
    name = (environ.get("AGENT_DEPLOYMENT_NAME") or environ.get("TEMPORAL_DEPLOYMENT_NAME") or "").strip()
    build = (environ.get("AGENT_BUILD_ID") or environ.get("TEMPORAL_WORKER_BUILD_ID") or "").strip()
    if bool(name) != bool(build):
        given, missing = (
            ("AGENT_DEPLOYMENT_NAME", "AGENT_BUILD_ID")
            if name
            else ("AGENT_BUILD_ID", "AGENT_DEPLOYMENT_NAME")
        )
        raise ValueError(f"{given} is set but {missing} is not: a versioned worker needs both (or neither)")
    if "." in name:
        raise ValueError(f"AGENT_DEPLOYMENT_NAME must not contain '.', not {name!r}")
    return {"deployment_name": name or None, "build_id": build or None}
