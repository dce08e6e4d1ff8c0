"""One follower per conversation in a server process, fanning out to all of that process's
clients (the SSE endpoint): a thousand clients of one conversation cost the conversation what one
does (``live.follow``: queries and a history long poll, no update, no history event).

The follower keeps the newest events in one list that every client reads by its own cursor: a
client costs a cursor, not a queue, and each encoding of an event is made once (``Entry.encoded``).
A client that does not take what is written to it (its write waits) while the events it still
needs leave that list, ``kept`` events behind, is dropped: its connection closes and it may
reconnect after the last event it got. A client that is only behind (it joined late, a burst came)
reads what it lacks with queries of its own. Deltas from the fast channel go into the same list as
they arrive (without an offset: a client that reads past them, or joins after them, never gets
them; the log's ``model_call_finished`` has the whole text).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from temporalio.client import Client

from durable_agents.activities.delta_channel import DeltaListener
from durable_agents.client.live import follow, next_offset, read_batch
from durable_agents.workflows.events import Ended, Event, TextDelta

KEPT_EVENTS = 1000
TEXT_SO_FAR = 1000
"""Conversations whose running model call's text so far a server process keeps (the latest to stream)."""
"""Events a conversation's follower keeps for its clients (up to twice as many, between trims): a
client that takes nothing while it falls this far behind is dropped."""

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Entry:
    """One event of a conversation's stream, shared by every client that gets it."""

    offset: int | None
    """Its offset in the log; None for a delta from the fast channel (not in the log)."""
    event: Event
    seq: int = 0
    """Its place among everything the follower took (log events and deltas), in arrival order."""
    _encoded: dict[str, bytes] = field(default_factory=dict, repr=False)

    def encoded(self, name: str, encode: Callable[[Entry], bytes]) -> bytes:
        """``encode(self)``, made once for all clients under ``name``."""
        if name not in self._encoded:
            self._encoded[name] = encode(self)
        return self._encoded[name]


class Dropped(Exception):
    """The client fell too far behind while taking nothing; it may reconnect after its last event."""


class Subscription:
    """One client's view of a conversation: ``events()`` from an offset, and ``dropped``, set the
    moment the client is dropped (so a server can stop a write that does not finish)."""

    def __init__(self, hub: Hub, workflow_id: str, from_offset: int) -> None:
        self._hub, self._workflow_id = hub, workflow_id
        self.cursor = from_offset
        """The offset of the next log event this client needs."""
        self.position: int | None = None
        """The ``seq`` of the next entry of the follower's list this client takes (None: not in it)."""
        self.away = False
        """True while the client holds an event it has not taken (its write may be waiting)."""
        self.dropped = asyncio.Event()

    async def events(self) -> AsyncIterator[Entry]:
        """The running model call's text so far (``TextSoFar``), then the events from the offset
        on, with the deltas that arrive meanwhile, until the conversation ends. Raises ``Dropped``,
        or what stopped the conversation's follower."""
        feed = await self._hub.feed(self._workflow_id, self.cursor)
        feed.subscribers.add(self)
        # The running call's text so far first, and every delta after it: the feed has this
        # conversation's deltas from here on (it took them since it started, or starts now).
        so_far = [Entry(None, delta) for delta in self._hub.text_so_far.of(self._workflow_id)]
        if so_far and self.cursor >= feed.oldest_offset():
            self.position = feed.position_of(self.cursor)
        try:
            for entry in so_far:
                yield entry
            while True:
                if self.dropped.is_set():
                    raise Dropped
                if self.position is None or self.position < feed.first_seq:
                    oldest = feed.oldest_offset()
                    if self.cursor < oldest:  # before what the follower has: read it here
                        for entry in await self._read(oldest):
                            self.away = True
                            yield entry
                            self.away = False
                            if self.dropped.is_set():
                                raise Dropped
                            if isinstance(entry.event, Ended):
                                return
                        continue
                    self.position = feed.position_of(self.cursor)
                if self.position < feed.seq:
                    entry = feed.kept[self.position - feed.first_seq]
                    self.position += 1
                    if entry.offset is not None:
                        if entry.offset < self.cursor:
                            continue
                        self.cursor = entry.offset + 1
                    self.away = True
                    yield entry
                    self.away = False
                    if entry.offset is not None and isinstance(entry.event, Ended):
                        return
                    continue
                if feed.finished:
                    if feed.error is not None:
                        raise feed.error
                    return
                await feed.changed.wait()
        finally:
            feed.subscribers.discard(self)
            self._hub.idle(feed)

    async def _read(self, until: int) -> list[Entry]:
        """One query's worth (at most 1 MB held for this client) of what it lacks before ``until``."""
        client = self._hub.client
        handle = client.get_workflow_handle(self._workflow_id)
        read, after, more = await read_batch(client, handle, self.cursor, until=until)
        self.cursor = after if more else until
        return [Entry(at, event) for at, event in read]


