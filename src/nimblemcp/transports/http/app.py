"""Streamable HTTP server transport (2026-07-28) as a plain ASGI app.

One endpoint path, POST only (HTTP-01/03). Each POST is one JSON-RPC message:
a notification is answered 202 (HTTP-05); a request is checked (JSON-RPC shape,
`_meta`, headers against the body, version, method, `Mcp-Param-*`) and run on the
request's own ASGI task. The answer is a single `application/json` body unless the
handler emits a request-scoped notification first, or is still running after
`keepalive` seconds; then it becomes an SSE stream that ends with the response
(HTTP-06/07/20). A client that disconnects cancels the handler and gets nothing
more (HTTP-10). Origin/Host checks, size limits and CORS are the middleware in
`http_security`, not options here. Requests the legacy (2025-11-25) leg must serve
are handed to the `legacy` hook when one is plugged in. Talks to the server through
the port (`nimblemcp._port.Core`) only; `nimblemcp.serving` runs it under uvicorn or on
nimblemcp's engine. On the engine, a plain JSON answer goes out through the engine's
one-step `answer` (its `scope["extensions"]` entry, `_asgi.ENGINE`) when the `send`
handed here is the engine's own.

Must not import uvicorn, the server, nor any client code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from nimblemcp._loop import running_loop
from nimblemcp._port import Core, Prepared
from nimblemcp.errors import (
    InternalError,
    InvalidRequest,
    ProtocolError,
    UnsupportedProtocolVersion,
)
from nimblemcp.jsonrpc import (
    classify,
    decode_request,
    encode,
    encode_reply,
    error_response,
    request_id_of,
)
from nimblemcp.transports._sse import frame
from nimblemcp.transports.http._asgi import (
    ACCEPT_VERDICTS,
    ENGINE,
    JSON,
    SUBJECT,
    EngineOffer,
    Receive,
    Scope,
    Send,
    accepts_json_and_sse,
    endpoint_path,
    respond,
    respond_json,
)
from nimblemcp.transports.http._exchange import Exchange, Watchlist
from nimblemcp.transports.http._headers import (
    ENCODED,
    NAME_TEXT,
    ROUTES,
    ParamRules,
    RequestHeaders,
    check_standard,
)
from nimblemcp.transports.http._routes import App
from nimblemcp.transports.http._serving_gc import YOUNG_GC_THRESHOLD, settle_gc
from nimblemcp.types._http import (
    HEADER_METHOD,
    HEADER_NAME,
    HEADER_PROTOCOL_VERSION,
    HEADER_SESSION_ID,
    header_key,
)
from nimblemcp.types._meta import CLIENT_CAPABILITIES, PROTOCOL_VERSION
from nimblemcp.types._versions import LEGACY_VERSIONS, MODERN_VERSIONS

__all__ = ["DEFAULT_BODY_TIMEOUT", "YOUNG_GC_THRESHOLD", "LegacyHandler", "McpHttpApp", "asgi_app"]

logger = logging.getLogger("nimblemcp.http")


class LegacyHandler(Protocol):
    """The seam for the 2025-11-25 leg: gets GET/DELETE (message None) and POSTs
    with a legacy `MCP-Protocol-Version`, or with none and `Mcp-Session-Id` or
    `initialize` (COMPAT-S04). `asgi_app` plugs in `_http_legacy.LegacyHttp`."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send, message: Any) -> None: ...


# Status per JSON-RPC error code when the answer is a plain JSON body (CHECKLIST 20.4).
_STATUS: dict[int, int] = {
    -32700: 400, -32600: 400, -32602: 400, -32020: 400, -32021: 400, -32022: 400,
    -32601: 404, -32001: 403,
}
_BODY_TIMEOUT = encode(error_response(None, InvalidRequest("Request body not received in time")))
_LEGACY_HEADER = frozenset(v.encode() for v in LEGACY_VERSIONS)  # MCP-Protocol-Version values
_MODERN_HEADER = frozenset(v.encode() for v in MODERN_VERSIONS)
_VERSION_KEY = header_key(HEADER_PROTOCOL_VERSION)
_METHOD_KEY = header_key(HEADER_METHOD)
_NAME_KEY = header_key(HEADER_NAME)
_SESSION_KEY = header_key(HEADER_SESSION_ID)


# Seconds a POST body may take to arrive in full (408 after; None: no deadline);
# `HttpSecurity.body_timeout` carries the same default.
DEFAULT_BODY_TIMEOUT = 30.0

