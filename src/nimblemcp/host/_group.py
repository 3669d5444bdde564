"""`ClientGroup`: one `Client` per configured server, supervised, behind one catalog.

    async with ClientGroup.from_config("mcp.json", confirm=ask_user) as group:
        print(group.states)                      # every server's status and error
        result = await group.call_tool("docs__read_doc", {"name": "brief.md"})
        async with group.events() as events:     # merged, tagged by server
            async for event in events: ...

Servers connect in parallel, each bounded by its own timeout; entering the group waits
until every server has connected or failed once. A failing server never breaks the
others: it is `failed` with its error and is retried with backoff (`Supervision`, see
`_supervisor`). The catalog is rebuilt from the connected servers' lists whenever one
connects, is lost or says a list changed, before the matching event goes out. Servers
can be added and removed while the group runs.

The host's hooks: `on_elicit`, `on_sample`, `on_roots` receive `(server, params)` so a
consent UI can say who asks; every tool call first passes `policy` (and `confirm` when
the policy says "ask", see `_policy`); logs and progress are delivered as events and to
`on_log(server, params)` / `on_progress(server, tool, progress, total, message)`.
A stdio server starts with a short allow-list of the host's environment plus its
config's `env` (`_config.child_environment`; `inherit_env` for all of it). A catalog
rebuild that fails keeps the previous catalog and is logged, never raised into a
supervisor. `auth(config)` may return an `httpx.Auth` for a remote server. The OAuth
flow runs only when a server answers 401, so giving every remote server one is safe:

    def auth(config):                    # config.oauth is the entry's `oauth` object
        ids = config.oauth or {}
        return OAuth(on_authorize=open_browser, pre_registered=[PreRegistered(ids["clientId"])]
                     if "clientId" in ids else ())

`client_options` are passed to every `Client` (`log_level`, `timeout`, `tasks`, ...);
their `limits` (`client.Limits`) also bound the transports the group builds.
`pinning` pins every server's catalog (`_pins`): a changed catalog is reviewed before
any changed tool is offered or called.
Uses only the public Client API; transports are imported when a server is built.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import TracebackType
from typing import Any

from nimblemcp._loop import maybe_await
from nimblemcp.client import Client, Limits
from nimblemcp.errors import ServerUnavailable, TransportError, UnknownName

from ._catalog import Catalog, NameScheme, ServerLists
from ._config import ServerConfig, child_environment, load_config
from ._events import EventKind, EventStream, HostEvent, ServerState
from ._pins import CatalogChange, PinGate, Pinning, snapshot_of
from ._policy import AnnotationPolicy, Confirm, ToolCall, ToolPolicy, decide
from ._supervisor import ServerSupervisor, Supervision

__all__ = ["ClientGroup", "HostCallback"]

logger = logging.getLogger("nimblemcp.host")

#: `(server, params) -> answer` for elicitation, sampling and roots requests.
HostCallback = Callable[[str, dict[str, Any]], Any]
LogCallback = Callable[[str, dict[str, Any]], Any]
ProgressHook = Callable[[str, str, float, "float | None", "str | None"], Any]
AuthFactory = Callable[[ServerConfig], Any]

logger = logging.getLogger("nimblemcp.host")
_DEFAULT_LIMITS = Limits()


class ClientGroup:
    """Many servers, one catalog. See the module docstring."""

    def __init__(
        self,
        servers: Mapping[str, ServerConfig] | None = None,
        *,
        supervision: Supervision | None = None,
        scheme: NameScheme | None = None,
        policy: ToolPolicy | None = None,
        confirm: Confirm | None = None,
        on_elicit: HostCallback | None = None,
        on_sample: HostCallback | None = None,
        on_roots: HostCallback | None = None,
        on_log: LogCallback | None = None,
        on_progress: ProgressHook | None = None,
        auth: AuthFactory | None = None,
        client_options: Mapping[str, Any] | None = None,
        pinning: Pinning | None = None,
    ) -> None:
        """Servers by name (usually from `ClientGroup.from_config("mcp.json")`), and the
        host's hooks:

        - `supervision`: timeouts, reconnection backoff (`Supervision()`);
        - `scheme`: how names are qualified in the catalog (`docs__read_doc`);
        - `policy` and `confirm`: the consent step before every tool call. The default
          `AnnotationPolicy()` asks before destructive or open-world tools, and without
          a `confirm(call) -> bool` callback asking means no (`ToolCallDenied`);
        - `on_elicit`, `on_sample`, `on_roots`: `(server, params) -> answer`;
        - `on_log(server, params)`, `on_progress(server, tool, progress, total, message)`;
        - `auth(config)`: an `httpx.Auth` (e.g. `OAuth(...)`) per remote server;
        - `client_options`: keywords for every `Client` (`timeout`, `tasks`, ...);
        - `pinning`: review changed catalogs against their pins (`Pinning(...)`).

            group = ClientGroup(load_config("mcp.json"), confirm=ask_user)
            async with group:
                await group.call_tool("docs__read_doc", {"name": "brief.md"})
        """
        self.supervision = supervision or Supervision()
        self.scheme = scheme or NameScheme()
        self.policy: ToolPolicy = policy or AnnotationPolicy()
        self.confirm = confirm
        self.on_elicit = on_elicit
        self.on_sample = on_sample
        self.on_roots = on_roots
        self.on_log = on_log
        self.on_progress = on_progress
        self.auth = auth
        self.client_options = dict(client_options or {})
        self.catalog = Catalog(scheme=self.scheme)
        self._pins = PinGate(pinning, self._pin_decided) if pinning is not None else None
        self._servers: dict[str, ServerSupervisor] = {}
        for name, config in (servers or {}).items():
            self._servers[name] = self._supervisor(
                config if name == config.name else replace(config, name=name))
        self._streams: set[EventStream] = set()
        self._running = False

    @classmethod
    def from_config(
        cls, source: str | os.PathLike[str] | Mapping[str, Any], *,
        variables: Mapping[str, str] | None = None, **options: Any,
    ) -> ClientGroup:
        """A group for the servers of an `mcp.json` (path or parsed object); a `pinning`
        without a lockfile keeps its pins beside the file (`mcp.lock.json`)."""
        pinning = options.get("pinning")
        if isinstance(pinning, Pinning) and pinning.lockfile is None and not isinstance(source, Mapping):
            from nimblemcp.catalog._snapshot import lock_path_for

            options["pinning"] = replace(pinning, lockfile=lock_path_for(source))
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
        for server in self._servers.values():
            server.start()
        await self.wait_settled()

    async def wait_settled(self) -> None:
        """Wait until every enabled server has finished its first attempt."""
        await asyncio.gather(*(s.settled.wait() for s in self._servers.values()))
        if self._pins is not None:
            await self._pins.settled()

    async def close(self) -> None:
        """Stop supervising and close every client (in parallel)."""
        self._running = False
        await asyncio.gather(*(s.stop() for s in self._servers.values()))
        if self._pins is not None:
            await self._pins.close()
        for stream in list(self._streams):
            stream.end()

    async def add_server(self, config: ServerConfig, *, wait: bool = True) -> ServerState:
        """Add (or replace) a server while running; with `wait`, until it connected or failed."""
        if config.name in self._servers:
            await self.remove_server(config.name)
        server = self._supervisor(config)
        self._servers[config.name] = server
        if self._running:
            server.start()
            if wait:
                await server.settled.wait()
        return server.state

    async def remove_server(self, name: str) -> None:
        """Disconnect a server and drop its names from the catalog."""
        server = self._servers.pop(name, None)
        if server is None:
            raise UnknownName(f"no server named {name!r}")
        await server.stop()
        self._rebuild()

    # -- state and events --------------------------------------------------------------

    @property
    def states(self) -> dict[str, ServerState]:
        """Every server's current state, in configuration order."""
        return {name: s.state for name, s in self._servers.items()}

    @property
    def servers(self) -> dict[str, ServerConfig]:
        return {name: s.config for name, s in self._servers.items()}

    def snapshot(self, server: str) -> dict[str, Any]:
        """The canonical catalog of a connected server, as `nimblemcp snapshot` writes it
        (from what the group holds; no request is sent)."""
        supervisor, client = self._live(server)
        return snapshot_of(client, supervisor.lists)

    @property
    def held_changes(self) -> dict[str, CatalogChange]:
        """With `pinning`: the catalog changes kept out of the catalog now (waiting for
        a decision, or refused), by server."""
        return dict(self._pins.held) if self._pins is not None else {}

    def client(self, server: str) -> Client:
        """The live Client of a connected server (for anything the group does not wrap)."""
        return self._live(server)[1]

    def events(self) -> EventStream:
        """`async with group.events() as events:` every server's events, merged."""
        return EventStream(self._streams.add, self._streams.discard)

    def _emit(self, event: HostEvent) -> None:
        for stream in list(self._streams):
            stream.put(event)

    def _rebuild(self) -> None:
        lists = {name: s.lists for name, s in self._servers.items() if s.live is not None}
        if self._pins is not None:
            lists = self._pinned(lists)
        try:
            self.catalog = Catalog(lists, self.scheme, servers=self._servers)
        except Exception:  # not expected (the lists are checked): keep the last catalog
            logger.exception("could not rebuild the catalog; the previous one is kept")

    def _pinned(self, lists: dict[str, ServerLists]) -> dict[str, ServerLists]:
        """Each server's items that its pin (or a decision) lets the catalog offer."""
        assert self._pins is not None
        shown: dict[str, ServerLists] = {}
        for name, found in lists.items():
            client = self._servers[name].live
            assert client is not None
            try:
                visible = self._pins.visible(name, snapshot_of(client, found), found)
            except Exception:  # a catalog we cannot even compare is not offered
                logger.exception("server %s: could not check its catalog against its pin", name)
                continue
            if visible is not None:
                shown[name] = visible
        return shown

    def _pin_decided(self, server: str, change: CatalogChange, accepted: bool) -> None:
        self._rebuild()
        if accepted:  # the catalog now offers what was held back
            kinds = {c.kind for c in change.diff.changes}
            events: tuple[tuple[str, EventKind], ...] = (
                ("tool", "tools_changed"), ("prompt", "prompts_changed"))
            for kind, event in events:
                if kind in kinds:
                    self._emit(HostEvent(server, event))
            if kinds & {"resource", "template"}:
                self._emit(HostEvent(server, "resources_changed"))

    def _state_changed(self, server: ServerSupervisor) -> None:
        if self._servers.get(server.name) is server:
            self._rebuild()
        self._emit(HostEvent(server.name, "status", state=server.state))

    def _lists_changed(self, server: ServerSupervisor, event: HostEvent) -> None:
        if event.kind.endswith("_changed") and self._servers.get(server.name) is server:
            self._rebuild()
        self._emit(event)

    # -- building a server's Client ----------------------------------------------------

    def _supervisor(self, config: ServerConfig) -> ServerSupervisor:
        return ServerSupervisor(config, self.supervision, self._make_client,
                                self._state_changed, self._lists_changed)

    def _make_client(self, config: ServerConfig) -> Client:
        name = config.name
        target: Any
        # the transports built here take the Client's limits (a Transport handed to a
        # Client keeps its own)
        limits = self.client_options.get("limits") or _DEFAULT_LIMITS
        if config.transport == "stdio":
            from nimblemcp.transports.stdio.client import StdioTransport

            target = StdioTransport(config.command or "", config.args, cwd=config.cwd,
                                    env=child_environment(config), inherit_env=False,
                                    max_message_bytes=limits.max_message_bytes)
        elif config.transport == "http":
            from nimblemcp.transports.client.http import HttpTransport

            auth = self.auth(config) if self.auth is not None else None
            target = HttpTransport(config.url or "", headers=config.headers, auth=auth,
                                   max_message_bytes=limits.max_message_bytes,
                                   max_redirects=limits.max_redirects,
                                   max_connections=limits.max_connections)
        else:
            raise TransportError(
                f"{config.shown}: the HTTP+SSE transport (type {config.transport!r}, protocol "
                "2024-11-05) is not supported; use the server's Streamable HTTP endpoint")

        def hook(callback: HostCallback | None) -> Callable[[dict[str, Any]], Any] | None:
            return functools.partial(callback, name) if callback is not None else None

        return Client(
            target, on_elicit=hook(self.on_elicit), on_sample=hook(self.on_sample),
            on_roots=hook(self.on_roots), on_log=functools.partial(self._log, name),
            on_notification=functools.partial(self._stray, name), **self.client_options,
        )

    def _stray(self, server: str, note: dict[str, Any]) -> Any:
        """A notification outside any request (a 2025-11-25 session's log messages)."""
        params = note.get("params")
        if note.get("method") == "notifications/message" and isinstance(params, dict):
            return self._log(server, params)
        return None

    async def _log(self, server: str, params: dict[str, Any]) -> None:
        self._emit(HostEvent(server, "log", raw=params))
        if self.on_log is not None:
            await maybe_await(self.on_log(server, params))

    async def _progress(self, server: str, tool: str, progress: float, total: float | None,
                        message: str | None) -> None:
        self._emit(HostEvent(server, "progress", raw={
            "tool": tool, "progress": progress, "total": total, "message": message}))
        if self.on_progress is not None:
            await maybe_await(self.on_progress(server, tool, progress, total, message))

    # -- routing -----------------------------------------------------------------------

    def _live(self, name: str) -> tuple[ServerSupervisor, Client]:
        server = self._servers.get(name)
        if server is None:
            raise UnknownName(f"no server named {name!r}")
        client = server.live
        if client is None:
            raise ServerUnavailable(name, server.state)
        return server, client

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, **kw: Any,
    ) -> dict[str, Any]:
        """Call a catalog tool (`docs__read_doc`, or `docs.read_doc`) on its server,
        after the policy (and the user) allowed it; keywords go to `Client.call_tool`."""
        item = self.catalog.tool(name)
        if item is None:
            held = self._pins.why_missing(name) if self._pins is not None else None
            raise UnknownName(held or f"no tool named {name!r} in the catalog")
        server, client = self._live(item.server)
        args = dict(arguments or {})
        await decide(ToolCall(item.server, item.original, item.name, args, item.definition),
                     self.policy, self.confirm)
        if "on_progress" not in kw:
            kw["on_progress"] = functools.partial(self._progress, item.server, item.original)
        try:
            return await client.call_tool(item.original, args, **kw)
        except TransportError as exc:
            server.note_failure(exc)
            raise

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None, **kw: Any,
    ) -> dict[str, Any]:
        """Get a catalog prompt (`docs__review_brief`, or `docs.review_brief`) from its server."""
        item = self.catalog.prompt(name)
        if item is None:
            held = self._pins.why_missing(name) if self._pins is not None else None
            raise UnknownName(held or f"no prompt named {name!r} in the catalog")
        server, client = self._live(item.server)
        try:
            return await client.get_prompt(item.original, arguments, **kw)
        except TransportError as exc:
            server.note_failure(exc)
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
        owner, client = self._live(server or self.server_for_uri(uri))
        try:
            return await client.read_resource(uri, **kw)
        except TransportError as exc:
            owner.note_failure(exc)
            raise

    async def subscribe(self, uri: str, *, server: str | None = None) -> None:
        """Hear `resource_updated` events for `uri` (kept across reconnections). When the
        server is connected, waits (up to the connect timeout) until it acknowledged."""
        name = server or self.server_for_uri(uri)
        owner = self._servers.get(name)
        if owner is None:
            raise UnknownName(f"no server named {name!r}")
        if uri not in owner.subscriptions:
            owner.subscriptions.add(uri)
            await owner.relisten(self.supervision.connect_timeout)

    async def unsubscribe(self, uri: str) -> None:
        """Stop hearing about `uri` (from every server it was subscribed on)."""
        for owner in list(self._servers.values()):
            if uri in owner.subscriptions:
                owner.subscriptions.discard(uri)
                await owner.relisten(self.supervision.connect_timeout)
