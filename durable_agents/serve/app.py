"""A conversation's event stream as Server-Sent Events (``python starter.py serve``):

    curl -N http://127.0.0.1:8765/conversations/ID/events            # from the start
    curl -N http://127.0.0.1:8765/conversations/ID/events?from=12    # from offset 12

Each event is ``id: <offset>``, ``event: <type>``, ``data: <json>``; the events that are not in the
log (deltas from the fast channel, ``text_replaced``) come without ``id``. A browser's EventSource
reconnects with ``Last-Event-ID`` and gets the events after that one; the response ends after
the ``end`` event (or once a conversation that closed without one has been read).

However many clients read a conversation, the server follows it once (``fanout.Hub``); a client
that takes nothing while it falls ``KEPT_EVENTS`` behind is dropped (it reconnects after its last
event). The same server answers AG-UI and useChat runs (``runs.py``).

Every conversation id is routable, a sub-agent's (``parent/call_2_0``) too, as it is or URL-encoded
(``parent%2Fcall_2_0``). Who may read is ``Access``'s: a bearer token (``AGENT_SERVE_TOKEN``, in an
``Authorization`` header or, for a browser's ``EventSource``, which cannot set one, ``?token=``),
required before ``serve`` binds anything but a loopback address, and the browser origins allowed to
read from other pages (``AGENT_SERVE_ORIGINS``, CORS). Every route, the console's too, answers only
the host names it serves (``AGENT_SERVE_HOSTS``), state-changing requests only from no page or from
an allowed one, and bodies up to ``AGENT_SERVE_MAX_BODY`` (``_Guard``). The operator console
(``console/``) is mounted at ``/console/``: its pages need a login with the same token, its actions
a CSRF token as well. ``GET /conversations/ID/export`` answers the conversation as ``starter.py
export`` writes it (JSON Lines), to a token that reaches its tenant.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import parse_qs

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.client import Client
from temporalio.service import RPCError

from durable_agents.activities.delta_channel import DeltaListener
from durable_agents.client.conversations import NoWorkerError
from durable_agents.client.export import export_conversation
from durable_agents.serve import runs
from durable_agents.serve.console import routes as console_routes
from durable_agents.serve.fanout import Entry, Hub, Subscription
from durable_agents.serve.identities import ANYONE, OPERATOR, SCOPE_KEY, Caller, Tokens, caller_of, tenant_of
from durable_agents.serve.streaming import EventStreamResponse, QuietDrops
from durable_agents.settings import DEFAULT_SERVE_MAX_BODY, DEFAULT_TASK_QUEUE, DEFAULT_UI_URL
from durable_agents.workflows.config import Versioning
from durable_agents.workflows.events import Event, ModelCallFinished, StreamedText, TextDelta, TextReplaced

DEFAULT_PORT = 8765


# -- the app and its routes ----------------------------------------------------------------------


def app(client: Client, hub: Hub | None = None, options: ServeOptions | None = None) -> ASGIApp:
    """The streams' and the runs' routes behind ``options.access``, and the console at ``/console/``
    behind its own login (the same token)."""
    hub = hub or Hub(client)
    options = options or ServeOptions()
    access, console = options.access, options.console

    async def events(request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        try:
            start = _first_offset(request)
        except ValueError as e:
            return PlainTextResponse(f"{e}\n", status_code=400)
        if (missing := await _missing(client, workflow_id, caller_of(request.scope))) is not None:
            return missing
        subscription = hub.subscribe(workflow_id, start)
        return EventStreamResponse(_sse(subscription), subscription.dropped, failed=_sse_error)  # type: ignore[return-value]

    async def export(request: Request) -> Response:
        """The conversation as ``starter.py export`` writes it (``durable_agents/client/export.py``)."""
        workflow_id = request.path_params["workflow_id"]
        if (missing := await _missing(client, workflow_id, caller_of(request.scope))) is not None:
            return missing
        try:
            lines = await export_conversation(client, workflow_id)
        except NoWorkerError as e:
            return PlainTextResponse(f"{workflow_id}: {e}\n", status_code=503)
        body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        return PlainTextResponse(body, media_type="application/x-ndjson")

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await hub.close()

    # ``path``: a sub-agent's id holds a ``/``; an encoded one (``%2F``) arrives decoded, as the same id.
    routes = [
        Route("/conversations/{workflow_id:path}/events", events),
        Route("/conversations/{workflow_id:path}/export", export),
        *runs.routes(client, hub, options.task_queue, options.agents),
        Route("/", lambda _: RedirectResponse(f"{console_routes.BASE}/", status_code=307)),
        console_routes.mount(
            client,
            events,
            holder=access.holder,
            needs_token=access.needs_token,
            approver_key=console.approver_key,
            ui_url=console.ui_url,
            decide_timeout=console.decide_timeout,
        ),
    ]
    return _Guard(Starlette(routes=routes, lifespan=lifespan), access)


@dataclass(frozen=True)
class ConsoleOptions:
    """What the console takes from the settings besides the token."""

    approver_key: str = field(default="", repr=False)
    """``AGENT_APPROVER_KEY``: signs the decisions of a person who gave no key of their own at login."""
    ui_url: str = DEFAULT_UI_URL
    """``AGENT_UI_URL``: the Temporal Web UI the conversation pages link to."""
    decide_timeout: float = 10.0
    """``AGENT_DECIDE_TIMEOUT``: how long a decision on a sub-agent's call waits for it to take."""


