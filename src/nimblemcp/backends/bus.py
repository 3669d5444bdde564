"""The notification bus behind `subscriptions/listen`: publish/subscribe of change events.

Concurrency contract: `publish` is non-blocking and may be called from any thread
(a sync tool in a worker thread, a file watcher); each subscription delivers on the
event loop that created it. Slow listeners never block publishers: every
subscription has a bounded queue, and one that overflows is ended with
`SlowListener` so its stream can be closed with a reason (memory stays bounded).
Cleanup contract: leaving the `async with` (or `close()`) unregisters at once;
`close_all()` ends every subscription gracefully (iteration just stops).
The in-process bus is the default; a Redis bus implements the same Protocol.
A bus that sends events elsewhere may also offer `async flush(timeout) -> bool`
(`FlushingBus`, not in `__all__`: the frozen public API is unchanged): the server
awaits it when its lifespan ends, so what was published before the process exits has
left the process. A bus may offer `publish_local(event)` (`LocalBus`): deliver to this
process's subscriptions only, not to other instances (the server tells its own listens
to move elsewhere at a rolling restart that way).

Fan-out: a subscription may say which events it wants (`Match`); the subscriptions of
one event loop are indexed by it (kind, resource URI and the URIs above it, task id),
so an event touches only the subscriptions it matches. An event published from another
thread (a worker, the Redis bus thread) is handed to each event loop once, in one
`call_soon_threadsafe` per loop for the whole batch, and fanned out there; the index
is only ever read or changed on its own loop's thread. Each subscription still gets
its events in publish order, each once.

This module's annotations are evaluated, not postponed: names defined further down are
quoted.
"""

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from types import TracebackType
from typing import Any, NamedTuple, Protocol, runtime_checkable

from nimblemcp.errors import SlowListener

__all__ = [
    "GAP",
    "Event",
    "InProcessBus",
    "Match",
    "NotificationBus",
    "SlowListener",
    "Subscription",
]


class Event(NamedTuple):
    """A change: kind is "tools", "prompts", "resources" (list changed) or "updated"."""

    kind: str
    uri: str | None = None


# The kind of event a bus sends to its own subscriptions that name it (`Match.kinds`;
# not to those without a `Match`) when events from other instances may have been lost (the Redis bus lost its
# connection, or has it again): a listen then ends so that its client re-listens and
# knows it may have missed something.
GAP = "gap"


class Match(NamedTuple):
    """Which events a subscription wants (no `Match` at all: every event).

    `kinds`: every event of these kinds ("tools", "prompts", "resources", ...);
    `uris`: "updated" events for one of these URIs or a resource beneath it (the
    event's URI equals it, or starts with it plus "/": SUB-11); `tasks`: "task"
    events for one of these task ids; `keys`: events equal to one of these
    `(kind, uri)` pairs (a listen's hand-over marker)."""

    kinds: Collection[str] = ()
    uris: Collection[str] = ()
    tasks: Collection[str] = ()
    keys: Collection[tuple[str, str]] = ()


class Subscription(Protocol):
    """One listener's events from a bus: `async with bus.subscribe() as sub: async for
    event in sub: ...`. A listener that falls `max_queue` events behind is ended."""

    def __aiter__(self) -> "Subscription": ...
    async def __anext__(self) -> Event: ...
    async def __aenter__(self) -> "Subscription": ...
    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
    def close(self) -> None: ...


class NotificationBus(Protocol):
    """Publish an event once; every subscription of every instance sharing the bus hears
    it (in-process by default, Redis pub/sub to scale out). Delivery is at most once."""

    def publish(self, event: Event) -> None: ...
    def subscribe(self, max_queue: int = 256, *, match: Match | None = None) -> Subscription: ...
    def close_all(self) -> None: ...


@runtime_checkable
class FlushingBus(Protocol):
    """A bus with something to send before the process exits (the Redis bus)."""

    async def flush(self, timeout: float = ...) -> bool:
        """Wait until what was published before the call has left the process (True),
        at most `timeout` seconds (False)."""
        ...


@runtime_checkable
class LocalBus(Protocol):
    """A bus that can deliver an event to this process's subscriptions alone."""

    def publish_local(self, event: Event) -> None:
        """Deliver `event` to the subscriptions of this process only (never to other
        instances); non-blocking, from any thread, as `publish`."""
        ...


_CLOSED = Event("__closed__")
_OVERFLOW = Event("__overflow__")

_Subs = dict["_LocalSubscription", None]  # an ordered set


class _LocalSubscription:
    def __init__(self, bus: "InProcessBus", max_queue: int, match: Match | None) -> None:
        self._bus = bus
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._queue: deque[Event] = deque()
        self._max = max_queue
        self._match = match
        self._wakeup: asyncio.Future[None] | None = None
        self._ended = False
        self._fanout: _Fanout | None = None  # set while registered

    def _push(self, event: Event) -> None:
        if self._ended:
            return
        if event is _CLOSED or event is _OVERFLOW:
            self._ended = True
            self._queue.append(event)
        elif len(self._queue) >= self._max:
            self._ended = True
            self._queue.clear()
            self._queue.append(_OVERFLOW)
        else:
            self._queue.append(event)
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    def __aiter__(self) -> "_LocalSubscription":
        return self

    async def __anext__(self) -> Event:
        while not self._queue:
            self._wakeup = self._loop.create_future()
            await self._wakeup
        event = self._queue.popleft()
        if event is _CLOSED:
            raise StopAsyncIteration
        if event is _OVERFLOW:
            raise SlowListener(f"listener fell more than {self._max} events behind")
        return event

    async def __aenter__(self) -> "_LocalSubscription":
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        fanout = self._fanout
        if fanout is None:
            return
        if threading.get_ident() == self._thread:
            fanout.remove(self)
        else:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nothing to wake
                self._loop.call_soon_threadsafe(fanout.remove, self)