class _Feed:
    """A conversation's one follower in this process, from where its first client asked (at most
    from the end of the log, so no event a later client needs is passed over), with the
    conversation's deltas from the fast channel as they arrive."""

    def __init__(self, hub: Hub, workflow_id: str, start: int) -> None:
        self.hub, self.workflow_id = hub, workflow_id
        self.start = self.next = start
        self.kept: list[Entry] = []
        self.seq = 0
        """The ``seq`` the next entry gets."""
        self.changed = asyncio.Event()
        self.subscribers: set[Subscription] = set()
        self.error: BaseException | None = None
        self.finished = False
        self._unsubscribe = (
            hub.deltas.subscribe(workflow_id, lambda event: self._add(Entry(None, event)))
            if hub.deltas is not None
            else None
        )
        self.task = asyncio.create_task(self._run())

    @property
    def first_seq(self) -> int:
        return self.kept[0].seq if self.kept else self.seq

    def oldest_offset(self) -> int:
        """The offset of the oldest log event kept (``next`` when none is)."""
        return next((e.offset for e in self.kept if e.offset is not None), self.next)

    def position_of(self, offset: int) -> int:
        """The ``seq`` of the kept log event at ``offset`` or after it (or of the next entry)."""
        return next((e.seq for e in self.kept if e.offset is not None and e.offset >= offset), self.seq)

    async def _run(self) -> None:
        try:
            async for offset, event in follow(self.hub.client, self.workflow_id, self.start):
                self.next = offset + 1
                self._add(Entry(offset, event))
        except Exception as e:
            log.warning("following %s failed: %s", self.workflow_id, e)
            self.error = e
        finally:
            if self._unsubscribe is not None:
                self._unsubscribe()
            self.finished = True
            self._wake()
            self.hub.idle(self)

    def _add(self, entry: Entry) -> None:
        if self.finished:
            return
        entry.seq, self.seq = self.seq, self.seq + 1
        self.kept.append(entry)
        if len(self.kept) >= 2 * self.hub.kept:
            self._trim()
        self._wake()

    def _wake(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def _trim(self) -> None:
        """Forget the older half; drop the clients that still need it and take nothing."""
        del self.kept[: self.hub.kept]
        first = self.kept[0].seq
        for subscriber in self.subscribers:
            if subscriber.away and subscriber.position is not None and subscriber.position < first:
                subscriber.dropped.set()


class TextSoFar:
    """The text so far of each conversation's newest streamed model call, from every delta this
    process heard on the fast channel, followed or not: what a client that comes in mid-answer
    (a reloaded page, a console page) gets first, the call's deltas after it as they come. Deltas
    are not in the log: without this the text before the client came would arrive only whole,
    with ``model_call_finished``. Kept for the ``conversations`` that streamed last."""

    def __init__(self, conversations: int = TEXT_SO_FAR) -> None:
        self._conversations = conversations
        self._calls: OrderedDict[str, TextDelta] = OrderedDict()
        """By conversation: its newest call's latest attempt, as one delta from the start (its
        ``start`` is -1 once a delta was missed: the text is then not known)."""

    def add(self, key: str, event: Event) -> None:
        if not isinstance(event, TextDelta):
            return
        known = self._calls.get(key)
        if known is None or (event.model_call, event.attempt) > (known.model_call, known.attempt):
            known = TextDelta(model_call=event.model_call, attempt=event.attempt, start=0, text="")
        elif (event.model_call, event.attempt) < (known.model_call, known.attempt):
            return
        if known.start == 0 and event.start <= len(known.text):
            known = known.model_copy(update={"text": known.text[: event.start] + event.text})
        else:
            known = known.model_copy(update={"start": -1})
        self._calls[key] = known
        self._calls.move_to_end(key)
        while len(self._calls) > self._conversations:
            self._calls.popitem(last=False)

    def of(self, key: str) -> list[TextDelta]:
        """The conversation's newest call's text so far as one delta (none when it is not known)."""
        known = self._calls.get(key)
        return [known] if known is not None and known.start == 0 and known.text else []


class Hub:
    """The conversations this process follows, each once, for as long as a client reads it."""

    def __init__(
        self, client: Client, *, kept: int = KEPT_EVENTS, deltas: DeltaListener | None = None
    ) -> None:
        """``deltas``: the fast channel's reader in this process (None: the log's batches only)."""
        self.client = client
        self.kept = kept
        self.deltas = deltas
        self.text_so_far = TextSoFar()
        if deltas is not None:
            deltas.subscribe_all(self.text_so_far.add)
        self._feeds: dict[str, _Feed] = {}

    @property
    def following(self) -> int:
        """How many conversations this process follows now."""
        return len(self._feeds)

    def subscribe(self, workflow_id: str, from_offset: int = 0) -> Subscription:
        return Subscription(self, workflow_id, from_offset)

    async def feed(self, workflow_id: str, from_offset: int) -> _Feed:
        """The conversation's follower: the running one, or a new one."""
        feed = self._feeds.get(workflow_id)
        if feed is None or feed.finished:
            start = min(from_offset, await next_offset(self.client, workflow_id)) if from_offset else 0
            feed = self._feeds.get(workflow_id)  # one may have started meanwhile
            if feed is None or feed.finished:
                feed = self._feeds[workflow_id] = _Feed(self, workflow_id, start)
        return feed

    def idle(self, feed: _Feed) -> None:
        """A follower that finished, or that no client reads any longer, stops."""
        if feed.finished or not feed.subscribers:
            if self._feeds.get(feed.workflow_id) is feed:
                del self._feeds[feed.workflow_id]
            if not feed.finished:
                feed.task.cancel()

    async def close(self) -> None:
        """Stop following every conversation."""
        feeds = list(self._feeds.values())
        self._feeds.clear()
        for feed in feeds:
            feed.task.cancel()
        for feed in feeds:
            with contextlib.suppress(asyncio.CancelledError):
                await feed.task
