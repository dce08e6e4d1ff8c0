"""Conversations found by their prompt: AgentPrompt, a Text search attribute with the start of the
first user message, set by the client that starts a conversation (the workflow never writes it, so
no command changes), and the visibility condition that matches it.

A Text attribute matches whole words, whatever their case and accents (SQL visibility's full-text
match: the dev server's SQLite, PostgreSQL, MySQL; Elasticsearch's match query), no prefix and no
``LIKE``; ``AgentPrompt = 'a b'`` matches either word, so the search asks for each.

It is in clear in the visibility store: a client whose payloads are encoded
(``AGENT_ENCRYPTION_KEY``) sets it only when ``AGENT_SEARCH_ENCRYPTED_PROMPTS=1`` says so."""

from __future__ import annotations

import re
import weakref

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributePair
from temporalio.service import RPCError

from durable_agents.connection import AGENT_PROMPT
from durable_agents.settings import Settings

PROMPT_CHARS = 300
"""What AgentPrompt keeps of a prompt: well under Temporal's 2 KiB for a search attribute's value."""
UNREGISTERED = (
    "Search matches ids only: this namespace lacks the search attribute AgentPrompt"
    " (temporal operator search-attribute create --name AgentPrompt --type Text)"
)
"""The console's line when prompts cannot be searched."""

_registered: weakref.WeakKeyDictionary[Client, bool] = weakref.WeakKeyDictionary()


async def prompt_searchable(client: Client) -> bool:
    """Whether the client's namespace has AgentPrompt (a Text). Remembered once it has; asked again
    while it has not, so a registration counts without a restart. A server that cannot list its
    search attributes (the time-skipping one) or a caller that may not counts as without."""
    if _registered.get(client):
        return True
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError:
        return False
    found = listed.custom_attributes.get(AGENT_PROMPT.name) == IndexedValueType.INDEXED_VALUE_TYPE_TEXT
    if found:
        _registered[client] = True
    return found


async def prompt_attribute(client: Client, prompt: str) -> SearchAttributePair[str] | None:
    """AgentPrompt for a conversation whose first message is ``prompt``: its first ``PROMPT_CHARS``
    characters, spaces folded. None for an empty prompt, a namespace without AgentPrompt (a start
    with it would be refused), or a client whose payloads are encoded (encrypted) unless
    ``AGENT_SEARCH_ENCRYPTED_PROMPTS=1``: the attribute would put the prompt in clear."""
    text = " ".join(prompt.split())[:PROMPT_CHARS]
    if not text:
        return None
    if client.data_converter.payload_codec is not None and not Settings.from_env().search_encrypted_prompts:
        return None
    return SearchAttributePair(AGENT_PROMPT, text) if await prompt_searchable(client) else None


def prompt_condition(text: str) -> str:
    """The visibility condition of conversations whose AgentPrompt holds every word of ``text``, or
    "" for text without words. One condition per word: a value of several words matches any of them.
    Only the words go to the server: a quote would be a syntax error of SQLite's full-text match
    (which Temporal answers as unavailable, and clients retry)."""
    words = re.findall(r"\w+", text)
    return " AND ".join(f"AgentPrompt = '{word}'" for word in words)  # a word holds no quote to escape