def _is_json(value: bytes | None) -> bool:
    if value == b"application/json":
        return True
    return value is not None and value.split(b";", 1)[0].strip().lower() == b"application/json"


def _negotiation_refused(found: dict[bytes, bytes]) -> tuple[int, bytes] | None:
    """415 unless the Content-Type is JSON, 406 unless Accept lists JSON and SSE; None
    when both are right."""
    # Subscripts, not `.get` (a method call, ~0.3k more each on 3.11), for what a
    # request that is served has; a missing header takes the KeyError's path.
    try:
        value: bytes | None = found[b"content-type"]
    except KeyError:
        value = None
    if value != b"application/json" and not _is_json(value):
        return 415, b"Content-Type must be application/json"
    try:  # the verdict on this value, when it was given before (`_asgi.ACCEPT_VERDICTS`)
        acceptable = ACCEPT_VERDICTS[found[b"accept"]]
    except KeyError:
        acceptable = accepts_json_and_sse(found.get(b"accept"))
    if not acceptable:
        return 406, b"Accept must list application/json and text/event-stream"
    return None


async def _not_a_request(send: Send, kind: str) -> None:
    if kind == "notification":  # HTTP-05: accepted, nothing to answer
        await respond(send, 202)
    else:  # HTTP-03: clients never send responses in this revision
        await respond_json(send, 400, error_response(None, InvalidRequest("responses are not accepted")))


