"""Backends a server opens itself for `NIMBLEMCP_REDIS_URL`, and closes when it stops.

The store and bus a server opens for the URL its settings name (`ServerSettings`) are
its own to close: when it stops (the end of its lifespan, `Server.stopped`), after the
bus has sent what was published. Backends the code passed in belong to the caller and
stay open. Imports the option groups and the handle store.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from nimblemcp.server._handles import HandleStore
from nimblemcp.server._options import Backends, StateOptions

if TYPE_CHECKING:
    from nimblemcp.backends._store import KeyValueStore
    from nimblemcp.backends.bus import NotificationBus

__all__ = ["Opened", "Owner", "close_opened", "open_shared"]

logger = logging.getLogger("nimblemcp.server")


class Owner(Protocol):
    """The server whose backends these are (a `nimblemcp.Server`)."""

    state_options: StateOptions
    backends: Backends
    store: KeyValueStore
    bus: NotificationBus
    handles: HandleStore
    _opened: Opened | None


@dataclass(frozen=True, slots=True)
class Opened:
    """What a server opened itself for a backend URL: the URL, and whether the store
    and the bus it now uses are those (False: the code gave that one)."""

    url: str
    store: bool
    bus: bool


def open_shared(server: Owner, url: str) -> None:
    """Give `server` the store and bus `url` names where its code gave none, and
    remember them as its own (`server._opened`) for `close_opened`. Nothing connects
    yet: the Redis ones connect on first use."""
    from nimblemcp.backends._select import from_url

    store, bus = from_url(url)
    own_store, own_bus = server.backends.store is None, server.backends.bus is None
    if own_store:
        server.store = store
        server.handles = HandleStore(store, server.state_options)
    if own_bus:
        server.bus = bus
    server.backends = Backends(server.store, server.bus)
    server._opened = Opened(url, own_store, own_bus)


async def close_opened(server: Owner) -> None:
    """Close the backends `open_shared` opened for `server` (the bus sends what is
    still queued first: `RedisBus.close`), once the server has stopped. The server
    gets fresh ones for the same URL, unopened, so that it can be served again."""
    opened: Opened | None = server._opened
    if opened is None:
        return
    store = server.store if opened.store else None
    bus = server.bus if opened.bus else None
    server.backends = Backends(None if opened.store else server.store, None if opened.bus else server.bus)
    open_shared(server, opened.url)
    if bus is not None:
        bus.close_all()  # its local subscriptions end here, on their loop
    close = getattr(bus, "close", None)
    if close is not None:  # blocks while the bus's thread ends: not on this loop
        try:
            await asyncio.to_thread(close)
        except Exception:
            logger.warning("closing the notification bus failed", exc_info=True)
    if store is not None:
        try:
            await store.close()
        except Exception:
            logger.warning("closing the store failed", exc_info=True)
