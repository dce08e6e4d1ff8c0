"""What an approver signs: one canonical text per decision. The workflow hands it to the worker's
``verify_decision`` (no key ever reaches workflow code or history); the starter, ``starter.py sign``
and any ops tool sign the same text (docs/trust.md shows it in a few lines of Python).

The text names the call as ``<workflow id>/<call id>``: a sub-agent's call decided at its parent
(``parent`` and ``call_2_0/call_1_0``) reads the same as at the sub-agent (``parent/call_2_0`` and
``call_1_0``), so one signature holds at both. It also names the conversation that asked (the first
run id of its chain, the record's ``conversation``, which ``pending_approvals`` shows): Temporal lets a
closed conversation's workflow id be used again, and a signature taken from the old one's history
fits nothing in the new one.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from durable_agents.workflows.decisions import parse
from durable_agents.workflows.records import Decision, arguments_digest

SIGNED_TAG = "durable-agents decision v2"


class SignedDecision(BaseModel):
    """Input of the ``verify_decision`` activity: what the signature must cover, and the signature."""

    call: str
    """``<workflow id>/<call id>``."""
    conversation: str
    """The first run id of the chain of the conversation that asked (the record's ``conversation``)."""
    arguments_digest: str
    """Of the arguments the call waits with (what a person was shown)."""
    kind: str
    """``approve``, ``reject``, ``edit``, ``approve+remember``, ``edit+remember`` or ``result``."""
    edited_digest: str | None = None
    """Of the edited arguments, for an edit; of ``{"result": ...}`` for a result."""
    by: str
    """The approver: the name of the key that must have signed."""
    reason: str = ""
    signature: str | None = None

    @classmethod
    def of(cls, workflow_id: str, conversation: str, digest: str, decision: Decision) -> SignedDecision:
        """The decision on call ``decision.call_id`` of conversation ``workflow_id`` (whose chain
        began with run ``conversation``), whose arguments have ``digest``."""
        edited = decision.arguments
        if decision.result is not None:  # a result recorded for a call whose outcome is unknown
            kind, edited = "result", {"result": decision.result}
        else:
            kind = "+".join(parse(decision).kinds)
        return cls(
            call=f"{workflow_id}/{decision.call_id}",
            conversation=conversation,
            arguments_digest=digest,
            kind=kind,
            edited_digest=None if edited is None else arguments_digest(edited),
            by=decision.by,
            reason=decision.reason,
            signature=decision.signature,
        )

    def text(self) -> bytes:
        """The bytes the approver's key signs: compact JSON of the tag and the fields, in order."""
        fields = [SIGNED_TAG, self.call, self.conversation, self.arguments_digest, self.kind]
        fields += [self.edited_digest, self.by, self.reason]
        return json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode()