class McpHttpApp:
    """The ASGI callable. Build it with `asgi_app(server, ...)`."""

    # `__call__` takes the header dict a guard in front already built (see there).
    takes_found_headers = True

    def __init__(
        self,
        core: Core,
        *,
        path: str = "/mcp",
        keepalive: float = 15.0,
        legacy: LegacyHandler | None = None,
        freeze_gc: bool = False,
        routes: Mapping[str, App] | None = None,
        body_timeout: float | None = DEFAULT_BODY_TIMEOUT,
    ) -> None:
        self.core = core
        # Plain routes beside the endpoint (`_routes`): looked at only off the endpoint path.
        self.routes: dict[str, App] = dict(routes or {})
        self.body_timeout = body_timeout
        self.path = path
        self.keepalive = keepalive
        self.legacy = legacy
        self.freeze_gc = freeze_gc
        self.header_rules = core.tool_header_rules
        self.param_rules = ParamRules(core.tool_header_rules)
        self.watchlists: dict[asyncio.AbstractEventLoop, Watchlist] = {}
        self._last: Watchlist | None = None  # the one of the loop that served last

    def _watchlist(self, loop: asyncio.AbstractEventLoop) -> Watchlist:
        watchlist = self.watchlists.get(loop)
        if watchlist is None:
            for old in [k for k in self.watchlists if k.is_closed()]:
                del self.watchlists[old]
            watchlist = self.watchlists[loop] = Watchlist(loop)
            self.core.note_serving()  # the first request on this loop (see `Core`)
            if self.body_timeout is not None:
                watchlist.body_timeout = self.body_timeout
        return watchlist

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        # The server's own lifespan (`Core.lifespan_context`) runs between the two.
        lifespan = self.core.lifespan_context()
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await lifespan.__aenter__()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                if self.freeze_gc:
                    settle_gc()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                try:
                    await lifespan.__aexit__(None, None, None)
                except Exception as exc:
                    await send({"type": "lifespan.shutdown.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def __call__(
        self, scope: Scope, receive: Receive, send: Send, found: dict[bytes, bytes] | None = None,
    ) -> None:
        """The ASGI entry: a POST to the endpoint is checked (content negotiation), its
        body read (under the body deadline), decoded and admitted (the legacy leg, the
        HTTP-19 ladder of headers against the body), then run and answered (JSON, or SSE
        once it streams). `found` (not part of ASGI): the request's headers as a dict
        with no repeated name, from a caller that built it already (`SecurityMiddleware`
        with `takes_found_headers`), so the list is not read twice."""
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self._lifespan(receive, send)
            return
        if scope["path"] != self.path and await self._served_elsewhere(scope, receive, send):
            return
        if scope["method"] != "POST":
            await self._not_a_post(scope, receive, send)
            return
        # `h`, the header view the full checks read, is built only when one runs: a
        # dict handed in is the whole list, no name repeated (`RequestHeaders.of`).
        h: RequestHeaders | None = None
        if found is None:
            h = RequestHeaders(scope["headers"])
            found = h.found
        refused = _negotiation_refused(found)
        if refused is not None:
            await respond(send, *refused)
            return
        engine, loop, task, watchlist = self._where(scope)
        # Outside the last resort below: what `receive` raises (a guard's signal, a
        # server's error) belongs to whoever wrapped us.
        body = await self._read_body(receive, send, loop, task, watchlist)
        if body is None:
            return
        msg: Any = None
        try:
            try:
                msg = decode_request(body)
                kind = classify(msg)
            except ProtocolError as exc:  # -32700 / -32600 (HTTP-19)
                await respond_json(send, 400, error_response(request_id_of(msg), exc))
                return
            # A modern version header, as sent, settles the leg without a look at the body.
            try:
                version: bytes | None = found[_VERSION_KEY]
            except KeyError:
                version = None
            if self.legacy is not None and version not in _MODERN_HEADER and self._is_legacy(found, msg):
                await self.legacy(scope, receive, send, msg)
                return
            if kind != "request":
                await _not_a_request(send, kind)
                return
            try:
                prepared = self._admitted(found, h, msg, version)
            except ProtocolError as exc:
                await respond_json(send, _STATUS.get(exc.code, 200), error_response(msg["id"], exc))
                return
            await self._run(scope, receive, send, prepared, loop, engine, task, watchlist)
        except Exception:
            # The last resort: a JSON-RPC answer, never the HTTP server's plain-text 500
            # (if the response had begun, the send fails and the connection just ends).
            logger.exception("unexpected error serving a POST")
            with contextlib.suppress(Exception):
                await respond_json(send, 500, error_response(
                    request_id_of(msg), InternalError("Internal error")))

    def _where(self, scope: Scope) -> tuple[EngineOffer | None, asyncio.AbstractEventLoop,
                                            asyncio.Task[Any], Watchlist]:
        """Where the request runs: the engine that offers one-step answers (None under
        another server), its loop, its task, and the loop's watchlist."""
        # Once, and handed on: nimblemcp's engine names its loop in its extension;
        # elsewhere it is looked up without a syscall (see `_loop`).
        extensions = scope.get("extensions")
        engine: EngineOffer | None = extensions.get(ENGINE) if extensions else None
        loop: asyncio.AbstractEventLoop = engine.loop if engine is not None else running_loop()
        task = asyncio.current_task(loop)
        assert task is not None  # an ASGI server runs each request in a task
        watchlist = self._last
        if watchlist is None or watchlist.loop is not loop:
            watchlist = self._last = self._watchlist(loop)
        return engine, loop, task, watchlist

    async def _served_elsewhere(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """A path other than the endpoint's as the app sees it: a plain route, or 404.
        False when it is the endpoint after all (a mount's prefix stripped)."""
        local = endpoint_path(scope)
        if local == self.path:
            return False
        route = self.routes.get(local)
        if route is not None:
            await route(scope, receive, send)
        else:
            await respond(send, 404, b"Not Found")
        return True

    async def _not_a_post(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.legacy is not None:
            await self.legacy(scope, receive, send, None)
        else:  # HTTP-01: no GET stream, no DELETE, no sessions
            await respond(send, 405, b"Method Not Allowed", [(b"allow", b"POST")])

    async def _read_body(self, receive: Receive, send: Send, loop: asyncio.AbstractEventLoop,
                         task: asyncio.Task[Any], watchlist: Watchlist) -> bytes | None:
        """The whole body, under the body deadline (None: it passed, 408 answered)."""
        reading = watchlist.reading
        if self.body_timeout is not None:
            reading[task] = loop.time()
            if watchlist.body_timer is None:
                watchlist.arm_body_sweep()
        try:
            message = await receive()
            try:  # every key there, as a server sends them
                body: bytes = message["body"]
                more = message["more_body"]
            except KeyError:
                body = message.get("body", b"")
                more = message.get("more_body")
            if more:
                chunks = [body]
                while message.get("more_body"):
                    message = await receive()
                    chunks.append(message.get("body", b""))
                body = b"".join(chunks)
        except asyncio.CancelledError:
            if reading.pop(task, 0) >= 0:
                raise
            task.uncancel()  # the body deadline passed (see `Watchlist.sweep_bodies`)
            await respond(send, 408, _BODY_TIMEOUT, [(b"connection", b"close")], content_type=b"application/json")
            return None
        try:  # noqa: SIM105  (no `.pop` call: the entry is there; the sweep drops only done tasks')
            del reading[task]
        except KeyError:
            pass
        return body

    def _admitted(self, found: dict[bytes, bytes], h: RequestHeaders | None, msg: Any,
                  version: bytes | None) -> Prepared:
        """The request the core prepared, once its headers agree with its body; the
        ladder's error (a ProtocolError) otherwise."""
        # HTTP-19 ladder: `_meta` keys -> headers vs body -> version -> method -> params.
        # The core checks `_meta`, version, method and params; the headers are
        # compared with the body after it passed, reading what it read (the version
        # it parsed), or, when it refused the request, before its error is
        # answered, as the ladder wants.
        if msg["method"] == "initialize":
            self._refuse_initialize(msg)
        try:
            prepared = self.core.prepare(msg)  # -32602 / -32022 / -32601
        except ProtocolError:
            self._headers_before(h or RequestHeaders.of(found), msg)
            raise
        method = prepared.method
        params = prepared.params
        # Headers that agree with the body as sent pass on a few look-ups
        # (`_http_headers.ROUTES`); any other request (a look-up misses: KeyError)
        # takes `check_standard`, which gives the verdict and the error in the
        # ladder's order.
        try:
            method_header, name_param = ROUTES[method]
            agreed = (h is None or h.dup < 0) and version == ENCODED[prepared.meta.version] \
                and found[_METHOD_KEY] == method_header \
                and (name_param is None or NAME_TEXT[found[_NAME_KEY]] == params[name_param])
        except KeyError:
            agreed = False
        if not agreed:
            check_standard(h or RequestHeaders.of(found), method, params, prepared.meta.version)
        if method == "tools/call":
            # A tool without `x-mcp-header` rules (most) needs no more than the look-up.
            try:
                name = params["name"]
            except KeyError:
                name = None
            if type(name) is not str or self.header_rules(name):
                self.param_rules.check(h or RequestHeaders.of(found), params)
        return prepared

    async def _run(self, scope: Scope, receive: Receive, send: Send, prepared: Prepared,
                   loop: asyncio.AbstractEventLoop, engine: EngineOffer | None, task: asyncio.Task[Any],
                   watchlist: Watchlist) -> None:
        """Run the request and answer it: one JSON body, or the end of its SSE stream."""
        subject = scope[SUBJECT] if SUBJECT in scope else None  # noqa: SIM401  (most have none)
        if subject is not None and not isinstance(subject, str):
            subject = None
        # A lean Exchange (see `_http_exchange`): its stream's state comes with a
        # first `emit` or the watch.
        ex = Exchange(loop, receive, send, self.keepalive, subject, scope, task, lean=True)
        step = self.core.execute(prepared, ex)
        watchlist.add(ex)
        try:
            response = await step
        except asyncio.CancelledError:
            if await self._cancelled(ex, loop, task):
                return
            raise
        entry = ex.watch_entry
        if entry is not None:  # still waiting for its watch: nothing runs to stop
            entry[1] = None
        else:
            ex.finish()
        if not ex.armed or ex.pump is None:
            body = encode_reply(response)
            status = 200 if "result" in response else _STATUS.get(response["error"]["code"], 200)
            if engine is not None and engine.answer(send, status, body):  # one step
                return
            # Answer on the loop's next pass, not in the middle of this one: under
            # load the answers to one batch of requests then leave together, and the
            # client's next requests all make the next poll instead of trailing a
            # whole batch behind it (benchmarks/README.md).
            await asyncio.sleep(0)
            await send({
                "type": "http.response.start",
                "status": status,
                "headers": [JSON, (b"content-length", b"%d" % len(body))],
            })
            await send({"type": "http.response.body", "body": body})
            return
        ex.frames.append(frame(encode_reply(response)))
        ex.closed = True
        ex._wake()
        await ex.pump

    @staticmethod
    async def _cancelled(ex: Exchange, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> bool:
        """The request's task was cancelled: True when that was ours to handle (a
        reader cut off for reading too slowly, a client gone), False to re-raise."""
        ex.finish()
        if not ex.armed:  # it never streamed nor was watched: nothing of its own to end
            return False
        if ex.slow and not ex.disconnected:
            # Cut off for reading too slowly (`Exchange._cut`): the pump is kept
            # (it may be waiting for the reader's drain) and ends the stream
            # cleanly, with the closing note of a listen (SUB-09).
            task.uncancel()
            pump = ex.pump
            if pump is None:
                pump = ex.pump = loop.create_task(ex._pump())
            with contextlib.suppress(Exception):
                await pump
            return True
        if ex.disconnected:
            # HTTP-10: nothing more is sent for a cancelled request; its pump only
            # ends the body (a client that half-closed still reads; uvicorn logs
            # an error for a response left unfinished).
            task.uncancel()
            if ex.pump is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ex.pump, 1.0)
            return True
        if ex.pump is not None:
            ex.pump.cancel()
        return False

    def _is_legacy(self, found: dict[bytes, bytes], msg: Any) -> bool:
        get = found.get
        version = get(_VERSION_KEY)
        # COMPAT-S04: the version header decides; a modern one wins over a stray
        # `Mcp-Session-Id` and makes `initialize` a removed method (-32601).
        if version is not None:
            if version not in _LEGACY_HEADER:
                version = version.strip(b" \t")
                if version not in _LEGACY_HEADER:
                    return False
            # A legacy header on a body enveloped for a modern revision contradicts
            # itself: the modern path answers it 400 -32020 (HTTP-17).
            params = msg.get("params") if type(msg) is dict else None
            meta = params.get("_meta") if type(params) is dict else None
            body_version = meta.get(PROTOCOL_VERSION) if type(meta) is dict else None
            return type(body_version) is not str or body_version.encode() in _LEGACY_HEADER
        return get(_SESSION_KEY) is not None or (type(msg) is dict and msg.get("method") == "initialize")

    @staticmethod
    def _refuse_initialize(msg: dict[str, Any]) -> None:
        params = msg.get("params")
        meta = params.get("_meta") if type(params) is dict else None
        if not (type(meta) is dict and PROTOCOL_VERSION in meta):
            # A legacy client the legacy leg does not serve (COMPAT-S02); an enveloped
            # `initialize` is a removed method instead (-32601, 404).
            requested = params.get("protocolVersion") if type(params) is dict else None
            raise UnsupportedProtocolVersion(
                requested, list(MODERN_VERSIONS),
                "This server speaks only the stateless revisions (no initialize handshake)")

    @staticmethod
    def _headers_before(h: RequestHeaders, msg: dict[str, Any]) -> None:
        """A request the core refused: once its `_meta` keys are there, headers that
        contradict the body are the answer (-32020), not the core's error."""
        params = msg.get("params")
        meta = params.get("_meta") if type(params) is dict else None
        if type(meta) is dict:
            version = meta.get(PROTOCOL_VERSION)
            if type(version) is str and type(meta.get(CLIENT_CAPABILITIES)) is dict:
                check_standard(h, msg["method"], params, version)  # type: ignore[arg-type]


def asgi_app(
    core: Core,
    *,
    path: str = "/mcp",
    keepalive: float = 15.0,
    legacy: LegacyHandler | None = None,
    legacy_sessions: bool = True,
    freeze_gc: bool = False,
    routes: Mapping[str, App] | None = None,
    body_timeout: float | None = DEFAULT_BODY_TIMEOUT,
) -> McpHttpApp:
    """The bare MCP endpoint as an ASGI app (no Origin/size checks: wrap it, see
    `http_security.secure_app`). `keepalive` <= 0 turns keep-alive comments off.
    `freeze_gc=True` (what `run_http` uses) tunes the process's cyclic GC for serving
    at lifespan start-up (`_serving_gc`): collect, `gc.freeze()`, young threshold
    `YOUNG_GC_THRESHOLD`.
    A POST whose body has not fully arrived `body_timeout` seconds after the request
    began is answered 408 and its connection closed (None: wait forever).

    Dual-era by default: 2025-11-25 clients (`initialize`, `Mcp-Session-Id`) are
    served by the legacy session leg; `legacy_sessions=False` serves only 2026-07-28.
    `routes` maps other paths to ASGI apps (see `_routes`)."""
    if legacy is None and legacy_sessions:
        from nimblemcp.transports.http._legacy_leg import LegacyHttp

        legacy = LegacyHttp(core, keepalive=keepalive)
    return McpHttpApp(
        core, path=path, keepalive=keepalive, legacy=legacy, freeze_gc=freeze_gc, routes=routes,
        body_timeout=body_timeout)
