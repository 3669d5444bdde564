"""ASGI middleware that guards the MCP endpoint: Origin and Host checks against DNS
rebinding (HTTP-02), a request body limit, header count/size limits, optional CORS.

Kept outside the MCP app on purpose, so it also wraps any other ASGI app and the
app stays mountable under a framework that brings its own guards. Verdicts on
Origin/Host values are cached (bounded), so the hot path is a header scan and a dict
lookup. `HttpSecurity` holds the guard options and their defaults, in one place.
Must not import the server, the dispatcher or uvicorn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from nimblemcp.errors import error_from_wire
from nimblemcp.jsonrpc import encode, error_response
from nimblemcp.transports.http._asgi import respond
from nimblemcp.transports.http._drain import DRAIN

if TYPE_CHECKING:
    from nimblemcp._port import Core
    from nimblemcp.transports.http._asgi import Receive, Scope, Send
    from nimblemcp.transports.http.app import LegacyHandler

__all__ = ["DEFAULT_MAX_BODY", "HttpSecurity", "SecurityMiddleware", "secure_app"]

DEFAULT_MAX_BODY: Final = 4 * 1024 * 1024
LOCAL_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
_CACHE_LIMIT = 512
_MCP_METHOD: Final = b"mcp-method"
_LISTEN: Final = b"subscriptions/listen"


def _error_body(code: int, message: str) -> bytes:
    # An id-less JSON-RPC error: the status says it all, the body helps a human.
    return encode(error_response(None, error_from_wire({"code": code, "message": message})))


_FORBIDDEN_ORIGIN = _error_body(
    -32600, "Forbidden: Origin not allowed (list it in allowed_origins: nimblemcp run --allowed-origins,"
    " NIMBLEMCP_ALLOWED_ORIGINS)")
_FORBIDDEN_HOST = _error_body(
    -32600, "Forbidden: Host not allowed (list it in allowed_hosts: nimblemcp run --allowed-hosts,"
    " NIMBLEMCP_ALLOWED_HOSTS; behind a proxy, the name it sends, e.g. the upstream name)")
_TOO_LARGE = _error_body(-32600, "Request body too large")
_TWO_HOSTS = _error_body(-32600, "Bad Request: more than one Host header")
_NO_HOST = _error_body(-32600, "Bad Request: an HTTP/1.1 request must have a Host header")
_BAD_LENGTH = _error_body(-32600, "Invalid Content-Length")
_TOO_MANY_HEADERS = _error_body(-32600, "Request header fields too large")
_PREFLIGHT_HEADERS = (
    b"content-type, accept, authorization, mcp-protocol-version, mcp-method, mcp-name, mcp-session-id"
)


@dataclass(frozen=True, slots=True)
class HttpSecurity:
    """The guards in front of the MCP endpoint.

    `allowed_origins` / `allowed_hosts`: deployment values besides localhost ("*"
    allows any); `allowed_hosts=None` means localhost only, except that `run_http`
    on a non-loopback address accepts any Host (Origin is still checked).
    `allow_localhost`: localhost Origins and Hosts pass. `max_body`: bytes per request
    body (413 above; None = no limit). `max_headers` / `max_header_bytes`: header
    count and total size (431 above). `cors`: answer preflights and add CORS headers
    for allowed Origins; `cors_max_age`: seconds a preflight may be cached.
    `body_timeout`: seconds a POST body may take to arrive in full, counted from the
    request head (408 and the connection closed after, checked once a second; None =
    no deadline). A timeout rather than a rate: it bounds how long one slow client
    holds a connection and a task, and at the 4 MiB default body a client still
    needs only ~1.1 Mbit/s.
    Connection limits, applied by `run_http` to uvicorn (an app mounted elsewhere
    gets them from its own server): `head_timeout`, seconds a request head (request
    line and headers) may take, counted from the connection or the previous
    response (the connection is closed after); `idle_timeout`, seconds an idle
    keep-alive connection is kept."""

    allowed_origins: Sequence[str] = ()
    allowed_hosts: Sequence[str] | None = None
    allow_localhost: bool = True
    max_body: int | None = DEFAULT_MAX_BODY
    max_headers: int = 100
    max_header_bytes: int = 32 * 1024
    cors: bool = False
    cors_max_age: int = 600
    body_timeout: float | None = 30.0
    head_timeout: float = 10.0
    idle_timeout: float = 5.0

    def __post_init__(self) -> None:
        # Lists are welcome; kept as tuples, so the options stay hashable and unshared.
        # One string is refused: its letters would each become an allowed value.
        for name in ("allowed_origins", "allowed_hosts"):
            if isinstance(getattr(self, name), str):
                raise TypeError(f"{name} takes a list of strings, e.g. [{getattr(self, name)!r}], not one string")
        object.__setattr__(self, "allowed_origins", tuple(self.allowed_origins))
        if self.allowed_hosts is not None:
            object.__setattr__(self, "allowed_hosts", tuple(self.allowed_hosts))

    def override(self, **given: Any) -> HttpSecurity:
        """These options with the given (not None) keyword arguments replacing theirs
        (how the command line lays its flags over the environment's settings)."""
        given = {k: v for k, v in given.items() if v is not None}
        return replace(self, **given) if given else self


class _BodyTooLarge(Exception):
    """Raised out of `receive` through the wrapped app (ours reads its body outside
    its last-resort handler, so it passes)."""


async def _reject(send: Send, status: int, body: bytes) -> None:
    await respond(send, status, body, content_type=b"application/json")


def _host_name(value: str) -> str:
    """`example.com:8000` -> `example.com`; `[::1]:8000` -> `[::1]`."""
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end > 0 else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class SecurityMiddleware:
    """Rejects foreign Origins (403) and Hosts (403), a repeated Host (400), oversized
    bodies (413) and header floods (431) before the wrapped app sees the request."""

    # A `ListenDrain` made around this guard hands it its per-request part (`drain`).
    takes_listen_drain = True

    def __init__(self, app: Any, security: HttpSecurity | None = None) -> None:
        config = security or HttpSecurity()
        self.app = app
        self.security = config
        self.allowed_origins = {o.rstrip("/").lower() for o in config.allowed_origins}
        hosts = {h.lower() for h in config.allowed_hosts or ()}
        self.any_host = "*" in hosts
        self.any_origin = "*" in self.allowed_origins
        self.allowed_hosts = hosts | (LOCAL_HOSTS if config.allow_localhost else set())
        self.allow_localhost = config.allow_localhost
        self.max_body = config.max_body
        self.max_headers = config.max_headers
        self.max_header_bytes = config.max_header_bytes
        self.cors = config.cors
        self.cors_max_age = str(config.cors_max_age).encode()
        self._origins: dict[bytes, bool] = {}
        self._hosts: dict[bytes, bool] = {}
        # The app takes the header dict built here (nimblemcp's endpoint does).
        self.hands_headers = getattr(app, "takes_found_headers", False) is True
        # A `_drain.ListenDrain` made around this guard: it keeps the listen streams
        # this guard lets through, and hands GETs itself (see `ListenDrain`).
        self.drain: Any = None

    # -- verdicts (cached) --------------------------------------------------------------

    def origin_ok(self, raw: bytes) -> bool:
        verdict = self._origins.get(raw)
        if verdict is None:
            verdict = self._judge_origin(raw.decode("latin-1"))
            if len(self._origins) < _CACHE_LIMIT:
                self._origins[raw] = verdict
        return verdict

    def _judge_origin(self, origin: str) -> bool:
        origin = origin.strip().rstrip("/").lower()
        if self.any_origin or origin in self.allowed_origins:
            return True
        if not self.allow_localhost or origin == "null":
            return False
        try:
            parts = urlsplit(origin)
            host = parts.hostname
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or host is None:
            return False
        return host in LOCAL_HOSTS or f"[{host}]" in LOCAL_HOSTS

    def host_ok(self, raw: bytes) -> bool:
        verdict = self._hosts.get(raw)
        if verdict is None:
            value = raw.decode("latin-1").strip().lower()
            verdict = self.any_host or value in self.allowed_hosts or _host_name(value) in self.allowed_hosts
            if len(self._hosts) < _CACHE_LIMIT:
                self._hosts[raw] = verdict
        return verdict

    # -- the middleware ------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The checks, then the wrapped app (or a rejection). They read only the scope:
        whichever server runs the app, the same request gets the same verdict."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_headers = scope["headers"]
        # A request that names no header twice is read as a dict, which goes on to an
        # app that takes it (`takes_found_headers`); a repeated name takes the full scan.
        try:
            found = dict(raw_headers) if type(raw_headers) is list else None
        except TypeError:  # names that are not bytes (unhashable)
            found = None
        if found is not None and len(found) == len(raw_headers):
            size = sum(map(len, found)) + sum(map(len, found.values()))
            if len(found) > self.max_headers or size > self.max_header_bytes:
                await _reject(send, 431, _TOO_MANY_HEADERS)
                return
            origin = found.get(b"origin")
            host = found.get(b"host")
            length = found.get(b"content-length")
            if host is None and scope.get("http_version") == "1.1":
                await _reject(send, 400, _NO_HOST)  # RFC 9112 §3.2
                return
        else:
            found = origin = host = length = listen = None
            size = 0
            for key, value in raw_headers:
                size += len(key) + len(value)
                if key == b"mcp-method":
                    if listen is None:  # the first one, as the drain always read it
                        listen = value
                elif key == b"origin":
                    if origin is not None and origin != value:
                        await _reject(send, 403, _FORBIDDEN_ORIGIN)
                        return
                    origin = value
                elif key == b"host":
                    if host is not None:  # RFC 9112 §3.2: more than one Host is a 400
                        await _reject(send, 400, _TWO_HOSTS)
                        return
                    host = value
                elif key == b"content-length":
                    length = value
            if len(raw_headers) > self.max_headers or size > self.max_header_bytes:
                await _reject(send, 431, _TOO_MANY_HEADERS)
                return
            if host is None and scope.get("http_version") == "1.1":
                await _reject(send, 400, _NO_HOST)  # RFC 9112 §3.2
                return
        if host is not None and not self.host_ok(host):
            await _reject(send, 403, _FORBIDDEN_HOST)  # DNS rebinding (HTTP-02)
            return
        if origin is not None:
            if not self.origin_ok(origin):
                await _reject(send, 403, _FORBIDDEN_ORIGIN)  # present and invalid (HTTP-02)
                return
            if self.cors:
                if scope["method"] == "OPTIONS":
                    await self._preflight(scope, origin, send)
                    return
                send = self._with_cors(send, origin)
        limit = self.max_body
        if limit is not None:
            if length is not None:
                try:
                    declared = int(length)
                except ValueError:
                    declared = -1
                if declared < 0:
                    await _reject(send, 400, _BAD_LENGTH)
                    return
                if declared > limit:
                    await _reject(send, 413, _TOO_LARGE)
                    return
                # The HTTP server never delivers more than Content-Length bytes.
            elif scope["method"] in ("POST", "PUT", "PATCH"):
                if self.drain is not None and scope["method"] == "POST" and (
                        found.get(_MCP_METHOD) if found is not None else listen) == _LISTEN:
                    await self._listen(scope, receive, send, found, limit)
                    return
                await self._limited(scope, receive, send, limit)
                return
        drain = self.drain
        if drain is not None:
            kind = scope["method"]
            if kind == "POST":
                if found is not None:
                    try:
                        listen = found[_MCP_METHOD]
                    except KeyError:
                        listen = None
                if listen == _LISTEN:
                    await self._listen(scope, receive, send, found, None)
                    return
            elif kind == "GET":
                scope[DRAIN] = drain
        if found is not None and self.hands_headers:
            await self.app(scope, receive, send, found)
            return
        await self.app(scope, receive, send)

    async def _listen(self, scope: Scope, receive: Receive, send: Send, found: dict[bytes, bytes] | None,
                      limit: int | None) -> None:
        """A `subscriptions/listen` POST, its response kept by the drain (`_drain`)."""
        drain: Any = self.drain
        relay = drain.track(send)
        try:
            if limit is not None:
                await self._limited(scope, receive, relay, limit)
            elif found is not None and self.hands_headers:
                await self.app(scope, receive, relay, found)
            else:
                await self.app(scope, receive, relay)
        finally:
            drain.untrack(relay)

    async def _limited(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        """A body without Content-Length (chunked): count as it arrives."""
        seen = 0
        started = False

        async def counting_receive() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _BodyTooLarge
            return message

        async def tracking_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await _reject(send, 413, _TOO_LARGE)

    async def _preflight(self, scope: Scope, origin: bytes, send: Send) -> None:
        requested = b""
        for key, value in scope["headers"]:
            if key == b"access-control-request-headers":
                requested = value
        await respond(send, 204, headers=[
            (b"access-control-allow-origin", origin),
            (b"access-control-allow-methods", b"POST, GET, DELETE, OPTIONS"),
            (b"access-control-allow-headers", requested or _PREFLIGHT_HEADERS),
            (b"access-control-max-age", self.cors_max_age),
            (b"vary", b"origin"),
        ])

    @staticmethod
    def _with_cors(send: Send, origin: bytes) -> Send:
        async def cors_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [
                    *message.get("headers", ()),
                    (b"access-control-allow-origin", origin),
                    (b"access-control-expose-headers", b"www-authenticate, mcp-session-id"),
                    (b"vary", b"origin"),
                ]
            await send(message)

        return cors_send


def secure_app(
    core: Core,
    *,
    path: str = "/mcp",
    security: HttpSecurity | None = None,
    keepalive: float = 15.0,
    legacy: LegacyHandler | None = None,
    legacy_sessions: bool = True,
    freeze_gc: bool = False,
    auth: dict[str, Any] | None = None,
    routes: Mapping[str, Any] | None = None,
) -> SecurityMiddleware:
    """`asgi_app(core)` wrapped in `SecurityMiddleware`: what `run_http` serves and
    what `Server.asgi_app()` returns (`core` is a `Server`, or any `nimblemcp._port.Core`).

    The guards are `security` (an `HttpSecurity`; its defaults when None): localhost
    Origins and Hosts are allowed by default; list deployment ones in its
    `allowed_origins` / `allowed_hosts` ("*" allows any). `auth` makes the endpoint an
    OAuth resource server: the keyword arguments of `auth.bearer.BearerAuth` (verifier,
    resource, authorization_servers, scopes...).
    """
    from nimblemcp.transports.http.app import asgi_app

    config = security or HttpSecurity()
    app: Any = asgi_app(
        core, path=path, keepalive=keepalive, legacy=legacy, legacy_sessions=legacy_sessions, freeze_gc=freeze_gc,
        routes=routes,
        body_timeout=config.body_timeout,
    )
    if auth is not None:
        from nimblemcp.transports.auth.bearer import BearerAuth

        app = BearerAuth(app, path=path, **auth)
    return SecurityMiddleware(app, config)