async def _missing(client: Client, workflow_id: str, caller: Caller) -> Response | None:
    """A 404 (or 502) for a conversation that cannot be followed (another tenant's is as one that
    does not exist); None for one that can."""
    try:
        exists, tenant = await tenant_of(client, workflow_id)
    except RPCError as e:
        return PlainTextResponse(f"{workflow_id}: {e.message}\n", status_code=502)
    if not exists or not caller.reaches(tenant):
        return PlainTextResponse(f"{workflow_id}: workflow not found\n", status_code=404)
    return None


def _first_offset(request: Request) -> int:
    """Where to start: after ``Last-Event-ID`` (a reconnect), else at ``?from=``, else 0."""
    last = request.headers.get("last-event-id")
    given, what = (last, "Last-Event-ID") if last is not None else (request.query_params.get("from"), "from")
    if given is None:
        return 0
    if not given.isdigit():
        raise ValueError(f"{what} must be an event offset (0, 1, 2, ...), not {given!r}")
    return int(given) + 1 if last is not None else int(given)


# -- our own format ---------------------------------------------------------------------------------


def _frame(entry: Entry) -> bytes:
    if entry.offset is None:
        return _unnumbered(entry.event)
    data = entry.event.model_dump_json(exclude_none=True)
    return f"id: {entry.offset}\nevent: {entry.event.type}\ndata: {data}\n\n".encode()


def _unnumbered(event: Event) -> bytes:
    """An event that is not in the log: no ``id``, so a reconnect goes on after the last one that is."""
    return f"event: {event.type}\ndata: {event.model_dump_json(exclude_none=True)}\n\n".encode()


async def _sse(subscription: Subscription) -> AsyncIterator[bytes]:
    """The events as frames; before a retry's text that words a call otherwise than the text streamed
    so far, a ``text_replaced`` (by the dedupe rule, as this client got the text)."""
    rule = StreamedText()
    async for entry in subscription.events():
        event = entry.event
        update = rule.add(event) if isinstance(event, TextDelta | ModelCallFinished) else None
        if update is not None and update[0] == "restart" and isinstance(event, TextDelta):
            yield _unnumbered(TextReplaced(model_call=event.model_call, attempt=event.attempt))
        yield entry.encoded("sse", _frame)


def _sse_error(error: Exception) -> bytes:
    return f"event: error\ndata: {json.dumps({'message': str(error)})}\n\n".encode()


# -- serving -------------------------------------------------------------------------------------


async def serve(
    client: Client,
    host: str,
    port: int,
    options: ServeOptions | None = None,
    deltas: DeltaListener | None = None,
) -> None:
    """Serve ``app`` until interrupted; open streams are closed at once when it stops. ``deltas`` is
    this process's reader of the fast channel. ``ValueError`` (one line) for an address other than
    loopback without a token."""
    options = options or ServeOptions()
    check_exposure(host, options.access)
    logging.getLogger("uvicorn.error").addFilter(QuietDrops())
    bound = replace(options, access=options.access.bound_to(host))
    config = uvicorn.Config(
        app(client, Hub(client, deltas=deltas), bound),
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=1,
    )
    await uvicorn.Server(config).serve()


# ---------------------------------------------------------------------------------------------------
# Who may read and who may act: the token, the origins, the host names, the body's size (apart from
# the streams, for an easy merge)

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""The host names every ``serve`` answers to, with any port (``[::1]`` in a Host header)."""
WILDCARDS = ("0.0.0.0", "::", "")
"""``--host`` values that bind every interface: they name no host a client would ask for."""
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
SAME_SITE = ("same-origin", "none")
"""``Sec-Fetch-Site`` values of a request no other site's page made (``none``: the person typed it)."""


