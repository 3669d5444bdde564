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
Uses only the public Client API; the group builds the Client (`make_client`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from nimblemcp.client import Client
from nimblemcp.errors import HttpStatusError, McpError, ProtocolError, TransportError

from ._catalog import ServerLists
from ._config import ServerConfig
from ._events import HostEvent, ServerState

__all__ = ["ServerSupervisor", "Supervision"]

logger = logging.getLogger("nimblemcp.host")

Lister = Callable[[], Awaitable[list[dict[str, Any]]]]


@dataclass(frozen=True, slots=True)
class Supervision:
    """How a group keeps its servers connected.

    `connect_timeout` bounds one connection attempt (a server's own `timeout` wins);
    after a failure or a loss the next attempt waits `backoff` s, doubling up to
    `max_backoff`; `max_attempts` failed attempts in a row end the retries (None:
    never); `reconnect=False` makes every failure final; `listen=False` opens no
    listen streams (no list-change events; losses are noticed by calls only)."""

    connect_timeout: float = 30.0
    reconnect: bool = True
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_attempts: int | None = None
    listen: bool = True


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
        self._on_state(self)

    # -- the loop ----------------------------------------------------------------------

    async def _run(self) -> None:
        settings = self.settings
        delay = settings.backoff
        failures = 0
        limit = self.config.timeout or settings.connect_timeout
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
                retry = settings.reconnect and (
                    settings.max_attempts is None or failures < settings.max_attempts)
                self._set(status="failed", error=_describe(exc, limit), attempts=failures,
                          retry_in=delay if retry else None)
                logger.info("server %s failed: %s", self.name, self.state.error)
                self.settled.set()
                if not retry:
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, settings.max_backoff)
                continue
            failures, delay = 0, settings.backoff
            client = self.client
            assert client is not None
            info = client.server_info or (client.initialized or {}).get("serverInfo")
            self._set(status="connected", error=None, attempts=0, retry_in=None,
                      era=client.era, server_info=info)
            self.settled.set()
            reason = await self._watch()
            await self._drop_client()
            self._set(status="failed", error=reason, attempts=0,
                      retry_in=delay if settings.reconnect else None)
            logger.info("server %s lost: %s", self.name, reason)
            if not settings.reconnect:
                return
            await asyncio.sleep(delay)

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

    async def _fetch(self, client: Client, only: tuple[str, ...]) -> ServerLists:
        async def listed(method: Lister, optional: bool = False) -> list[dict[str, Any]]:
            try:
                return await method()
            except ProtocolError:
                if optional:  # e.g. a server without resource templates
                    return []
                raise

        want = {k for k in only if k in self.capabilities}
        tools, prompts, resources, templates = await asyncio.gather(
            listed(client.list_tools if "tools" in want else _empty),
            listed(client.list_prompts if "prompts" in want else _empty),
            listed(client.list_resources if "resources" in want else _empty),
            listed(client.list_resource_templates if "resources" in want else _empty, True),
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
        try:
            while True:
                done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    what = waiters.pop(task)
                    if what == "lost":
                        return self._lost_reason or "the connection was lost"
                    if what == "exited":
                        return f"the server process exited with code {task.result()}"
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
                async for event in events:
                    if event.kind == "closed":
                        return "the server closed its listen stream (shutting down)"
                    if event.kind in ("tools_changed", "prompts_changed", "resources_changed"):
                        await self._refresh(event.kind)
                        self._on_change(self, HostEvent(self.name, event.kind, raw=event.raw))
                    elif event.kind == "resource_updated":
                        self._on_change(self, HostEvent(self.name, "resource_updated",
                                                        uri=event.uri, raw=event.raw))
        except ProtocolError as exc:
            logger.info("server %s cannot listen (%s); watching its calls only", self.name, exc)
            return None
        except McpError as exc:
            return f"the listen stream broke: {exc}"
        return "the listen stream ended"

    async def _refresh(self, kind: str) -> None:
        client = self.client
        if client is None:
            return
        key = {"tools_changed": "tools", "prompts_changed": "prompts"}.get(kind, "resources")
        try:
            fresh = await self._fetch(client, (key,))
        except McpError as exc:
            logger.info("server %s: could not refresh its %s: %s", self.name, key, exc)
            return
        old = self.lists
        self.lists = ServerLists(
            fresh.tools if key == "tools" else old.tools,
            fresh.prompts if key == "prompts" else old.prompts,
            fresh.resources if key == "resources" else old.resources,
            fresh.templates if key == "resources" else old.templates,
        )


async def _empty() -> list[dict[str, Any]]:
    return []


async def _cancel(task: asyncio.Task[Any]) -> None:
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def _describe(exc: BaseException, limit: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"did not connect within {limit:g} s"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
