"""Keeping one server connected: `Supervision` (the settings) and `ServerSupervisor`.

A supervisor owns one server's `Client` and runs one task:

    connecting ──ok──> connected ──lost──> failed ──backoff──> connecting ...
        └──error/timeout──> failed ──backoff──┘

Connecting = build a fresh Client, open it, settle the era (`discover`), list what the
server's capabilities promise (tools, prompts, resources, templates), all within the
server's timeout. A connected server is *lost* when its listen stream (list changes,
subscribed resources) drops or closes, its process exits (stdio), or a call through
the group fails with a transport error (`note_failure`). Every state change is a new
`ServerState` handed to `on_state`; list changes re-list the affected lists before
`on_change` hears of them, so the group's catalog is current when its event goes out.

What a server says is never trusted to keep this loop alive (issue 37): every list
item is checked (`_lists`) and a bad one dropped with a `warning` event; a list past
the Client's page or item caps is left out, with a warning; each re-list after a
`list_changed` runs under `list_timeout`, and notices that arrive while one runs are
merged into the next (one re-list per `relist_interval` at most); a connection that
ends within `stable_after` seconds is a crash, which keeps the back-off growing, and
`max_restarts` crashes in a row end the retries, visibly (status `failed`, no
`retry_in`, the error says why). Whatever goes wrong, the first attempt settles and
the task ends in a state, never in an exception nobody reads.
Uses only the public Client API; the group builds the Client (`make_client`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from types import MappingProxyType
from typing import Any, cast

from nimblemcp.client import Client
from nimblemcp.errors import (
    HttpStatusError,
    McpError,
    MessageTooLarge,
    ProtocolError,
    TransportError,
)

from ._catalog import ServerLists
from ._config import ServerConfig
from ._events import EventKind, HostEvent, ServerState
from ._lists import ListKind, checked

__all__ = ["ServerSupervisor", "Supervision"]

logger = logging.getLogger("nimblemcp.host")
_MAX_ERROR = 2000  # characters of `state.error` (a dead child's stderr tail can be long)
_REASON = 80  # characters of a JSON-RPC error message kept from an HTTP error answer

Lister = Callable[[], Awaitable[list[dict[str, Any]]]]


@dataclass(frozen=True, slots=True)
class Supervision:
    """How a group keeps its servers connected.

    `connect_timeout` bounds one connection attempt (a server's own `timeout` wins);
    after a failure or a loss the next attempt waits `backoff` s, doubling up to
    `max_backoff`; `max_attempts` failed attempts in a row end the retries (None:
    never); `reconnect=False` makes every failure final; `listen=False` opens no
    listen streams (no list-change events; losses are noticed by calls only).

    A connection lost within `stable_after` s of connecting is a crash: the back-off
    goes on growing (only a connection that stayed up that long resets it) and
    `max_restarts` crashes in a row end the retries (None: never). `list_timeout`
    bounds each re-list after a `list_changed` notice; bursts of notices are merged,
    at most one re-list per `relist_interval` s. Pages and items per list are the
    Client's `Limits` (`max_list_pages`, `max_list_items`)."""

    connect_timeout: float = 30.0
    reconnect: bool = True
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_attempts: int | None = None
    listen: bool = True
    stable_after: float = 10.0
    max_restarts: int | None = 5
    list_timeout: float = 30.0
    relist_interval: float = 0.5


class ServerSupervisor:
    """One server: its config, state, live Client and lists, and the task keeping them."""

    def __init__(
        self, config: ServerConfig, settings: Supervision,
        make_client: Callable[[ServerConfig], Client],
        on_state: Callable[[ServerSupervisor], None],
        on_change: Callable[[ServerSupervisor, HostEvent], None],
    ) -> None:
        self.config = config
        self.settings = settings
        self._make_client = make_client
        self._on_state = on_state
        self._on_change = on_change
        self.state = ServerState(config.name, "disabled" if config.disabled else "connecting",
                                 transport=config.transport)
        self.client: Client | None = None
        self.lists = ServerLists()
        self.capabilities: dict[str, Any] = {}
        self.subscriptions: set[str] = set()
        self.task: asyncio.Task[None] | None = None
        #: set once the first attempt ended (connected or failed)
        self.settled = asyncio.Event()
        self._lost = asyncio.Event()
        self._lost_reason = ""
        self._relisten = asyncio.Event()
        # bumped by every (un)subscribe; a listen records the one it was acknowledged for
        self._generation = 0
        self._acked_generation = -1
        self._acked = asyncio.Condition()
        # list_changed notices not yet re-listed (kind -> the last notice), and the wake-up
        self._dirty: dict[str, Mapping[str, Any] | None] = {}
        self._changed = asyncio.Event()

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def live(self) -> Client | None:
        """The Client when connected, else None."""
        return self.client if self.state.status == "connected" else None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        if self.config.disabled:
            self.settled.set()
            return
        self.settled.clear()
        self.task = asyncio.create_task(self._run(), name=f"nimblemcp-host-{self.name}")

    async def stop(self) -> None:
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._drop_client()
        if self.state.status != "disabled":
            self._set(status="closed", retry_in=None)
        self.settled.set()

    def note_failure(self, exc: BaseException) -> None:
        """A call failed: a broken connection (not an HTTP 4xx answer) means lost."""
        if isinstance(exc, TransportError) and not (
            isinstance(exc, HttpStatusError) and exc.status < 500
        ):
            self._lost_reason = f"a request failed: {exc}"
            self._lost.set()

    async def relisten(self, timeout: float) -> None:
        """Re-open the listen with the current subscriptions; when connected, wait (up to
        `timeout`) for the server's acknowledgement."""
        self._generation += 1
        generation = self._generation
        self._relisten.set()
        if self.state.status != "connected" or not self.settings.listen:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout), self._acked:
                await self._acked.wait_for(lambda: self._acked_generation >= generation)

    def _set(self, **changes: Any) -> None:
        self.state = replace(self.state, **changes)
        try:
            self._on_state(self)
        except Exception:  # the group's bug must not end this server's supervision
            logger.exception("server %s: a state listener failed", self.name)

    def _tell(self, event: HostEvent) -> None:
        try:
            self._on_change(self, event)
        except Exception:
            logger.exception("server %s: an event listener failed", self.name)

    def _warn(self, message: str) -> None:
        """Something the server sent was refused or left out: log it, and say it as a
        `warning` event naming the server."""
        logger.warning("server %s: %s", self.name, message)
        self._tell(HostEvent(self.name, "warning", raw={"message": message}))

    # -- the loop ----------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._supervise()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # not expected: end in a state that says so
            logger.exception("server %s: supervision stopped", self.name)
            await self._drop_client()
            self._set(status="failed", retry_in=None,
                      error=self._describe(exc, 0.0, "supervision stopped: "))
        finally:
            self.settled.set()

    async def _supervise(self) -> None:
        settings = self.settings
        delay = settings.backoff
        failures = crashes = 0  # in a row: failed attempts, connections that did not last
        limit = self.config.timeout or settings.connect_timeout
        clock = asyncio.get_running_loop().time
        while True:
            self._set(status="connecting", retry_in=None)
            try:
                async with asyncio.timeout(limit):
                    await self._connect()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._drop_client()
                failures += 1
                error = self._describe(exc, limit)
                stop = settings.max_attempts is not None and failures >= settings.max_attempts
                cause = ""  # the limit the caller chose: the last error says enough
            else:
                client = self.client
                assert client is not None
                info = client.server_info or (client.initialized or {}).get("serverInfo")
                self._set(status="connected", error=None, attempts=failures + crashes,
                          retry_in=None, era=client.era, server_info=info)
                self.settled.set()
                since = clock()
                try:
                    error = self._clean(await self._watch())
                except Exception as exc:
                    logger.exception("server %s: watching it failed", self.name)
                    error = self._describe(exc, limit)
                await self._drop_client()
                if clock() - since >= settings.stable_after:
                    failures = crashes = 0
                    delay = settings.backoff
                else:
                    crashes += 1
                stop = settings.max_restarts is not None and crashes >= settings.max_restarts
                cause = (f"{crashes} connections in a row lost within "
                         f"{settings.stable_after:g} s")
            if not settings.reconnect:
                stop, cause = True, ""
            if stop and cause:
                error = f"gave up after {cause}; last: {error}"
            self._set(status="failed", error=error, attempts=failures + crashes,
                      retry_in=None if stop else delay)
            log = logger.warning if stop and cause else logger.info
            log("server %s failed: %s", self.name, self.state.error)
            self.settled.set()
            if stop:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, settings.max_backoff)

    def _describe(self, exc: BaseException, limit: float, prefix: str = "") -> str:
        """A failure as `state.error` says it: short, without the body of an HTTP error
        answer, and without any of the config's secret values."""
        if isinstance(exc, TimeoutError):
            return f"{prefix}did not connect within {limit:g} s"
        # an HttpStatusError's message quotes the body; its subclasses' are our own words
        text = _http_reason(exc) if type(exc) is HttpStatusError else str(exc) or type(exc).__name__
        return self._clean(f"{prefix}{type(exc).__name__}: {text}")

    def _clean(self, text: str) -> str:
        text = self.config.redact(text)
        return text if len(text) <= _MAX_ERROR else text[:_MAX_ERROR] + " [...]"

    async def _connect(self) -> None:
        self._lost.clear()
        self._lost_reason = ""
        client = self._make_client(self.config)
        self.client = client
        await client.open()
        found = await client.discover()
        caps = found.get("capabilities")
        self.capabilities = caps if isinstance(caps, dict) else {}
        self.lists = await self._fetch(client, ("tools", "prompts", "resources"))

    async def _fetch(self, client: Client, only: tuple[str, ...], *, cache: bool = True) -> ServerLists:
        """The lists of `only` the server has, each checked item by item; a list past the
        Client's caps is left out (empty) with a warning, other errors are raised.
        `cache=False` asks the server even where the Client's cache still holds a list."""
        async def listed(kind: ListKind, method: Lister, optional: bool = False) -> list[dict[str, Any]]:
            try:
                items = await method()
            except MessageTooLarge as exc:
                self._warn(f"its {kind} are left out: {exc}")
                return []
            except ProtocolError:
                if optional:  # e.g. a server without resource templates
                    return []
                raise
            kept, dropped = checked(kind, items)
            if dropped:
                self._warn(f"dropped {len(dropped)} malformed item(s) of its {kind}: "
                           + "; ".join(dropped[:3]) + ("; ..." if len(dropped) > 3 else ""))
            return kept

        want = {k for k in only if k in self.capabilities}
        tools, prompts, resources, templates = await asyncio.gather(
            listed("tools", partial(client.list_tools, cache=cache) if "tools" in want else _empty),
            listed("prompts", partial(client.list_prompts, cache=cache) if "prompts" in want else _empty),
            listed("resources",
                   partial(client.list_resources, cache=cache) if "resources" in want else _empty),
            listed("templates", partial(client.list_resource_templates, cache=cache)
                   if "resources" in want else _empty, True),
        )
        return ServerLists(tools, prompts, resources, templates)

    async def _drop_client(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

    # -- watching a connected server ---------------------------------------------------

    async def _watch(self) -> str:
        """Wait until the server is lost; return why."""
        client = self.client
        assert client is not None
        self._relisten.clear()  # the first listen below already has every subscription
        waiters: dict[asyncio.Task[Any], str] = {
            asyncio.create_task(self._lost.wait()): "lost",
            asyncio.create_task(self._relisten.wait()): "relisten",
        }
        process = getattr(client.transport, "process", None)
        if process is not None and hasattr(process, "wait"):
            waiters[asyncio.create_task(process.wait())] = "exited"
        listener = self._start_listen()
        if listener is not None:
            waiters[listener] = "listen"
        self._dirty.clear()
        waiters[asyncio.create_task(self._relister())] = "relister"
        try:
            while True:
                done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    what = waiters.pop(task)
                    if what == "lost":
                        return self._lost_reason or "the connection was lost"
                    if what == "exited":
                        return f"the server process exited with code {task.result()}"
                    if what == "relister":  # ends only by an error it did not expect
                        task.result()
                        return "re-listing stopped"
                    if what == "relisten":
                        self._relisten.clear()
                        for other, kind in list(waiters.items()):
                            if kind == "listen":
                                await _cancel(other)
                                del waiters[other]
                        waiters[asyncio.create_task(self._relisten.wait())] = "relisten"
                        listener = self._start_listen()
                        if listener is not None:
                            waiters[listener] = "listen"
                        continue
                    reason = task.result()  # the listen ended
                    if reason is not None:
                        return str(reason)
        finally:
            for task in waiters:
                await _cancel(task)

    def _start_listen(self) -> asyncio.Task[str | None] | None:
        if not self.settings.listen:
            return None
        caps = self.capabilities

        def changes(key: str) -> bool:
            cap = caps.get(key)
            return isinstance(cap, dict) and bool(cap.get("listChanged"))

        wanted = {"tools": changes("tools"), "prompts": changes("prompts"),
                  "resources_list": changes("resources")}
        if not any(wanted.values()) and not self.subscriptions:
            return None
        return asyncio.create_task(self._listen(wanted))

    async def _listen(self, wanted: Mapping[str, bool]) -> str | None:
        """Forward the listen's events; the reason it ended, or None when the server
        cannot listen (then it is watched through its calls alone)."""
        client = self.client
        assert client is not None
        generation = self._generation
        try:
            async with client.listen(resources=sorted(self.subscriptions), reconnect=False,
                                     tools=wanted["tools"], prompts=wanted["prompts"],
                                     resources_list=wanted["resources_list"]) as events:
                async with self._acked:
                    self._acked_generation = generation
                    self._acked.notify_all()
                for kind, key in (("tools_changed", "tools"), ("prompts_changed", "prompts"),
                                  ("resources_changed", "resources_list")):
                    if wanted[key]:
                        self._dirty.setdefault(kind, _CATCH_UP)
                self._changed.set()
                async for event in events:
                    if event.kind == "closed":
                        return "the server closed its listen stream (shutting down)"
                    if event.kind in ("tools_changed", "prompts_changed", "resources_changed"):
                        self._dirty[event.kind] = event.raw  # `_relister` lists it again
                        self._changed.set()
                    elif event.kind == "resource_updated":
                        self._tell(HostEvent(self.name, "resource_updated", uri=event.uri,
                                             raw=event.raw))
        except ProtocolError as exc:
            logger.info("server %s cannot listen (%s); watching its calls only", self.name, exc)
            return None
        except McpError as exc:
            return f"the listen stream broke: {exc}"
        return "the listen stream ended"

    async def _relister(self) -> None:
        """Re-list what `list_changed` notices marked, one kind at a time; notices that
        arrive meanwhile only mark it again, so a burst costs one more re-list, not one
        per notice. At most one round per `relist_interval` seconds."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            dirty, self._dirty = self._dirty, {}
            for kind, raw in dirty.items():
                await self._refresh(kind, raw)
            await asyncio.sleep(self.settings.relist_interval)

    async def _refresh(self, kind: str, raw: Mapping[str, Any] | None) -> None:
        client = self.client
        if client is None:
            return
        key = {"tools_changed": "tools", "prompts_changed": "prompts"}.get(kind, "resources")
        limit = self.settings.list_timeout
        try:
            async with asyncio.timeout(limit):
                fresh = await self._fetch(client, (key,), cache=raw is not _CATCH_UP)
        except TimeoutError:
            self._warn(f"re-listing its {key} took longer than {limit:g} s; the last list is kept")
            return
        except McpError as exc:
            self._warn(f"could not re-list its {key}; the last list is kept: "
                       f"{self._describe(exc, limit)}")
            return
        old = self.lists
        if raw is _CATCH_UP and _same(old, fresh, key):
            return
        self.lists = ServerLists(
            fresh.tools if key == "tools" else old.tools,
            fresh.prompts if key == "prompts" else old.prompts,
            fresh.resources if key == "resources" else old.resources,
            fresh.templates if key == "resources" else old.templates,
        )
        self._tell(HostEvent(self.name, cast("EventKind", kind), raw=raw))


# `_dirty`'s mark for "listed before the listen was acknowledged": what changed in
# between sent its notice to no one, so the kind is listed again once, and said only
# when it differs.
_CATCH_UP: Mapping[str, Any] = MappingProxyType({})


def _same(old: ServerLists, fresh: ServerLists, key: str) -> bool:
    if key == "resources":
        return old.resources == fresh.resources and old.templates == fresh.templates
    return bool(getattr(old, key) == getattr(fresh, key))


async def _empty() -> list[dict[str, Any]]:
    return []


async def _cancel(task: asyncio.Task[Any]) -> None:
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def _http_reason(exc: HttpStatusError) -> str:
    """`HTTP 502 (Bad Gateway)`, plus the JSON-RPC error's message when the body held one
    (cut short): never the body itself."""
    from http import HTTPStatus

    try:
        phrase = HTTPStatus(exc.status).phrase
    except ValueError:
        phrase = "unknown status"
    text = f"HTTP {exc.status} ({phrase})"
    message = (exc.error or {}).get("message")
    if isinstance(message, str) and message:
        short = "".join(ch if ch.isprintable() else " " for ch in message[:_REASON])
        text += f": {short}" + ("..." if len(message) > _REASON else "")
    return text
