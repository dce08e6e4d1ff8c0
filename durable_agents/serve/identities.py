"""Who calls ``serve``: tokens that say who holds them.

``AGENT_SERVE_TOKENS`` names a TOML file of tokens, each kept as the SHA-256 of its value (the file
holds no secret a reader could use), with who holds it and what it may do::

    # serve-tokens.toml: make a token and its entry with `python starter.py new-token NAME`
    [tokens.acme-support]
    sha256 = "5e88489..."          # of the token its holder sends (Authorization: Bearer ...)
    user = "ana"                   # runs it starts belong to ana; its decisions are taken as ana
    tenant = "acme"                # it reaches acme's conversations only (absent: every tenant's)
    decide = true                  # it may decide waiting calls (absent: false)
    agents = ["support"]           # the agents it may run (absent: every agent)

One shared ``AGENT_SERVE_TOKEN`` (or none, on loopback) keeps working as before, for one team: its
holder is every tenant's operator. ``Caller`` is the answer either way, and every route of serve
asks it: which conversations it reaches, whether it may decide or run an agent, and the tenant and
user a run it starts belongs to.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_agents.workflows.api import AGENT_TENANT

ENV_VAR = "AGENT_SERVE_TOKENS"
_FIELDS = {"sha256", "user", "tenant", "decide", "agents"}


@dataclass(frozen=True)
class Caller:
    """Who a request comes from, and what they may do."""

    name: str
    """The token's name in the file; ``token`` for the shared token, ``anyone`` without one."""
    user: str | None = None
    """Runs it starts belong to this user, and its decisions are taken in this name."""
    tenant: str | None = None
    """The one tenant whose conversations it reaches; None: every tenant's (an operator)."""
    decide: bool = True
    """May it decide waiting calls?"""
    agents: frozenset[str] | None = None
    """The agents it may run; None: every one."""

    def may_run(self, agent: str) -> bool:
        return self.agents is None or agent in self.agents

    def reaches(self, tenant: str | None) -> bool:
        """Does it reach a conversation of ``tenant`` (None: of no tenant)?"""
        return self.tenant is None or tenant == self.tenant


OPERATOR = Caller("token")
"""The holder of the shared ``AGENT_SERVE_TOKEN``: everything, as before tokens said who holds them."""
ANYONE = Caller("anyone")
"""Without any token (loopback only): everything."""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


class Tokens:
    """The tokens of an ``AGENT_SERVE_TOKENS`` file."""

    def __init__(self, callers: dict[str, Caller]) -> None:
        self._by_hash = callers

    @classmethod
    def load(cls, path: Path) -> Tokens:
        """The file's tokens; ``ValueError`` in one line naming the file and the entry."""
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise ValueError(f"{ENV_VAR}: cannot read {path}: {e}") from e
        entries = document.get("tokens")
        if set(document) - {"tokens"} or not isinstance(entries, dict) or not entries:
            raise ValueError(f"{ENV_VAR}: {path}: give one [tokens.NAME] table per token (and nothing else)")
        callers: dict[str, Caller] = {}
        for name, entry in entries.items():
            caller, digest = _entry(name, entry, f"{ENV_VAR}: {path}: [tokens.{name}]")
            if digest in callers:
                raise ValueError(
                    f"{ENV_VAR}: {path}: [tokens.{name}] has the same sha256 as {callers[digest].name}"
                )
            callers[digest] = caller
        return cls(callers)

    def caller(self, token: str) -> Caller | None:
        """Who holds ``token``; None for a token of nobody's."""
        given = token_hash(token)
        found = None
        for digest, caller in self._by_hash.items():  # every entry compared: the time tells nothing
            if hmac.compare_digest(digest, given):
                found = caller
        return found


def _entry(name: str, entry: object, where: str) -> tuple[Caller, str]:
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be a table")
    if unknown := sorted(set(entry) - _FIELDS):
        raise ValueError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(sorted(_FIELDS))})")
    digest = entry.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(
            f"{where}: sha256 must be the 64 hex digits of the token's SHA-256 (starter.py new-token)"
        )
    texts = {key: entry.get(key) for key in ("user", "tenant")}
    if bad := [
        key for key, value in texts.items() if value is not None and (not isinstance(value, str) or not value)
    ]:
        raise ValueError(f"{where}: {bad[0]} must be a non-empty string")
    decide = entry.get("decide", False)
    if not isinstance(decide, bool):
        raise ValueError(f"{where}: decide must be true or false")
    agents = entry.get("agents")
    if agents is not None and (not isinstance(agents, list) or not all(isinstance(a, str) for a in agents)):
        raise ValueError(f"{where}: agents must be a list of agent names")
    caller = Caller(
        name=name,
        user=texts["user"],
        tenant=texts["tenant"],
        decide=decide,
        agents=None if agents is None else frozenset(agents),
    )
    return caller, digest


SCOPE_KEY = "durable_agents.caller"
"""Where serve's guard leaves the request's ``Caller`` in its ASGI scope."""


def caller_of(scope: Mapping[str, Any]) -> Caller:
    """The caller serve's guard admitted (``ANYONE`` where no guard ran: an app without one)."""
    return scope.get(SCOPE_KEY, ANYONE)


async def tenant_of(client: Client, workflow_id: str) -> tuple[bool, str | None]:
    """Does conversation ``workflow_id`` exist, and whose tenant's is it (None: no tenant's)?"""
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return False, None
        raise
    return True, described.typed_search_attributes.get(AGENT_TENANT)


async def reaches(client: Client, caller: Caller, workflow_id: str) -> bool:
    """Does ``caller`` reach conversation ``workflow_id``? Those of other tenants are, to it, as if
    they did not exist (a route answers 404 as for one that does not)."""
    if caller.tenant is None:
        return True
    exists, tenant = await tenant_of(client, workflow_id)
    return exists and caller.reaches(tenant)
