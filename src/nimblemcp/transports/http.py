"""Streamable HTTP server transport (2026-07-28) as a plain ASGI app, and `run_http`.

One endpoint path, POST only (HTTP-01/03). Each POST is one JSON-RPC message:
a notification is answered 202 (HTTP-05); a request is checked (JSON-RPC shape,
`_meta`, headers against the body, version, method, `Mcp-Param-*`) and run on the
request's own ASGI task. The answer is a single `application/json` body unless the
handler emits a request-scoped notification first, or is still running after
`keepalive` seconds; then it becomes an SSE stream that ends with the response
(HTTP-06/07/20). A client that disconnects cancels the handler and gets nothing
more (HTTP-10). Origin/Host checks, size limits and CORS are the middleware in
`http_security`, not options here. Requests the legacy (2025-11-25) leg must serve
are handed to the `legacy` hook when one is plugged in.

Must not import uvicorn at module level, nor any client code.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from typing import TYPE_CHECKING, Any, Protocol

from nimblemcp._loop import running_loop
from nimblemcp.errors import InvalidRequest, ProtocolError, UnsupportedProtocolVersion
from nimblemcp.jsonrpc import classify, decode, encode, error_response, request_id_of
from nimblemcp.transports._http_exchange import (
    EMPTY_BODY,
    Exchange,
    Receive,
    Scope,
    Send,
    Watchlist,
)
from nimblemcp.transports._http_headers import (
    ACCEPT,
    CONTENT_TYPE,
    SESSION,
    VERSION,
    ParamRules,
    RequestHeaders,
    check_standard,
)
from nimblemcp.transports._sse import frame
from nimblemcp.types._meta import CLIENT_CAPABILITIES, PROTOCOL_VERSION
from nimblemcp.types._versions import LEGACY_VERSIONS, MODERN_VERSIONS

if TYPE_CHECKING:
    from nimblemcp.server._dispatch import Prepared
    from nimblemcp.server._server import Server

__all__ = ["LegacyHandler", "McpHttpApp", "asgi_app", "run_http"]

logger = logging.getLogger("nimblemcp.http")


class LegacyHandler(Protocol):
    """The seam for the 2025-11-25 leg: gets GET/DELETE (message None) and POSTs
    with a legacy `MCP-Protocol-Version`, or with none and `Mcp-Session-Id` or
    `initialize` (COMPAT-S04). `asgi_app` plugs in `_http_legacy.LegacyHttp`."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send, message: Any) -> None: ...


# Status per JSON-RPC error code when the answer is a plain JSON body (CHECKLIST 20.4).
_STATUS: dict[int, int] = {
    -32700: 400, -32600: 400, -32602: 400, -32020: 400, -32021: 400, -32022: 400,
    -32601: 404,
}
_JSON = (b"content-type", b"application/json")
_LEGACY_HEADER = frozenset(v.encode() for v in LEGACY_VERSIONS)  # MCP-Protocol-Version values
_START_202: dict[str, Any] = {"type": "http.response.start", "status": 202, "headers": []}


