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
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from nimblemcp._loop import running_loop
from nimblemcp._port import Ask, Emit, Handler, Prepared, RequestIO
from nimblemcp.errors import (
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ProtocolError,
    ResourceNotFound,
    StateTooLarge,
    UnsupportedProtocolVersion,
)
from nimblemcp.jsonrpc import classify, error_response, request_id_of
from nimblemcp.server._context import Context
from nimblemcp.server._invoke import LANE_ASYNC, LANE_INLINE
from nimblemcp.server._logbridge import current
from nimblemcp.server._mrtr import InputRequired, check_responses, run_answering, warn_dropped
from nimblemcp.server._prompts import PromptEntry
from nimblemcp.server._resources import ResourceEntry, TemplateEntry, to_contents
from nimblemcp.server._tools import ToolEntry
from nimblemcp.server._workers import _workers
from nimblemcp.types._meta import (
    CLIENT_CAPABILITIES,
    CLIENT_INFO,
    LOG_LEVEL,
    META_HINT,
    PROGRESS_TOKEN,
    PROTOCOL_VERSION,
    SERVER_INFO,
    RequestMeta,
    parse_request_meta,
)
from nimblemcp.types._versions import MODERN_VERSIONS
from nimblemcp.types.methods import METHODS, MethodSpec

if TYPE_CHECKING:
    from nimblemcp.server._middleware import Middleware
    from nimblemcp.server._server import Server

logger = logging.getLogger("nimblemcp.server")

__all__ = ["Ask", "Dispatcher", "Emit", "Handler", "Prepared"]

INVALID_STATE = "Invalid or expired requestState"
# A sync tool's worker hop, one function (`Workers.call`) under two names: `_submit`
# for keyword jobs, (loop, fn, (), kwargs); `_call` for values by position, (loop, fn, values).
_submit = _call = _workers.call
_NO_ARGUMENTS: dict[str, Any] = {}  # a call without `arguments` (read only: `bind` copies)
# Which lean lane of `Dispatcher.run` a route may take (small ints: compared by identity).
# `_PLAIN`: a built-in answer that needs neither a Context nor an await (discover, lists).
_GENERAL, _CALL, _PROMPT, _READ, _PLAIN = 0, 1, 2, 3, 4


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


# Builds a NamedTuple without its generated Python-level __new__ (~100 ns less per
# request); the fields are passed in declaration order.
_tuple_new = tuple.__new__


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


# Completion and subscriptions are loaded on their first request, not at every
# server's start (issue 18).


def _complete(server: Server, params: dict[str, Any]) -> Awaitable[dict[str, Any]]:
    from nimblemcp.server._completion import complete

    return complete(server, params)