class _Fanout:
    """The subscriptions of one event loop, indexed by what they want. Every method
    runs on that loop's thread (publishers elsewhere hand events over with one
    `call_soon_threadsafe` per batch)."""

    def __init__(self, bus: "InProcessBus", loop: asyncio.AbstractEventLoop) -> None:
        self.bus = bus
        self.loop = loop
        self.thread = threading.get_ident()
        self.size = 0
        self._all: _Subs = {}  # no Match: every event
        self._kinds: dict[str, _Subs] = {}  # every event of a kind
        self._exact: dict[tuple[str, str], _Subs] = {}  # (kind, uri or task id)
        self._beneath: dict[str, _Subs] = {}  # "updated" at this URI + "/" + anything

    def _keys(self, match: Match) -> Iterable[tuple[dict[Any, _Subs], Any]]:
        for kind in match.kinds:
            yield self._kinds, kind
        for uri in match.uris:
            yield self._exact, ("updated", uri)
            yield self._beneath, uri.rstrip("/")
        for task_id in match.tasks:
            yield self._exact, ("task", task_id)
        for key in match.keys:
            yield self._exact, key

    def add(self, sub: "_LocalSubscription") -> None:
        sub._fanout = self
        self.size += 1
        if sub._match is None:
            self._all[sub] = None
            return
        for index, key in self._keys(sub._match):
            index.setdefault(key, {})[sub] = None

    def remove(self, sub: "_LocalSubscription") -> None:
        if sub._fanout is not self:
            return
        sub._fanout = None
        self.size -= 1
        if sub._match is None:
            self._all.pop(sub, None)
        else:
            for index, key in self._keys(sub._match):
                subs = index.get(key)
                if subs is not None:
                    subs.pop(sub, None)
                    if not subs:
                        del index[key]
        if not self.size:
            self.bus._drop(self)

    def targets(self, event: Event) -> Iterable["_LocalSubscription"]:
        """The subscriptions `event` matches, each once (as a snapshot: pushing may
        not change the index, but a caller may)."""
        kind, uri = event
        found: list[_Subs] = []
        if self._all and kind != GAP:  # only to those that ask for it
            found.append(self._all)
        subs = self._kinds.get(kind)
        if subs:
            found.append(subs)
        if uri is not None:
            subs = self._exact.get((kind, uri))
            if subs:
                found.append(subs)
            if kind == "updated" and self._beneath:
                cut = uri.find("/")
                while cut >= 0:  # every URI above this one, as a "beneath" key
                    subs = self._beneath.get(uri[:cut])
                    if subs:
                        found.append(subs)
                    cut = uri.find("/", cut + 1)
        if not found:
            return ()
        if len(found) == 1:
            return list(found[0])
        merged: _Subs = {}
        for subs in found:
            merged.update(subs)
        return list(merged)

    def deliver(self, events: Sequence[Event]) -> None:
        for event in events:
            for sub in self.targets(event):
                sub._push(event)

    def close_all(self) -> None:
        subs: _Subs = dict(self._all)
        for index in (self._kinds, self._exact, self._beneath):
            for group in list(index.values()):
                subs.update(group)
        for sub in subs:
            sub._push(_CLOSED)
            self.remove(sub)


class InProcessBus:
    """Fan-out to the listeners of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # One `_Fanout` per event loop with subscriptions; replaced, never changed in
        # place, so that publishers on any thread can read it without the lock.
        self._fanouts: tuple[_Fanout, ...] = ()

    def publish(self, event: Event) -> None:
        self.publish_many((event,))

    def publish_local(self, event: Event) -> None:
        """`LocalBus`: this process's subscriptions are all there is."""
        self.publish_many((event,))

    def publish_many(self, events: Sequence[Event]) -> None:
        """Publish `events` in order: one hand-over per event loop for all of them."""
        if not events:
            return
        here = threading.get_ident()
        for fanout in self._fanouts:
            if fanout.thread == here:
                fanout.deliver(events)
            else:
                try:
                    fanout.loop.call_soon_threadsafe(fanout.deliver, events)
                except RuntimeError:  # that loop is closed: nobody listens there any more
                    self._drop(fanout)

    def subscribe(self, max_queue: int = 256, *, match: Match | None = None) -> "_LocalSubscription":
        sub = _LocalSubscription(self, max_queue, match)
        self._fanout_for(sub._loop).add(sub)
        return sub

    def _fanout_for(self, loop: asyncio.AbstractEventLoop) -> "_Fanout":
        for fanout in self._fanouts:
            if fanout.loop is loop:
                return fanout
        with self._lock:
            for fanout in self._fanouts:
                if fanout.loop is loop:
                    return fanout
            fanout = _Fanout(self, loop)
            self._fanouts = (*self._fanouts, fanout)
            return fanout

    def _drop(self, fanout: "_Fanout") -> None:
        with self._lock:
            self._fanouts = tuple(f for f in self._fanouts if f is not fanout)

    def close_all(self) -> None:
        here = threading.get_ident()
        for fanout in self._fanouts:
            if fanout.thread == here:
                fanout.close_all()
            else:
                try:
                    fanout.loop.call_soon_threadsafe(fanout.close_all)
                except RuntimeError:  # that loop is closed
                    self._drop(fanout)

    def __len__(self) -> int:
        return sum(fanout.size for fanout in self._fanouts)
