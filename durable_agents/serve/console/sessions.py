"""Who is at the console: a login that checks ``AGENT_SERVE_TOKEN`` and names the person, a session
cookie (HttpOnly, SameSite=Strict), and a CSRF token per session that every action must carry.
Failed logins are counted per name and per address: past a few a minute, the next wait (429), so
the token cannot be guessed at the speed of the network.

Sessions live in the ``serve`` process's memory: a restart logs everyone out, which is the safe way
round. A person's approver key, when given at login, stays here too and signs their decisions; it is
never sent back to the browser.
"""

from __future__ import annotations

import hmac
import math
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request

from durable_agents.activities.approver_keys import secret_of
from durable_agents.serve.identities import ANYONE, Caller

COOKIE = "agent_console"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
LIFETIME = 12 * 3600
"""Seconds a login lasts."""
MAX_SESSIONS = 1000
"""The oldest logins go first past this many (a flood of logins cannot fill the memory)."""
FAILURES_PER_NAME = 5
FAILURES_PER_ADDRESS = 20
FAILURE_WINDOW = 60.0
"""Seconds a failed login counts against its name and its address."""
MAX_COUNTED = 10_000
"""Names and addresses whose failures are kept; the longest quiet go first past this many."""


class Throttled(Exception):
    """Too many failed logins for a name or from an address: the next waits ``retry_after`` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many failed logins: try again in {retry_after} s")
        self.retry_after = retry_after


class Throttle:
    """The failed logins of the last ``FAILURE_WINDOW`` seconds, per key (a name, an address)."""

    def __init__(self, limit: int, window: float = FAILURE_WINDOW) -> None:
        self._limit, self._window = limit, window
        self._failures: dict[str, deque[float]] = {}

    def wait(self, key: str) -> int:
        """Seconds before ``key`` may try again: 0 below the limit, else until its oldest failure
        no longer counts."""
        failures = self._recent(key)
        if len(failures) < self._limit:
            return 0
        return max(1, math.ceil(failures[0] + self._window - time.monotonic()))

    def failed(self, key: str) -> None:
        failures = self._recent(key)
        failures.append(time.monotonic())
        self._failures.pop(key, None)
        self._failures[key] = failures  # the most recent last
        while len(self._failures) > MAX_COUNTED:
            del self._failures[next(iter(self._failures))]

    def _recent(self, key: str) -> deque[float]:
        failures = self._failures.get(key, deque())
        while failures and failures[0] <= time.monotonic() - self._window:
            failures.popleft()
        return failures


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
        self._by_name, self._by_address = Throttle(FAILURES_PER_NAME), Throttle(FAILURES_PER_ADDRESS)

    def login(self, name: str, token: str, approver_key: str, address: str = "") -> tuple[str, Session]:
        """A new session's id and the session; ``ValueError`` (one line, naming no secret) when the
        token is wrong, the name empty or the key not a key; ``Throttled`` once the name or the
        ``address`` failed too often of late (whatever this attempt gives). A token that names its
        holder's user logs in as that user, whatever name was typed."""
        key = name.strip().casefold()
        wait = max(self._by_name.wait(key), self._by_address.wait(address))
        if wait:
            raise Throttled(wait)
        try:
            return self._login(name, token, approver_key)
        except ValueError:
            self._by_name.failed(key)
            self._by_address.failed(address)
            raise

    def _login(self, name: str, token: str, approver_key: str) -> tuple[str, Session]:
        caller = self._holder([token]) if self.needs_token else ANYONE
        if caller is None:
            raise ValueError(
                "wrong token: give the AGENT_SERVE_TOKEN this console was started with, or yours"
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
