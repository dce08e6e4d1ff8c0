"""Who is at the console: a login that checks ``AGENT_SERVE_TOKEN`` and names the person, a session
cookie (HttpOnly, SameSite=Strict), and a CSRF token per session that every action must carry.

Sessions live in the ``serve`` process's memory: a restart logs everyone out, which is the safe way
round. A person's approver key, when given at login, stays here too and signs their decisions; it is
never sent back to the browser.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request

from activities.approver_keys import secret_of
from durable_agents.identities import ANYONE, Caller

COOKIE = "agent_console"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
LIFETIME = 12 * 3600
"""Seconds a login lasts."""
MAX_SESSIONS = 1000
"""The oldest logins go first past this many (a flood of logins cannot fill the memory)."""


@dataclass
class Session:
    """One person logged in."""

    name: str
    """Who decides: the decisions' ``by``."""
    caller: Caller = ANYONE
    """Whose token logged in: the tenant whose conversations the console shows, whether it decides."""
    secret: bytes | None = field(default=None, repr=False)
    """Their approver key, when they gave one (or the process's ``AGENT_APPROVER_KEY``)."""
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    expires: float = field(default_factory=lambda: time.monotonic() + LIFETIME)


class Sessions:
    """The logins of one console, and the token they need (None: loopback only, no token)."""

    def __init__(
        self, holder: Callable[[list[str]], Caller | None], needs_token: bool, approver_key: str = ""
    ) -> None:
        self._holder, self.needs_token, self._approver_key = holder, needs_token, approver_key
        self._by_id: dict[str, Session] = {}

    def login(self, name: str, token: str, approver_key: str) -> tuple[str, Session]:
        """A new session's id and the session; ``ValueError`` (one line, naming no secret) when the
        token is wrong, the name empty or the key not a key. A token that names its holder's user
        logs in as that user, whatever name was typed."""
        caller = self._holder([token]) if self.needs_token else ANYONE
        if caller is None:
            raise ValueError(
                "wrong token: give a token this console takes (AGENT_SERVE_TOKEN, AGENT_SERVE_TOKENS)"
            )
        name = caller.user or name.strip()
        if not name or len(name) > 200:
            raise ValueError("give your name (at most 200 characters): decisions are taken in it")
        key = approver_key.strip() or self._approver_key
        secret = secret_of(key, "the approver key") if key else None
        session = Session(name=name, caller=caller, secret=secret)
        session_id = secrets.token_urlsafe(32)
        self._by_id[session_id] = session
        while len(self._by_id) > MAX_SESSIONS:
            del self._by_id[next(iter(self._by_id))]
        return session_id, session

    def of(self, request: Request) -> Session | None:
        """The request's live session, if its cookie names one."""
        session_id = request.cookies.get(COOKIE, "")
        session = self._by_id.get(session_id)
        if session is None:
            return None
        if session.expires < time.monotonic():
            del self._by_id[session_id]
            return None
        return session

    def logout(self, request: Request) -> None:
        self._by_id.pop(request.cookies.get(COOKIE, ""), None)


async def csrf_holds(request: Request, session: Session) -> bool:
    """The action carries the session's CSRF token, in the form or in the ``X-CSRF-Token`` header."""
    given = request.headers.get(CSRF_HEADER)
    if given is None:
        given = str((await request.form()).get(CSRF_FIELD, ""))
    return bool(given) and hmac.compare_digest(given.encode(), session.csrf.encode())