async def _plain(send: Send, status: int, body: bytes = b"", extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8")] if body else []
    if extra:
        headers.extend(extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, status: int, message: dict[str, Any]) -> None:
    await _json_body(send, status, encode(message))


async def _json_body(send: Send, status: int, body: bytes) -> None:
    await send({
        "type": "http.response.start", "status": status,
        "headers": [_JSON, (b"content-length", str(len(body)).encode())],
    })
    await send({"type": "http.response.body", "body": body})


# Young-generation GC threshold while serving (CPython's default is 700).
YOUNG_GC_THRESHOLD = 10_000


def _settle_gc() -> None:
    """Start-up built everything long-lived: freeze it out of the cyclic GC, and
    collect the young generation less often. Under load that generation is the
    requests in flight, freed by reference counting, never garbage: at the default
    threshold a 64-connection run spent ~3 us per request, plus a 0.7 ms pause every
    few thousand requests, traversing them and collecting nothing."""
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if young:  # 0 means the application turned the GC off: leave it so
        gc.set_threshold(max(young, YOUNG_GC_THRESHOLD), middle, old)


def _accepts(value: bytes | None) -> bool:
    """HTTP-04: the client must accept both JSON and SSE (wildcards count)."""
    if value is None:
        return False
    if b"application/json" in value and b"text/event-stream" in value:
        return True
    kinds = {part.split(b";", 1)[0].strip().lower() for part in value.split(b",")}
    return bool(kinds & {b"application/json", b"application/*", b"*/*"}) and bool(
        kinds & {b"text/event-stream", b"text/*", b"*/*"}
    )


def _is_json(value: bytes | None) -> bool:
    if value == b"application/json":
        return True
    return value is not None and value.split(b";", 1)[0].strip().lower() == b"application/json"


class McpHttpApp:
    """The ASGI callable. Build it with `asgi_app(server, ...)`."""

    def __init__(
        self,
        server: Server,
        *,
        path: str = "/mcp",
        keepalive: float = 15.0,
        legacy: LegacyHandler | None = None,
        freeze_gc: bool = False,
    ) -> None:
        self.server = server
        self.path = path
        self.keepalive = keepalive
        self.legacy = legacy
        self.freeze_gc = freeze_gc
        self.param_rules = ParamRules(server)
        self.watchlists: dict[asyncio.AbstractEventLoop, Watchlist] = {}

    def _watchlist(self, loop: asyncio.AbstractEventLoop) -> Watchlist:
        watchlist = self.watchlists.get(loop)
        if watchlist is None:
            for old in [k for k in self.watchlists if k.is_closed()]:
                del self.watchlists[old]
            watchlist = self.watchlists[loop] = Watchlist(loop)
        return watchlist

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.freeze_gc:
                    _settle_gc()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self._lifespan(receive, send)
            return
        if scope["path"] != self.path:
            await _plain(send, 404, b"Not Found")
            return
        h = RequestHeaders(scope["headers"])
        if scope["method"] != "POST":
            if self.legacy is not None:
                await self.legacy(scope, receive, send, None)
            else:  # HTTP-01: no GET stream, no DELETE, no sessions
                await _plain(send, 405, b"Method Not Allowed", [(b"allow", b"POST")])
            return
        if not _is_json(h.values[CONTENT_TYPE]):
            await _plain(send, 415, b"Content-Type must be application/json")
            return
        if not _accepts(h.values[ACCEPT]):
            await _plain(send, 406, b"Accept must list application/json and text/event-stream")
            return
        message = await receive()
        body = message.get("body", b"")
        if message.get("more_body"):
            chunks = [body]
            while message.get("more_body"):
                message = await receive()
                chunks.append(message.get("body", b""))
            body = b"".join(chunks)
        msg: Any = None
        try:
            msg = decode(body)
            kind = classify(msg)
        except ProtocolError as exc:  # -32700 / -32600 (HTTP-19)
            await _json(send, 400, error_response(request_id_of(msg), exc))
            return
        if self.legacy is not None and self._is_legacy(h, msg):
            await self.legacy(scope, receive, send, msg)
            return
        if kind != "request":
            if kind == "notification":  # HTTP-05: accepted, nothing to answer
                await send(_START_202)
                await send(EMPTY_BODY)
            else:  # HTTP-03: clients never send responses in this revision
                await _json(send, 400, error_response(None, InvalidRequest("responses are not accepted")))
            return
        try:
            prepared = self._prepare(h, msg)
        except ProtocolError as exc:
            await _json(send, _STATUS.get(exc.code, 200), error_response(msg["id"], exc))
            return
        await self._run(prepared, scope, receive, send)

    def _is_legacy(self, h: RequestHeaders, msg: Any) -> bool:
        version = h.values[VERSION]
        # COMPAT-S04: the version header decides; a modern one wins over a stray
        # `Mcp-Session-Id` and makes `initialize` a removed method (-32601).
        if version is not None:
            return version in _LEGACY_HEADER
        return h.values[SESSION] is not None or (type(msg) is dict and msg.get("method") == "initialize")

    def _prepare(self, h: RequestHeaders, msg: dict[str, Any]) -> Prepared:
        """HTTP-19 ladder: `_meta` keys -> headers vs body -> version -> method -> params."""
        params = msg.get("params")
        meta = params.get("_meta") if type(params) is dict else None
        if msg["method"] == "initialize" and not (type(meta) is dict and PROTOCOL_VERSION in meta):
            # A legacy client the legacy leg does not serve (COMPAT-S02); an enveloped
            # `initialize` is a removed method instead (-32601, 404).
            requested = params.get("protocolVersion") if type(params) is dict else None
            raise UnsupportedProtocolVersion(
                requested, list(MODERN_VERSIONS),
                "This server speaks only the stateless revisions (no initialize handshake)")
        if type(meta) is dict:
            version = meta.get(PROTOCOL_VERSION)
            if type(version) is str and type(meta.get(CLIENT_CAPABILITIES)) is dict:
                check_standard(h, msg["method"], params, version)  # type: ignore[arg-type]
        prepared = self.server.dispatcher.prepare(msg)  # -32602 / -32022 / -32601
        if prepared.method == "tools/call":
            self.param_rules.check(h, prepared.params)
        return prepared

    async def _run(self, prepared: Prepared, scope: Scope, receive: Receive, send: Send) -> None:
        # Look the loop up once, without a syscall (see `_loop`), and hand it on.
        loop = running_loop()
        ex = Exchange(loop, receive, send, self.keepalive)
        ex.owner = asyncio.current_task(loop)
        subject = scope.get("user")
        step = self.server.dispatcher.execute(
            prepared, ex.emit, subject if isinstance(subject, str) else None, loop=loop
        )
        self._watchlist(loop).add(ex)
        try:
            response = await step
        except asyncio.CancelledError:
            ex.finish()
            if ex.pump is not None:
                ex.pump.cancel()
            if ex.disconnected and ex.owner is not None:
                ex.owner.uncancel()
                return  # HTTP-10: nothing more is sent for a cancelled request
            if ex.slow and ex.owner is not None:
                ex.owner.uncancel()
                ex.pump = loop.create_task(ex._pump()) if ex.pump is None else ex.pump
                with contextlib.suppress(Exception):
                    await ex.pump
                return
            raise
        ex.finish()
        if ex.pump is None:
            status = 200 if "result" in response else _STATUS.get(response["error"]["code"], 200)
            body = encode(response)
            # Answer on the loop's next pass, not in the middle of this one: under load
            # the answers to one batch of requests then leave together, and the client's
            # next requests all make the next poll instead of trailing a whole batch
            # behind it. Measured at 64 connections: ~9% more req/s, p99 6.3 -> 4.5 ms.
            await asyncio.sleep(0)
            await _json_body(send, status, body)
            return
        ex.frames.append(frame(encode(response)))
        ex.closed = True
        ex._wake()
        await ex.pump


def asgi_app(
    server: Server,
    *,
    path: str = "/mcp",
    keepalive: float = 15.0,
    legacy: LegacyHandler | None = None,
    legacy_sessions: bool = True,
    freeze_gc: bool = False,
) -> McpHttpApp:
    """The bare MCP endpoint as an ASGI app (no Origin/size checks: wrap it, see
    `http_security.secure_app`). `keepalive` <= 0 turns keep-alive comments off.
    `freeze_gc=True` (what `run_http` uses) tunes the process's cyclic GC for serving
    at lifespan start-up: collect, `gc.freeze()`, young threshold `YOUNG_GC_THRESHOLD`.

    Dual-era by default: 2025-11-25 clients (`initialize`, `Mcp-Session-Id`) are
    served by the legacy session leg; `legacy_sessions=False` serves only 2026-07-28."""
    if legacy is None and legacy_sessions:
        from nimblemcp.transports._http_legacy import LegacyHttp

        legacy = LegacyHttp(server, keepalive=keepalive)
    return McpHttpApp(server, path=path, keepalive=keepalive, legacy=legacy, freeze_gc=freeze_gc)


_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


def run_http(
    server: Server,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
    *,
    allowed_origins: list[str] | None = None,
    allowed_hosts: list[str] | None = None,
    max_body: int | None = None,
    cors: bool = False,
    keepalive: float = 15.0,
    shutdown_timeout: float = 10.0,
    log_level: str = "info",
    access_log: bool = False,
    legacy_sessions: bool = True,
    auth: dict[str, Any] | None = None,
) -> None:
    """Serve `server` under uvicorn (uvloop + httptools when installed), blocking.

    Bound to 127.0.0.1 unless told otherwise (HTTP-02). On a non-loopback bind with
    no `allowed_hosts`, any Host is accepted (Origin is still checked). Shutdown
    lets in-flight requests finish for at most `shutdown_timeout` seconds.
    `legacy_sessions=False` turns the 2025-11-25 session leg off; `auth` makes the
    endpoint an OAuth resource server (see `http_auth.BearerAuth`).
    """
    from nimblemcp._extras import needs_extra

    with needs_extra("http", "HTTP serving"):
        import uvicorn

    from nimblemcp.transports.http_security import secure_app

    if allowed_hosts is None and host not in _LOOPBACK:
        allowed_hosts = ["*"]
    app = secure_app(
        server, path=path, keepalive=keepalive, freeze_gc=True, legacy_sessions=legacy_sessions,
        allowed_origins=allowed_origins, allowed_hosts=allowed_hosts, max_body=max_body, cors=cors,
        auth=auth,
    )
    config = uvicorn.Config(
        app, host=host, port=port, loop="auto", http="auto", lifespan="on",
        log_level=log_level, access_log=access_log, server_header=False,
        timeout_graceful_shutdown=max(1, round(shutdown_timeout)),
    )

    class _Uvicorn(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            # Listen streams never finish by themselves: close them gracefully first
            # (SUB-09) so the wait below covers only real in-flight requests.
            server.close_listeners()
            await super().shutdown(sockets)

    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the caught SIGINT
        _Uvicorn(config).run()
