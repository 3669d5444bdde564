"""Streamable HTTP client transport (HTTP-03..08, HTTP-12..15).

One POST per request; the answer is `application/json` (one response) or
`text/event-stream` (notifications, then the response). Routing headers
(`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`) are derived from the
body here, so the Client never sees HTTP. Closing a response stream early is the
cancellation (CANC-01).

Legacy (2025-11-25) sessions (LEGC-02/03/06): `begin_session(version)` after the
`initialize` exchange makes every later message carry `Mcp-Session-Id` (captured from
the `initialize` response) and `MCP-Protocol-Version`; a 404 for a message carrying the
session raises `SessionExpired`; server-to-client requests on a response stream go to
`on_request` and its answers are POSTed back; an abandoned request is cancelled with an
explicit `notifications/cancelled`; the session's standalone GET stream (LEGC-05;
`listen_get=False` to skip) carries the server's own requests and notifications (to
`on_notification`); an SSE stream that ends before the response is resumed with GET +
`Last-Event-ID` after the server's `retry:` delay; `close()` DELETEs
the session (405 tolerated). `auth` (an `httpx.Auth`, e.g. `nimblemcp.client.auth.OAuth`)
runs every request: it adds the bearer token and answers 401/403 challenges.

What real servers answer besides JSON-RPC (`_http_answers` reads it): same-origin
307/308 redirects are followed with the method and body kept, at most
`max_redirects` hops (a 308 moves `url` for good); any other redirect, or one to
another origin (credentials never leave the origin), is `RedirectNotFollowed`
naming the target. 429/503 are `ServerBusy` with the `Retry-After` delay (the Client
decides whether to wait); a 401 with no `auth` is `AuthorizationRequired` quoting
the challenge. Bodies and SSE events are read with a cap (`max_message_bytes`): over
it the response is closed unread and the request fails with `MessageTooLarge`; the
transport stays usable.
The bytes go over a wire (`_wire.Wire`: one small interface, each wire mapping its own
errors into the tree; neither re-sends a request that may have left, so what is
re-sent is the Client's idempotence policy). `h1.client` (nimblemcp's HTTP/1.1 client
on httptools: kept-alive connections, one write per request) carries plain and TLS URLs
when nothing needs httpx; httpx carries them when the endpoint is proxied (as httpx
decides from `urllib.request.getproxies()` and NO_PROXY, `_proxies`), an
`httpx.AsyncClient` is handed in (`http=`: explicit proxies, mounts), `auth` is set
(the `httpx.Auth` flows: OAuth, DPoP), the URL carries user info, or httptools is
missing; `wire="h1"` or `"httpx"` forces one. `backend` says which was chosen after
`open()`; httpx is imported only then. Both take the same TLS context (`verify=`,
`cert=`: `_tls`), at most `max_connections` connections at once (more requests wait
for one), send `Accept-Encoding: gzip, deflate` (and br with brotli installed) and
decode the answer. A URL with characters a request line cannot carry (an IDNA host,
non-ASCII in the path) is kept in httpx's normal form (`url`).
It has the Client's optional transport capabilities `RemotePeer`, `StrayNotifications`,
`PeerRequests` and `LegacySessions` (`nimblemcp.client._transport`), by shape.
Must not import `nimblemcp.client` or `nimblemcp.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import ssl
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Mapping,
)
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from nimblemcp.errors import (
    AuthorizationRequired,
    ClientError,
    HttpStatusError,
    MessageTooLarge,
    RedirectNotFollowed,
    ServerBusy,
    SessionExpired,
    StreamBroken,
    TransportError,
)
from nimblemcp.jsonrpc import decode, encode
from nimblemcp.transports._limits import MAX_CONNECTIONS, MAX_MESSAGE_BYTES, MAX_REDIRECTS
from nimblemcp.transports._sse import iter_sse
from nimblemcp.transports.client._answers import (
    bounded_lines,
    parse_challenge,
    read_capped,
    redirect_target,
    retry_after,
    same_origin,
)
from nimblemcp.types._http import (
    ACCEPT_BOTH,
    HEADER_METHOD,
    HEADER_NAME,
    HEADER_PROTOCOL_VERSION,
    HEADER_SESSION_ID,
    JSON_TYPE,
    PARAM_HEADER_PREFIX,
    SSE_TYPE,
)
from nimblemcp.types._meta import PROTOCOL_VERSION
from nimblemcp.types._tool_headers import encode_header_value
from nimblemcp.types.methods import METHODS

# The [http] extra is what this module needs: httpx carries proxies, auth flows and given
# clients, so its absence is reported here (by name, `MissingExtraError`) without paying
# for importing it on the paths that do not use it.
if importlib.util.find_spec("httpx") is None:
    raise ModuleNotFoundError("No module named 'httpx'", name="httpx")

if TYPE_CHECKING:
    import httpx

    from nimblemcp.transports.client._tls import Cert, Verify
    from nimblemcp.transports.client._wire import Wire, WireResponse
    from nimblemcp.transports.client.sse import SseTransport
    from nimblemcp.transports.h1.client import Decoder

__all__ = [
    "HttpStatusError", "HttpTransport", "SessionExpired", "StreamBroken",
    "encode_header_value", "mcp_name",
]

logger = logging.getLogger("nimblemcp.http_client")

_GATEWAY_FAILED = (502, 504)  # Bad Gateway, Gateway Timeout: retryable for idempotent requests


@dataclass(slots=True)
class _Resume:
    """Where an SSE response stream stood: the last event id and the retry hint."""

    last_id: str | None = None
    retry_ms: int | None = None
    accepted: bool = False


def mcp_name(method: str, params: Mapping[str, Any]) -> str | None:
    """The value mirrored in `Mcp-Name` for this request, if the method has one."""
    spec = METHODS.get(method)  # tasks/* name their taskId there too (TASK-11)
    key = spec.name_param if spec is not None else None
    if key is None:
        return None
    value = params.get(key)
    return value if isinstance(value, str) else None


class HttpTransport:
    """POSTs each request to one MCP endpoint URL.

    `verify` (True, a CA bundle path, an `ssl.SSLContext` or False) and `cert` (a PEM
    path, `(certfile, keyfile)` or `(certfile, keyfile, password)`) set TLS for the wire
    it builds (not for a client given as `http=`); `max_connections` caps connections to
    the server (more requests wait for one); `wire` is "auto", "h1" or "httpx"."""

    carries_param_headers = True
    wire = "http"

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        http: httpx.AsyncClient | None = None,
        connect_timeout: float = 10.0,
        max_resumes: int = 5,
        listen_get: bool = True,
        auth: httpx.Auth | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_redirects: int = MAX_REDIRECTS,
        max_connections: int = MAX_CONNECTIONS,
        sse_fallback: bool = True,
        verify: Verify = True,
        cert: Cert | None = None,
        wire: Literal["auto", "h1", "httpx"] = "auto",
    ) -> None:
        if verify is not True or cert is not None:
            if http is not None:
                raise TypeError("verify= and cert= apply to the client the transport builds: "
                                "configure TLS on the httpx.AsyncClient you pass as http=")
            from nimblemcp.transports.client._tls import check

            check(verify, cert)
        if wire not in ("auto", "h1", "httpx"):
            raise ValueError(f"wire must be 'auto', 'h1' or 'httpx', not {wire!r}")
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        url = _wire_form(url)
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018  (reading it validates it)
        except ValueError as exc:
            raise ClientError(f"invalid URL {url!r}: {exc}") from None
        if not parts.hostname:
            raise ClientError(f"invalid URL {url!r}: no host")
        self._userinfo = "@" in parts.netloc
        if wire == "h1" and (auth is not None or self._userinfo):
            raise ValueError("wire='h1' carries neither auth= nor user info in the URL: use httpx")
        #: The endpoint, in the ASCII form sent on the wire (IDNA host, percent-encoded path).
        self.url = url
        self.peer = f"{parts.scheme}://{parts.netloc}"
        #: TLS for https URLs, on either wire (see `transports._tls`).
        self._verify = verify
        self._cert = cert
        #: "auto": "h1" unless the connection needs what only httpx does; or forced.
        self.wire_choice = wire
        #: At most this many connections to the server at once; more requests wait for one.
        self.max_connections = max_connections
        self.max_message_bytes = max_message_bytes
        self.max_redirects = max_redirects
        #: Fall back to the 2024-11-05 HTTP+SSE transport (`sse_client`) when the first
        #: `initialize` POST gets 400/404/405 and a GET of the URL opens an `endpoint` stream.
        self.sse_fallback = sse_fallback
        self._sse: SseTransport | None = None
        self._settled = False  # a POST got its answer: no fallback any more
        #: Runs every request (e.g. `nimblemcp.client.auth.OAuth`: Bearer tokens, 401/403).
        self.auth = auth
        self.extra_headers = dict(headers or {})
        self._http = http
        self._wire: Wire | None = None
        #: The wire in use after `open()`: "h1" (`h1.client`) or "httpx".
        self.backend: str | None = None
        self._connect_timeout = connect_timeout
        self.max_resumes = max_resumes
        self.listen_get = listen_get
        #: Receives notifications that arrive outside any request (the GET stream).
        self.on_notification: Callable[[dict[str, Any]], None] | None = None
        #: Answers a server-to-client request (legacy sessions); the result is POSTed.
        self.on_request: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None
        self.session_id: str | None = None
        self.session_version: str | None = None
        self._pending_id: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        if self._wire is not None:
            return
        from nimblemcp.transports.client._wire import HttpxWire, route

        if self._http is not None:  # handed in: used as it is
            self._wire, self.backend = HttpxWire(self._http, self.auth, owned=False), "httpx"
            return
        tls = self._tls_context()
        if self._wants_httpx():
            import httpx

            # Read timeouts are per request and enforced by the Client, not here.
            self._http = httpx.AsyncClient(
                timeout=httpx.Timeout(None, connect=self._connect_timeout),
                verify=tls if tls is not None else False,
                limits=httpx.Limits(max_connections=self.max_connections, max_keepalive_connections=20),
            )
            self._wire, self.backend = HttpxWire(self._http, self.auth), "httpx"
            return
        from nimblemcp.transports.h1.client import DECODERS, H1Pool

        self._wire = H1Pool(route=route, ssl_context=tls, connect_timeout=self._connect_timeout,
                            max_connections=self.max_connections, decoders=_decoders(DECODERS))
        self.backend = "h1"

    def _tls_context(self) -> ssl.SSLContext | None:
        """The TLS context both wires use (`verify=`, `cert=`); None for plain HTTP."""
        if self.url[:8].lower() != "https://":
            return None
        from nimblemcp.transports.client._tls import tls_context

        return tls_context(self.url, self._verify, self._cert)

    def _wants_httpx(self) -> bool:
        """Whether this connection needs what only httpx does (see the module docstring)."""
        if self.wire_choice != "auto":
            return self.wire_choice == "httpx"
        if self.auth is not None or self._userinfo:
            return True
        from nimblemcp.transports.client._proxies import proxy_for

        if proxy_for(self.url) is not None:
            return True
        try:
            import httptools  # noqa: F401
        except ImportError:
            return True
        return False

    # -- legacy sessions (LEGC-02) -------------------------------------------------------

    async def begin_session(self, version: str) -> None:
        """The `initialize` exchange is done: carry its session id and version from now
        on, and open the standalone GET stream (answered before this returns, so later
        requests' resumptions never race it)."""
        self.session_id, self._pending_id = self._pending_id, None
        self.session_version = version
        if self.listen_get and self.session_id is not None:
            connected = asyncio.Event()
            task = self._spawn(self._standalone(connected))
            waiter = asyncio.ensure_future(connected.wait())
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()

    async def _standalone(self, connected: asyncio.Event) -> None:
        """LEGC-05: the session's GET stream; 405 (or any error) means there is none."""
        state = _Resume()
        try:
            async with contextlib.aclosing(self._resume(state, connected)) as stream:
                async for message in stream:
                    if "method" in message and self.on_notification is not None:
                        self.on_notification(message)
        except ClientError as exc:  # a TransportError, or an auth failure: no GET stream
            logger.warning("the session's GET stream ended: %s", exc)

    def reset_session(self) -> None:
        self.session_id = self.session_version = self._pending_id = None

    def _session_headers(self) -> dict[str, str]:
        headers = dict(self.extra_headers)
        if self.session_id is not None:
            headers[HEADER_SESSION_ID] = self.session_id
        if self.session_version is not None:
            headers[HEADER_PROTOCOL_VERSION] = self.session_version
        return headers

    def build_headers(
        self, request: Mapping[str, Any], param_headers: Mapping[str, Any] | None
    ) -> dict[str, str]:
        """All headers for one POST (HTTP-04, HTTP-09..11, HTTP-15)."""
        headers = {
            **self._session_headers(),
            "Accept": ACCEPT_BOTH,
            "Content-Type": JSON_TYPE,
        }
        params = request.get("params") or {}
        meta = params.get("_meta") or {}
        version = meta.get(PROTOCOL_VERSION)
        if isinstance(version, str):
            headers[HEADER_PROTOCOL_VERSION] = version
        method = request.get("method")
        if isinstance(method, str):
            headers[HEADER_METHOD] = method
            name = mcp_name(method, params)
            if name is not None:
                headers[HEADER_NAME] = encode_header_value(name)
        for key, value in (param_headers or {}).items():
            headers[PARAM_HEADER_PREFIX + key] = encode_header_value(value)
        return headers

    # -- requests ------------------------------------------------------------------------

    async def send(
        self, request: dict[str, Any], *, param_headers: Mapping[str, Any] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        # The spec's backwards-compatibility probe: only an `initialize` POST refused with
        # 400/404/405 makes the client look for a 2024-11-05 `endpoint` stream (a refused
        # `server/discover` just means "not 2026-07-28").
        if (self._sse is None and self.sse_fallback and not self._settled
                and request.get("method") == "initialize"):
            try:
                async with contextlib.aclosing(self._send_http(request, param_headers)) as stream:
                    async for message in stream:
                        self._settled = True
                        yield message
                return
            except HttpStatusError as exc:
                if exc.status not in (400, 404, 405) or self._settled or not await self._fall_back():
                    raise
        stream = self._sse.send(request, param_headers=param_headers) if self._sse is not None \
            else self._send_http(request, param_headers)
        async with contextlib.aclosing(stream):
            async for message in stream:
                yield message

    async def _fall_back(self) -> bool:
        """Backwards compatibility (2025-11-25 transports): is `url` a 2024-11-05
        HTTP+SSE server? If so, every later message goes through it."""
        self._settled = True  # one try
        from nimblemcp.transports.client.sse import SseTransport

        tls = self._tls_context() if self._http is None else None
        sse = SseTransport(self.url, headers=self.extra_headers, http=self._http,
                           auth=self.auth, connect_timeout=self._connect_timeout,
                           verify=tls if tls is not None else True)
        try:
            await sse.open()
        except (TimeoutError, TransportError):
            await sse.close()
            return False
        logger.info("%s speaks the 2024-11-05 HTTP+SSE transport: using it", self.url)
        sse.on_notification, sse.on_request = self.on_notification, self.on_request
        self._sse = sse
        return True

    async def _send_http(
        self, request: dict[str, Any], param_headers: Mapping[str, Any] | None
    ) -> AsyncGenerator[dict[str, Any], None]:
        if self._wire is None:
            await self.open()
        rid = request.get("id")
        state = _Resume()
        finished = False
        try:
            async with contextlib.aclosing(self._post(request, param_headers, state)) as stream:
                async for message in stream:
                    finished = "method" not in message and message.get("id") == rid
                    yield message
                    if finished:
                        return
            if not state.accepted:
                return  # a plain JSON answer that was not ours: the caller reports it
            for _ in range(self.max_resumes):
                if state.last_id is None or self.session_version is None:
                    break
                # LEGC-06: resume with GET + Last-Event-ID after the server's retry hint.
                await asyncio.sleep((state.retry_ms if state.retry_ms is not None else 1000) / 1000)
                async with contextlib.aclosing(self._resume(state)) as stream:
                    async for message in stream:
                        finished = "method" not in message and message.get("id") == rid
                        yield message
                        if finished:
                            return
            raise StreamBroken("the SSE stream ended before the response")
        finally:
            if not finished and state.accepted and self.session_version is not None:
                # LEGC-06: closing a stream is not cancellation on a legacy session.
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.notify({
                        "jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": rid, "reason": "the client abandoned the request"},
                    }))

    @contextlib.asynccontextmanager
    async def _exchange(
        self, method: str, headers: Mapping[str, str], content: bytes | None = None
    ) -> AsyncIterator[WireResponse]:
        """One HTTP exchange with the endpoint, following same-origin redirects that
        keep the method (307/308; for GET any redirect) up to `max_redirects` hops.
        The response is the wire's (`_wire.WireResponse`)."""
        url = self.url
        if self._wire is None:
            await self.open()
        wire = self._wire
        assert wire is not None
        for hop in range(self.max_redirects + 1):
            async with wire.stream(method, url, headers, content) as response:
                status = response.status_code
                if not (300 <= status < 400 and status != 304):
                    yield response
                    return
                target = redirect_target(url, response.headers.get("location"))
                keeps = status in (307, 308) or method == "GET"
                if target is None or not keeps or not same_origin(target, self.url):
                    why = ("no Location" if target is None else
                           "another origin (credentials never leave this one)"
                           if not same_origin(target, self.url) else f"it would turn {method} into GET")
                    raise RedirectNotFollowed(
                        status, f"HTTP {status} redirect from {url} to {target}: not followed "
                                f"({why}); connect to that URL directly if you trust it",
                        location=target)
                if hop == self.max_redirects:
                    raise RedirectNotFollowed(
                        status, f"more than {self.max_redirects} redirects (max_redirects); "
                                f"the last one from {url} to {target}", location=target)
            target = _wire_form(target)  # a Location may carry what a request line cannot
            if status == 308 and url == self.url:
                logger.info("%s moved permanently to %s", self.url, target)
                self.url = target
            url = target

    async def _post(
        self, request: dict[str, Any], param_headers: Mapping[str, Any] | None, state: _Resume
    ) -> AsyncGenerator[dict[str, Any], None]:
        headers = self.build_headers(request, param_headers)
        rid = request.get("id")
        async with self._exchange("POST", headers, encode(request)) as response:
            status = response.status_code
            if request.get("method") == "initialize":
                self._pending_id = response.headers.get(HEADER_SESSION_ID)
            ctype = (response.headers.get("content-type") or "").split(";")[0].strip().lower()
            if ctype == SSE_TYPE and status < 400:
                state.accepted = True
                async for message in self._events(response, state):
                    yield message
                return
            body = await read_capped(response.aiter_bytes(), self.max_message_bytes,
                                     response.headers.get("content-length"))
            answer = _decode(body, response) if ctype == JSON_TYPE and body else None
            error = answer.get("error") if isinstance(answer, dict) else None
            error = error if isinstance(error, dict) else None
            if status == 404 and HEADER_SESSION_ID in headers:
                # LEGC-02: whatever the body says, the session is gone.
                raise SessionExpired(status, f"HTTP 404 for session {headers[HEADER_SESSION_ID]}: "
                                             "the session expired", error)
            if status in (429, 503):
                raise self._busy(response, error)
            if status == 401 and self.auth is None:
                raise self._unauthorized(response, error)
            if (isinstance(answer, dict) and ("result" in answer or "error" in answer)
                    and (status < 400 or answer.get("id") == rid)):
                yield answer
                return
            failed = HttpStatusError(
                status,
                f"HTTP {status} without a JSON-RPC response"
                f" ({ctype or 'no content type'}): {body[:200]!r}",
                error,
            )
            # A proxy in front lost the server mid-request (a rolling restart): the
            # request may have run, so only an idempotent one is sent again.
            failed.retryable = status in _GATEWAY_FAILED
            raise failed

    def _busy(self, response: Any, error: dict[str, Any] | None) -> ServerBusy:
        status = response.status_code
        header = response.headers.get("retry-after")
        delay = retry_after(header)
        what = "too many requests" if status == 429 else "the server is unavailable"
        when = f"retry after {delay:g} s" if delay is not None else "no Retry-After given"
        return ServerBusy(status, f"HTTP {status} from {self.url}: {what} ({when})", error,
                          retry_after=delay)

    def _unauthorized(self, response: Any, error: dict[str, Any] | None) -> AuthorizationRequired:
        challenge = parse_challenge(response.headers.get("www-authenticate"))
        quoted = (f"WWW-Authenticate: {challenge.raw}" if challenge.raw
                  else "no WWW-Authenticate challenge")
        return AuthorizationRequired(
            401,
            f"the server at {self.url} requires authorization (HTTP 401, {quoted}); no auth is "
            f"configured: pass auth= to Client (e.g. nimblemcp.client.auth.OAuth(...))",
            error, scheme=challenge.scheme, resource_metadata=challenge.resource_metadata,
            scope=challenge.scope,
        )

    async def _resume(
        self, state: _Resume, connected: asyncio.Event | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        headers = {**self._session_headers(), "Accept": SSE_TYPE}
        if state.last_id is not None:
            headers["Last-Event-ID"] = state.last_id
        before = state.last_id
        try:
            async with self._exchange("GET", headers) as response:
                if connected is not None:
                    connected.set()
                ctype = (response.headers.get("content-type") or "").split(";")[0].strip().lower()
                if response.status_code >= 400 or ctype != SSE_TYPE:
                    state.last_id = None  # the server cannot resume: stop trying
                    return
                async for message in self._events(response, state):
                    yield message
        except StreamBroken:
            pass  # a failed resumption attempt; the caller may try again
        if state.last_id == before and before is not None:
            logger.info("resumption from %s delivered nothing new", before)

    async def _events(
        self, response: Any, state: _Resume
    ) -> AsyncIterator[dict[str, Any]]:
        lines = bounded_lines(response.aiter_bytes(), self.max_message_bytes)
        async for event in iter_sse(lines):
            if event.id is not None:
                state.last_id = event.id
            if event.retry is not None:
                state.retry_ms = event.retry
            if event.event != "message" or not event.data.strip():
                continue
            message = _decode(event.data, response)
            if "method" in message and "id" in message and self.on_request is not None:
                self._serve(message)
                continue
            yield message

    def _serve(self, message: dict[str, Any]) -> None:
        """LEGC-03: answer a server-to-client request by POSTing the response."""
        assert self.on_request is not None
        handler = self.on_request

        async def run() -> None:
            response = await handler(message)
            await self.notify(response)

        self._spawn(run())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def notify(self, message: dict[str, Any]) -> None:
        """Send a notification or a response (no JSON-RPC answer expected; 202)."""
        if self._sse is not None:
            await self._sse.notify(message)
            return
        try:
            async with self._exchange("POST", self.build_headers(message, None),
                                      encode(message)) as response:
                status = response.status_code
                with contextlib.suppress(MessageTooLarge):  # nothing in it is for us
                    await read_capped(response.aiter_bytes(), self.max_message_bytes, None)
        except StreamBroken as exc:  # nothing re-sends a notification: not retryable
            raise TransportError(f"HTTP transport failed: {exc}") from exc
        if status >= 400:
            logger.warning("%s refused: HTTP %s", message.get("method", "a response"), status)

    async def close(self) -> None:
        if self._sse is not None:
            sse, self._sse = self._sse, None
            await sse.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._wire is not None and self.session_id is not None:
            # LEGC-02: end the session; 405 means the server does not allow it.
            with contextlib.suppress(ClientError):
                async with self._exchange("DELETE", self._session_headers()):
                    pass
        self.reset_session()
        if self._wire is not None:
            wire, self._wire = self._wire, None
            await wire.aclose()
        self._http = None


def _wire_form(url: str) -> str:
    """`url` as the wire carries it: httpx's normal form (IDNA host, percent-encoded path
    and query) when it has characters a request line cannot carry; as it is otherwise."""
    if url.isascii() and url.isprintable() and not any(c in url for c in _UNSAFE):
        return url
    import httpx

    try:
        return str(httpx.URL(url))
    except httpx.InvalidURL as exc:
        raise ClientError(f"invalid URL {url!r}: {exc}") from None


_UNSAFE = frozenset(' "<>`{}')


def _decoders(builtin: Mapping[str, Callable[[], Decoder]]) -> Mapping[str, Callable[[], Decoder]]:
    """The content codings the h1 wire decodes: its own, and br when brotli is installed."""
    from nimblemcp.transports.client._brotli import brotli_decoder

    return builtin if brotli_decoder is None else {**builtin, "br": brotli_decoder}


def _decode(data: str | bytes, response: WireResponse | None = None) -> dict[str, Any]:
    try:
        message = decode(data)
    except Exception as exc:
        coding = response.headers.get("content-encoding") if response is not None else None
        why = f" (Content-Encoding: {coding})" if coding else ""
        raise TransportError(f"the server sent invalid JSON{why}: {data[:200]!r}") from exc
    if not isinstance(message, dict):
        raise TransportError("the server sent a JSON value that is not a message")
    return message
