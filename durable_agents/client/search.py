"""Conversations found by their prompt: AgentPromptWords, a KeywordList search attribute with the
words of the start of the first user message, set by the client that starts a conversation (the
workflow never writes it, so no command changes), and the visibility condition that matches it.

Each word is kept lowercased and without accents, once; a query word matches an element whole
(``AgentPromptWords = 'refund'``), so the search asks for each word typed. A KeywordList rather than a
Text: a Text's full-text index cost the dev server's SQLite visibility 7 ms of CPU per conversation
(bench.peers, 0.81x against 0.89x the hand-written loop's throughput with a KeywordList, 0.90x with
neither; docs/benchmarks.md).

It is in clear in the visibility store: a client whose payloads are encoded
(``AGENT_ENCRYPTION_KEY``) sets it only when ``AGENT_SEARCH_ENCRYPTED_PROMPTS=1`` says so."""

from __future__ import annotations

import re
import time
import unicodedata
import weakref

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributePair
from temporalio.service import RPCError

from durable_agents.connection import AGENT_PROMPT
from durable_agents.settings import Settings

PROMPT_CHARS = 300
"""The part of a prompt whose words AgentPromptWords keeps: well under Temporal's 2 KiB for a value."""
UNREGISTERED = (
    "Search matches ids only: this namespace lacks the search attribute AgentPromptWords"
    " (temporal operator search-attribute create --name AgentPromptWords --type KeywordList)"
)
"""The console's line when prompts cannot be searched."""

ASK_AGAIN_SECONDS = 60.0
"""How long a namespace found without AgentPromptWords is taken to lack it before the server is asked
again: a start does not pay a second call each time, and a registration counts within a minute."""

_registered: weakref.WeakKeyDictionary[Client, bool] = weakref.WeakKeyDictionary()
_lacking_since: weakref.WeakKeyDictionary[Client, float] = weakref.WeakKeyDictionary()


async def prompt_searchable(client: Client) -> bool:
    """Whether the client's namespace has AgentPromptWords (a KeywordList). Remembered once it has;
    while it has not, asked again every ``ASK_AGAIN_SECONDS``, so a registration counts without a
    restart. A server that cannot list its search attributes (the time-skipping one) or a caller that
    may not counts as without."""
    if _registered.get(client):
        return True
    if time.monotonic() - _lacking_since.get(client, -ASK_AGAIN_SECONDS) < ASK_AGAIN_SECONDS:
        return False
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
        found = (
            listed.custom_attributes.get(AGENT_PROMPT.name)
            == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST
        )
    except RPCError:
        found = False
    if found:
        _registered[client] = True
    else:
        _lacking_since[client] = time.monotonic()
    return found


async def prompt_attribute(client: Client, prompt: str) -> SearchAttributePair[list[str]] | None:
    """AgentPromptWords for a conversation whose first message is ``prompt``: the words of its first
    ``PROMPT_CHARS`` characters (``words``). None for a prompt without words, a namespace without
    AgentPromptWords (a start with it would be refused), or a client whose payloads are encoded
    (encrypted) unless ``AGENT_SEARCH_ENCRYPTED_PROMPTS=1``: the attribute would put them in clear."""
    found = words(prompt[:PROMPT_CHARS])
    if not found:
        return None
    if client.data_converter.payload_codec is not None and not Settings.from_env().search_encrypted_prompts:
        return None
    return SearchAttributePair(AGENT_PROMPT, found) if await prompt_searchable(client) else None


def words(text: str) -> list[str]:
    """The words of ``text`` as AgentPromptWords keeps them and a search asks for them: lowercased,
    without accents, each once, in order."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return list(dict.fromkeys(re.findall(r"\w+", plain.lower())))


def prompt_condition(text: str) -> str:
    """The visibility condition of conversations whose AgentPromptWords holds every word of ``text``,
    or "" for text without words: one condition per word (a list matches a value it holds). Only the
    words go to the server, so nothing typed needs escaping."""
    return " AND ".join(f"AgentPromptWords = '{word}'" for word in words(text))