@dataclass(frozen=True)
class Access:
    """Who may call serve (the tokens), from which pages, and which requests any route answers at all."""

    token: str | None = None
    """``AGENT_SERVE_TOKEN``: one shared token, required as ``Authorization: Bearer <token>`` or
    ``?token=<token>``; its holder reaches everything (``OPERATOR``)."""
    origins: tuple[str, ...] = ()
    """``AGENT_SERVE_ORIGINS``: browser origins whose pages may read the streams and send runs and
    decisions (``*``: any)."""
    hosts: tuple[str, ...] = ()
    """``AGENT_SERVE_HOSTS``: host names answered besides loopback's (and the address bound): any other
    ``Host`` header is a page's DNS rebinding, refused."""
    max_body: int = DEFAULT_SERVE_MAX_BODY
    """``AGENT_SERVE_MAX_BODY``: bytes a request's body may have; larger is refused before it is read."""
    tokens: Tokens | None = None
    """``AGENT_SERVE_TOKENS``: tokens that say who holds them (durable_agents/serve/identities.py)."""

    @property
    def needs_token(self) -> bool:
        return self.token is not None or self.tokens is not None

    def allows_origin(self, origin: str) -> bool:
        return "*" in self.origins or origin.rstrip("/") in {o.rstrip("/") for o in self.origins}

    def caller(self, scope: Scope) -> Caller | None:
        """Who the request comes from: the holder of the token it carries, ``ANYONE`` when no token
        is needed; None when it carries none of them."""
        if not self.needs_token:
            return ANYONE
        header = _header(scope, b"authorization") or b""
        bearer = header[len(b"Bearer ") :].decode("latin-1") if header[:7].lower() == b"bearer " else ""
        given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [])
        return self.holder([bearer, *given])

    def holder(self, candidates: Iterable[str]) -> Caller | None:
        """The caller whose token is among ``candidates``, if any."""
        for candidate in (c for c in candidates if c):
            if self.tokens is not None and (caller := self.tokens.caller(candidate)) is not None:
                return caller
            if self.token is not None and hmac.compare_digest(candidate.encode(), self.token.encode()):
                return OPERATOR
        return None

    def bound_to(self, host: str) -> Access:
        """These settings, answering to the address ``serve --host`` binds as well (unless it binds
        every interface, whose name a client may give in any form)."""
        return self if host in WILDCARDS else replace(self, hosts=(*self.hosts, host))

    def serves_host(self, host_header: str) -> bool:
        """``Host`` names loopback, the address bound or one of ``hosts`` (any port)."""
        served = {_bare(h) for h in (*LOOPBACK_NAMES, *self.hosts)}
        return _host_name(host_header) in served

    def refuses_origin(self, scope: Scope, origin: str) -> str | None:
        """Why a state-changing request is refused, or None: it must come from no page of another
        site (no ``Origin``, ``Sec-Fetch-Site`` absent, ``same-origin`` or ``none``: curl, the
        starter, programs), from this server's own pages, or from an origin listed in ``origins``."""
        if not origin:
            site = (_header(scope, b"sec-fetch-site") or b"").decode("latin-1")
            if not site or site in SAME_SITE:
                return None
            return f"refused: a {site} request from a page whose origin is not given\n"
        own = f"{scope['scheme']}://{(_header(scope, b'host') or b'').decode('latin-1')}"
        if origin.lower() == own.lower() or self.allows_origin(origin):
            return None
        return f"refused: pages of {origin} may not send here (AGENT_SERVE_ORIGINS lists those that may)\n"


@dataclass(frozen=True)
class ServeOptions:
    """What ``app`` serves besides the client (``serve`` takes the same)."""

    task_queue: str = DEFAULT_TASK_QUEUE
    """Where the conversations a run starts (``runs.py``) start."""
    access: Access = field(default_factory=Access)
    """Who may call, from which pages (default: no token, no other origin)."""
    console: ConsoleOptions = field(default_factory=ConsoleOptions)
    """What the console takes from the settings besides the token."""
    agents: Callable[[], Mapping[str, Versioning]] | None = None
    """The names a run may start (``runs.routes``)."""


def _host_name(host_header: str) -> str:
    """The name in a ``Host`` header, lower case, without its port (and an IPv6 address's brackets)."""
    if host_header.startswith("["):
        name, closed, _ = host_header[1:].partition("]")
        return name.lower() if closed else host_header
    return host_header.partition(":")[0].lower()