async def _listen(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    from nimblemcp.server._subscriptions import listen

    return await listen(ctx, params)


class Dispatcher:
    """Owns the handler table and the precomputed list payloads of one Server."""

    def __init__(self, server: Server) -> None:
        self.server = server
        # The bare handlers of the methods with a lean lane, one bound method each for
        # good: `run` knows by their identity that no middleware wraps the call.
        tool_call: Handler = self._call_tool
        read: Handler = self._read_resource
        get_prompt: Handler = self._get_prompt
        discover: Handler = self._discover
        list_tools: Handler = self._list_tools
        list_resources: Handler = self._list_resources
        list_templates: Handler = self._list_templates
        list_prompts: Handler = self._list_prompts
        self._lanes: dict[Handler, int] = {
            tool_call: _CALL, get_prompt: _PROMPT, read: _READ, discover: _PLAIN, list_tools: _PLAIN,
            list_resources: _PLAIN, list_templates: _PLAIN, list_prompts: _PLAIN,
        }
        # The plain lane's answers, by method: what the handlers above await, called
        # directly (a fresh result dict from the params; all of them cacheable).
        self._plain: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "server/discover": self._discover_now,
            "tools/list": self._tools_page,
            "resources/list": self._resources_page,
            "resources/templates/list": self._templates_page,
            "prompts/list": self._prompts_page,
        }
        self.supported_versions: list[str] = list(MODERN_VERSIONS)
        self.handlers: dict[str, Handler] = {
            "server/discover": discover,
            "tools/list": list_tools,
            "tools/call": tool_call,
            "resources/list": list_resources,
            "resources/templates/list": list_templates,
            "resources/read": read,
            "prompts/list": list_prompts,
            "prompts/get": get_prompt,
            "completion/complete": lambda ctx, p: _complete(server, p),
        }
        if server.subscriptions:
            self.handlers["subscriptions/listen"] = _listen
        self.handlers["tasks/get"] = lambda ctx, p: server.tasks.get(ctx, p)
        self.handlers["tasks/update"] = lambda ctx, p: server.tasks.update(ctx, p)
        self.handlers["tasks/cancel"] = lambda ctx, p: server.tasks.cancel(ctx, p)
        # The bare handlers; `handlers` holds them inside the middleware chain, if any.
        self.bare: dict[str, Handler] = dict(self.handlers)
        self._pages: dict[Any, Any] = {}
        self.busy = 0  # requests whose handler is running (for max_inflight)
        self._caps: dict[str, Any] | None = None
        # method -> (spec, handler, lean lane) for every method this server answers now
        # (its capability advertised): one look-up per request; rebuilt after a change.
        self._routes: dict[str, tuple[MethodSpec, Handler, int]] | None = None
        self._server_meta = {SERVER_INFO: server.info}

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

    def _build_routes(self) -> dict[str, tuple[MethodSpec, Handler, int]]:
        caps = self.capabilities
        routes: dict[str, tuple[MethodSpec, Handler, int]] = {}
        for method, handler in self.handlers.items():
            spec = METHODS.get(method)
            if spec is not None and (spec.capability is None or spec.capability in caps):
                # A handler inside middleware is not a bare one: no lean lane.
                routes[method] = (spec, handler, self._lanes.get(handler, _GENERAL))
        self._routes = routes
        return routes

    @property
    def capabilities(self) -> dict[str, Any]:
        caps = self._caps
        if caps is None:
            caps = self._caps = self.server.capabilities()
        return caps

    # -- the pipeline --------------------------------------------------------------------

    def prepare(self, message: Any, meta: RequestMeta | None = None, /) -> Prepared:
        """Checks in the spec's order: shape, `_meta`, version, method (CHECKLIST pipeline).

        With `meta` (built by a legacy session from its handshake), only the method
        and its capability gate are checked."""
        rid = message["id"]
        method: str = message["method"]
        params = message.get("params")
        version: Any
        caps: Any
        raw: Any
        if meta is not None:
            version, caps, info, rank, token, raw = meta
        else:
            # The common `_meta` (version and capabilities, maybe clientInfo; no log
            # level, no progress token) is read here; anything else, well-formed or
            # not, goes through `parse_request_meta`, the one place its rules live.
            raw = params.get("_meta") if type(params) is dict else None
            if type(raw) is dict and LOG_LEVEL not in raw and PROGRESS_TOKEN not in raw:
                version = raw.get(PROTOCOL_VERSION)
                caps = raw.get(CLIENT_CAPABILITIES)
                if type(version) is not str or type(caps) is not dict:
                    version, caps, info, rank, token, raw = self._parse_meta(params)
                else:
                    info = raw.get(CLIENT_INFO)
                    if type(info) is not dict and not isinstance(info, dict):
                        info = None
                    rank = token = None
            else:
                version, caps, info, rank, token, raw = self._parse_meta(params)
            if version not in self.supported_versions:
                raise UnsupportedProtocolVersion(version, self.supported_versions)
        routes = self._routes
        if routes is None:
            routes = self._build_routes()
        route = routes.get(method)
        if route is None:
            if method not in METHODS or method not in self.handlers:
                raise MethodNotFound(f"Method not found: {method}")
            raise MethodNotFound(f"Method not supported by this server: {method}")
        spec, handler, lane = route
        return _tuple_new(Prepared, (rid, method, params, spec, handler, version, caps, info, rank, token, raw, lane))

    @staticmethod
    def _parse_meta(params: Any) -> RequestMeta:
        if params is None:
            raise InvalidParams("params with _meta is required" + META_HINT)
        return parse_request_meta(params)

    async def execute(
        self, req: Prepared, emit: Emit | None = None, subject: str | None = None
    ) -> dict[str, Any]:
        """`run` for an in-process caller with an emit callback instead of a RequestIO."""
        return await self.run(req, _CallIO(emit, subject))

    async def run(self, req: Prepared, io: RequestIO, /) -> dict[str, Any]:
        """Run a prepared request (the port's `Core.execute`); always returns a response message.

        With `io.ask` (a peer with a back channel) a handler's questions are sent to
        the client as real requests and the handler re-runs with the answers, instead
        of ending the round with `input_required`. `io.loop`, when the transport has
        it, saves looking up the running loop again.

        The lean lane: a `tools/call`, `prompts/get` or `resources/read` that nothing
        but the function itself needs to see (no middleware, no back channel, no log
        forwarding for this request, no MRTR round to resume, no load shedding, a
        plain function that takes no Context and, for tools, is not a task tool) runs
        the function right here, without a Context and without the frames of the
        method's handler and `Invocable.invoke`, whose policy it repeats exactly (a
        tool that takes a Context, not a task tool, runs here too, with one built here):
        protocol errors and cancellation propagate, any other exception becomes the
        tool's `failed` answer (TOOL-08) or, for prompts and resources, the masked
        -32603 below. A resource or template that takes a Context, once found, runs
        through its own `invoke` with one built here (the search is not repeated); so
        does a prompt that takes one. Under the same conditions `server/discover` and the four lists (the plain lane)
        answer from the dispatcher's own functions, with no Context and no coroutine.
        Everything else takes the general lane below it."""
        # Once: a field read is a descriptor call.
        rid, method, params, spec, handler, _, _, _, log_level, _, _, kind = req
        server = self.server
        ctx: Context | None = None
        token = None
        try:
            entry: Any = None
            if kind is not _GENERAL and io.ask is None and server.max_inflight is None \
                    and (log_level is None or not server.forward_logs) \
                    and "inputResponses" not in params and "requestState" not in params:
                if kind is _CALL:
                    name = params.get("name")
                    entry = server.tools.get(name) if type(name) is str else None
                    arguments = params.get("arguments", _NO_ARGUMENTS)
                    if entry is not None and type(arguments) is dict and type(entry) is ToolEntry \
                            and (entry.lane or entry.task is None):
                        try:
                            positional = entry.positional
                            if not entry.lane:  # it takes a Context (or a provider-resolved
                                # parameter, which needs one): `invoke`'s steps, inline
                                ctx = Context(server, req, io, io.loop)
                                kwargs = entry.bind(arguments)
                                kwargs[entry.ctx_param or ""] = ctx
                                if entry.is_async:
                                    value = await entry.fn(**kwargs)
                                elif entry.inline:
                                    value = entry.fn(**kwargs)
                                else:
                                    value = await _submit(ctx._loop, entry.fn, (), kwargs)
                            elif positional is not None:  # async or inline, values in order
                                value = entry.fn(*positional(arguments))
                                if entry.lane == LANE_ASYNC:
                                    value = await value
                            elif entry.thread_values is not None:  # a worker thread, values in order
                                value = await _call(io.loop or running_loop(), entry.fn, entry.thread_values(arguments))
                            else:
                                kwargs = entry.bind(arguments)
                                lane = entry.lane
                                if lane == LANE_ASYNC:
                                    value = await entry.fn(**kwargs)
                                elif lane == LANE_INLINE:
                                    value = entry.fn(**kwargs)
                                else:  # LANE_THREAD
                                    value = await _submit(io.loop or running_loop(), entry.fn, (), kwargs)
                        except (ProtocolError, asyncio.CancelledError):
                            raise
                        except Exception as exc:
                            result = entry.failed(exc)
                        else:
                            if ctx is not None and ctx._dropped:  # questions never asked (`invoke`)
                                warn_dropped(ctx._dropped)
                            if type(value) is str and entry.output is None:  # plain text: shaped at once
                                return {"jsonrpc": "2.0", "id": rid, "result": {
                                    "resultType": "complete", "content": [{"type": "text", "text": value}],
                                    "_meta": self._server_meta}}
                            result = entry.to_result(value)
                    else:
                        entry = None
                elif kind is _PROMPT:
                    name = params.get("name")
                    entry = server.prompts.get(name) if type(name) is str else None
                    if entry is not None and type(entry) is PromptEntry and entry.lane:
                        kwargs = entry.bind(params.get("arguments"))
                        lane = entry.lane
                        if lane == LANE_ASYNC:
                            value = await entry.fn(**kwargs)
                        elif lane == LANE_INLINE:
                            value = entry.fn(**kwargs)
                        else:  # LANE_THREAD
                            value = await _submit(io.loop or running_loop(), entry.fn, (), kwargs)
                        result = entry.finish(value)  # a fresh dict without `_meta`
                        result["_meta"] = self._server_meta
                        return {"jsonrpc": "2.0", "id": rid, "result": result}
                    if entry is not None and type(entry) is PromptEntry:
                        # It takes a Context: its own `invoke` (what `get` awaits), with one built here.
                        ctx = Context(server, req, io, io.loop)
                        result = await entry.invoke(ctx, params.get("arguments"))
                        result["_meta"] = self._server_meta
                        return {"jsonrpc": "2.0", "id": rid, "result": result}
                    entry = None
                elif kind is _PLAIN:
                    # Discover and the lists: no Context, no coroutine of the handler, no
                    # busy count (nothing awaits in them); shaped as below, keys in the
                    # same order (`_meta`, then `_hints`).
                    result = self._plain[method](params)
                    result["_meta"] = self._server_meta
                    self._hints(method, result, io.subject)
                    return {"jsonrpc": "2.0", "id": rid, "result": result}
                else:  # resources/read: a fixed URI, else the first template that matches
                    uri: Any = params.get("uri")
                    if type(uri) is str:
                        entry = server.resources.get(uri)
                        values = None
                        if entry is None:
                            entry, values = self._template_for(uri)
                        lane = entry.lane
                        if lane and (type(entry) is ResourceEntry if values is None else type(entry) is TemplateEntry):
                            kwargs = entry.bind(() if values is None else values)
                            if lane == LANE_ASYNC:
                                value = await entry.fn(**kwargs)
                            elif lane == LANE_INLINE:
                                value = entry.fn(**kwargs)
                            else:  # LANE_THREAD
                                value = await _submit(io.loop or running_loop(), entry.fn, (), kwargs)
                            contents = to_contents(entry.uri if values is None else uri, value, entry.mime_type)
                        else:  # it takes a Context (or is a subclass): its own `read`, as the handler's
                            ctx = Context(server, req, io, io.loop)
                            contents = await (entry.read(ctx) if values is None else entry.read(ctx, uri, values))
                        # What `_read_resource` answers, shaped as below (keys in that order).
                        ttl, scope = entry.ttl_ms, entry.cache_scope
                        d_ttl, d_scope = server.cache_hints["resources/read"]
                        if ttl is not None or scope is not None:  # the entry's own hints
                            return {"jsonrpc": "2.0", "id": rid, "result": {
                                "resultType": "complete", "contents": contents,
                                "ttlMs": d_ttl if ttl is None else ttl, "cacheScope": scope or d_scope,
                                "_meta": self._server_meta}}
                        if io.subject is not None and "resources/read" not in server.explicit_hints:
                            d_scope = "private"  # CACHE-07/10, as `_hints` decides
                        return {"jsonrpc": "2.0", "id": rid, "result": {
                            "resultType": "complete", "contents": contents, "_meta": self._server_meta,
                            "ttlMs": d_ttl, "cacheScope": d_scope}}
            if entry is None:
                ctx = Context(server, req, io, io.loop)
                if log_level is not None and server.forward_logs:
                    token = current.set(ctx)
                if spec.input_required:
                    # A first round carries neither: nothing to load, no coroutine to run.
                    if params.get("inputResponses") is not None or params.get("requestState") is not None:
                        await self._resume(ctx, req, io.subject)
                    limit = server.max_inflight
                    if limit is not None and self.busy >= limit:
                        # Load shedding (MRTR-02): a state-only checkpoint; the client
                        # retries after its backoff and resumes from the same state.
                        raise InputRequired({})
                if method == "subscriptions/listen":  # long-lived: not load
                    result = await handler(ctx, params)
                else:
                    self.busy += 1
                    try:
                        ask = io.ask
                        result = await (self._ask_loop(ctx, req, ask) if ask else handler(ctx, params))
                    finally:
                        self.busy -= 1
        except InputRequired as asked:
            if not spec.input_required:  # MRTR-01: never on other methods
                logger.error("%s asked for client input, which only MRTR methods may", method)
                return error_response(rid, InternalError())
            if ctx is None:  # raised in the lean lane: nothing resumed, nothing kept
                ctx = Context(server, req, io, io.loop)
            try:
                result = self._input_required(ctx, req, io.subject, asked)
            except StateTooLarge as exc:  # the tool author's bug: say so in the log too
                logger.error("%s %r: %s", method, params.get("name") or params.get("uri"), exc)
                return error_response(rid, exc)
        except ProtocolError as exc:
            return error_response(rid, exc)
        except asyncio.CancelledError:
            if ctx is not None:
                ctx._cancel()
            raise
        except Exception:  # masked: the text may hold secrets; the log has it by reference
            ref = os.urandom(4).hex()
            logger.exception("handler for %s failed [ref %s]", method, ref)
            return error_response(rid, InternalError(f"Internal error (reference {ref})"))
        finally:
            if ctx is not None:
                ctx._done = True
            if token is not None:
                current.reset(token)
        # Result shaping: `_meta.serverInfo`, `resultType`, caching hints where the
        # method's results carry them.
        if "_meta" in result:
            if SERVER_INFO not in result["_meta"]:
                result["_meta"] = {**result["_meta"], **self._server_meta}
        else:
            result["_meta"] = self._server_meta
        if spec.cacheable:
            self._hints(method, result, io.subject)
        elif "resultType" not in result:
            result["resultType"] = "complete"
        return {"jsonrpc": "2.0", "id": rid, "result": result}

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

    async def _ask_loop(self, ctx: Context, req: Prepared, ask: Ask) -> dict[str, Any]:
        """A peer with a back channel: questions go to it as requests (MRTR methods only)."""
        if not req.spec.input_required:
            return await req.handler(ctx, req.params)
        return await run_answering(lambda: req.handler(ctx, req.params), ctx, ask)

    # -- MRTR: resuming and pausing a request -----------------------------------------------

    def _binding(self, req: Prepared, subject: str | None) -> dict[str, Any]:
        """What a requestState is bound to: method, target, argument digest, subject."""
        p = req.params
        target = p.get("uri") if req.method == "resources/read" else p.get("name")
        from nimblemcp.server._sealing import digest  # MRTR only: keep hashlib off start-up

        return {"m": req.method, "t": target, "d": digest(p.get("arguments") or {}), "sub": subject}

    def _one_time(self, req: Prepared) -> bool:
        if self.server.one_time_state:
            return True
        if req.method == "tools/call":
            tool = self.server.tools.get(req.params.get("name"))  # type: ignore[arg-type]
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
            sealed, nonce = self.server.sealer.open(token, self._binding(req, subject))
        except StateError as exc:
            logger.warning("refused requestState for %s: %s", req.method, exc)
            raise InvalidParams(INVALID_STATE) from None
        if self._one_time(req) and not await self.server.store.set_if_absent(
            "rs:" + nonce, b"1", self.server.state_ttl
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
        result["requestState"] = self.server.sealer.seal(
            self._binding(req, subject), {"state": ctx.state, "answers": ctx._responses}
        )
        return result

    def _hints(self, method: str, result: dict[str, Any], subject: str | None) -> None:
        """`resultType`, and the caching hints of a complete result without its own."""
        kind = result.setdefault("resultType", "complete")
        if kind == "complete" and "ttlMs" not in result:
            ttl, scope = self.server.cache_hints[method]
            if subject is not None and method not in self.server.explicit_hints:
                # An authenticated answer may be user-specific: never shared across
                # authorization contexts unless the server said so (CACHE-07/10).
                scope = "private"
            result["ttlMs"] = ttl
            result["cacheScope"] = scope

    # -- handlers ------------------------------------------------------------------------

    async def _discover(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        return self._discover_now(params)

    def _discover_now(self, params: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = {
            "supportedVersions": self.supported_versions,
            "capabilities": self.capabilities,
        }
        if self.server.instructions:
            result["instructions"] = self.server.instructions
        return result

    def _page(self, method: str, key: str, registry: Mapping[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        """One page of a list; pages are built once per registry change."""
        cursor = params.get("cursor")
        # Keyed by the cursor's JSON value itself: a client sending the string "None"
        # must not be served the first page (PAG-03). Any other type is refused below.
        if cursor is None:
            cache_key: Any = (method, None)
        elif isinstance(cursor, str):
            cache_key = (method, "str", cursor)
        else:
            cache_key = None
        page = self._pages.get(cache_key) if cache_key is not None else None
        if page is None:
            everything = self._pages.get(method)
            if everything is None:
                everything = self._pages[method] = [x.definition for x in registry.values()]
            size = self.server.page_size
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
        return self._tools_page(params)

    async def _list_resources(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        return self._resources_page(params)

    async def _list_templates(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        return self._templates_page(params)

    async def _list_prompts(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        return self._prompts_page(params)

    def _tools_page(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._page("tools/list", "tools", self.server.tools, params)

    def _resources_page(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._page("resources/list", "resources", self.server.resources, params)

    def _templates_page(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._page("resources/templates/list", "resourceTemplates", self.server.templates, params)

    def _prompts_page(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._page("prompts/list", "prompts", self.server.prompts, params)

    def _call_tool(self, ctx: Context, params: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        # Not a coroutine itself: the checks raise at once, and what is awaited is the
        # tool's own call (one frame less per call).
        name = params.get("name")
        if not isinstance(name, str):
            raise InvalidParams("tools/call needs a string 'name'")
        tool = self.server.tools.get(name)
        if tool is None:
            raise InvalidParams(f"Unknown tool: {name}")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            raise InvalidParams("tools/call 'arguments' must be an object")
        if tool.task is not None:
            from nimblemcp.server._tasks import call_tool

            return call_tool(self.server, ctx, tool, arguments)  # type: ignore[arg-type]
        return tool.call(ctx, arguments)  # type: ignore[arg-type]

    def _template_for(self, uri: str) -> tuple[TemplateEntry, dict[str, str]]:
        """The first template matching `uri` and its variables (both lanes search here)."""
        for template in self.server.templates.values():
            values = template.match(uri)
            if values is not None:
                return template, values
        raise ResourceNotFound(uri)

    async def _read_resource(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise InvalidParams("resources/read needs a string 'uri'")
        entry = self.server.resources.get(uri)
        if entry is not None:
            contents = await entry.read(ctx)
            ttl, scope = entry.ttl_ms, entry.cache_scope
        else:
            template, values = self._template_for(uri)
            contents = await template.read(ctx, uri, values)
            ttl, scope = template.ttl_ms, template.cache_scope
        result: dict[str, Any] = {"resultType": "complete", "contents": contents}
        if ttl is not None or scope is not None:
            d_ttl, d_scope = self.server.cache_hints["resources/read"]
            result["ttlMs"] = d_ttl if ttl is None else ttl
            result["cacheScope"] = scope or d_scope
        return result

    async def _get_prompt(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str):
            raise InvalidParams("prompts/get needs a string 'name'")
        prompt = self.server.prompts.get(name)
        if prompt is None:
            raise InvalidParams(f"Unknown prompt: {name}")
        return await prompt.get(ctx, params.get("arguments"))
