"""One follower per conversation in a server process, fanning out to all of that process's
clients (the SSE endpoint): a thousand clients of one conversation cost the conversation what one
does (``live.follow``: queries and a history long poll, no update, no history event).

The follower keeps the newest events in one list that every client reads by its own cursor: a
client costs a cursor, not a queue, and each encoding of an event is made once (``Entry.encoded``).
A client that does not take what is written to it (its write waits) while the events it still
needs leave that list, ``kept`` events behind, is dropped: its connection closes and it may
reconnect after the last event it got. A client that is only behind (it joined late, a burst came)
reads what it lacks with queries of its own.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from temporalio.client import Client

from durable_agents.live import follow, next_offset, read_batch
from workflows.events import Ended, Event

KEPT_EVENTS = 1000
"""Events a conversation's follower keeps for its clients (up to twice as many, between trims): a
client that takes nothing while it falls this far behind is dropped."""

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Entry:
    """One event of a conversation's stream, shared by every client that gets it."""

    offset: int
    event: Event
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
        """The offset of the next event this client needs."""
        self.away = False
        """True while the client holds an event it has not taken (its write may be waiting)."""
        self.dropped = asyncio.Event()

    async def events(self) -> AsyncIterator[Entry]:
        """The events from the offset on, until the conversation ends. Raises ``Dropped``, or what
        stopped the conversation's follower."""
        feed = await self._hub.feed(self._workflow_id, self.cursor)
        feed.subscribers.add(self)
        try:
            while True:
                if self.dropped.is_set():
                    raise Dropped
                oldest = feed.kept[0].offset if feed.kept else feed.start
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
                if self.cursor < feed.next:
                    at = bisect.bisect_left(feed.kept, self.cursor, key=lambda e: e.offset)
                    entry = feed.kept[at]
                    self.cursor = entry.offset + 1
                    self.away = True
                    yield entry
                    self.away = False
                    if isinstance(entry.event, Ended):
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
    from the end of the log, so no event a later client needs is passed over)."""

    def __init__(self, hub: Hub, workflow_id: str, start: int) -> None:
        self.hub, self.workflow_id = hub, workflow_id
        self.start = self.next = start
        self.kept: list[Entry] = []
        self.changed = asyncio.Event()
        self.subscribers: set[Subscription] = set()
        self.error: BaseException | None = None
        self.finished = False
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            async for offset, event in follow(self.hub.client, self.workflow_id, self.start):
                self.kept.append(Entry(offset, event))
                self.next = offset + 1
                if len(self.kept) >= 2 * self.hub.kept:
                    self._trim()
                self._wake()
        except Exception as e:
            log.warning("following %s failed: %s", self.workflow_id, e)
            self.error = e
        finally:
            self.finished = True
            self._wake()
            self.hub.idle(self)

    def _wake(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def _trim(self) -> None:
        """Forget the older half; drop the clients that still need it and take nothing."""
        del self.kept[: self.hub.kept]
        oldest = self.kept[0].offset
        for subscriber in self.subscribers:
            if subscriber.away and subscriber.cursor < oldest:
                subscriber.dropped.set()


class Hub:
    """The conversations this process follows, each once, for as long as a client reads it."""

    def __init__(self, client: Client, *, kept: int = KEPT_EVENTS) -> None:
        self.client = client
        self.kept = kept
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
