"""`ClientGroup`: one `Client` per configured server, supervised, behind one catalog.

    async with ClientGroup.from_config("mcp.json", confirm=ask_user) as group:
        print(group.states)                      # every server's status and error
        result = await group.call_tool("docs__read_doc", {"name": "brief.md"})
        async with group.events() as events:     # merged, tagged by server
            async for event in events: ...

Servers connect in parallel, each bounded by its own timeout; entering the group waits
until every server has connected or failed once. A failing server never breaks the
others: it is `failed` with its error, and (unless `reconnect=False`) the group tries
again with exponential backoff. A connected server is watched: its listen stream
(list changes, subscribed resources) dropping, its process exiting or a call failing
with a transport error marks it `failed` and starts the reconnection, which builds a
fresh Client. List changes refresh the catalog before the event is delivered.
Servers can be added and removed while the group runs.

The host's hooks: `on_elicit`, `on_sample`, `on_roots` receive `(server, params)` so a
consent UI can say who asks; every tool call first passes `policy` (and `confirm` when
the policy says "ask", see `_policy`); logs and progress are delivered as events and to
`on_log(server, params)` / `on_progress(server, tool, progress, total, message)`.
Uses only the public Client API; transports are imported when a server is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from types import TracebackType
from typing import Any

from nimblemcp.client import Client
from nimblemcp.errors import (
    HttpStatusError,
    McpError,
    ProtocolError,
    ServerUnavailable,
    TransportError,
    UnknownName,
)

from ._catalog import Catalog, CatalogItem, NameScheme, ServerLists
from ._config import ServerConfig, load_config
from ._events import EventStream, HostEvent, ServerState
from ._policy import AnnotationPolicy, Confirm, ToolCall, ToolPolicy, decide

__all__ = ["ClientGroup", "HostCallback"]

logger = logging.getLogger("nimblemcp.host")

#: `(server, params) -> answer` for elicitation, sampling and roots requests.
HostCallback = Callable[[str, dict[str, Any]], Any]
LogCallback = Callable[[str, dict[str, Any]], Any]
ProgressHook = Callable[[str, str, float, "float | None", "str | None"], Any]
AuthFactory = Callable[[ServerConfig], Any]


class _Member:
    """The group's book-keeping for one server."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.state = ServerState(config.name, "disabled" if config.disabled else "connecting",
                                 transport=config.transport)
        self.client: Client | None = None
        self.lists = ServerLists()
        self.capabilities: dict[str, Any] = {}
        self.subscriptions: set[str] = set()
        self.task: asyncio.Task[None] | None = None
        self.settled = asyncio.Event()
        self.lost = asyncio.Event()
        self.lost_reason = ""
        self.relisten = asyncio.Event()
        #: bumped by every (un)subscribe; a listen records the one it was acknowledged for
        self.generation = 0
        self.acked_generation = -1
        self.acked = asyncio.Condition()


