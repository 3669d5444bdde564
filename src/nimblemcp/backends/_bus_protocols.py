"""The bus's Protocols (`Subscription`, `NotificationBus`, `FlushingBus`, `LocalBus`), built on first use.

`nimblemcp.backends.bus` hands these out through its module `__getattr__`: a
`Protocol` class costs ~170k instructions to build on CPython 3.11 and a server needs
them only for type checks, so a stdio server starts without them (issue 18). Their
`__module__` is `nimblemcp.backends.bus`, where they are documented and imported from
(repr, pickling by reference). Imports only `backends.bus` and the standard library.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from nimblemcp.backends.bus import Event, Match

__all__ = ["FlushingBus", "LocalBus", "NotificationBus", "Subscription"]


class Subscription(Protocol):
    """One listener's events from a bus: `async with bus.subscribe() as sub: async for
    event in sub: ...`. A listener that falls `max_queue` events behind is ended."""

    def __aiter__(self) -> Subscription: ...
    async def __anext__(self) -> Event: ...
    async def __aenter__(self) -> Subscription: ...
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


for _cls in (Subscription, NotificationBus, FlushingBus, LocalBus):
    _cls.__module__ = "nimblemcp.backends.bus"
