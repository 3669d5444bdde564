"""Run-time switches (`server.enable`/`disable`, see `_visibility`) shared by instances.

Behind a round-robin balancer, a tool disabled on one instance must be gone from every
instance's lists and calls. When the server's store and bus reach beyond the process
(Redis), a switch made while serving is

- published on the bus as one `switches` event carrying the whole, versioned state, which
  every instance applies as it arrives (the newest version wins; their listeners hear
  the list change once, from the instance that made it), and
- written to the store, where an instance that starts later (or whose bus connection
  had a gap) reads it.

Switches made before serving (at import, in the lifespan's start-up) are every
instance's own code and stay local; the stored ones are applied over them at start-up.
A failure to reach the store is logged and costs only the late-starting instances.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

from nimblemcp.backends.bus import GAP, Event, Match
from nimblemcp.errors import SlowListener
from nimblemcp.server._visibility import Switches, Visibility

if TYPE_CHECKING:
    from nimblemcp.backends._store import KeyValueStore
    from nimblemcp.backends.bus import NotificationBus
    from nimblemcp.server._lifespan import Lifespan

__all__ = ["SWITCHES", "Sharing", "following", "share"]


class Sharing(Protocol):
    """What this module reads of a server: the `Server` facade, which imports this
    module (never the other way round)."""

    name: str
    served: bool
    store: KeyValueStore
    bus: NotificationBus
    _lifespan: Lifespan
    _visibility: Visibility

    def _shares_backends(self) -> bool: ...

    def _adopt_switches(self, switches: Switches, *, publish: bool = True) -> None: ...


logger = logging.getLogger("nimblemcp.server")

SWITCHES = "switches"  # the bus event's kind; its `uri` holds the encoded switches
_KEEP_S = 10 * 365 * 86400.0  # the store's TTL for them: until changed
_START_S = 10.0  # at most this long for the first read at start-up
_writes: set[asyncio.Task[None]] = set()  # referenced until done
# The loop each following server serves on: a switch made in a worker thread (a sync
# tool) is written to the store from there.
_loops: weakref.WeakKeyDictionary[Sharing, asyncio.AbstractEventLoop] = weakref.WeakKeyDictionary()


def _key(server: Sharing) -> str:
    return f"switches:{server.name}"


def share(server: Sharing, switches: Switches) -> None:
    """Tell the other instances, when serving with shared backends (see above)."""
    if not (server._lifespan.started or server.served) or not server._shares_backends():
        return
    text = switches.encode()
    server.bus.publish(Event(SWITCHES, text))
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # a worker thread: the store is written from the server's loop
        loop = _loops.get(server)
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(_write, server, text)
    else:
        _write(server, text)


def _write(server: Sharing, text: str) -> None:
    task = asyncio.get_running_loop().create_task(_save(server, text))
    _writes.add(task)
    task.add_done_callback(_writes.discard)


async def _save(server: Sharing, text: str) -> None:
    try:
        await server.store.set(_key(server), text.encode(), _KEEP_S)
    except Exception as exc:
        logger.warning("server %r: could not store its switches (%s); instances starting "
                       "later will not see them", server.name, type(exc).__name__)


async def _load(server: Sharing) -> None:
    try:
        stored = await server.store.get(_key(server))
    except Exception as exc:
        logger.warning("server %r: could not read the shared switches (%s)", server.name,
                       type(exc).__name__)
        return
    found = Switches.decode(stored) if stored is not None else None
    if found is not None:
        adopt(server, found, over_own=True)


def adopt(server: Sharing, switches: Switches, *, over_own: bool = False) -> None:
    """Apply switches another instance made, when newer than those in force. `over_own`
    (start-up): laid over this instance's own, code-made ones."""
    current = server._visibility.switches
    if over_own:
        switches = Switches({**current.names, **switches.names}, {**current.tags, **switches.tags},
                            max(current.version, switches.version))
    elif switches.version <= current.version:
        return
    server._adopt_switches(switches, publish=False)


async def _follow(server: Sharing, ready: asyncio.Event) -> None:
    while True:
        try:
            async with server.bus.subscribe(64, match=Match(kinds=(SWITCHES, GAP))) as events:
                await _load(server)  # after subscribing: no change falls in between
                ready.set()
                async for event in events:
                    if event.kind == GAP:  # events may have been lost: read the store
                        await _load(server)
                    elif event.uri is not None:
                        found = Switches.decode(event.uri)
                        if found is not None:
                            adopt(server, found)
                return
        except SlowListener:
            continue


@contextlib.asynccontextmanager
async def following(server: Sharing) -> AsyncIterator[None]:
    """While the server's lifespan runs: apply the other instances' switches."""
    if not server._shares_backends():
        yield
        return
    ready = asyncio.Event()
    _loops[server] = asyncio.get_running_loop()
    task = asyncio.create_task(_follow(server, ready), name=f"nimblemcp-switches-{server.name}")
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_START_S):
                await ready.wait()
        yield
    finally:
        _loops.pop(server, None)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
