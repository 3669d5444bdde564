"""The request path: `_meta` check, version, method table, handler, result shaping.

`prepare()` does every check that needs no I/O, so the HTTP transport can compare
headers with the body before anything runs; `run()` runs the handler and shapes the
result (`resultType`, caching hints, `serverInfo`). The two are the port's
`Core.prepare` / `Core.execute` (see `nimblemcp._port`). Eras are not known here: a
legacy session hands in the `RequestMeta` it built and a back channel (`io.ask`),
and shapes results itself. List payloads are built once per registry change.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import os
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from nimblemcp._port import Ask, Emit, Handler, Prepared, RequestIO
from nimblemcp.errors import (
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ProtocolError,
    StateTooLarge,
    UnsupportedProtocolVersion,
)
from nimblemcp.jsonrpc import classify, error_response, request_id_of
from nimblemcp.server._context import Context
from nimblemcp.server._logbridge import current
from nimblemcp.server._mrtr import InputRequired, check_responses, run_answering
from nimblemcp.types._meta import (
    META_HINT,
    SERVER_INFO,
    RequestMeta,
    parse_request_meta,
)
from nimblemcp.types._versions import MODERN_VERSIONS
from nimblemcp.types.methods import METHODS, MethodSpec

if TYPE_CHECKING:
    from nimblemcp.backends._store import KeyValueStore
    from nimblemcp.backends.bus import NotificationBus
    from nimblemcp.server._config import ServerConfig
    from nimblemcp.server._middleware import Middleware
    from nimblemcp.server._registry import Registry
    from nimblemcp.server._sealing import Sealer
    from nimblemcp.server._tasks import TaskManager

logger = logging.getLogger("nimblemcp.server")

__all__ = ["Ask", "Dispatcher", "Emit", "Handler", "Prepared"]

INVALID_STATE = "Invalid or expired requestState"


class _CallIO:
    """The `RequestIO` of `handle()`: an optional emit callback and a subject."""

    __slots__ = ("_emit", "subject")
    loop = None
    ask = None
    close_stream = None

    def __init__(self, emit: Emit | None, subject: str | None) -> None:
        self._emit = emit
        self.subject = subject

    def emit(self, message: dict[str, Any], /) -> None:
        if self._emit is not None:
            self._emit(message)


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode()


def _offset(cursor: Any, size: int) -> int:
    if not isinstance(cursor, str):
        raise InvalidParams("cursor must be a string")
    try:
        text = base64.urlsafe_b64decode(cursor.encode()).decode()
        offset = int(text[2:]) if text.startswith("o:") else -1
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidParams("Invalid cursor") from None
    if not 0 <= offset <= size:
        raise InvalidParams("Invalid cursor")
    return offset


class Host(Protocol):
    """What the request path uses of its server beside the registry and the
    configuration: the shared state it runs on, built on first use or replaced when it
    is served with backends from the environment (a `nimblemcp.Server`; handlers see
    it as `ctx.server`)."""

    @property
    def store(self) -> KeyValueStore: ...
    @property
    def bus(self) -> NotificationBus: ...
    @property
    def sealer(self) -> Sealer: ...
    @property
    def tasks(self) -> TaskManager: ...
    @property
    def moving(self) -> bool:
        """A rolling restart is moving this instance's listens away."""
        ...
    @property
    def scope_rules(self) -> Mapping[tuple[str, str], frozenset[str]]:
        """(method, name or URI) -> the scopes a caller needs (`require_scopes`)."""
        ...
    def scopes_needed(self, method: str, target: str | None) -> frozenset[str]: ...


# A list's items are used by this method (what `require_scopes` rules name).
_USED_BY = {"tools/list": "tools/call", "prompts/list": "prompts/get",
            "resources/list": "resources/read", "resources/templates/list": "resources/read"}


