"""A small HTTP/1.1 client: kept-alive connections per origin, one write per request,
responses parsed by `httptools` and streamed (JSON bodies and SSE alike).

It parses no URL: the caller gives it a `route` function that turns a URL into a
`Route` (the origin, and the request line's target and `Host`), and it knows nothing
of proxies or MCP. It is the client transport's default wire (`transports._wire.Wire`,
by shape). Measured on loopback it costs a third of what httpx does per exchange.

What a request can count on:
- It is written once. Another connection is tried only when the request provably never
  left: the pooled connection was seen closed (or had bytes waiting, or outlived
  `keepalive_expiry`) before the write, or the write failed at once. When a connection
  closes, resets or half-closes after the write and before the answer, that is
  `H1Closed`: re-sending is the caller's decision (the Client re-sends only what its
  idempotence policy allows).
- At most `max_connections` connections per origin (100 by default, as httpx); more
  exchanges wait in line, first come first served. At most `max_idle` idle ones are kept,
  none reused after `keepalive_expiry` seconds (5, as httpx; servers time them out too).
- A response head larger than `MAX_HEAD_BYTES` (100 KiB, httpx's bound) is refused as
  its bytes arrive; repeated fields are joined in linear time.
- `Accept-Encoding` names the codings of `decoders` (gzip and deflate from zlib; the
  caller may add others, e.g. br), and bodies in them are decoded as they stream, in
  pieces of at most 64 KiB (a small body that inflates hugely is never inflated whole).
  A body that cannot be decoded (corrupt, or cut short) is `H1DecodingError` naming the
  `Content-Encoding`; a coding it has no decoder for passes as it is, as with httpx.
- Content-Length, chunked and read-until-close bodies; a server's `Connection: close`
  honoured; bytes arriving when no answer is due end the connection; TLS with the given
  `SSLContext` (hostname checked); a connect timeout; back-pressure (the socket stops
  being read while a response's unread body passes `_HIGH_WATER`). Header names and
  values with CR, LF or a colon in the name are refused.
What it does not do: proxies, HTTP/2, redirects (the caller decides those), cookies,
request bodies other than bytes.

Errors are in the one tree. `H1Error`s are `StreamBroken`s (nothing final arrived):
`H1ConnectError` (nothing was sent), `H1ProtocolError` (bytes that are not HTTP/1.1, a
head over the bound, a header it refuses to send), `H1Closed` (the connection ended
mid-exchange). `H1DecodingError` is a `TransportError`.
Imports the standard library, `httptools` and `nimblemcp.errors` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import ssl
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Protocol

import httptools

from nimblemcp.errors import StreamBroken, TransportError

# The H1 errors are importable but not exported: what a caller catches is the tree's
# `StreamBroken` and `TransportError` (public modules export only `nimblemcp.errors` classes).
__all__ = ["DECODERS", "MAX_HEAD_BYTES", "Decoder", "H1Pool", "H1Response", "Headers", "Origin", "Route"]

#: The largest response head (status line and fields) read; httpx refuses at the same size.
MAX_HEAD_BYTES = 100 * 1024
_HIGH_WATER = 256 * 1024  # unread body bytes buffered before the socket is paused
_READ_SIZE = 64 * 1024  # as transports._read_size: a heap buffer per read, not an mmap (issue 18)
_PIECE = 64 * 1024  # the most decoded bytes handed out at a time
_USER_AGENT = "nimblemcp"

#: (scheme, host, port): connections are pooled per origin.
Origin = tuple[str, str, int]
#: The origin, and what follows the method: " TARGET HTTP/1.1\r\nHost: HOST\r\n".
Route = tuple[Origin, str]


class H1Error(StreamBroken):
    """The exchange failed below HTTP semantics (connect, framing, a closed socket)."""


class H1ConnectError(H1Error):
    """The connection could not be made; nothing was sent."""


class H1ProtocolError(H1Error):
    """The server's bytes are not a valid HTTP/1.1 response (or one over the bounds)."""


class H1Closed(H1Error):
    """The connection ended before the response did."""


class _Unsent(H1Closed):
    """The request was provably not sent on this connection: another may carry it."""


