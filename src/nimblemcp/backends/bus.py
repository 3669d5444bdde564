"""The notification bus behind `subscriptions/listen`: publish/subscribe of change events.

Concurrency contract: `publish` is non-blocking and may be called from any thread
(a sync tool in a worker thread, a file watcher); each subscription delivers on the
event loop that created it. Slow listeners never block publishers: every
subscription has a bounded queue, and one that overflows is ended with
`SlowListener` so its stream can be closed with a reason (memory stays bounded).
Cleanup contract: leaving the `async with` (or `close()`) unregisters at once;
`close_all()` ends every subscription gracefully (iteration just stops).
The in-process bus is the default; a Redis bus implements the same Protocol.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from types import TracebackType
from typing import NamedTuple, Protocol

from nimblemcp.errors import SlowListener

__all__ = [
    "Event",
    "InProcessBus",
    "NotificationBus",
    "SlowListener",
    "Subscription",
]


class Event(NamedTuple):
    """A change: kind is "tools", "prompts", "resources" (list changed) or "updated"."""

    kind: str
    uri: str | None = None


class Subscription(Protocol):
    def __aiter__(self) -> Subscription: ...
    async def __anext__(self) -> Event: ...
    async def __aenter__(self) -> Subscription: ...
    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
    def close(self) -> None: ...


class NotificationBus(Protocol):
    def publish(self, event: Event) -> None: ...
    def subscribe(self, max_queue: int = 256) -> Subscription: ...
    def close_all(self) -> None: ...


_CLOSED = Event("__closed__")
_OVERFLOW = Event("__overflow__")


class _LocalSubscription:
    def __init__(self, bus: InProcessBus, max_queue: int) -> None:
        self._bus = bus
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._queue: deque[Event] = deque()
        self._max = max_queue
        self._wakeup: asyncio.Future[None] | None = None
        self._ended = False

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

    def deliver(self, event: Event) -> None:
        if threading.get_ident() == self._thread:
            self._push(event)
        else:
            self._loop.call_soon_threadsafe(self._push, event)

    def __aiter__(self) -> _LocalSubscription:
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

    async def __aenter__(self) -> _LocalSubscription:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._bus._subs.discard(self)


class InProcessBus:
    """Fan-out to the listeners of this process."""

    def __init__(self) -> None:
        self._subs: set[_LocalSubscription] = set()

    def publish(self, event: Event) -> None:
        for sub in list(self._subs):
            sub.deliver(event)

    def subscribe(self, max_queue: int = 256) -> _LocalSubscription:
        sub = _LocalSubscription(self, max_queue)
        self._subs.add(sub)
        return sub

    def close_all(self) -> None:
        for sub in list(self._subs):
            sub.deliver(_CLOSED)
            sub.close()

    def __len__(self) -> int:
        return len(self._subs)
