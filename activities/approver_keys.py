"""Approver keys (``AGENT_APPROVER_KEYS``): named shared secrets, and the ``verify_decision``
activity that checks a decision's signature with them on the worker, outside workflow code.

The key file is TOML, one ``name = "base64secret"`` line per approver (16 bytes of secret at
least; ``python codec.py new-key`` makes one of 32). The name is what a decision's ``by`` says.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import tomllib
from collections.abc import Mapping
from pathlib import Path

from durable_agents.workflows.activity_refs import VERIFY_DECISION
from durable_agents.workflows.records import Verdict
from durable_agents.workflows.signatures import SignedDecision

MIN_SECRET_BYTES = 16
ENV_VAR = "AGENT_APPROVER_KEYS"


def secret_of(text: str, where: str) -> bytes:
    """A base64 secret (standard or URL-safe alphabet); ``ValueError`` naming ``where``, never the secret."""
    try:
        secret = base64.b64decode(text.strip().replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{where} is not valid base64") from None
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(
            f"{where} is {len(secret)} bytes; an approver key has {MIN_SECRET_BYTES} at least"
            " (make one with: python codec.py new-key)"
        )
    return secret


def load_approver_keys(path: Path | None) -> dict[str, bytes]:
    """The key file's keys by approver name; none without a file. ``ValueError`` in one line naming
    the file and the entry."""
    if path is None:
        return {}
    try:
        entries = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{ENV_VAR}: cannot read {path}: {e}") from e
    keys = {}
    for name, text in entries.items():
        if not isinstance(text, str):
            raise ValueError(f'{ENV_VAR}: {path}: {name} must be a string ({name} = "base64secret")')
        keys[name] = secret_of(text, f"{ENV_VAR}: {path}: key {name!r}")
    if not keys:
        raise ValueError(f'{ENV_VAR}: {path} has no keys (one line per approver: name = "base64secret")')
    return keys


def sign(secret: bytes, decision: SignedDecision) -> str:
    """The decision's signature: HMAC-SHA256 of its canonical text, in hex."""
    return hmac.new(secret, decision.text(), hashlib.sha256).hexdigest()


class ApproverKeys:
    """The worker's approver keys; without any, every decision's ``by`` is self-declared."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        self._keys = dict(keys)

    @VERIFY_DECISION.defn
    async def verify_decision(self, decision: SignedDecision) -> Verdict:
        if not self._keys:
            return Verdict(approver="self-declared")
        if not decision.signature:
            return _refused(
                "unsigned: this conversation's workers take only decisions signed with the approver's key"
                " (AGENT_APPROVER_KEY with --by, or starter.py sign)"
            )
        key = self._keys.get(decision.by)
        if key is None:
            return _refused(f"no approver key is named {decision.by!r} ('by' names the key that signed)")
        if not hmac.compare_digest(sign(key, decision), decision.signature.strip().lower()):
            return _refused(
                f"the signature is not {decision.by}'s for this decision (its conversation, call,"
                " arguments digest, kind, edit and reason)"
            )
        return Verdict(approver="signed", key=decision.by)


def _refused(reason: str) -> Verdict:
    return Verdict(approver="refused", reason=reason)