class H1DecodingError(TransportError):
    """The body is in a content coding that could not be decoded."""


class Decoder(Protocol):
    """Decodes one response body in one content coding."""

    def decode(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of `data`, in pieces."""
        ...

    def flush(self) -> bytes:
        """What is left at the end of the body; raises if the encoded data was cut short."""
        ...


class _Inflate:
    """gzip, or deflate: zlib-wrapped as RFC 9110 says, or raw as some servers send it."""

    __slots__ = ("_guess", "_seen", "_z")

    def __init__(self, wbits: int, guess_raw: bool = False) -> None:
        self._z = zlib.decompressobj(wbits)
        self._guess = guess_raw
        self._seen = False

    def decode(self, data: bytes) -> Iterator[bytes]:
        self._seen = True
        z = self._z
        if self._guess:
            self._guess = False
            try:
                out = z.decompress(data, _PIECE)
            except zlib.error:
                self._z = z = zlib.decompressobj(-zlib.MAX_WBITS)
                out = z.decompress(data, _PIECE)
        else:
            out = z.decompress(data, _PIECE)
        yield out
        while z.unconsumed_tail:
            yield z.decompress(z.unconsumed_tail, _PIECE)

    def flush(self) -> bytes:
        if not self._seen:
            return b""
        rest = self._z.flush()
        if not self._z.eof:
            raise zlib.error("the compressed data ends early")
        return rest


class _Chain:
    """Several codings, undone in the reverse of the order they were applied."""

    __slots__ = ("_decoders",)

    def __init__(self, decoders: list[Decoder]) -> None:
        self._decoders = decoders

    def decode(self, data: bytes) -> Iterator[bytes]:
        pieces: Iterable[bytes] = (data,)
        for decoder in self._decoders:
            pieces = _through(decoder, pieces)
        return iter(pieces)

    def flush(self) -> bytes:
        out = b""
        for decoder in self._decoders:
            out = (b"".join(decoder.decode(out)) if out else b"") + decoder.flush()
        return out


def _through(decoder: Decoder, pieces: Iterable[bytes]) -> Iterator[bytes]:
    for piece in pieces:
        if piece:
            yield from decoder.decode(piece)


#: The content codings decoded without another package (`Accept-Encoding` names them).
DECODERS: Mapping[str, Callable[[], Decoder]] = {
    "gzip": lambda: _Inflate(zlib.MAX_WBITS | 16),
    "deflate": lambda: _Inflate(zlib.MAX_WBITS, guess_raw=True),
}


def _decoder_for(coding: str, table: Mapping[str, Callable[[], Decoder]]) -> Decoder | None:
    """The decoder for a `Content-Encoding` value: None when there is nothing to undo.
    A coding without a decoder is skipped, as httpx skips it (its bytes pass as they are)."""
    chain: list[Decoder] = []
    for name in reversed(coding.split(",")):
        make = table.get(name.strip().lower())
        if make is not None:
            chain.append(make())
    if not chain:
        return None
    return chain[0] if len(chain) == 1 else _Chain(chain)


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
    """One response: `status_code`, `headers`, and the body through `aiter_bytes()`
    (decoded when it came in a content coding)."""

    __slots__ = ("_chunks", "_conn", "_decoder", "_done", "_error", "_waiter", "buffered", "headers",
                 "status_code")

    def __init__(self, conn: _Conn, status_code: int, headers: Headers, decoder: Decoder | None) -> None:
        self._conn = conn
        self.status_code = status_code
        self.headers = headers
        self._decoder = decoder
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
        """The body as it arrives (chunked framing removed, content coding undone)."""
        if self._decoder is not None:
            async for piece in self._decoded(self._decoder):
                yield piece
            return
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

    async def _decoded(self, decoder: Decoder) -> AsyncIterator[bytes]:
        self._decoder = None  # the raw chunks, from aiter_bytes
        async for chunk in self.aiter_bytes():
            try:
                for piece in decoder.decode(chunk):
                    if piece:
                        yield piece
            except Exception as exc:
                raise self._undecodable(exc) from exc
        try:
            rest = decoder.flush()
        except Exception as exc:
            raise self._undecodable(exc) from exc
        if rest:
            yield rest

    def _undecodable(self, exc: Exception) -> H1DecodingError:
        coding = self.headers.get("content-encoding")
        return H1DecodingError(f"the response body could not be decoded (Content-Encoding: {coding}): {exc}")

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_bytes()])


_poll = getattr(select, "poll", None)


class _Conn(asyncio.Protocol):
    """One TCP (or TLS) connection and its response parser."""

    def __init__(self, loop: asyncio.AbstractEventLoop, decoders: Mapping[str, Callable[[], Decoder]]) -> None:
        self.loop = loop
        self.decoders = decoders
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.paused = False
        self.idle = True  # no answer is due: a byte now ends the connection
        self.idle_since = 0.0
        self.response: H1Response | None = None
        self._poller: select.poll | None = None
        self._fd = -1
        self._head: asyncio.Future[H1Response] | None = None
        self._fields: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0  # bytes read while no final head was complete
        self._error: H1Error | None = None
        self._until_close = False
        self.keep_alive = False

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        size = getattr(transport, "max_size", None)  # asyncio's Unix transports read 256 KiB
        if isinstance(size, int) and size > _READ_SIZE:
            transport.max_size = _READ_SIZE  # type: ignore[attr-defined]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._fd = sock.fileno()
            if _poll is not None:
                self._poller = _poll()
                self._poller.register(self._fd, select.POLLIN)

    def data_received(self, data: bytes) -> None:
        if self.idle:  # nothing is due: a stray answer, or garbage; never reuse this connection
            self.close()
            return
        in_head = self.response is None
        if in_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(self._error or H1ProtocolError(f"invalid HTTP/1.1 response: {exc}"))
            self.close()
            return
        if in_head and self.response is None and self._head_bytes > MAX_HEAD_BYTES:
            self._fail(_head_too_large())
            self.close()

    def eof_received(self) -> bool | None:
        self.closed = True
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        response = self.response
        if response is not None and self._until_close and not response.complete:
            response._finish()  # a body delimited by the end of the connection
            self.keep_alive = False
            return
        why = f": {exc}" if exc is not None else ""
        answered = "before answering" if response is None else "before the answer was complete"
        self._fail(H1Closed(f"the server closed the connection {answered}{why}"))

    def pause_writing(self) -> None:  # request bodies are small; nothing to throttle
        pass

    def resume_writing(self) -> None:
        pass

    # -- httptools callbacks ---------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.response is not None:  # a second answer to one request
            self.keep_alive = False
            self._error = H1ProtocolError("the server sent more than one response to one request")
            raise self._error

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields.append((name, value))

    def on_headers_complete(self) -> None:
        fields, self._fields = self._fields, []
        # A whole head over the bound within one read (the read may hold body bytes too:
        # the fields themselves are counted only then).
        if self._head_bytes > MAX_HEAD_BYTES and sum(len(n) + len(v) + 4 for n, v in fields) > MAX_HEAD_BYTES:
            self._error = _head_too_large()
            raise self._error
        headers = Headers()
        repeated: dict[str, list[str]] | None = None
        for raw, value in fields:
            name = raw.decode("latin-1").lower()
            text = value.decode("latin-1")
            if dict.__contains__(headers, name):  # joined once at the end, not pairwise
                if repeated is None:
                    repeated = {}
                if name in repeated:
                    repeated[name].append(text)
                else:
                    repeated[name] = [dict.__getitem__(headers, name), text]
            else:
                dict.__setitem__(headers, name, text)
        if repeated is not None:
            for name, parts in repeated.items():
                dict.__setitem__(headers, name, ", ".join(parts))
        status = self.parser.get_status_code()
        if status < 200:  # 1xx: informational, the real head follows
            return
        self._until_close = (not dict.__contains__(headers, "content-length") and status not in (204, 304)
                             and "chunked" not in dict.get(headers, "transfer-encoding", "").lower())
        coding = dict.get(headers, "content-encoding")
        decoder = _decoder_for(coding, self.decoders) if coding is not None else None
        self.response = response = H1Response(self, status, headers, decoder)
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

    def readable(self) -> bool:
        """Bytes (or an end) wait on the socket that the loop has not handled yet (where
        there is no `poll`; the pool polls `_poller` itself)."""
        return self._fd >= 0 and bool(select.select([self._fd], [], [], 0)[0])

    def start(self, data: bytes) -> asyncio.Future[H1Response]:
        """Send one request (already framed); the future gets the response's head.
        `_Unsent` when the connection is closed before the write or the write fails
        at once: no byte of the request left."""
        transport = self.transport
        assert transport is not None
        if self.closed or transport.is_closing():
            raise _Unsent("the connection was closed before the request was written")
        self.idle = False
        self.response = None
        self.keep_alive = False
        self._until_close = False
        self._head_bytes = 0
        self._error = None
        self._head = head = self.loop.create_future()
        transport.write(data)
        if transport.is_closing():  # the socket's send failed and asyncio closed it: nothing was sent
            self._head = None
            raise _Unsent("the connection failed as the request was written")
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


def _head_too_large() -> H1ProtocolError:
    return H1ProtocolError(f"the response head is larger than {MAX_HEAD_BYTES // 1024} KiB")


class _Origin:
    """One origin's connections: how many are open, the idle ones, and the exchanges
    waiting for one (each gets a connection, or None: a slot to connect with)."""

    __slots__ = ("count", "idle", "waiters")

    def __init__(self) -> None:
        self.count = 0
        self.idle: list[_Conn] = []
        self.waiters: deque[asyncio.Future[_Conn | None]] = deque()


class H1Pool:
    """Connections to the origins of the URLs it is asked for, reused while idle.
    Safe for many concurrent exchanges on one event loop (each gets its own
    connection); `aclose()` ends every connection, open responses included."""

    def __init__(self, *, route: Callable[[str], Route], ssl_context: ssl.SSLContext | None = None,
                 connect_timeout: float | None = 10.0, max_connections: int = 100, max_idle: int = 20,
                 keepalive_expiry: float = 5.0, decoders: Mapping[str, Callable[[], Decoder]] = DECODERS) -> None:
        if max_connections < 1 or max_idle < 0:
            raise ValueError("need max_connections >= 1 and max_idle >= 0")
        self.route = route
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self.max_idle = max_idle
        self.keepalive_expiry = keepalive_expiry
        self.decoders = decoders
        self._defaults = {"user-agent": f"User-Agent: {_USER_AGENT}\r\n"}
        if decoders:
            self._defaults["accept-encoding"] = f"Accept-Encoding: {', '.join(decoders)}\r\n"
        self._default_fields = "".join(self._defaults.values())
        self._origins: dict[Origin, _Origin] = {}
        self._all: set[_Conn] = set()
        self._closed = False

    # -- framing -----------------------------------------------------------------------

    def _frame(self, method: str, line: str, headers: Iterable[tuple[str, str]], content: bytes | None) -> bytes:
        out = [method, line]
        given: set[str] | None = None
        defaults = self._defaults
        for name, value in headers:
            if "\r" in name or "\n" in name or "\r" in value or "\n" in value or ":" in name:
                raise H1ProtocolError(f"refusing to send the header {name!r}: it contains CR, LF or ':'")
            lowered = name.lower()
            if lowered in defaults:
                given = {lowered} if given is None else given | {lowered}
            out.append(f"{name}: {value}\r\n")
        if given is None:
            out.append(self._default_fields)
        else:
            out.extend(field for name, field in defaults.items() if name not in given)
        if content is not None:
            out.append(f"Content-Length: {len(content)}\r\n\r\n")
        else:
            out.append("\r\n")
        try:
            head = "".join(out).encode("latin-1")
        except UnicodeEncodeError as exc:
            raise H1ProtocolError(f"a header is not latin-1: {exc}") from None
        return head + content if content is not None else head

    # -- connections -------------------------------------------------------------------

    async def _connect(self, key: Origin) -> _Conn:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if scheme == "https":
            tls = self.ssl_context if self.ssl_context is not None else ssl.create_default_context()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Conn(loop, self.decoders), host, port, ssl=tls,
                    server_hostname=host if tls else None)
        except TimeoutError:
            raise H1ConnectError(f"connecting to {host}:{port} timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise H1ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        if self._closed:
            conn.close()
            raise H1Closed("the HTTP client was closed")
        self._all.add(conn)
        return conn

    async def _acquire(self, key: Origin, origin: _Origin) -> tuple[_Conn, bool]:
        """An idle connection (True), or a new one (False), waiting in line at the cap."""
        idle = origin.idle
        if idle:
            since = time.monotonic() - self.keepalive_expiry
            while idle:
                conn = idle.pop()  # the most recently used: the least likely timed out
                # Open, not expired, and nothing waiting (a close or stray bytes the loop
                # has not handled yet); `start` checks the transport itself.
                poller = conn._poller
                if not conn.closed and conn.idle_since >= since and not (
                        poller.poll(0) if poller is not None else conn.readable()):
                    return conn, True
                self._discard(origin, conn)
        if origin.count < self.max_connections:
            origin.count += 1
        else:
            waiter: asyncio.Future[_Conn | None] = asyncio.get_running_loop().create_future()
            origin.waiters.append(waiter)
            try:
                handed = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    self._hand_on(origin, waiter.result())  # ours, but we are leaving: the next one's
                else:
                    with contextlib.suppress(ValueError):
                        origin.waiters.remove(waiter)
                raise
            if handed is not None:
                return handed, True
        try:
            return await self._connect(key), False
        except BaseException:
            self._free_slot(origin)
            raise

    def _hand_on(self, origin: _Origin, conn: _Conn | None) -> None:
        """Give a connection (or, for None, a slot) to the first one waiting; a
        connection nobody waits for goes idle, a slot is freed."""
        while origin.waiters:
            waiter = origin.waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        if conn is None:
            origin.count -= 1
        elif len(origin.idle) < self.max_idle and not self._closed:
            conn.idle_since = time.monotonic()
            origin.idle.append(conn)
        else:
            self._discard(origin, conn)

    def _free_slot(self, origin: _Origin) -> None:
        origin.count -= 1
        if origin.waiters:
            origin.count += 1
            self._hand_on(origin, None)

    def _discard(self, origin: _Origin, conn: _Conn) -> None:
        self._all.discard(conn)
        conn.close()
        self._free_slot(origin)

    def _release(self, origin: _Origin, conn: _Conn) -> None:
        response = conn.response
        if (not self._closed and not conn.closed and conn.keep_alive and response is not None
                and response.complete and not response._chunks):
            conn.response = None
            conn.idle = True
            conn.resume()
            if not origin.waiters and len(origin.idle) < self.max_idle:
                conn.idle_since = time.monotonic()
                origin.idle.append(conn)
            else:
                self._hand_on(origin, conn)
            return
        self._discard(origin, conn)

    # -- exchanges ---------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def stream(self, method: str, url: str, headers: Mapping[str, str] | Iterable[tuple[str, str]],
                     content: bytes | None = None) -> AsyncIterator[H1Response]:
        """One exchange: the response once its head arrived; its body streams from
        `aiter_bytes()` until the block exits (an unfinished body closes the connection)."""
        if self._closed:
            raise H1Closed("the HTTP client is closed")
        key, line = self.route(url)
        data = self._frame(method, line, headers.items() if isinstance(headers, Mapping) else headers, content)
        origin = self._origins.get(key)
        if origin is None:
            origin = self._origins[key] = _Origin()
        while True:
            conn, reused = await self._acquire(key, origin)
            try:
                head = conn.start(data)
            except _Unsent as exc:
                self._discard(origin, conn)
                if reused:
                    continue  # provably not sent: the next connection carries it
                raise H1ConnectError(f"{exc}; nothing was sent") from None
            except BaseException:
                self._discard(origin, conn)
                raise
            break
        try:
            response = await head
        except BaseException:
            self._discard(origin, conn)
            raise
        try:
            yield response
        finally:
            self._release(origin, conn)

    async def aclose(self) -> None:
        self._closed = True
        for conn in list(self._all):
            conn._fail(H1Closed("the HTTP client was closed"))
            conn.close()
        self._all.clear()
        for origin in self._origins.values():
            origin.idle.clear()
            while origin.waiters:
                waiter = origin.waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(H1Closed("the HTTP client was closed"))
        self._origins.clear()