def _bare(host: str) -> str:
    return host.strip("[]").lower()


def check_exposure(host: str, access: Access) -> None:
    """``ValueError`` (one line) for binding an address other than loopback without a token: the
    streams hold every conversation's decrypted events."""
    if not access.needs_token and not is_loopback(host):
        raise ValueError(
            f"serve --host {host}: an address other than loopback needs a token: set AGENT_SERVE_TOKEN"
            " (clients send it as 'Authorization: Bearer <token>', or '?token=' for EventSource)"
        )


def plain_http_warning(host: str) -> str | None:
    """The warning for serving beyond loopback: ``serve`` speaks plain http, so the token, the console's
    session cookie and every conversation would cross the network readable."""
    if is_loopback(host):
        return None
    return (
        f"warning: serve --host {host} answers over plain http: the token and the conversations cross"
        " the network unencrypted; put TLS in front of it (a reverse proxy)"
    )


def is_loopback(host: str) -> bool:
    """``127.0.0.1``, ``::1``, ``localhost``: nobody on another host can connect."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


CORS_ALLOW_HEADERS = "Authorization, Last-Event-ID, Cache-Control, Content-Type"


class _Guard:
    """What every request passes, the console's included: its ``Host`` is served (421), a
    state-changing request comes from no other site's page (403), its body is at most
    ``max_body`` (413, counted as it comes). Beyond the console (which has its own login and CSRF):
    the token (401), CORS preflights answered, and the CORS headers for an allowed origin added to
    every answer (a refusal too, so the page can read why)."""

    def __init__(self, inner: ASGIApp, access: Access) -> None:
        self._inner, self._access = inner, access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._inner(scope, receive, send)
            return
        console = console_routes.is_console(scope["path"]) or scope["path"] == "/"
        origin = (_header(scope, b"origin") or b"").decode("latin-1")
        cors = [] if console else self._cors(origin)
        caller = None if console else self._access.caller(scope)
        answer = self._answer(scope, origin, console, cors, caller)
        if answer is not None:
            await answer(scope, receive, _with(send, cors))
            return
        inner = scope if caller is None else {**scope, SCOPE_KEY: caller}
        await self._inner(inner, _limited(receive, self._access.max_body), _with(send, cors))

    def _answer(
        self, scope: Scope, origin: str, console: bool, cors: list[tuple[bytes, bytes]], caller: Caller | None
    ) -> Response | None:
        """The guard's own answer to the request (a refusal, a preflight's), or None to pass it on."""
        host = (_header(scope, b"host") or b"").decode("latin-1")
        if not self._access.serves_host(host):
            why = (
                f"this server does not answer to Host {host!r} (AGENT_SERVE_HOSTS lists the names it does)\n"
            )
            return PlainTextResponse(why, status_code=421)
        if not console and scope["method"] == "OPTIONS" and _header(scope, b"access-control-request-method"):
            preflight = {
                "access-control-allow-methods": "GET, POST, OPTIONS",
                "access-control-allow-headers": CORS_ALLOW_HEADERS,
                "access-control-max-age": "600",
            }
            return Response(status_code=204, headers=preflight if cors else None)  # not listed: refused
        if scope["method"] not in SAFE_METHODS and (why := self._access.refuses_origin(scope, origin)):
            return PlainTextResponse(why, status_code=403)
        if not console and caller is None:
            return PlainTextResponse(
                "missing or wrong token (Authorization: Bearer <token>, or ?token=<token>)\n",
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        length = (_header(scope, b"content-length") or b"").decode("latin-1")
        if length.isdigit() and int(length) > self._access.max_body:
            return PlainTextResponse(_too_large(self._access.max_body), status_code=413)
        return None

    def _cors(self, origin: str) -> list[tuple[bytes, bytes]]:
        if not origin or not self._access.allows_origin(origin):
            return []
        return [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]


def _too_large(limit: int) -> str:
    return f"the body is larger than {limit} bytes (AGENT_SERVE_MAX_BODY)\n"


def _limited(receive: Receive, limit: int) -> Receive:
    """``receive``, refusing a body (413) as soon as more than ``limit`` bytes came: a chunked body
    gives no length to check first."""
    seen = 0

    async def receiving() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise HTTPException(413, _too_large(limit))
        return message

    return receiving


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((value for key, value in scope["headers"] if key == name), None)


def _with(send: Send, headers: list[tuple[bytes, bytes]]) -> Send:
    """``send``, adding ``headers`` to the response's start."""
    if not headers:
        return send

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *headers]}
        await send(message)

    return sending
