"""A small HTTP/1.1 client for one MCP endpoint: kept-alive connections, one write per
request, responses parsed by `httptools` and streamed (JSON bodies and SSE alike).

`http_client.HttpTransport` uses it for plain `http://` and `https://` URLs when no
proxy is configured, no httpx client or `httpx.Auth` was handed in and `httptools` is
installed; everything else goes through httpx. Measured on loopback it costs a third
of what httpx does per exchange, and importing it costs nothing beyond `httptools`.

What it does: Content-Length, chunked and read-until-close response bodies; keep-alive
reuse of idle connections (at most `max_idle` kept; a server's `Connection: close`
honoured); one retry on a fresh connection when a *reused* idle connection turns out
closed before any byte of the answer (the server timed it out between calls; the
request never reached a handler); TLS with the given `SSLContext` (hostname checked);
a connect timeout; back-pressure (the socket stops being read while a response's
unread body passes `_HIGH_WATER`). What it does not: proxies, HTTP/2, redirects (the
caller decides those), cookies, compressed bodies (no `Accept-Encoding` is sent),
request bodies other than bytes. Header names and values with CR or LF are refused.

Errors are `H1Error` subclasses, in the one tree as `StreamBroken`s (nothing final
arrived): `H1ConnectError` (nothing was sent), `H1ProtocolError` (bytes that are not
HTTP/1.1, or a header it refuses to send), `H1Closed` (the connection ended mid-exchange).
Imports the standard library, `httptools`, `nimblemcp.errors` and `_url_split` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping

import httptools

from nimblemcp.errors import StreamBroken
from nimblemcp.transports._read_size import small_reads
from nimblemcp.transports._url_split import split_url

__all__ = ["H1Closed", "H1ConnectError", "H1Error", "H1Pool", "H1ProtocolError", "H1Response", "Headers"]

_HIGH_WATER = 256 * 1024  # unread body bytes buffered before the socket is paused
_USER_AGENT = "nimblemcp"


class H1Error(StreamBroken):
    """The exchange failed below HTTP semantics (connect, framing, a closed socket)."""


class H1ConnectError(H1Error):
    """The connection could not be made; nothing was sent."""


class H1ProtocolError(H1Error):
    """The server's bytes are not a valid HTTP/1.1 response."""


class H1Closed(H1Error):
    """The connection ended before the response did."""