class Dispatcher:
    """Owns the handler table and the precomputed list payloads of one server: reads
    its `registry` and frozen `config`, and the shared state of its `host`."""

    def __init__(self, registry: Registry, config: ServerConfig, host: Host) -> None:
        self.registry = registry
        self.config = config
        self.host = host
        self.supported_versions: list[str] = list(MODERN_VERSIONS)
        self.handlers: dict[str, Handler] = {
            "server/discover": self._discover,
            "tools/list": self._list_tools,
            "tools/call": self._call_tool,
            "resources/list": self._list_resources,
            "resources/templates/list": self._list_templates,
            "resources/read": self._read_resource,
            "prompts/list": self._list_prompts,
            "prompts/get": self._get_prompt,
            "completion/complete": self._complete,
        }
        if config.listen.enabled:
            self.handlers["subscriptions/listen"] = self._listen
        self.handlers["tasks/get"] = lambda ctx, p: host.tasks.get(ctx, p)
        self.handlers["tasks/update"] = lambda ctx, p: host.tasks.update(ctx, p)
        self.handlers["tasks/cancel"] = lambda ctx, p: host.tasks.cancel(ctx, p)
        # The bare handlers; `handlers` holds them inside the middleware chain, if any.
        self.bare: dict[str, Handler] = dict(self.handlers)
        self._pages: dict[Any, Any] = {}
        self.busy = 0  # requests whose handler is running (for max_inflight)
        self._caps: dict[str, Any] | None = None
        # method -> (spec, handler) for every method this server answers now (its
        # capability advertised): one look-up per request; rebuilt after a change.
        self._routes: dict[str, tuple[MethodSpec, Handler]] | None = None
        self._server_meta = {SERVER_INFO: config.info}

    def reconfigure(self, config: ServerConfig) -> None:
        """Serve with `config` from now on (a setting of the server changed)."""
        self.config = config
        self._server_meta = {SERVER_INFO: config.info}
        self.invalidate()

    def use(self, middleware: list[Middleware]) -> None:
        """Rebuild the handler table inside `middleware` (at registration, not per request)."""
        from nimblemcp.server._middleware import chain

        self.handlers = {m: chain(h, middleware) if middleware else h for m, h in self.bare.items()}
        self._routes = None

    def invalidate(self) -> None:
        """Forget precomputed payloads; called on every registry change."""
        self._pages.clear()
        self._caps = None
        self._routes = None

    def _build_routes(self) -> dict[str, tuple[MethodSpec, Handler]]:
        caps = self.capabilities
        routes: dict[str, tuple[MethodSpec, Handler]] = {}
        for method, handler in self.handlers.items():
            spec = METHODS.get(method)
            if spec is not None and (spec.capability is None or spec.capability in caps):
                routes[method] = (spec, handler)
        self._routes = routes
        return routes

    @property
    def capabilities(self) -> dict[str, Any]:
        caps = self._caps
        if caps is None:
            config = self.config
            caps = self._caps = self.registry.capabilities(
                subscriptions=config.listen.enabled, logging=config.logging)
        return caps

    # -- the pipeline --------------------------------------------------------------------

    def prepare(self, message: Any, meta: RequestMeta | None = None, /) -> Prepared:
        """Checks in the spec's order: shape, `_meta`, version, method (CHECKLIST pipeline).

        With `meta` (built by a legacy session from its handshake), only the method
        and its capability gate are checked."""
        method: str = message["method"]
        params = message.get("params")
        if meta is None:
            if params is None:
                raise InvalidParams("params with _meta is required" + META_HINT)
            meta = parse_request_meta(params)
            if meta.version not in self.supported_versions:
                raise UnsupportedProtocolVersion(meta.version, self.supported_versions)
        routes = self._routes
        if routes is None:
            routes = self._build_routes()
        route = routes.get(method)
        if route is None:
            if method not in METHODS or method not in self.handlers:
                raise MethodNotFound(f"Method not found: {method}")
            raise MethodNotFound(f"Method not supported by this server: {method}")
        spec, handler = route
        return Prepared(message["id"], method, params, spec, handler, meta)

    async def execute(
        self, req: Prepared, emit: Emit | None = None, subject: str | None = None
    ) -> dict[str, Any]:
        """`run` for an in-process caller with an emit callback instead of a RequestIO."""
        return await self.run(req, _CallIO(emit, subject))

    async def run(self, req: Prepared, io: RequestIO, /) -> dict[str, Any]:
        """Run a prepared request (the port's `Core.execute`); always returns a response
        message: the handler's result shaped (`_shape`), a paused MRTR round
        (`_paused`), or the error it raised (an unexpected one masked).

        An MRTR method first resumes its earlier rounds (`_resume`) and sheds load beyond
        `max_inflight` (`_shed_load`). With `io.ask` (a peer with a back channel) a
        handler's questions are sent to the client as real requests and the handler
        re-runs with the answers (`_answer`), instead of ending the round with
        `input_required`. `io.loop`, when the transport has it, saves looking up the
        running loop again."""
        ctx = Context(self.host, req, io, io.loop)
        token = current.set(ctx) if req.meta.log_level is not None and self.config.forward_logs else None
        try:
            if req.spec.input_required:
                params = req.params
                # A first round carries neither: nothing to load, no coroutine to run.
                if params.get("inputResponses") is not None or params.get("requestState") is not None:
                    await self._resume(ctx, req, io.subject)
                self._shed_load()
            if req.method == "subscriptions/listen":  # long-lived: not load
                result = await req.handler(ctx, req.params)
            else:
                self.busy += 1
                try:
                    result = await self._answer(ctx, req, io.ask)
                finally:
                    self.busy -= 1
        except InputRequired as asked:
            return self._paused(ctx, req, io.subject, asked)
        except ProtocolError as exc:
            return error_response(req.id, exc)
        except asyncio.CancelledError:
            ctx._cancel()
            raise
        except Exception:  # masked: the text may hold secrets; the log has it by reference
            ref = os.urandom(4).hex()
            logger.exception("handler for %s failed [ref %s]", req.method, ref)
            return error_response(req.id, InternalError(f"Internal error (reference {ref})"))
        finally:
            ctx._done = True
            if token is not None:
                current.reset(token)
        return {"jsonrpc": "2.0", "id": req.id, "result": self._shape(req, result, io.subject)}

    def _shed_load(self) -> None:
        """Load shedding (MRTR-02): beyond `max_inflight` running handlers, a state-only
        checkpoint; the client retries after its backoff and resumes from the same state."""
        limit = self.config.max_inflight
        if limit is not None and self.busy >= limit:
            raise InputRequired({})

    def _answer(self, ctx: Context, req: Prepared, ask: Ask | None) -> Awaitable[dict[str, Any]]:
        """The method's handler at work on this request; with a back channel, an MRTR
        method's questions go to the peer as requests (`run_answering`)."""
        if ask is not None and req.spec.input_required:
            return run_answering(lambda: req.handler(ctx, req.params), ctx, ask)
        return req.handler(ctx, req.params)

    def _shape(self, req: Prepared, result: dict[str, Any], subject: str | None) -> dict[str, Any]:
        """`_meta.serverInfo`, `resultType`, and the caching hints where the method's
        results carry them."""
        if "_meta" in result:
            if SERVER_INFO not in result["_meta"]:
                result["_meta"] = {**result["_meta"], **self._server_meta}
        else:
            result["_meta"] = self._server_meta
        if req.spec.cacheable:
            self._hints(req.method, result, subject)
        elif "resultType" not in result:
            result["resultType"] = "complete"
        return result

    def _paused(
        self, ctx: Context, req: Prepared, subject: str | None, asked: InputRequired
    ) -> dict[str, Any]:
        """The response of a handler that asked for input: an `input_required` result
        on MRTR methods (MRTR-01), an internal error on any other."""
        if not req.spec.input_required:
            logger.error("%s asked for client input, which only MRTR methods may", req.method)
            return error_response(req.id, InternalError())
        try:
            result = self._input_required(ctx, req, subject, asked)
        except StateTooLarge as exc:  # the tool author's bug: say so in the log too
            logger.error("%s %r: %s", req.method, req.params.get("name") or req.params.get("uri"), exc)
            return error_response(req.id, exc)
        return {"jsonrpc": "2.0", "id": req.id, "result": self._shape(req, result, subject)}

    async def handle(
        self, message: Any, emit: Emit | None = None, subject: str | None = None
    ) -> dict[str, Any] | None:
        try:
            kind = classify(message)
        except InvalidRequest as exc:
            return error_response(request_id_of(message), exc)
        if kind != "request":
            return None  # notifications and stray responses are never answered
        try:
            req = self.prepare(message)
        except ProtocolError as exc:
            return error_response(message["id"], exc)
        return await self.run(req, _CallIO(emit, subject))

    # -- MRTR: resuming and pausing a request -----------------------------------------------

    def _binding(self, req: Prepared, subject: str | None) -> dict[str, Any]:
        """What a requestState is bound to: method, target, argument digest, subject."""
        p = req.params
        target = p.get("uri") if req.method == "resources/read" else p.get("name")
        from nimblemcp.server._sealing import digest  # MRTR only: keep hashlib off start-up

        return {"m": req.method, "t": target, "d": digest(p.get("arguments") or {}), "sub": subject}

    def _one_time(self, req: Prepared) -> bool:
        if self.config.one_time_state:
            return True
        if req.method == "tools/call":
            tool = self.registry.served.tools.get(req.params.get("name"))  # type: ignore[arg-type]
            return tool is not None and tool.one_time
        return False

    async def _resume(self, ctx: Context, req: Prepared, subject: str | None) -> None:
        """Load `inputResponses` and open `requestState` (MRTR-11/12/13)."""
        ctx._responses = responses = check_responses(req.params.get("inputResponses"))
        token = req.params.get("requestState")
        if token is None:
            return
        from nimblemcp.server._sealing import StateError

        try:
            sealed, nonce = self.host.sealer.open(token, self._binding(req, subject))
        except StateError as exc:
            logger.warning("refused requestState for %s: %s", req.method, exc)
            raise InvalidParams(INVALID_STATE) from None
        if self._one_time(req) and not await self.host.store.set_if_absent(
            "rs:" + nonce, b"1", self.config.state_ttl
        ):
            logger.warning("refused replayed one-time requestState for %s", req.method)
            raise InvalidParams(INVALID_STATE)
        # Answers of earlier rounds ride in the sealed state, so a re-entrant handler
        # finds them although the client sends only this round's answers.
        ctx.state = sealed.get("state") or {}
        ctx._responses = {**(sealed.get("answers") or {}), **responses}

    def _input_required(
        self, ctx: Context, req: Prepared, subject: str | None, asked: InputRequired
    ) -> dict[str, Any]:
        result: dict[str, Any] = {"resultType": "input_required"}
        if asked.requests:
            result["inputRequests"] = asked.requests
        # Always sealed, even when empty: it binds the next round to this request.
        result["requestState"] = self.host.sealer.seal(
            self._binding(req, subject), {"state": ctx.state, "answers": ctx._responses}
        )
        return result

    def _hints(self, method: str, result: dict[str, Any], subject: str | None) -> None:
        """`resultType`, and the caching hints of a complete result without its own."""
        kind = result.setdefault("resultType", "complete")
        if kind == "complete" and "ttlMs" not in result:
            ttl, scope = self.config.cache_hints[method]
            if subject is not None and method not in self.config.explicit_hints:
                # An authenticated answer may be user-specific: never shared across
                # authorization contexts unless the server said so (CACHE-07/10).
                scope = "private"
            result["ttlMs"] = ttl
            result["cacheScope"] = scope

    # -- handlers ------------------------------------------------------------------------

    async def _discover(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = {
            "supportedVersions": self.supported_versions,
            "capabilities": self.capabilities,
        }
        if self.config.instructions:
            result["instructions"] = self.config.instructions
        return result

    def _page(self, ctx: Context, method: str, key: str, registry: Mapping[str, Any],
              params: dict[str, Any]) -> dict[str, Any]:
        """One page of a list; pages are built once per registry change. Where
        `require_scopes` rules are set, a caller sees only what its scopes let it use
        (pages then built per set of scopes held)."""
        cursor = params.get("cursor")
        held: frozenset[str] | None = None
        if self.host.scope_rules:
            held = frozenset(getattr(ctx.principal, "scopes", None) or ())
        # Keyed by the cursor's JSON value itself: a client sending the string "None"
        # must not be served the first page (PAG-03). Any other type is refused below.
        if cursor is None:
            cache_key: Any = (method, None, held)
        elif isinstance(cursor, str):
            cache_key = (method, "str", cursor, held)
        else:
            cache_key = None
        page = self._pages.get(cache_key) if cache_key is not None else None
        if page is None:
            everything = self._pages.get((method, held))
            if everything is None:
                everything = [x.definition for name, x in registry.items()
                              if held is None or self.host.scopes_needed(_USED_BY[method], name) <= held]
                if len(self._pages) < 1024:  # bounded: scope sets come from tokens
                    self._pages[(method, held)] = everything
            size = self.config.page_size
            start = 0 if cursor is None else _offset(cursor, len(everything))
            if size is None:
                page = {key: everything[start:] if start else everything}
            else:
                page = {key: everything[start : start + size]}
                if start + size < len(everything):
                    page["nextCursor"] = _cursor(start + size)
            if len(self._pages) < 1024:  # bounded: cursors come from clients
                self._pages[cache_key] = page
        return dict(page)

    async def _list_tools(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        return self._page(ctx, "tools/list", "tools", self.registry.served.tools, params)

    async def _list_resources(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        return self._page(ctx, "resources/list", "resources", self.registry.served.resources, params)

    async def _list_templates(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        return self._page(ctx, "resources/templates/list", "resourceTemplates", self.registry.served.templates, params)

    async def _list_prompts(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        return self._page(ctx, "prompts/list", "prompts", self.registry.served.prompts, params)

    def _call_tool(self, ctx: Context, params: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        """Checks the request at once and hands back the tool's own call to await."""
        name = params.get("name")
        if not isinstance(name, str):
            raise InvalidParams("tools/call needs a string 'name'")
        tool = self.registry.served.tools.get(name)
        if tool is None:
            raise InvalidParams(f"Unknown tool: {name}")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            raise InvalidParams("tools/call 'arguments' must be an object")
        if tool.task is not None:
            from nimblemcp.server._tasks import call_tool

            return call_tool(self.host.tasks, ctx, tool, arguments)
        invoked: Awaitable[dict[str, Any]] = tool.invoke(ctx, arguments)
        return invoked

    async def _read_resource(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise InvalidParams("resources/read needs a string 'uri'")
        entry = self.registry.served.resources.get(uri)
        if entry is not None:
            contents = await entry.read(ctx)
            ttl, scope = entry.ttl_ms, entry.cache_scope
        else:
            template, values = self.registry.served.template_for(uri)
            contents = await template.read(ctx, uri, values)
            ttl, scope = template.ttl_ms, template.cache_scope
        result: dict[str, Any] = {"resultType": "complete", "contents": contents}
        if ttl is not None or scope is not None:
            d_ttl, d_scope = self.config.cache_hints["resources/read"]
            result["ttlMs"] = d_ttl if ttl is None else ttl
            result["cacheScope"] = scope or d_scope
        return result

    async def _get_prompt(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str):
            raise InvalidParams("prompts/get needs a string 'name'")
        prompt = self.registry.served.prompts.get(name)
        if prompt is None:
            raise InvalidParams(f"Unknown prompt: {name}")
        result: dict[str, Any] = await prompt.invoke(ctx, params.get("arguments"))
        return result

    # Completion and subscriptions are loaded on their first request, not at every
    # server's start (issue 18).

    async def _complete(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        from nimblemcp.server._completion import complete

        return await complete(self.registry, params)

    async def _listen(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        from nimblemcp.server._subscriptions import listen

        host = self.host
        return await listen(ctx, params, bus=host.bus, options=self.config.listen,
                            capabilities=self.capabilities, tasks=lambda: host.tasks,
                            moving=lambda: host.moving)
