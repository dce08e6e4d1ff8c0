"""The console's pages and actions, under ``/console`` of ``starter.py serve``.

    GET  /console/                      the inbox: every call waiting for a person
    GET  /console/conversations         conversations, newest first (?before= the next page, ?after= the
                                        one before; ?status= ?agent= ?tenant= ?user= filter them, ?search=
                                        an id's start or a prompt's words)
    GET  /console/c/ID                  one conversation, live (its event stream: /console/c/ID/events)
    POST /console/c/ID/decide           approve, reject, edit the arguments, remember
    POST /console/c/ID/answer           a client tool's result (``ask_user``: the answer)
    POST /console/c/ID/revoke|message|interrupt|end|cancel|fork

Every page needs a login (the person's name, and ``AGENT_SERVE_TOKEN`` when one is set); every POST
the session's CSRF token. Pages are Jinja2 templates (autoescaped: what a model or a tool wrote is
text), their actions htmx requests answered with the piece of page that changed.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_agents.client.conversations import ui_link
from durable_agents.client.search import UNREGISTERED, prompt_searchable
from durable_agents.serve.console import actions, reading
from durable_agents.serve.console.sessions import (
    COOKIE,
    CSRF_FIELD,
    LIFETIME,
    Session,
    Sessions,
    Throttled,
    csrf_holds,
)
from durable_agents.serve.identities import Caller, reaches

HERE = Path(__file__).parent
BASE = "/console"
PAGE_SIZE = 25
MAX_PAGE_SIZE = 200
FILTERS = ("status", "agent", "tenant", "user", "search")
"""The list's filters (``reading.ListFilter``), as the page's form and links name them."""
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

Handler = Callable[[Request], Awaitable[Response]]


def _templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=HERE / "templates")  # autoescapes .html
    templates.env.filters["url"] = lambda workflow_id: quote(workflow_id, safe="")
    templates.env.filters["pretty"] = lambda value: json.dumps(value, indent=2, ensure_ascii=False)
    templates.env.filters["dollars"] = reading.dollars
    templates.env.filters["when"] = lambda at: f"{at:%Y-%m-%d %H:%M:%S}Z" if at else ""
    templates.env.globals["BASE"] = BASE
    templates.env.globals["CSRF_FIELD"] = CSRF_FIELD
    return templates


def mount(
    client: Client,
    events: Handler,
    *,
    holder: Callable[[list[str]], Caller | None],
    needs_token: bool,
    approver_key: str = "",
    ui_url: str,
    decide_timeout: float = 10.0,
) -> Mount:
    """The console at ``/console``: ``events`` is serve's event stream handler (one follower per
    conversation in the process, shared with the SSE clients), behind the console's login here
    (``holder``: whose token a login gives, as serve's ``Access`` says)."""
    sessions = Sessions(holder, needs_token, approver_key)
    templates = _templates()

    def page(request: Request, name: str, session: Session | None, **context: Any) -> Response:
        context |= {"session": session, "needs_token": sessions.needs_token}
        return templates.TemplateResponse(request, name, context, headers=HEADERS)

    def fragment(request: Request, name: str, session: Session, **context: Any) -> Response:
        return page(request, name, session, **context)

    async def refused(request: Request, session: Session, message: str) -> Response:
        """A refusal, shown where the person acted: the form's outcome line (its ``outcome`` field),
        else the request's target; the form stays as the person left it."""
        response = page(request, "_outcome.html", session, ok=False, message=message)
        target = str((await request.form()).get("outcome", "")) or request.headers.get("hx-target", "")
        if target:
            response.headers["HX-Retarget"] = f"#{target}"
            response.headers["HX-Reswap"] = "innerHTML"
        return response

    def guarded(handler: Callable[[Request, Session], Awaitable[Response]], action: bool = False) -> Handler:
        async def checked(request: Request) -> Response:
            session = sessions.of(request)
            if session is None:
                if request.headers.get("hx-request"):
                    again = {"HX-Redirect": f"{BASE}/login"}
                    return PlainTextResponse("log in again\n", status_code=401, headers=again)
                return RedirectResponse(f"{BASE}/login", status_code=303, headers=HEADERS)
            if action and not await csrf_holds(request, session):
                refusal = "refused: the form's CSRF token is missing or wrong; load the page again\n"
                return PlainTextResponse(refusal, status_code=403)
            workflow_id = request.path_params.get("workflow_id")
            if workflow_id is not None and not await reaches(client, session.caller, workflow_id):
                return PlainTextResponse(f"{workflow_id}: workflow not found\n", status_code=404)
            return await handler(request, session)

        return checked

    async def login_form(request: Request) -> Response:
        return page(request, "login.html", None, error="")

    async def login(request: Request) -> Response:
        form = await request.form()
        try:
            session_id, _ = sessions.login(
                str(form.get("name", "")),
                str(form.get("token", "")),
                str(form.get("approver_key", "")),
                request.client.host if request.client else "",
            )
        except Throttled as e:
            response = page(request, "login.html", None, error=str(e))
            response.status_code = 429
            response.headers["Retry-After"] = str(e.retry_after)
            return response
        except ValueError as e:
            response = page(request, "login.html", None, error=str(e))
            response.status_code = 401
            return response
        response = RedirectResponse(f"{BASE}/", status_code=303, headers=HEADERS)
        response.set_cookie(
            COOKIE,
            session_id,
            max_age=LIFETIME,
            path=BASE,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def logout(request: Request, session: Session) -> Response:
        sessions.logout(request)
        response = RedirectResponse(f"{BASE}/login", status_code=303, headers=HEADERS)
        response.delete_cookie(COOKIE, path=BASE)
        return response

    async def inbox_page(request: Request, session: Session) -> Response:
        return page(request, "inbox.html", session, **await _inbox(request, session))

    async def inbox_items(request: Request, session: Session) -> Response:
        return fragment(request, "_inbox_items.html", session, **await _inbox(request, session))

    async def _inbox(request: Request, session: Session) -> dict[str, Any]:
        found = await reading.inbox(client, session.caller.tenant)
        agent, tool = request.query_params.get("agent", ""), request.query_params.get("tool", "")
        order = request.query_params.get("order", "newest")
        return {
            "inbox": found,
            "items": found.filtered(agent, tool, order),
            "agent": agent,
            "tool": tool,
            "order": order,
        }

    async def list_page(request: Request, session: Session) -> Response:
        given = request.query_params
        prompts = await prompt_searchable(client)
        try:
            before, after = _time(given, "before"), _time(given, "after")
            size = int(given.get("size") or PAGE_SIZE)
            if not 1 <= size <= MAX_PAGE_SIZE:
                raise ValueError(f"size must be 1 to {MAX_PAGE_SIZE}")
            filters = {name: given.get(name, "").strip() for name in FILTERS}
            shown = reading.ListFilter(**filters, prompts=prompts)
        except ValueError as e:
            return PlainTextResponse(f"{e}\n", status_code=400)
        tenant = session.caller.tenant
        rows = await reading.conversations(client, size + 1, before, tenant, after=after, shown=shown)
        more = len(rows) > size
        rows = rows[1:] if after is not None and more else rows[:size]
        kept = {name: getattr(shown, name) for name in FILTERS if getattr(shown, name)}
        if size != PAGE_SIZE:
            kept["size"] = str(size)
        older = rows and (more or after is not None)
        newer = rows and (before is not None or (after is not None and more))
        links = {
            "older": f"?{urlencode({**kept, 'before': rows[-1].started.isoformat()})}" if older else None,
            "newer": f"?{urlencode({**kept, 'after': rows[0].started.isoformat()})}" if newer else None,
        }
        context = {"rows": rows, "shown": shown, "statuses": reading.STATUSES, "links": links}
        context["notice"] = "" if prompts else UNREGISTERED
        return page(request, "conversations.html", session, **context)

    async def conversation_page(request: Request, session: Session) -> Response:
        return await _conversation(request, session, "conversation.html")

    async def transcript(request: Request, session: Session) -> Response:
        return await _conversation(request, session, "_conversation_body.html")

    async def _conversation(request: Request, session: Session, template: str) -> Response:
        workflow_id = request.path_params["workflow_id"]
        try:
            found = await reading.conversation(client, workflow_id)
        except RPCError as e:
            status = 404 if e.status == RPCStatusCode.NOT_FOUND else 502
            return PlainTextResponse(f"{workflow_id}: {e.message}\n", status_code=status)
        link = ui_link(workflow_id, client.namespace, ui_url)
        return page(request, template, session, c=found, ui_link=link)

    async def stream(request: Request, session: Session) -> Response:
        return await events(request)

    async def decide(request: Request, session: Session) -> Response:
        workflow_id = request.path_params["workflow_id"]
        form = await request.form()
        if not session.caller.decide:
            return await refused(request, session, f"the token {session.caller.name} may not decide")
        approve = form.get("action") == "approve"
        try:
            edited = actions.edited_arguments(str(form.get("arguments", ""))) if approve else None
            original = actions.edited_arguments(str(form.get("original", "")))
            record = await actions.decide(
                client,
                workflow_id,
                session,
                call_id=str(form.get("call_id", "")),
                digest=str(form.get("digest", "")),
                approve=approve,
                reason=str(form.get("reason", "")),
                arguments=None if edited == original else edited,
                remember=approve and form.get("remember") == "on",
                wait_seconds=decide_timeout,
            )
        except actions.Refused as e:
            return await refused(request, session, str(e))
        return fragment(request, "_decided.html", session, record=record, workflow_id=workflow_id)

    async def answer(request: Request, session: Session) -> Response:
        workflow_id = request.path_params["workflow_id"]
        form = await request.form()
        try:
            call = await actions.answer(
                client,
                workflow_id,
                str(form.get("call_id", "")),
                str(form.get("text", "")),
                as_json=form.get("json") == "1",
            )
        except actions.Refused as e:
            return await refused(request, session, str(e))
        return fragment(request, "_answered.html", session, call=call, workflow_id=workflow_id)

    async def revoke(request: Request, session: Session) -> Response:
        workflow_id = request.path_params["workflow_id"]
        tool = str((await request.form()).get("tool", ""))
        try:
            allowance = await actions.revoke(client, workflow_id, session, tool)
        except actions.Refused as e:
            return await refused(request, session, str(e))
        message = f"{allowance.tool} asks for approval again (revoked by {allowance.revoked_by})"
        return fragment(request, "_outcome.html", session, ok=True, message=message)

    async def message(request: Request, session: Session) -> Response:
        workflow_id = request.path_params["workflow_id"]
        text = str((await request.form()).get("text", ""))
        try:
            await actions.send_message(client, workflow_id, text)
        except actions.Refused as e:
            return await refused(request, session, str(e))
        sent = "Sent: the reply streams in below."
        return fragment(request, "_outcome.html", session, ok=True, message=sent)

    def closing(
        act: Callable[[Client, str], Awaitable[str | None]], done: str = ""
    ) -> Callable[[Request, Session], Awaitable[Response]]:
        """An action on a conversation; what it says it did, else ``done``."""

        async def handler(request: Request, session: Session) -> Response:
            try:
                said = await act(client, request.path_params["workflow_id"])
            except actions.Refused as e:
                return await refused(request, session, str(e))
            return fragment(request, "_outcome.html", session, ok=True, message=said or done)

        return handler

    async def fork(request: Request, session: Session) -> Response:
        workflow_id = request.path_params["workflow_id"]
        at = str((await request.form()).get("at", ""))
        try:
            new_id = await actions.fork(client, workflow_id, int(at) if at.isdigit() else 0)
        except actions.Refused as e:
            return await refused(request, session, str(e))
        where = f"{BASE}/c/{quote(new_id, safe='')}"
        if request.headers.get("hx-request"):
            return Response(status_code=204, headers={"HX-Redirect": where})
        return RedirectResponse(where, status_code=303)

    def on(path: str, handler: Handler, methods: list[str] | None = None) -> Route:
        return Route(path, handler, methods=methods or ["GET"])

    def act(path: str, handler: Callable[[Request, Session], Awaitable[Response]]) -> Route:
        return Route(path, guarded(handler, action=True), methods=["POST"])

    # The conversation routes end in a fixed word: ``{workflow_id:path}`` holds a sub-agent's ``/``.
    routes = [
        on("/", guarded(inbox_page)),
        on("/login", login_form),
        Route("/login", login, methods=["POST"]),
        act("/logout", logout),
        on("/inbox", guarded(inbox_items)),
        on("/conversations", guarded(list_page)),
        on("/c/{workflow_id:path}/events", guarded(stream)),
        on("/c/{workflow_id:path}/body", guarded(transcript)),
        act("/c/{workflow_id:path}/decide", decide),
        act("/c/{workflow_id:path}/answer", answer),
        act("/c/{workflow_id:path}/revoke", revoke),
        act("/c/{workflow_id:path}/message", message),
        act("/c/{workflow_id:path}/end", closing(actions.end, "The chat closes after its current turn.")),
        act(
            "/c/{workflow_id:path}/interrupt",
            closing(actions.interrupt),
        ),
        act("/c/{workflow_id:path}/cancel", closing(actions.cancel, "Cancelled: it ends with what it has.")),
        act("/c/{workflow_id:path}/fork", fork),
        on("/c/{workflow_id:path}", guarded(conversation_page)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Mount(BASE, routes=routes)


def _time(given: Any, name: str) -> datetime | None:
    """The page link's ``before`` or ``after``: a time, or None."""
    text = given.get(name)
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        raise ValueError(f"{name} must be a time, as the page's link gives it") from None


def is_console(path: str) -> bool:
    """A path the console answers (its own login guards it, not serve's bearer token)."""
    return path == BASE or path.startswith(f"{BASE}/")
