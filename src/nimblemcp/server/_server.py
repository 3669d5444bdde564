"""The Server: a registry of tools, resources, prompts and completions.

Registration builds everything that can be built once (schemas, validators, wire
definitions, list payloads); request handling lives in `_dispatch`. A Server is the
`nimblemcp._port.Core` the transports talk to; it never imports a transport:
`run()` and `asgi_app()` delegate to `nimblemcp.serving`, imported when called.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Literal, overload

from nimblemcp.backends.bus import Event, InProcessBus, Match
from nimblemcp.backends.memory import MemoryStore
from nimblemcp.errors import InsufficientScope, RegistrationNotShared
from nimblemcp.server._config import DEFAULT_CACHE_HINTS, ServerConfig
from nimblemcp.server._dispatch import Dispatcher
from nimblemcp.server._handles import HandleStore
from nimblemcp.server._lifespan import Lifespan, LifespanFactory
from nimblemcp.server._options import (
    Backends,
    LegacyOptions,
    ListenOptions,
    ListOptions,
    ServerInfo,
    ServerSettings,
    StateOptions,
    TaskOptions,
    ToolOptions,
)
from nimblemcp.server._prompts import PromptEntry
from nimblemcp.server._registry import Registry
from nimblemcp.server._resources import ResourceEntry, TemplateEntry
from nimblemcp.server._tools import Icon, ToolAnnotations, ToolEntry
from nimblemcp.server._visibility import KINDS, Visibility
from nimblemcp.types._meta import TASKS_EXTENSION

if TYPE_CHECKING:
    from nimblemcp._port import Changes, Prepared, RequestIO
    from nimblemcp.backends._store import KeyValueStore
    from nimblemcp.backends.bus import NotificationBus
    from nimblemcp.server._middleware import Middleware
    from nimblemcp.server._own_backends import Opened
    from nimblemcp.server._sealing import Sealer
    from nimblemcp.server._tasks import TaskManager
    from nimblemcp.server._transform import ArgChange, Derivation, Wrap
    from nimblemcp.types._tool_headers import HeaderRule

F = Callable[..., Any]
logger = logging.getLogger("nimblemcp.server")

_NO_SCOPES: frozenset[str] = frozenset()
# What `changes()` (the legacy adapter's feed) wants: the list changes `_changed`
# publishes and `notify_resource_updated`'s events; not tasks nor cancellations.
_CHANGES = Match(kinds=("tools", "prompts", "resources", "updated"))


def _check_callable(decorator: str, fn: Any) -> None:
    """A registration decorator applied to something that is not a function. A class is
    callable, but calling it builds an instance, which no client can read as a result."""
    if isinstance(fn, type):
        raise TypeError(
            f"{decorator} applies to a function (def or async def), not the class "
            f"{fn.__qualname__}: calling it would make an instance, not a result. Decorate a "
            f"function, or register a bound method (server.add_tool({fn.__name__}().method))")
    if not callable(fn):
        raise TypeError(f"{decorator} applies to a function (def or async def), not {fn!r}")


class Server:
    """An MCP server. Register with decorators, then `run()` it or mount its ASGI app."""

    # The port (`nimblemcp._port.Core`): the dispatcher's own methods, set in __init__.
    prepare: Callable[..., Prepared]
    execute: Callable[[Prepared, RequestIO], Awaitable[dict[str, Any]]]

    def __init__(
        self,
        name: str,
        version: str = "0.1.0",
        *,
        instructions: str | None = None,
        info: ServerInfo | None = None,
        lists: ListOptions | None = None,
        logging: bool = True,
        state: StateOptions | None = None,
        backends: Backends | None = None,
        listen: ListenOptions | None = None,
        tool_options: ToolOptions | None = None,
        task_options: TaskOptions | None = None,
        legacy: LegacyOptions | None = None,
        forward_logs: bool | str = False,
        max_inflight: int | None = None,
        lifespan: LifespanFactory | None = None,
        middleware: list[Middleware] | None = None,
        registrations: Literal["shared", "local"] = "shared",
        include_tags: Iterable[str] | None = None,
        exclude_tags: Iterable[str] | None = None,
    ) -> None:
        self.name = name
        lists = lists or ListOptions()
        hints = {**DEFAULT_CACHE_HINTS, **(lists.cache_hints or {})}
        # What is served: the tables below are the registry's own (`_registry`).
        self.registry = Registry()
        self.tools = self.registry.tools
        self.resources = self.registry.resources
        self.templates = self.registry.templates
        self.prompts = self.registry.prompts
        self.extensions = self.registry.extensions
        if registrations not in ("shared", "local"):
            raise ValueError(f"registrations must be 'shared' or 'local', not {registrations!r}")
        # "shared": the registry must be the same on every instance, so runtime changes
        # are refused while serving with shared backends; "local": this instance's own.
        self.registrations = registrations
        # What of the registry is served: tags and run-time switches (`_visibility`).
        self._visibility = Visibility(include_tags, exclude_tags)
        self._hosts: list[Server] = []  # servers this one is mounted in
        # Called with "tools" | "prompts" | "resources" whenever a list changes; the
        # subscription layer hooks in here.
        self._change_listeners: list[Callable[[str], None]] = []
        # Called with the URI on `notify_resource_updated` (a host that mounted us).
        self._update_listeners: list[Callable[[str], None]] = []
        # Each option in one place: its group (`_options`), or the environment's settings.
        state = state or StateOptions()
        backends = backends or Backends()
        listen = listen or ListenOptions()
        self.state_options, self.backends = state, backends
        self.tool_options = tool_options or ToolOptions()
        self._task_options = task_options or TaskOptions()  # read by the TaskManager
        self.legacy_options = legacy or LegacyOptions()  # read by the transports' legacy adapter
        # What the request path reads of these settings, frozen (`_config`).
        self.config = ServerConfig(
            info=(info or ServerInfo()).wire(name, version), cache_hints=hints, instructions=instructions,
            page_size=lists.page_size,
            explicit_hints=frozenset(lists.cache_hints or ()),  # kept as given, even when authenticated
            logging=logging, forward_logs=forward_logs is not False, max_inflight=max_inflight,
            listen=listen, one_time_state=state.one_time, state_ttl=state.ttl,
        )
        # MRTR: requestState sealing, the optional single-use guard, and state handles,
        # all over one store.
        self.audience = state.audience or name
        self._state_keys = None if state.keys is None else list(state.keys)
        self._sealer: Sealer | None = None
        self._tasks: TaskManager | None = None
        self.store: KeyValueStore = backends.store if backends.store is not None else MemoryStore()
        self.handles = HandleStore(self.store, state)
        # subscriptions/listen: list changes and resource updates fan out via the bus.
        self.bus: NotificationBus = backends.bus if backends.bus is not None else InProcessBus()
        self._opened: Opened | None = None  # backends it opened itself from the environment
        self.moving = False  # a rolling restart is moving the listens away (`move_listeners`)
        # Python logging inside handlers -> notifications/message (True = root logger).
        if forward_logs is not False:
            from nimblemcp.server._logbridge import install

            install("" if forward_logs is True else str(forward_logs))
        # Plain HTTP routes beside the MCP endpoint (`route`): path -> (function, methods,
        # served without a token under `auth`).
        self.routes: dict[str, tuple[F, tuple[str, ...], bool]] = {}
        # Servers mounted into this one (`mount`): their lifespans run inside ours.
        self.mounted: list[Server] = []
        self._lifespan = Lifespan(self, lifespan)
        self.dispatcher = Dispatcher(self.registry, self.config, self)
        self.prepare = self.dispatcher.prepare
        self.execute = self.dispatcher.run
        self.served = False  # a transport served a request (`note_serving`)
        self.middleware: list[Middleware] = []
        # (method, name or URI) -> scopes a token must hold: this server's own
        # (`require_scopes`) and, in `scope_rules`, those in force here, mounted
        # servers' rules renamed with their entries included (`_mount.rules_in_force`).
        self._own_scope_rules: dict[tuple[str, str], frozenset[str]] = {}
        self.scope_rules: dict[tuple[str, str], frozenset[str]] = {}
        self._mount_links: list[Any] = []  # one `_mount._Mount` per server mounted here
        self._derivations: dict[str, Derivation] = {}  # derived tool name -> how (`derive_tool`)
        for mw in middleware or ():
            self.add_middleware(mw)

    @property
    def info(self) -> dict[str, Any]:
        """The `serverInfo` this server sends: name, version, and what `ServerInfo` adds."""
        return self.config.info

    @property
    def instructions(self) -> str | None:
        """What `server/discover` tells a client about using this server."""
        return self.config.instructions

    @instructions.setter
    def instructions(self, text: str | None) -> None:
        self.config = self.config._replace(instructions=text)
        self.dispatcher.reconfigure(self.config)

    @property
    def subscriptions(self) -> bool:
        """`subscriptions/listen` and list-change notifications are served."""
        return self.config.listen.enabled

    def note_serving(self) -> None:
        """A transport is serving requests (the port's `Core.note_serving`, called once
        per event loop, not per request): registrations count as while serving from
        now on, also where no lifespan runs (a framework that mounts the ASGI app
        without running its lifespan), until the lifespan stops."""
        self.served = True

    def require_scopes(
        self, scopes: list[str] | tuple[str, ...] | frozenset[str], *, tool: str | None = None,
        prompt: str | None = None, resource: str | None = None,
    ) -> None:
        """Only tokens holding all of `scopes` may call `tool`, get `prompt` or read
        `resource` (a URI or a registered URI template). Checked in the core for every
        transport and era (`InsufficientScope`, -32001, when the caller lacks them; no
        token counts as no scopes); on HTTP with `auth=`, refused with 403 and an
        `insufficient_scope` challenge naming them before the request runs."""
        targets = [(m, t) for m, t in (("tools/call", tool), ("prompts/get", prompt),
                                       ("resources/read", resource)) if t is not None]
        if len(targets) != 1:
            raise TypeError("require_scopes needs exactly one of tool=, prompt= or resource=")
        needed = frozenset(scopes)
        if not needed:
            raise ValueError("require_scopes needs at least one scope")
        self._own_scope_rules[targets[0]] = needed
        self._scope_rules_changed()

    def _scope_rules_changed(self) -> None:
        """Recompute the rules in force here (own ones and mounted servers', renamed),
        add the guard on the first one, and pass the change on to the servers this one
        is mounted in: a rule travels with its entry however deep the mount."""
        from nimblemcp.server._mount import rules_in_force

        first = not self.scope_rules
        self.scope_rules = rules_in_force(self)
        if first and self.scope_rules:
            self.dispatcher.use([self._scope_guard, *self.middleware])
        for host in self._hosts:
            host._scope_rules_changed()

    def scopes_needed(self, method: str, target: str | None) -> frozenset[str]:
        """The scopes `require_scopes` asks for `method` on `target` (empty: none)."""
        if target is None or not self.scope_rules:
            return _NO_SCOPES
        needed = self.scope_rules.get((method, target))
        if needed is None and method == "resources/read":
            for (rule_method, key), wanted in self.scope_rules.items():
                template = self.templates.get(key) if rule_method == method else None
                if template is not None and template.match(target) is not None:
                    return wanted
        return needed or _NO_SCOPES

    async def _scope_guard(self, ctx: Any, call_next: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        params = ctx.params
        target = params.get("uri") if ctx.method == "resources/read" else params.get("name")
        needed = self.scopes_needed(ctx.method, target if isinstance(target, str) else None)
        if needed:
            principal = ctx.principal
            held = getattr(principal, "scopes", None) or _NO_SCOPES
            if not needed <= held:
                raise InsufficientScope(data={"requiredScopes": sorted(needed)})
        return await call_next()

    def add_middleware(self, middleware: Middleware) -> Middleware:
        """Run `middleware(ctx, call_next)` around every request, inside those added
        before (see `nimblemcp.middleware`). Usable as a decorator."""
        if not callable(middleware):
            raise TypeError(f"middleware must be an async callable (ctx, call_next), got {middleware!r}")
        self.middleware.append(middleware)
        self.dispatcher.use([self._scope_guard, *self.middleware] if self.scope_rules else self.middleware)
        return middleware

    def _apply_settings(self, settings: ServerSettings) -> None:
        """The environment's settings, where the code gave nothing (see `_options`)."""
        if settings.state_keys and self._state_keys is None:
            self._state_keys = list(settings.state_keys)
            self._sealer = None
        if settings.redis_url and (self.backends.store is None or self.backends.bus is None):
            from nimblemcp.server._own_backends import open_shared

            open_shared(self, settings.redis_url)  # applied: a second call is a no-op

    # -- registration ------------------------------------------------------------------
    # One rule for tools, prompts, resources and templates: decorators return the
    # function unchanged; `add_*` returns the entry and refuses a duplicate name (URI);
    # `remove_*` drops one (KeyError if unknown). Every change notifies listeners.
    # Across instances: a change while serving with shared backends is refused
    # (`RegistrationNotShared`) unless `registrations="local"`; see `_check_shared`.

    def _shares_backends(self) -> bool:
        """Whether the store or bus reaches beyond this process (Redis, a custom one)."""
        return not (isinstance(self.bus, InProcessBus) and isinstance(self.store, MemoryStore))

    def _check_shared(self, action: str, kind: str, name: str) -> None:
        """Refuse a registry change that only this instance would serve while every
        instance's listeners hear of it: serving (the lifespan has started, so not at
        import time nor in the lifespan's own start-up; or, where no lifespan runs, a
        request was served) with shared backends, on this server or a server it is
        mounted in, unless that server says `"local"`. The lifespan's shut-down is no
        longer serving."""
        pending, seen = [self], set()
        while pending:
            server = pending.pop()
            if id(server) in seen:
                continue
            seen.add(id(server))
            pending.extend(server._hosts)
            if (server.registrations == "shared" and (server._lifespan.started or server.served)
                    and server._shares_backends()):
                served = "" if server is self else f" (mounted in {server.name!r})"
                raise RegistrationNotShared(
                    f"cannot {action} {kind} {name!r} while {server.name!r}{served} is serving with "
                    f"shared backends ({type(server.store).__name__}, {type(server.bus).__name__}): "
                    "other instances would not serve the change, yet all of their listeners would "
                    "be told the list changed. Register at import time or in the lifespan's "
                    "start-up (every instance runs them alike); or, when every instance makes "
                    "this change itself or requests are routed to this instance, declare "
                    "Server(..., registrations=\"local\").",
                    kind=kind, name=name,
                )

    @overload
    def tool(self, fn: F, /) -> F: ...
    @overload
    def tool(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        structured_output: bool | None = None,
        meta: dict[str, Any] | None = None,
        one_time: bool = False,
        run_in_thread: bool = True,
        input_schema: dict[str, Any] | None = None,
        task: str | None = None,
        defer_task: bool = False,
        tags: Iterable[str] | None = None,
    ) -> Callable[[F], F]: ...
    def tool(
        self,
        fn: F | None = None,
        /,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        structured_output: bool | None = None,
        meta: dict[str, Any] | None = None,
        one_time: bool = False,
        run_in_thread: bool = True,
        input_schema: dict[str, Any] | None = None,
        task: str | None = None,
        defer_task: bool = False,
        tags: Iterable[str] | None = None,
    ) -> Any:
        """Register a function as a tool: `@server.tool` or `@server.tool(name=...)`.

        The input schema comes from the type hints, descriptions from the docstring.
        A structured return type (a model, TypedDict, dict, number...) adds an
        `outputSchema` and `structuredContent`; `str` and content blocks do not.
        Sync functions run in a worker thread; `run_in_thread=False` runs one that
        never blocks directly on the event loop (saves the thread hop). `one_time=True`
        makes its MRTR `requestState` single-use. `input_schema=` publishes a
        hand-written JSON Schema verbatim and validates arguments against it.
        `task="optional"|"required"` runs calls from clients that declare the tasks
        extension as background tasks (`defer_task=True`: only from `ctx.as_task()`).
        `tags={"admin"}` labels it for `include_tags`/`exclude_tags` and `enable`/`disable`.
        """

        def register(f: F) -> F:
            _check_callable("@server.tool", f)
            self.add_tool(
                f, name=name, title=title, description=description, annotations=annotations,
                icons=icons, structured_output=structured_output, meta=meta, one_time=one_time,
                run_in_thread=run_in_thread, input_schema=input_schema, task=task,
                defer_task=defer_task, tags=tags)
            return f

        return register(fn) if fn is not None else register

    def add_tool(
        self,
        fn: F,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        structured_output: bool | None = None,
        meta: dict[str, Any] | None = None,
        one_time: bool = False,
        run_in_thread: bool = True,
        input_schema: dict[str, Any] | None = None,
        task: str | None = None,
        defer_task: bool = False,
        tags: Iterable[str] | None = None,
    ) -> ToolEntry:
        """Register `fn` as a tool (the options of `tool`); the entry. While serving with
        shared backends, `RegistrationNotShared` unless `registrations="local"`."""
        _check_callable("add_tool", fn)
        entry = ToolEntry(
            fn, name=name, title=title, description=description, annotations=annotations,
            icons=icons, structured_output=structured_output, meta=meta, one_time=one_time,
            run_in_thread=run_in_thread, input_schema=input_schema, task=task,
            defer_task=defer_task, tags=tags)
        return self._add_tool_entry(entry)

    def _add_tool_entry(self, entry: ToolEntry) -> ToolEntry:
        """Register a built entry (`add_tool`; a proxy's mirror, whose definition is the
        target's as published)."""
        entry.configure(self.tool_options)
        if entry.name in self.tools:
            raise ValueError(f"a tool named {entry.name!r} is already registered")
        self._check_shared("add", "tool", entry.name)
        if entry.task is not None:
            self.extensions.setdefault(TASKS_EXTENSION, {})
        self.tools[entry.name] = entry
        self._changed("tools")
        return entry

    def remove_tool(self, name: str) -> None:
        self._check_shared("remove", "tool", name)
        del self.tools[name]
        derivation = self._derivations.pop(name, None)
        if derivation is not None:
            self.registry.replaced.discard(("tools", derivation.source))
            self._scope_rules_changed()
        self._changed("tools")

    def derive_tool(
        self,
        source: str,
        *,
        name: str,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        args: Mapping[str, ArgChange] | None = None,
        wrap: Wrap | None = None,
        hide_source: bool = False,
        tags: Iterable[str] | None = None,
    ) -> None:
        """Serve a tool made from tool `source` (this server's, a mounted or a proxied
        one's): `server.derive_tool("search", name="find_docs", args={"q":
        ArgChange(name="query")}, hide_source=True)`. See `_transform` for what `args`
        and `wrap` can do. The source's required scopes apply to it. A source not
        registered yet (a proxy's, before it starts) is derived from once it is."""
        from nimblemcp.server._transform import Derivation
        from nimblemcp.server._visibility import tag_set

        if name in self.tools or name in self._derivations:
            raise ValueError(f"a tool named {name!r} is already registered")
        self._check_shared("add", "tool", name)
        derivation = Derivation(source, name, title, description, annotations, dict(args or {}),
                                wrap, None if tags is None else tag_set(tags))
        found = self.tools.get(source)
        if found is not None:
            entry = derivation.build(self.registry, found)  # a mistake in `args` raises here
            entry.configure(self.tool_options)
            self.tools[name] = entry
        self._derivations[name] = derivation
        if hide_source:
            self.registry.replaced.add(("tools", source))
        self._scope_rules_changed()
        self._changed("tools")

    def _derive_again(self) -> None:
        """Rebuild the derived tools whose source changed (or came, or went)."""
        for name, derivation in self._derivations.items():
            source = self.tools.get(derivation.source)
            if source is None:
                self.tools.pop(name, None)
                derivation.built_from = None
            elif source.definition is not derivation.built_from or name not in self.tools:
                try:
                    entry = derivation.build(self.registry, source)
                except ValueError:
                    logger.exception("cannot derive tool %r from %r as it is now", name, derivation.source)
                    self.tools.pop(name, None)
                    continue
                entry.configure(self.tool_options)
                self.tools[name] = entry

    def resource(
        self,
        uri: str,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        size: int | None = None,
        icons: list[Icon] | None = None,
        annotations: dict[str, Any] | None = None,
        meta: dict[str, Any] | None = None,
        ttl_ms: int | None = None,
        cache_scope: str | None = None,
        complete: dict[str, F] | None = None,
        tags: Iterable[str] | None = None,
    ) -> Callable[[F], F]:
        """Register a resource; a URI with `{variables}` registers a template."""
        if callable(uri) or not isinstance(uri, str):
            raise TypeError(
                "@server.resource needs the resource's URI: write @server.resource(\"scheme://path\") "
                "(or \"scheme://items/{id}\" for a template)"
            )

        def register(f: F) -> F:
            _check_callable(f"@server.resource({uri!r})", f)
            common: dict[str, Any] = {
                "name": name, "title": title, "description": description,
                "mime_type": mime_type, "icons": icons, "annotations": annotations,
                "meta": meta, "ttl_ms": ttl_ms, "cache_scope": cache_scope, "tags": tags,
            }
            if "{" in uri:
                self.add_template(TemplateEntry(uri, f, complete=complete, **common))
            else:
                self.add_resource(ResourceEntry(uri, f, size=size, **common))
            return f

        return register

    def add_resource(self, entry: ResourceEntry) -> ResourceEntry:
        if entry.uri in self.resources:
            raise ValueError(f"a resource with URI {entry.uri!r} is already registered")
        self._check_shared("add", "resource", entry.uri)
        self.resources[entry.uri] = entry
        self._changed("resources")
        return entry

    def remove_resource(self, uri: str) -> None:
        self._check_shared("remove", "resource", uri)
        del self.resources[uri]
        self._changed("resources")

    def add_template(self, entry: TemplateEntry) -> TemplateEntry:
        if entry.uri_template in self.templates:
            raise ValueError(f"a resource template {entry.uri_template!r} is already registered")
        self._check_shared("add", "resource template", entry.uri_template)
        self.templates[entry.uri_template] = entry
        self._changed("resources")
        return entry

    def remove_template(self, uri_template: str) -> None:
        self._check_shared("remove", "resource template", uri_template)
        del self.templates[uri_template]
        self._changed("resources")

    @overload
    def prompt(self, fn: F, /) -> F: ...
    @overload
    def prompt(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        icons: list[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        complete: dict[str, F] | None = None,
        tags: Iterable[str] | None = None,
    ) -> Callable[[F], F]: ...
    def prompt(
        self,
        fn: F | None = None,
        /,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        icons: list[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        complete: dict[str, F] | None = None,
        tags: Iterable[str] | None = None,
    ) -> Any:
        """Register a prompt: its string parameters are the prompt's arguments."""

        def register(f: F) -> F:
            _check_callable("@server.prompt", f)
            entry = PromptEntry(f, name=name, title=title, description=description,
                                icons=icons, meta=meta, complete=complete,  # type: ignore[arg-type]
                                tags=tags)
            self.add_prompt(entry)
            return f

        return register(fn) if fn is not None else register

    def add_prompt(self, entry: PromptEntry) -> PromptEntry:
        if entry.name in self.prompts:
            raise ValueError(f"a prompt named {entry.name!r} is already registered")
        self._check_shared("add", "prompt", entry.name)
        self.prompts[entry.name] = entry
        self._changed("prompts")
        return entry

    def remove_prompt(self, name: str) -> None:
        self._check_shared("remove", "prompt", name)
        del self.prompts[name]
        self._changed("prompts")

    # -- serving some of what is registered (`_visibility`) ----------------------------

    def disable(
        self, *, tool: str | Iterable[str] | None = None, prompt: str | Iterable[str] | None = None,
        resource: str | Iterable[str] | None = None, tags: Iterable[str] | None = None,
    ) -> None:
        """Stop serving components, by name (`resource`: a URI or URI template) or by
        tag: `server.disable(tool="deploy")`, `server.disable(tags={"beta"})`. They leave
        the lists (listeners hear `list_changed`) and calls to them fail as for an
        unknown name; `enable` brings them back. A switch by name outranks one by tag.
        While serving with shared backends every instance applies it (`_switch_sharing`).
        Unknown names raise KeyError."""
        self._switch(False, tool, prompt, resource, tags)

    def enable(
        self, *, tool: str | Iterable[str] | None = None, prompt: str | Iterable[str] | None = None,
        resource: str | Iterable[str] | None = None, tags: Iterable[str] | None = None,
    ) -> None:
        """Serve again what `disable` switched off (same arguments): `server.enable(tool="deploy")`.
        Never serves what `include_tags`/`exclude_tags` leave out."""
        self._switch(True, tool, prompt, resource, tags)

    def _switch(self, on: bool, tool: str | Iterable[str] | None, prompt: str | Iterable[str] | None,
                resource: str | Iterable[str] | None, tags: Iterable[str] | None) -> None:
        from nimblemcp.server._switch_sharing import share
        from nimblemcp.server._visibility import switch_keys, tag_set

        keys = switch_keys(self.registry, tool=tool, prompt=prompt, resource=resource)
        tag_names = tag_set(tags)
        if not keys and not tag_names:
            raise TypeError("enable/disable needs tool=, prompt=, resource= or tags=")
        switches = self._visibility.switches
        if keys:
            switches = switches.with_names(keys, on)
        if tag_names:
            switches = switches.with_tags(tag_names, on)
        share(self, switches)  # first: other instances apply it before their listeners hear
        self._adopt_switches(switches)

    def _adopt_switches(self, switches: Any, *, publish: bool = True) -> None:
        """Put `switches` in force; the lists whose served items changed are announced
        (`publish=False`: to this process only, the instance that made them told the bus)."""
        served = self.registry.served
        before = {table: list(getattr(served, table)) for table in KINDS}
        self._visibility.switches = switches
        self.registry.refresh(self._visibility)
        self.dispatcher.invalidate()
        served = self.registry.served
        kinds = sorted({"resources" if table == "templates" else table for table in KINDS
                        if list(getattr(served, table)) != before[table]})
        for kind in kinds:
            for listener in self._change_listeners:
                listener(kind)
            if publish and self.subscriptions:
                self.bus.publish(Event(kind))

    def completion(self, fn: F) -> F:
        """Register a fallback completer: `fn(ref, argument_name, value, context_args)`
        returning a list of strings (or a `{"values", "total", "hasMore"}` dict)."""
        self.registry.completer = fn
        self.dispatcher.invalidate()
        return fn

    def tool_header_rules(self, name: str, /) -> tuple[HeaderRule, ...]:
        """The `x-mcp-header` rules of tool `name`, built at registration; () for a name
        no tool has. The same tuple every call (the HTTP check caches its wire form by
        identity)."""
        tool = self.tools.get(name)
        return () if tool is None else tool.header_rules

    def _changed(self, kind: str) -> None:
        if kind == "tools" and self._derivations:
            self._derive_again()
        self.registry.refresh(self._visibility)
        self.dispatcher.invalidate()
        for listener in self._change_listeners:
            listener(kind)
        if self.subscriptions:
            self.bus.publish(Event(kind))

    def notify_resource_updated(self, uri: str) -> None:
        """Tell listeners subscribed to `uri` (or a parent of it) that it changed.

        Safe to call from any thread."""
        if self.subscriptions:
            self.bus.publish(Event("updated", uri))
        for listener in self._update_listeners:
            listener(uri)

    def mount(self, other: Server, namespace: str | None = None) -> None:
        """Serve `other`'s tools, prompts and resources from this server, renamed
        under `namespace`: tool/prompt `x` -> `namespace_x`, resource `s://a` ->
        `s://namespace/a`. Kept in step with `other` (registrations, resource updates);
        its lifespan runs inside this one's; its handlers see `ctx.lifespan` of
        `other`. See `nimblemcp.server._mount`."""
        from nimblemcp.server._mount import Mount, check_namespace, mounts_below, prefix_uri

        self._check_shared("mount", "server", other.name)
        if other is self:
            raise ValueError("a server cannot mount itself")
        if id(self) in mounts_below(other):
            raise ValueError(f"server {other.name!r} already serves {self.name!r} (a mount cycle)")
        if other in self.mounted:
            raise ValueError(f"server {other.name!r} is already mounted on {self.name!r}")
        check_namespace(namespace)
        link = Mount(self.registry, other.registry, namespace, other, self.name, other.name)
        for kind in ("tools", "prompts", "resources"):
            link.sync(kind)
        for ext, value in other.extensions.items():
            self.extensions.setdefault(ext, value)
        self.mounted.append(other)
        self._mount_links.append(link)

        def on_change(kind: str) -> None:
            link.sync(kind)
            self._changed(kind)

        other._change_listeners.append(on_change)
        other._update_listeners.append(lambda uri: self.notify_resource_updated(prefix_uri(uri, namespace)))
        for kind in ("tools", "prompts", "resources"):
            self._changed(kind)
        other._hosts.append(self)  # `other`'s later changes are this server's too
        self._scope_rules_changed()  # its `require_scopes` rules, under the new names

    def changes(self) -> Changes | None:
        """A new subscription to list changes and resource updates (None when
        `ListenOptions(enabled=False)`); see `nimblemcp._port.Changes`. Only those kinds of
        event reach it (a `Match`), so other traffic on the bus (task changes) neither
        wakes it nor fills its queue."""
        return self.bus.subscribe(self.config.listen.queue, match=_CHANGES) if self.subscriptions else None

    def close_listeners(self) -> None:
        """End every open `subscriptions/listen` gracefully (e.g. at shutdown, SUB-09);
        while `move_listeners` moves them they end by themselves, within its window."""
        if not self.moving:
            self.bus.close_all()

    def move_listeners(self, window: float) -> bool:
        """A rolling restart began (SIGTERM under `run_http`): every open listen is told
        to move to another instance, make-before-break, and ends once it has (at most
        `window` seconds); see `server/_subscriptions.py`. False when the bus cannot
        reach this instance's listens alone: nothing was done."""
        from nimblemcp.server._subscriptions import move_listeners

        return move_listeners(self, window)

    def drain(self, grace: float) -> None:
        """A graceful stop began (SIGTERM under `run_http`; SIGTERM or the end of stdin
        on stdio): background tasks running now may finish within `grace` seconds; when
        the server stops, those still running are marked failed (see `stopping`). A task
        a request still in flight creates meanwhile gets the same deadline. A later call
        may only bring the deadline nearer (`drain(0)`: stop waiting, also while
        `stopping` waits)."""
        if self._tasks is not None or any(tool.task is not None for tool in self.tools.values()):
            self.tasks.drain(grace)

    def _following(self) -> AbstractAsyncContextManager[None]:
        """While the lifespan runs: apply the switches other instances make (`enable`,
        `disable`; see `_switch_sharing`). Entered by the lifespan."""
        from nimblemcp.server._switch_sharing import following

        return following(self)

    async def stopping(self) -> None:
        """The server stops (its lifespan's last exit, before the lifespan's own
        shut-down): background tasks still running after the drain's grace (none
        without a drain) are marked failed at once, the change published and their
        leases released, instead of staying `working` until a lease lapses; and
        registrations no longer count as while serving; listens moved away are over."""
        self.served = False
        self.moving = False
        if self._tasks is not None:
            await self._tasks.settle()

    async def stopped(self) -> None:
        """The server stopped (after its lifespan's own shut-down): events published
        until now leave the process before it may exit; a bus that sends them
        elsewhere (Redis) is flushed, for at most a few seconds. Backends the server
        opened itself from the environment are then closed (see `_own_backends`)."""
        bus = self.bus
        if type(bus) is not InProcessBus:  # the default has nothing to flush (and no Protocol check to load)
            from nimblemcp.backends.bus import FlushingBus

            if isinstance(bus, FlushingBus):
                await bus.flush()
        if self._opened is not None:
            from nimblemcp.server._own_backends import close_opened

            await close_opened(self)

    @property
    def tasks(self) -> TaskManager:
        """Background tasks of the tasks extension; built on first use."""
        if self._tasks is None:
            from nimblemcp.server._tasks import TaskManager

            self._tasks = TaskManager(self, self._task_options)
        return self._tasks

    @property
    def sealer(self) -> Sealer:
        """Seals requestState; built on first use so MRTR-free servers pay nothing."""
        if self._sealer is None:
            from nimblemcp.server._sealing import Sealer

            self._sealer = Sealer(self.audience, self._state_keys, self.state_options.ttl,
                                  self.state_options.max_state_size)
        return self._sealer

    # -- what the server advertises ---------------------------------------------------

    def capabilities(self) -> dict[str, Any]:
        """Capabilities matching what is registered (DISC-04)."""
        return self.registry.capabilities(subscriptions=self.subscriptions, logging=self.config.logging)

    def describe(self) -> dict[str, Any]:
        """`capabilities`, `serverInfo` and `instructions`: what a handshake says."""
        result: dict[str, Any] = {"capabilities": self.dispatcher.capabilities, "serverInfo": self.info}
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    # -- running -----------------------------------------------------------------------

    def lifespan_context(self, app: Any = None, /) -> AbstractAsyncContextManager[Any]:
        """Start the server's lifespan on entry, stop it on exit; yields its value.

        Every serving entry point enters it; a host framework that mounts the ASGI app
        enters it from its own lifespan: `Starlette(lifespan=server.lifespan_context)`
        (given `app`, as such a host does, it yields None). Entries nest: the lifespan runs
        once, until the last one leaves. Raises `StartupError` when start-up fails."""
        return self._lifespan.context(app)

    def route(
        self, path: str, methods: tuple[str, ...] | list[str] = ("GET",), *, public: bool = False,
    ) -> Callable[[F], F]:
        """Serve a plain HTTP route beside the MCP endpoint of `asgi_app()` (e.g. a
        health or metrics page): `@server.route("/status")` on `fn()` or `fn(scope)`,
        sync (keep it quick) or async, returning a dict or list (JSON), str, bytes or
        `(status, body)`. Paths are relative to the app's mount point. Served with
        `auth=`, a route needs a valid token like the endpoint (the verified token is
        `scope["nimblemcp.access"]`) unless `public=True`."""
        if not path.startswith("/"):
            raise ValueError(f"route path {path!r} must start with '/'")

        def register(fn: F) -> F:
            if not callable(fn):
                raise TypeError(f"@server.route({path!r}) needs a function, got {fn!r}")
            self.routes[path] = (fn, tuple(methods), public)
            return fn

        return register

    @property
    def ready(self) -> bool:
        """Ready to serve: the lifespan (if any) has started (the `/readyz` probe)."""
        return self._lifespan.started or not self._lifespan.needed

    @property
    def lifespan_state(self) -> Any:
        """What the lifespan yielded (None without a lifespan); a RuntimeError that says
        how to start it when the server has a lifespan that is not running."""
        return self._lifespan.current()

    async def handle(
        self, message: Any, emit: Callable[[dict[str, Any]], None] | None = None,
        subject: str | None = None,
    ) -> dict[str, Any] | None:
        """Turn one decoded message into its response (None for notifications)."""
        return await self.dispatcher.handle(message, emit, subject)

    def asgi_app(self, path: str = "/mcp", **options: Any) -> Any:
        """This server as a plain ASGI app with Origin/Host, body and header guards
        (see `nimblemcp.serving.asgi_app` for the options)."""
        from nimblemcp.serving import asgi_app

        return asgi_app(self, path=path, **options)

    def run(self, transport: str = "stdio", **options: Any) -> None:
        """Serve until stdin closes (stdio) or the process is stopped (http); see
        `nimblemcp.serving.run`."""
        from nimblemcp.serving import run

        run(self, transport, **options)

    # -- servers made from an HTTP API -------------------------------------------------

    @classmethod
    def from_openapi(cls, spec: Any, *, base_url: str | None = None, http: Any = None, **options: Any) -> Server:
        """A server whose tools call the HTTP API an OpenAPI 3.0/3.1 document (a dict, a
        file or a URL) describes: `Server.from_openapi("openapi.yaml",
        base_url="https://api.example.com")`. See `nimblemcp.openapi.from_openapi`."""
        from nimblemcp.openapi import from_openapi

        return from_openapi(spec, base_url=base_url, http=http, **options)

    @classmethod
    def from_fastapi(cls, app: Any, **options: Any) -> Server:
        """A server whose tools call a FastAPI app in-process (over ASGI, no port):
        `Server.from_fastapi(app)`. See `nimblemcp.openapi.from_fastapi`."""
        from nimblemcp.openapi import from_fastapi

        return from_fastapi(app, **options)