class ClientGroup:
    """Many servers, one catalog. See the module docstring."""

    def __init__(
        self,
        servers: Mapping[str, ServerConfig] | None = None,
        *,
        scheme: NameScheme | None = None,
        policy: ToolPolicy | None = None,
        confirm: Confirm | None = None,
        on_elicit: HostCallback | None = None,
        on_sample: HostCallback | None = None,
        on_roots: HostCallback | None = None,
        on_log: LogCallback | None = None,
        on_progress: ProgressHook | None = None,
        auth: AuthFactory | None = None,
        connect_timeout: float = 30.0,
        reconnect: bool = True,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        max_attempts: int | None = None,
        listen: bool = True,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.scheme = scheme or NameScheme()
        self.policy: ToolPolicy = policy or AnnotationPolicy()
        self.confirm = confirm
        self.on_elicit = on_elicit
        self.on_sample = on_sample
        self.on_roots = on_roots
        self.on_log = on_log
        self.on_progress = on_progress
        self.auth = auth
        self.connect_timeout = connect_timeout
        self.reconnect = reconnect
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_attempts = max_attempts
        self.listen = listen
        self.client_options = dict(client_options or {})
        self.catalog = Catalog(scheme=self.scheme)
        self._members: dict[str, _Member] = {}
        for name, config in (servers or {}).items():
            if name != config.name:
                config = replace(config, name=name)
            self._members[name] = _Member(config)
        self._streams: set[EventStream] = set()
        self._running = False

    @classmethod
    def from_config(
        cls, source: str | os.PathLike[str] | Mapping[str, Any], *,
        variables: Mapping[str, str] | None = None, **options: Any,
    ) -> ClientGroup:
        """A group for the servers of an `mcp.json` (path or parsed object)."""
        return cls(load_config(source, variables=variables), **options)

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> ClientGroup:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect every enabled server in parallel; return once each connected or failed."""
        self._running = True
        for member in self._members.values():
            self._launch(member)
        await self.wait_settled()

    async def wait_settled(self) -> None:
        """Wait until every enabled server has finished its first attempt."""
        waits = [m.settled.wait() for m in self._members.values() if m.task is not None]
        if waits:
            await asyncio.gather(*waits)

    async def close(self) -> None:
        """Stop supervising and close every client (in parallel)."""
        self._running = False
        members = list(self._members.values())
        await asyncio.gather(*(self._stop(m, "closed") for m in members))
        for stream in list(self._streams):
            stream.end()

    async def add_server(self, config: ServerConfig, *, wait: bool = True) -> ServerState:
        """Add (or replace) a server while running; with `wait`, until it connected or failed."""
        old = self._members.get(config.name)
        if old is not None:
            await self.remove_server(config.name)
        member = _Member(config)
        self._members[config.name] = member
        if self._running:
            self._launch(member)
            if wait and member.task is not None:
                await member.settled.wait()
        return member.state

    async def remove_server(self, name: str) -> None:
        """Disconnect a server and drop its names from the catalog."""
        member = self._members.pop(name, None)
        if member is None:
            raise UnknownName(f"no server named {name!r}")
        await self._stop(member, "closed")
        self._rebuild()

    def _launch(self, member: _Member) -> None:
        if member.config.disabled:
            member.settled.set()
            return
        member.task = asyncio.create_task(self._supervise(member),
                                          name=f"nimblemcp-host-{member.config.name}")

    async def _stop(self, member: _Member, status: str) -> None:
        task, member.task = member.task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._drop_client(member)
        if member.state.status != "disabled":
            self._set(member, status="closed", retry_in=None)
        member.settled.set()

    # -- state -------------------------------------------------------------------------

    @property
    def states(self) -> dict[str, ServerState]:
        """Every server's current state, in configuration order."""
        return {name: m.state for name, m in self._members.items()}

    @property
    def servers(self) -> dict[str, ServerConfig]:
        return {name: m.config for name, m in self._members.items()}

    def client(self, server: str) -> Client:
        """The live Client of a connected server (for anything the group does not wrap)."""
        member = self._members.get(server)
        if member is None:
            raise UnknownName(f"no server named {server!r}")
        if member.client is None or member.state.status != "connected":
            raise ServerUnavailable(server, member.state)
        return member.client

    def _set(self, member: _Member, **changes: Any) -> None:
        member.state = replace(member.state, **changes)
        self._emit(HostEvent(member.config.name, "status", state=member.state))

    def _emit(self, event: HostEvent) -> None:
        for stream in list(self._streams):
            stream.put(event)

    def events(self) -> EventStream:
        """`async with group.events() as events:` every server's events, merged."""
        return EventStream(self._streams.add, self._streams.discard)

    def _rebuild(self) -> None:
        self.catalog = Catalog(
            {name: m.lists for name, m in self._members.items()
             if m.state.status == "connected"}, self.scheme,
        )

    # -- supervision -------------------------------------------------------------------

    async def _supervise(self, member: _Member) -> None:
        delay = self.backoff
        failures = 0
        while True:
            self._set(member, status="connecting", retry_in=None)
            try:
                async with asyncio.timeout(member.config.timeout or self.connect_timeout):
                    await self._connect(member)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._drop_client(member)
                failures += 1
                retry = self.reconnect and (self.max_attempts is None or failures < self.max_attempts)
                limit = member.config.timeout or self.connect_timeout
                self._set(member, status="failed", error=_describe(exc, limit),
                          attempts=failures, retry_in=delay if retry else None)
                logger.info("server %s failed: %s", member.config.name, member.state.error)
                member.settled.set()
                if not retry:
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
                continue
            failures, delay = 0, self.backoff
            client = member.client
            assert client is not None
            self._set(member, status="connected", error=None, attempts=0, retry_in=None,
                      era=client.era,
                      server_info=client.server_info or (client.initialized or {}).get("serverInfo"))
            self._rebuild()
            member.settled.set()
            reason = await self._watch(member)
            await self._drop_client(member)
            retry = self.reconnect
            self._set(member, status="failed", error=reason, attempts=0,
                      retry_in=delay if retry else None)
            self._rebuild()
            logger.info("server %s lost: %s", member.config.name, reason)
            if not retry:
                return
            await asyncio.sleep(delay)

    def _make_client(self, config: ServerConfig) -> Client:
        name = config.name
        target: Any
        if config.transport == "stdio":
            from nimblemcp.transports.stdio_client import StdioTransport

            target = StdioTransport(config.command or "", config.args, env=config.env,
                                    cwd=config.cwd)
        elif config.transport == "http":
            from nimblemcp.transports.http_client import HttpTransport

            auth = self.auth(config) if self.auth is not None else None
            target = HttpTransport(config.url or "", headers=config.headers, auth=auth)
        else:
            raise TransportError(
                f"{config.url}: the HTTP+SSE transport (type {config.transport!r}, protocol "
                "2024-11-05) is not supported; use the server's Streamable HTTP endpoint")

        def hook(callback: HostCallback | None) -> Callable[[dict[str, Any]], Any] | None:
            return functools.partial(callback, name) if callback is not None else None

        return Client(
            target, on_elicit=hook(self.on_elicit), on_sample=hook(self.on_sample),
            on_roots=hook(self.on_roots), on_log=functools.partial(self._log, name),
            on_notification=functools.partial(self._stray, name), **self.client_options,
        )

    async def _connect(self, member: _Member) -> None:
        member.lost.clear()
        member.lost_reason = ""
        client = self._make_client(member.config)
        member.client = client
        await client.open()
        found = await client.discover()
        caps = found.get("capabilities")
        member.capabilities = caps if isinstance(caps, dict) else {}
        member.lists = await self._fetch(client, member.capabilities)

    async def _fetch(self, client: Client, caps: Mapping[str, Any],
                     only: tuple[str, ...] = ("tools", "prompts", "resources")) -> ServerLists:
        async def listed(method: Callable[[], Awaitable[list[dict[str, Any]]]],
                         optional: bool = False) -> list[dict[str, Any]]:
            try:
                return await method()
            except ProtocolError:
                if optional:  # e.g. a server without resource templates
                    return []
                raise

        want = {k for k in only if k in caps}
        none: Callable[[], Awaitable[list[dict[str, Any]]]] = _empty
        tools, prompts, resources, templates = await asyncio.gather(
            listed(client.list_tools if "tools" in want else none),
            listed(client.list_prompts if "prompts" in want else none),
            listed(client.list_resources if "resources" in want else none),
            listed(client.list_resource_templates if "resources" in want else none, True),
        )
        return ServerLists(tools, prompts, resources, templates)

    async def _drop_client(self, member: _Member) -> None:
        client, member.client = member.client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

    async def _watch(self, member: _Member) -> str:
        """Wait until the server is lost; return why."""
        client = member.client
        assert client is not None
        waiters: dict[asyncio.Task[Any], str] = {
            asyncio.create_task(member.lost.wait()): "lost",
            asyncio.create_task(member.relisten.wait()): "relisten",
        }
        process = getattr(client.transport, "process", None)
        if process is not None and hasattr(process, "wait"):
            waiters[asyncio.create_task(process.wait())] = "exited"
        listener = self._start_listen(member)
        if listener is not None:
            waiters[listener] = "listen"
        try:
            while True:
                done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    what = waiters.pop(task)
                    if what == "lost":
                        return member.lost_reason or "the connection was lost"
                    if what == "exited":
                        return f"the server process exited with code {task.result()}"
                    if what == "relisten":
                        member.relisten.clear()
                        for other, kind in list(waiters.items()):
                            if kind == "listen":
                                await _cancel(other)
                                del waiters[other]
                        waiters[asyncio.create_task(member.relisten.wait())] = "relisten"
                        listener = self._start_listen(member)
                        if listener is not None:
                            waiters[listener] = "listen"
                        continue
                    reason = task.result()  # the listen ended
                    if reason is not None:
                        return str(reason)
        finally:
            for task in waiters:
                await _cancel(task)

    def _start_listen(self, member: _Member) -> asyncio.Task[str | None] | None:
        if not self.listen:
            return None
        caps = member.capabilities

        def changes(key: str) -> bool:
            cap = caps.get(key)
            return isinstance(cap, dict) and bool(cap.get("listChanged"))

        wanted = {"tools": changes("tools"), "prompts": changes("prompts"),
                  "resources_list": changes("resources")}
        if not any(wanted.values()) and not member.subscriptions:
            return None
        return asyncio.create_task(self._listen(member, wanted))

    async def _listen(self, member: _Member, wanted: dict[str, bool]) -> str | None:
        """Forward one server's listen events; the reason it ended, or None when the
        server cannot listen (then the server is watched by its calls alone)."""
        client = member.client
        assert client is not None
        name = member.config.name
        generation = member.generation
        try:
            async with client.listen(resources=sorted(member.subscriptions), reconnect=False,
                                     **wanted) as events:
                async with member.acked:
                    member.acked_generation = generation
                    member.acked.notify_all()
                async for event in events:
                    if event.kind == "closed":
                        return "the server closed its listen stream (shutting down)"
                    if event.kind in ("tools_changed", "prompts_changed", "resources_changed"):
                        await self._refresh(member, event.kind)
                        self._emit(HostEvent(name, event.kind, raw=event.raw))
                    elif event.kind == "resource_updated":
                        self._emit(HostEvent(name, "resource_updated", uri=event.uri, raw=event.raw))
        except ProtocolError as exc:
            logger.info("server %s cannot listen (%s); watching its calls only", name, exc)
            return None
        except McpError as exc:
            return f"the listen stream broke: {exc}"
        return "the listen stream ended"

    async def _refresh(self, member: _Member, kind: str) -> None:
        client = member.client
        if client is None:
            return
        key = {"tools_changed": "tools", "prompts_changed": "prompts"}.get(kind, "resources")
        try:
            fresh = await self._fetch(client, member.capabilities, (key,))
        except McpError as exc:
            logger.info("server %s: could not refresh its %s: %s", member.config.name, key, exc)
            return
        old = member.lists
        member.lists = ServerLists(
            fresh.tools if key == "tools" else old.tools,
            fresh.prompts if key == "prompts" else old.prompts,
            fresh.resources if key == "resources" else old.resources,
            fresh.templates if key == "resources" else old.templates,
        )
        self._rebuild()

    def _note_failure(self, member: _Member, exc: BaseException) -> None:
        if isinstance(exc, TransportError) and not (
            isinstance(exc, HttpStatusError) and exc.status < 500
        ):
            member.lost_reason = f"a request failed: {exc}"
            member.lost.set()

    # -- hooks -------------------------------------------------------------------------

    def _stray(self, server: str, note: dict[str, Any]) -> Any:
        """A notification outside any request (a 2025-11-25 session's log messages)."""
        params = note.get("params")
        if note.get("method") == "notifications/message" and isinstance(params, dict):
            return self._log(server, params)
        return None

    async def _log(self, server: str, params: dict[str, Any]) -> None:
        self._emit(HostEvent(server, "log", raw=params))
        if self.on_log is not None:
            await _maybe_await(self.on_log(server, params))

    # -- routing -----------------------------------------------------------------------

    def _member_for(self, item: CatalogItem) -> tuple[_Member, Client]:
        member = self._members.get(item.server)
        if member is None:
            raise UnknownName(f"no server named {item.server!r}")
        if member.client is None or member.state.status != "connected":
            raise ServerUnavailable(item.server, member.state)
        return member, member.client

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, **kw: Any,
    ) -> dict[str, Any]:
        """Call a catalog tool (`docs__read_doc`, or `docs.read_doc`) on its server,
        after the policy (and the user) allowed it; keywords go to `Client.call_tool`."""
        item = self.catalog.tool(name)
        if item is None:
            raise UnknownName(f"no tool named {name!r} in the catalog")
        member, client = self._member_for(item)
        args = dict(arguments or {})
        await decide(ToolCall(item.server, item.original, item.name, args, item.definition),
                     self.policy, self.confirm)
        if "on_progress" not in kw:
            kw["on_progress"] = functools.partial(self._progress, item.server, item.original)
        try:
            return await client.call_tool(item.original, args, **kw)
        except TransportError as exc:
            self._note_failure(member, exc)
            raise

    async def _progress(self, server: str, tool: str, progress: float, total: float | None,
                        message: str | None) -> None:
        self._emit(HostEvent(server, "progress", raw={
            "tool": tool, "progress": progress, "total": total, "message": message}))
        if self.on_progress is not None:
            await _maybe_await(self.on_progress(server, tool, progress, total, message))

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None, **kw: Any,
    ) -> dict[str, Any]:
        """Get a catalog prompt from its server."""
        item = self.catalog.prompt(name)
        if item is None:
            raise UnknownName(f"no prompt named {name!r} in the catalog")
        member, client = self._member_for(item)
        try:
            return await client.get_prompt(item.original, arguments, **kw)
        except TransportError as exc:
            self._note_failure(member, exc)
            raise

    def server_for_uri(self, uri: str) -> str:
        """The server that serves `uri` (listed there, or matching one server's template)."""
        servers = self.catalog.servers_for_uri(uri)
        if not servers:
            raise UnknownName(f"no connected server lists {uri!r} or a template matching it")
        if len(servers) > 1:
            raise UnknownName(f"{uri!r} could come from {', '.join(servers)}: pass server=")
        return servers[0]

    async def read_resource(self, uri: str, *, server: str | None = None, **kw: Any) -> dict[str, Any]:
        """Read a resource from the server that serves it (or from `server`)."""
        name = server or self.server_for_uri(uri)
        member = self._members.get(name)
        if member is None:
            raise UnknownName(f"no server named {name!r}")
        if member.client is None or member.state.status != "connected":
            raise ServerUnavailable(name, member.state)
        try:
            return await member.client.read_resource(uri, **kw)
        except TransportError as exc:
            self._note_failure(member, exc)
            raise

    async def subscribe(self, uri: str, *, server: str | None = None) -> None:
        """Hear `resource_updated` events for `uri` (kept across reconnections). When the
        server is connected, waits (up to `connect_timeout`) until it acknowledged."""
        member = self._members.get(server or self.server_for_uri(uri))
        if member is None:
            raise UnknownName(f"no server named {server!r}")
        if uri not in member.subscriptions:
            member.subscriptions.add(uri)
            await self._relisten(member)

    async def unsubscribe(self, uri: str) -> None:
        """Stop hearing about `uri` (from every server it was subscribed on)."""
        for member in list(self._members.values()):
            if uri in member.subscriptions:
                member.subscriptions.discard(uri)
                await self._relisten(member)

    async def _relisten(self, member: _Member) -> None:
        member.generation += 1
        generation = member.generation
        member.relisten.set()
        if member.state.status != "connected" or not self.listen:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.connect_timeout), member.acked:
                await member.acked.wait_for(lambda: member.acked_generation >= generation)


async def _empty() -> list[dict[str, Any]]:
    return []


async def _cancel(task: asyncio.Task[Any]) -> None:
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _describe(exc: BaseException, limit: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"did not connect within {limit:g} s"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