class Headers(dict[str, str]):
    """Response headers by lower-case name (repeated fields joined with ", "); lookups
    ignore case."""

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return dict.get(self, key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return dict.__getitem__(self, key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and dict.__contains__(self, key.lower())


class H1Response:
    """One response: `status_code`, `headers`, and the body through `aiter_bytes()`."""

    __slots__ = ("_chunks", "_conn", "_done", "_error", "_waiter", "buffered", "headers", "status_code")

    def __init__(self, conn: _Conn, status_code: int, headers: Headers) -> None:
        self._conn = conn
        self.status_code = status_code
        self.headers = headers
        self._chunks: deque[bytes] = deque()
        self._done = False
        self._error: H1Error | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.buffered = 0

    @property
    def complete(self) -> bool:
        """The whole body arrived (whether or not it was read)."""
        return self._done

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _feed(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self.buffered += len(chunk)
        if self.buffered > _HIGH_WATER:
            self._conn.pause()
        self._wake()

    def _finish(self, error: H1Error | None = None) -> None:
        if not self._done:
            self._done = error is None
            self._error = error
        self._wake()

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked framing already removed)."""
        chunks = self._chunks
        while True:
            while chunks:
                chunk = chunks.popleft()
                self.buffered -= len(chunk)
                if self.buffered <= _HIGH_WATER:
                    self._conn.resume()
                yield chunk
            if self._done:
                return
            if self._error is not None:
                raise self._error
            self._waiter = self._conn.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_bytes()])


class _Conn(asyncio.Protocol):
    """One TCP (or TLS) connection and its response parser."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.paused = False
        self.seen_bytes = False  # any byte of the current exchange's answer arrived
        self.response: H1Response | None = None
        self._head: asyncio.Future[H1Response] | None = None
        self._fields: list[tuple[bytes, bytes]] = []
        self._until_close = False
        self.keep_alive = False

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        small_reads(transport)  # not 256 KiB a read: an mmap per response (issue 18)

    def data_received(self, data: bytes) -> None:
        self.seen_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(H1ProtocolError(f"invalid HTTP/1.1 response: {exc}"))
            self.close()

    def eof_received(self) -> bool | None:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        response = self.response
        if response is not None and self._until_close and not response.complete:
            response._finish()  # a body delimited by the end of the connection
            self.keep_alive = False
            return
        why = f": {exc}" if exc is not None else ""
        self._fail(H1Closed(f"the server closed the connection{why}"))

    def pause_writing(self) -> None:  # request bodies are small; nothing to throttle
        pass

    def resume_writing(self) -> None:
        pass

    # -- httptools callbacks ---------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields.append((name, value))

    def on_headers_complete(self) -> None:
        headers = Headers()
        for raw, value in self._fields:
            name = raw.decode("latin-1").lower()
            text = value.decode("latin-1")
            headers[name] = f"{dict.__getitem__(headers, name)}, {text}" if dict.__contains__(headers, name) else text
        self._fields = []
        status = self.parser.get_status_code()
        if status < 200:  # 1xx: informational, the real head follows
            return
        self._until_close = ("content-length" not in headers and status not in (204, 304)
                             and "chunked" not in (headers.get("transfer-encoding") or "").lower())
        self.response = response = H1Response(self, status, headers)
        head = self._head
        if head is not None and not head.done():
            head.set_result(response)

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response._feed(body)

    def on_message_complete(self) -> None:
        if self.response is None:
            return  # the end of a 1xx head
        self.keep_alive = self.parser.should_keep_alive() and not self._until_close
        self.response._finish()

    # -- the client side -------------------------------------------------------------

    def _fail(self, error: H1Error) -> None:
        head = self._head
        if head is not None and not head.done():
            head.set_exception(error)
        if self.response is not None:
            self.response._finish(error)

    def start(self, data: bytes) -> asyncio.Future[H1Response]:
        """Send one request (already framed); the future gets the response's head."""
        assert self.transport is not None
        self.seen_bytes = False
        if self.closed or self.transport.is_closing():
            raise H1Closed("the connection was closed")
        self.response = None
        self.keep_alive = False
        self._until_close = False
        self._head = head = self.loop.create_future()
        self.transport.write(data)
        return head

    def pause(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


@functools.lru_cache(maxsize=64)
def _route(url: str) -> tuple[tuple[str, str, int], bytes]:
    """(scheme, host, port) and the request line's target plus the Host field, for `url`."""
    parts = split_url(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise H1ConnectError(f"cannot reach {url!r}")
    port = parts.port or (443 if scheme == "https" else 80)
    host = parts.hostname
    netloc = parts.netloc.rpartition("@")[2]
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return (scheme, host, port), f" {target} HTTP/1.1\r\nHost: {netloc}\r\n".encode("ascii")


def _frame(method: str, url: str, headers: Iterable[tuple[str, str]], content: bytes | None) -> bytes:
    line = _route(url)[1]
    out = [method, line.decode("ascii")]
    seen_agent = False
    for name, value in headers:
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value or ":" in name:
            raise H1ProtocolError(f"refusing to send the header {name!r}: it contains CR, LF or ':'")
        if name.lower() == "user-agent":
            seen_agent = True
        out.append(f"{name}: {value}\r\n")
    if not seen_agent:
        out.append(f"User-Agent: {_USER_AGENT}\r\n")
    if content is not None:
        out.append(f"Content-Length: {len(content)}\r\n\r\n")
        try:
            return "".join(out).encode("latin-1") + content
        except UnicodeEncodeError as exc:
            raise H1ProtocolError(f"a header is not latin-1: {exc}") from None
    out.append("\r\n")
    try:
        return "".join(out).encode("latin-1")
    except UnicodeEncodeError as exc:
        raise H1ProtocolError(f"a header is not latin-1: {exc}") from None


class H1Pool:
    """Connections to the origins of the URLs it is asked for, reused while idle.
    Safe for many concurrent exchanges on one event loop (each gets its own
    connection); `aclose()` ends every connection, open responses included."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None, connect_timeout: float | None = 10.0,
                 max_idle: int = 8) -> None:
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._all: set[_Conn] = set()
        self._closed = False

    async def _connect(self, key: tuple[str, str, int]) -> _Conn:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if scheme == "https":
            tls = self.ssl_context if self.ssl_context is not None else ssl.create_default_context()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Conn(loop), host, port, ssl=tls, server_hostname=host if tls else None)
        except TimeoutError:
            raise H1ConnectError(f"connecting to {host}:{port} timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise H1ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        return conn

    def _take_idle(self, key: tuple[str, str, int]) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
            self._all.discard(conn)
        return None

    def _release(self, key: tuple[str, str, int], conn: _Conn) -> None:
        response = conn.response
        reusable = (not self._closed and not conn.closed and conn.keep_alive and response is not None
                    and response.complete and not response._chunks)
        idle = self._idle.setdefault(key, [])
        if reusable and len(idle) < self.max_idle:
            conn.response = None
            conn.resume()
            idle.append(conn)
            return
        self._all.discard(conn)
        conn.close()

    @contextlib.asynccontextmanager
    async def stream(self, method: str, url: str, headers: Mapping[str, str] | Iterable[tuple[str, str]],
                     content: bytes | None = None) -> AsyncIterator[H1Response]:
        """One exchange: the response once its head arrived; its body streams from
        `aiter_bytes()` until the block exits (an unfinished body closes the connection)."""
        if self._closed:
            raise H1Closed("the HTTP client is closed")
        items = headers.items() if isinstance(headers, Mapping) else headers
        data = _frame(method, url, items, content)
        key = _route(url)[0]
        while True:
            conn = self._take_idle(key)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(key)
                self._all.add(conn)
            try:
                response = await conn.start(data)
            except H1Closed:
                self._all.discard(conn)
                conn.close()
                if reused and not conn.seen_bytes:
                    continue  # the server had closed the idle connection: a fresh one
                raise
            except BaseException:
                self._all.discard(conn)
                conn.close()
                raise
            break
        try:
            yield response
        finally:
            self._release(key, conn)

    async def aclose(self) -> None:
        self._closed = True
        for conn in list(self._all):
            conn._fail(H1Closed("the HTTP client was closed"))
            conn.close()
        self._all.clear()
        self._idle.clear()
