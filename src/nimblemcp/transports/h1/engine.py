"""The HTTP/1.1 connection of nimblemcp's own serving engine (issue 18; opt-in, issue 31).

One `Connection` per TCP connection: it parses requests with `httptools`, runs each
through the ASGI app as a `_Cycle`, and writes the answer. What it does that a general
server does not: a response whose start and final body arrive together leaves in ONE
`transport.write` (under uvicorn that is two, which cost more than all of our request
handling); timers cost nothing per request (one sweep per engine, `engine_server`,
checks every connection's deadline against a coarse clock); the common response head
(a known content type and a content-length) is joined from ready lines, and the HTTP
version of a request that began a read is read off its request line (the parser's
getter formats a string per call).

Behaviour, as `nimblemcp run` has it under uvicorn (tests/test_http1_blackbox.py runs
the same cases against both):
- keep-alive (HTTP/1.1 default, `connection: close` and HTTP/1.0 honoured), an idle
  keep-alive timeout, and a deadline and a size cap on each request head: past either
  the connection is closed without an answer (the peer may not speak HTTP at all). A
  head's deadline starts with its target (the method and spaces before it are still
  under the idle timeout: no callback per request marks a method's first byte); the
  size cap counts the reads (in slices of `_SLICE` bytes) that a head spans;
- pipelined requests are answered in order, one at a time (reading pauses while any
  wait); past `MAX_PIPELINE` queued, the rest of the input is not answered: those queued
  are, the last with `connection: close`, then our side ends (FIN) and what still comes
  is read and dropped until the client closes (`_shut`: a close is not a reset);
- flow control: once the transport's write buffer is above its high-water mark, a
  streamed `send` waits for it to drain, and a finished response (the one-step answer
  included) holds back the next pipelined request and further reading until it has
  drained: a client that never reads stalls, the server's memory stays flat;
- a response body longer than its `content-length` is an error (`RuntimeError` in the
  app's `send`: a 500 if nothing was written yet, else the connection is closed); one
  that ends shorter closes the connection;
- streamed responses (no content-length, `more_body`) use chunked transfer encoding;
- `Expect: 100-continue` is answered when the app first asks for the body;
- a client that half-closes (shuts its write side) after a complete request still gets
  the answers to what it sent; then the connection closes;
- a malformed request gets `400` and the connection closes, after any earlier
  pipelined request has been answered; an app that fails before answering gets `500`;
- a response that ends before its request body was read (413) says `connection: close`;
  the rest of the body is read and dropped (for at most the head deadline), then the
  connection closes, so the client reads the answer instead of a reset;
- X-Forwarded-For/Proto are applied only from trusted peers (`proxies`).

What it offers the app beyond ASGI is one entry of `scope["extensions"]`, `EXTENSION`
(an `EngineExtension`): the event loop, and `answer(send, status, body)`, a whole JSON
response in one step when `send` is the engine's own (nothing wraps the response).

Imports `httptools` and the stdlib only; never the server (the app is any ASGI app).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import httptools

if TYPE_CHECKING:
    from nimblemcp.transports.h1.engine_server import Engine

__all__ = ["EXTENSION", "MAX_PIPELINE", "Connection", "EngineExtension"]

logger = logging.getLogger("nimblemcp.http")

_STATUS_LINES = {int(s): b"HTTP/1.1 %d %s\r\n" % (s, s.phrase.encode("ascii")) for s in HTTPStatus}
_NO_BODY_STATUS = frozenset({204, 304})
MAX_PIPELINE = 100  # pipelined requests queued on one connection; the input past them is not answered
_READ_SIZE = 64 * 1024  # asyncio's socket reads, as `transports._read_size` sets them (no mmap per read)
_SLICE = 8 * 1024  # a read that begins in a head is parsed in slices this big (see `data_received`)
_BODY_HIGH_WATER = 256 * 1024  # request body bytes buffered before reading pauses
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_CHUNK_END = b"0\r\n\r\n"
_ASGI = {"version": "3.0", "spec_version": "2.3"}
_QUERY = ord("?")
_X = ord("x")
_PERCENT = ord("%")
# The request line's last nine bytes -> `scope["http_version"]` without asking the
# parser (`get_http_version` formats a string per call): see `on_headers_complete`.
# With the space: llhttp reads `GET /HTTP/1.1` as an HTTP/0.9 request for `/HTTP/1.1`.
_VERSIONS = {b" HTTP/1.1": "1.1", b" HTTP/1.0": "1.0"}
# Response content types whose header line is written as it is, with no check per
# response (see `_Cycle._head`): (name, value) exactly as the app sends them -> line.
_KNOWN_TYPES = {
    (b"content-type", b"application/json"): b"content-type: application/json\r\n",
    (b"content-type", b"text/event-stream"): b"content-type: text/event-stream\r\n",
}
# The key of `scope["extensions"]` under which the engine offers its `EngineExtension`
# (`_asgi.ENGINE`, the same string: this module imports no nimblemcp code).
EXTENSION = "nimblemcp.engine"
_JSON = (b"content-type", b"application/json")
_JSON_LINE = _KNOWN_TYPES[_JSON]
_MAX_PATHS = 256  # plain request targets remembered per engine with their decoded path,
_MAX_PATH_BYTES = 256  # each at most this long: the memory they hold stays small


def _plain(status: int, text: bytes) -> bytes:
    return (_STATUS_LINES[status] + b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (len(text), text))


_BAD_REQUEST = _plain(400, b"Invalid HTTP request received.")
_SERVER_ERROR = _plain(500, b"Internal Server Error")


def _expects_continue(headers: list[tuple[bytes, bytes]]) -> bool:
    # Read only when the app asks for a body that has not arrived yet: the one case
    # where a client may be holding the body back until it sees `100 Continue`.
    return any(name == b"expect" and value.lower() == b"100-continue" for name, value in headers)


_Task = asyncio.Task


def _status_line(status: int) -> bytes:
    return b"HTTP/1.1 %d \r\n" % status  # a code without a standard phrase


class _Cycle:
    """One request and its response on a connection."""

    __slots__ = (
        "body",
        "check_continue",
        "chunked",
        "conn",
        "disconnected",
        "head_only",
        "headers",
        "keep_alive",
        "more_body",
        "remaining",
        "request_done",
        "response_complete",
        "response_started",
        "scope",
        "status",
        "task",
        "waiter",
        "written",
    )
    # Made by `Connection.on_headers_complete`; `headers` is set with the response's
    # start, `remaining` with its head and `task` by `Engine.start`.
    conn: Connection
    scope: dict[str, Any]
    keep_alive: bool
    check_continue: bool  # True until the app first asks for the body
    head_only: bool
    body: bytes  # b"": usually one chunk, bytes concatenation keeps it uncopied
    more_body: bool  # True: the request message is not complete yet
    request_done: bool  # the last body chunk was handed to the app
    disconnected: bool
    response_started: bool
    response_complete: bool
    written: bool  # the response head is on the wire
    chunked: bool
    status: int  # 200 until the app says
    waiter: asyncio.Future[None] | None
    headers: list[tuple[bytes, bytes]]  # the response's, from `http.response.start`
    remaining: int  # body bytes its content-length still allows; -1: no length (chunked, or to the close)
    task: asyncio.Task[None] | None  # None: started by a task factory that ran it to the end

    def __init__(self, conn: Connection, scope: dict[str, Any], keep_alive: bool, head_only: bool) -> None:
        self.conn = conn
        self.scope = scope
        self.keep_alive = keep_alive
        self.check_continue = True
        self.head_only = head_only
        self.body = b""
        self.more_body = True
        self.request_done = False
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        self.written = False
        self.chunked = False
        self.status = 200
        self.waiter = None

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def receive(self) -> dict[str, Any]:
        conn = self.conn
        if self.check_continue:
            self.check_continue = False
            # RFC 9110 10.1.1: a server ignores `Expect: 100-continue` from HTTP/1.0.
            if (self.more_body and not (self.disconnected or self.response_started or self.body)
                    and self.scope["http_version"] != "1.0"
                    and _expects_continue(self.scope["headers"])):
                conn.transport.write(_CONTINUE)
        while True:
            if self.disconnected or self.response_complete:
                return {"type": "http.disconnect"}
            if not self.request_done and (self.body or not self.more_body):
                body = self.body
                self.body = b""
                if not self.more_body:
                    self.request_done = True
                elif conn.reading_paused:
                    conn.update_reading()
                return {"type": "http.request", "body": body, "more_body": self.more_body}
            if conn.eof:  # the client sends nothing more: gone, as far as anyone can tell
                return {"type": "http.disconnect"}
            self.waiter = conn.engine.loop.create_future()
            await self.waiter

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.response_started:
                raise RuntimeError("response already started")
            self.response_started = True
            self.status = message["status"]
            self.headers = message.get("headers", [])
            return
        if kind != "http.response.body":
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        if not self.response_started or self.response_complete:
            raise RuntimeError("http.response.body outside a response")
        body = message.get("body", b"")
        more = message.get("more_body", False)
        conn = self.conn
        if self.disconnected or conn.closed:
            if not more:
                self.response_complete = True
                conn.transport.close()  # the client is gone (or half-closed mid-body)
            return
        transport = conn.transport
        if not self.written:
            head = self._head(body, more)  # may refuse the app's headers: then a 500 goes out
            if self.head_only or self.status in _NO_BODY_STATUS:
                self.written = True
                transport.write(head)
            elif self.chunked:
                self.written = True
                transport.write(head + b"%x\r\n%s\r\n" % (len(body), body) if body else head)
                if not more:
                    transport.write(_CHUNK_END)
            else:
                remaining = self.remaining
                if remaining >= 0:  # a body past its content-length: a 500 instead
                    if len(body) > remaining:
                        raise RuntimeError("ASGI response body longer than its content-length")
                    self.remaining = remaining - len(body)
                self.written = True
                transport.write(head + body)
        elif not (self.head_only or self.status in _NO_BODY_STATUS):
            if self.chunked:
                if body:
                    transport.write(b"%x\r\n%s\r\n%s" % (len(body), body, b"" if more else _CHUNK_END))
                elif not more:
                    transport.write(_CHUNK_END)
            elif body:
                remaining = self.remaining
                if remaining >= 0:
                    if len(body) > remaining:  # the head is out: the connection closes
                        raise RuntimeError("ASGI response body longer than its content-length")
                    self.remaining = remaining - len(body)
                transport.write(body)
        if more:
            if conn.write_paused:
                await conn.drained()
            return
        if self.remaining > 0 and not (self.head_only or self.status in _NO_BODY_STATUS):
            # Shorter than its content-length: the client would take the next response's
            # bytes for the rest of this one. The connection ends with it.
            logger.error("ASGI response ended %d bytes short of its content-length: connection closed",
                         self.remaining)
            self.keep_alive = False
        self.response_complete = True
        if self.waiter is not None:
            self.wake()
        conn.response_done(self)

    def deliver(self, body: bytes) -> None:
        """Write what the one-step answer was given (`_answer`): the final-body step of `send`."""
        conn = self.conn
        if self.disconnected or conn.closed:
            conn.transport.close()  # the client is gone (or half-closed mid-body)
            return
        status = self.status
        status_line = _STATUS_LINES.get(status)
        if (status_line is not None and self.keep_alive and not self.more_body
                and self.scope["http_version"] != "1.0"):
            # The common head of `_head`, without a header list to look at.
            head = b"".join((status_line, conn.engine.date_header, _JSON_LINE,
                             b"content-length: %d\r\n\r\n" % len(body)))
        else:
            self.headers = [_JSON, (b"content-length", b"%d" % len(body))]
            head = self._head(body, False)
        self.written = True
        if self.head_only or status in _NO_BODY_STATUS:
            conn.transport.write(head)
        else:
            conn.transport.write(head + body)
        if self.waiter is not None:
            self.wake()
        conn.response_done(self)

    def _head(self, body: bytes, more: bool) -> bytes:
        headers = self.headers
        # The common answer (a JSON body with its length, on a keep-alive HTTP/1.1
        # request that was read whole) is built without looking at each header: what
        # the general path below would write for it, minus the checks its known lines
        # make needless.
        if type(headers) is list and len(headers) == 2 and self.keep_alive and not self.more_body:
            kind, length_header = headers
            try:
                line = _KNOWN_TYPES.get(kind) if type(kind) is tuple else None
            except TypeError:  # an unhashable value (a bytearray): the general path takes it
                line = None
            status_line = _STATUS_LINES.get(self.status)
            if (line is not None and status_line is not None and type(length_header) is tuple
                    and length_header[0] == b"content-length" and length_header[1].isdigit()
                    and self.scope["http_version"] != "1.0"):
                self.remaining = int(length_header[1])
                return b"".join((status_line, self.conn.engine.date_header, line, b"content-length: ",
                                 length_header[1], b"\r\n\r\n"))
        self.remaining = -1
        length = False
        close = False
        app_lines = 0  # header lines of the app's, written as they came
        status = self.status
        parts = [_STATUS_LINES.get(status) or _status_line(status), self.conn.engine.date_header]
        for name, value in headers:
            low = name.lower()
            if low == b"content-length":
                digits = value.strip()
                declared = int(digits) if digits.isdigit() else -1
                if declared < 0 or (length and declared != self.remaining):
                    raise RuntimeError("invalid content-length in response")
                length = True
                self.remaining = declared
            elif low == b"transfer-encoding":
                if value.lower() != b"chunked":
                    raise RuntimeError("unsupported transfer-encoding in response")
                self.chunked = True
                continue  # added below, once
            elif low == b"connection" and value.lower() == b"close":
                close = True
            parts += (name, b": ", value, b"\r\n")
            app_lines += 1
        if close:
            self.keep_alive = False
        if self.status not in _NO_BODY_STATUS and not length:
            if (more or self.chunked) and self.scope["http_version"] == "1.0":
                self.chunked = False  # HTTP/1.0 has no chunks: the end is the close
                self.keep_alive = False
            elif more or self.chunked:
                self.chunked = True
                parts.append(b"transfer-encoding: chunked\r\n")
            elif not self.head_only:
                parts.append(b"content-length: %d\r\n" % len(body))
                self.remaining = len(body)
        elif length:
            self.chunked = False
        if self.keep_alive and self.more_body:  # the app answered before the body was read
            self.keep_alive = False
        if not self.keep_alive and not close:
            parts.append(b"connection: close\r\n")
        elif self.keep_alive and self.scope["http_version"] == "1.0":
            parts.append(b"connection: keep-alive\r\n")
        parts.append(b"\r\n")
        head = b"".join(parts)
        # Every line of the head ends in our own CRLF; one more CR or LF means a name or
        # value of the app's carried it (response splitting): refuse, as uvicorn does.
        lines = len(parts) - 3 * app_lines
        if head.count(b"\n") != lines or head.count(b"\r") != lines:
            raise RuntimeError("invalid response header: CR or LF in a name or value")
        return head


_CYCLE_SEND = _Cycle.send


def _answer(send: Callable[..., Any], status: int, body: bytes) -> bool:
    """`EngineExtension.answer`: the whole response at once, `status` and a JSON `body`
    with its length, as `http.response.start` (content-type `application/json`,
    `content-length`) and one final `http.response.body` would send it, when `send` is
    the engine's own (a bound `_Cycle.send`). It leaves on the loop's next pass with every
    other answer of this pass (`Engine.flush_answers`), written as `send` would write it
    then (`_Cycle.deliver`)."""
    if getattr(send, "__func__", None) is not _CYCLE_SEND:
        return False
    cycle: _Cycle = send.__self__  # type: ignore[attr-defined]
    if cycle.response_started:
        raise RuntimeError("response already started")
    cycle.response_started = True
    cycle.response_complete = True  # the app is done: the rest is the engine's
    cycle.status = status
    # Written on the loop's next pass with the other answers of this pass: under load the
    # answers to one batch of requests then leave together, and the clients' next
    # requests all make the next poll instead of trailing a whole batch behind it (what
    # the app's one-pass wait before `send` is for).
    engine = cycle.conn.engine
    answers = engine.answers
    if not answers:
        engine.loop.call_soon(engine.flush_answers)
    answers.append((cycle, body))
    return True


class EngineExtension:
    """What the engine offers an app beyond ASGI: `scope["extensions"][EXTENSION]`, one
    object per engine.

    `loop` is the event loop the request runs on (an app need not look it up).
    `answer(send, status, body)` sends a whole JSON response (`status`, content-type
    `application/json`, `body` with its content-length) in one step, without awaiting,
    when `send` is the very callable the engine handed the app for this request (no
    middleware wraps the response) and returns True; with any other `send` it does
    nothing and returns False (send the response as usual then). The answer is written
    on the loop's next pass, together with the other answers of this pass."""

    __slots__ = ("answer", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # A plain function in a slot: called as `extension.answer(...)` with no method
        # binding, in one frame, as the one-step answer took before issue 31.
        self.answer: Callable[[Callable[..., Any], int, bytes], bool] = _answer


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.parser: httptools.HttpRequestParser = None  # type: ignore[assignment]  # made once trust is known
        # What the parser calls per header (chosen in `connection_made`). An attribute set
        # here, not a method shadowed later: every connection keeps one attribute layout.
        self.on_header: Callable[[bytes, bytes], None] = self.header
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.server: tuple[str, int] | None = None
        self.client: tuple[str, int] | None = None
        self.scheme = "http"
        self.trusted = False
        self.forwarded = False  # the request being parsed has an X-Forwarded-* header
        self.base_scope: dict[str, Any] = {}
        self.context = contextvars.Context()
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        # Between two requests (no byte of the next one's target fed to the parser yet):
        # a read then holds the next request's target and header lines, its request
        # line's end is the read's first line (`chunk`). Cleared by `on_url`.
        self.between = True
        self.chunk: bytes | None = None
        # The request being answered; one whose response is complete stays here while
        # the write buffer drains (see `response_done`). No attribute more than 29: past
        # 30 an instance's attributes lose CPython's shared-key layout, and every
        # attribute access on the connection costs more (+1.8k per request, 3.11).
        self.cycle: _Cycle | None = None
        self.parsing: _Cycle | None = None  # the request whose body is being read
        self.queue: deque[_Cycle] = deque()
        self.in_head = True
        self.head_bytes = 0
        self.deadline = 0.0  # engine clock; 0 = none
        self.bad = False
        self.closed = False
        self.reading_paused = False
        self.write_paused = False
        self.drain_waiter: asyncio.Future[None] | None = None
        self.stopping = False
        self.lingering = False  # reading a body that was answered already, to close after it
        self.eof = False  # the client shut its write side (`eof_received`)

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        size = getattr(transport, "max_size", None)  # asyncio's Unix socket transport: 256 KiB reads
        if isinstance(size, int) and size > _READ_SIZE:  # (uvloop's and TLS transports have none)
            transport.max_size = _READ_SIZE  # type: ignore[attr-defined]
        self.context = contextvars.copy_context()  # what each request's task starts from
        engine = self.engine
        engine.connections.add(self)
        sock_name = transport.get_extra_info("sockname")
        peer = transport.get_extra_info("peername")
        if isinstance(sock_name, tuple):
            self.server = (str(sock_name[0]), int(sock_name[1]))
        if isinstance(peer, tuple):
            self.client = (str(peer[0]), int(peer[1]))
        if transport.get_extra_info("sslcontext") is not None:
            self.scheme = "https"
        self.trusted = engine.proxies is not None and engine.proxies.trusts(self.client)
        if self.trusted:  # the parser calls what `on_header` is when it is made
            self.on_header = self.header_trusted
        self.parser = httptools.HttpRequestParser(self)
        self.base_scope = {
            "type": "http", "asgi": _ASGI, "http_version": "1.1", "server": self.server,
            "client": self.client, "scheme": self.scheme, "method": "GET", "root_path": engine.root_path,
            "path": "/", "raw_path": b"/", "query_string": b"", "headers": [], "state": {},
            "extensions": None,
        }
        self.deadline = engine.now + engine.head_timeout

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.engine.connections.discard(self)
        for cycle in (self.cycle, self.parsing, *self.queue):
            if cycle is not None:
                cycle.disconnected = True
                cycle.wake()
        self.queue.clear()
        self._wake_drain()

    def data_received(self, data: bytes) -> None:
        if self.bad:
            return
        if self.in_head or self.parsing is None:  # a head, or between requests
            if len(data) > _SLICE:
                # The head cap counts whole reads (one slice here) from a head's first
                # one on, so that a burst of pipelined requests in one big read is not
                # taken for one oversized head: a head is then counted to within one
                # slice. What follows a head is a body, which may take the rest whole.
                start, end = 0, len(data)
                while start < end and (self.in_head or self.parsing is None):
                    self.data_received(data[start:start + _SLICE])
                    if self.bad or self.transport.is_closing():
                        return
                    start += _SLICE
                if start < end:
                    self.data_received(data[start:])
                return
            self.head_bytes += len(data)
        self.chunk = data if self.between else None
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._upgrade()
        except httptools.HttpParserError:
            self._bad_request()
        else:
            if (self.head_bytes > self.engine.max_head and (self.in_head or self.parsing is None)
                    and not self.transport.is_closing()):
                self.transport.close()  # a head (or what precedes one) past the size cap: cut off, unanswered
            elif self.queue or (self.parsing is not None and len(self.parsing.body) > _BODY_HIGH_WATER):
                self.update_reading()

    def eof_received(self) -> bool:
        """The client shut its write side (a half-close, or the first half of a close:
        TCP cannot tell them apart). Answers still go out, and the connection closes
        after the last; an app that asks for more of a request read whole hears
        `http.disconnect` (for the MCP endpoint: a tool still running is cancelled, as
        the spec asks of a client that goes away)."""
        last = self.queue[-1] if self.queue else self.cycle
        if last is None or self.parsing is not None or self.lingering or self.scheme == "https":
            return False  # nothing to answer, a request that can no longer end, or TLS: close
        self.eof = True
        last.keep_alive = False  # the connection closes after its response
        if self.cycle is not None:
            self.cycle.wake()
        return True  # keep the write side open until then

    def _upgrade(self) -> None:
        # An Upgrade we do not do (h2c, websocket): answer the request as plain
        # HTTP/1.1 if it is complete, then close; nothing after it is parsed.
        self.bad = True
        parsing = self.parsing
        if parsing is not None:  # what follows the head is not this request's body
            self.parsing = None
            parsing.more_body = False
            parsing.wake()
        for cycle in (self.cycle, *self.queue):
            if cycle is not None:
                cycle.keep_alive = False
        if self.cycle is None and not self.transport.is_closing():
            self.transport.close()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake_drain()
        cycle = self.cycle
        if cycle is not None and cycle.response_complete and cycle.written:
            self.response_done(cycle)  # held there until now (the client reads again)

    def _wake_drain(self) -> None:
        waiter = self.drain_waiter
        if waiter is not None:
            self.drain_waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def drained(self) -> None:
        if self.closed:
            return
        if self.drain_waiter is None:
            self.drain_waiter = self.engine.loop.create_future()
        await self.drain_waiter

    # -- httptools callbacks -----------------------------------------------------------

    # No `on_message_begin` (a call per request): its work is `on_url`'s (a request's
    # target is where its head is known to have begun; before it, only the method and
    # spaces, which the idle deadline and the size cap cover) and `on_message_complete`'s.

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.between = False
        if not self.in_head:  # the first span of a new request's target: its head deadline
            self.in_head = True
            self.deadline = self.engine.now + self.engine.head_timeout

    def header(self, name: bytes, value: bytes) -> None:
        """`on_header`: one request header."""
        self.headers.append((name.lower(), value))

    def header_trusted(self, name: bytes, value: bytes) -> None:
        """`on_header` on a connection from a trusted proxy: notes forwarding headers, so
        that a request without any skips `TrustedProxies.apply`'s walk over them all."""
        name = name.lower()
        # The first byte as an int (llhttp passes no empty names) costs no allocation,
        # and `bytes.startswith` parses its arguments the slow way: only the rare names
        # that start with "x" pay for the rest.
        if name[0] == _X and name[:12] == b"x-forwarded-":
            self.forwarded = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.bad:  # after a close decided within this same read
            return
        if self.cycle is not None and len(self.queue) >= MAX_PIPELINE:
            # Pipelined past the cap: those queued are answered, the last of them closes
            # the connection, and nothing more is read (this request is not answered).
            self.bad = True
            self.queue[-1].keep_alive = False
            self.update_reading()
            return
        self.in_head = False
        self.head_bytes = 0
        self.deadline = 0.0
        engine = self.engine
        parser = self.parser
        url = self.url
        known = engine.paths.get(url)
        if known is not None:
            raw_path, query, path = url, b"", known
        # `int in bytes` is a memchr; `b"?" in url` first tries the int path and
        # raises and clears a TypeError inside CPython (~10x slower).
        elif _QUERY in url or _PERCENT in url or not url.startswith(b"/"):
            parsed = httptools.parse_url(url)
            raw_path = parsed.path
            query = parsed.query or b""
            path = raw_path.decode("ascii")
            if "%" in path:
                path = unquote(path)
        else:
            raw_path, query, path = url, b"", url.decode("ascii")
            if len(engine.paths) < _MAX_PATHS and len(url) <= _MAX_PATH_BYTES:
                engine.paths[url] = path
        # The version: when this request began a read, its request line is the
        # chunk's first line, and llhttp (which accepted it) allows nothing between
        # the version and the line's CRLF. Otherwise (pipelined, or a head split
        # across reads), ask the parser.
        chunk = self.chunk
        version = None
        # A copy of the connection's scope with every key present costs about half
        # of building the 13-key dict anew.
        scope = self.base_scope.copy()
        if chunk is not None:
            self.chunk = None
            end = chunk.find(b"\r\n")
            version = _VERSIONS.get(chunk[end - 9:end]) if end >= 9 else None
        if version is None:
            version = parser.get_http_version()
        headers = self.headers
        scope["http_version"] = version
        scope["method"] = method = parser.get_method().decode("ascii")
        if engine.root_path:
            scope["path"] = engine.root_path + path
            scope["raw_path"] = engine.root_path_raw + raw_path
        else:
            scope["path"] = path
            scope["raw_path"] = raw_path
        scope["query_string"] = query
        scope["headers"] = headers
        scope["state"] = engine.state.copy()
        scope["extensions"] = {EXTENSION: engine.extension}
        if self.forwarded:  # only ever set on a trusted connection
            self.forwarded = False
            scope["scheme"], scope["client"] = engine.proxies.apply(  # type: ignore[union-attr]
                headers, self.scheme, self.client)
        keep_alive = parser.should_keep_alive() and not self.stopping
        cycle = _Cycle(self, scope, keep_alive, method == "HEAD")
        self.parsing = cycle
        if self.cycle is None:
            self.cycle = cycle
            if engine.plain_tasks:  # `engine.start`'s first branch, without the call
                cycle.task = task = _Task(engine._run(self, cycle), loop=engine.loop, name="nimblemcp-request")
                engine.tasks.add(task)
            else:
                engine.start(self, cycle)
        else:
            self.queue.append(cycle)

    def on_body(self, body: bytes) -> None:
        cycle = self.parsing
        if cycle is not None and not cycle.response_complete and not cycle.disconnected:
            cycle.body += body
            if cycle.waiter is not None:
                cycle.wake()

    def on_message_complete(self) -> None:
        self.between = True
        self.url = b""  # the next request's target and headers start empty
        self.headers = []
        if self.lingering:
            self.bad = True  # whatever follows is not read
            self.transport.close()
        cycle = self.parsing
        if cycle is not None:
            cycle.more_body = False
            self.parsing = None
            if cycle.waiter is not None:
                cycle.wake()

    # -- responses ---------------------------------------------------------------------

    def response_done(self, cycle: _Cycle) -> None:
        """`cycle` has sent its last byte: close, start the next pipelined request, or idle."""
        if self.transport.is_closing():
            return
        if not cycle.keep_alive:
            if cycle.more_body and self.parsing is cycle and not self.bad:
                # Answered before its body was read (413): read the rest and drop it,
                # then close, so that the close is not a reset that loses the answer.
                self.lingering = True
                self.cycle = None
                self.deadline = self.engine.now + self.engine.head_timeout
                return
            if self.bad:  # input past what is answered (pipelined past the cap) may be unread
                self._shut()
            else:
                self.transport.close()
            return
        if self.write_paused:
            # The client is not reading what it asked for: take nothing more from it (no
            # next pipelined request, no read) until the buffer drains; `resume_writing`
            # comes back here. `cycle` stays the connection's request until then.
            self.update_reading()
            return
        self.cycle = None
        if self.queue:
            nxt = self.queue.popleft()
            self.cycle = nxt
            # We are inside the finished request's task: started from here, the next
            # request's task would copy that task's context (its contextvars). Start it
            # from the connection's own context, as `data_received` does.
            if self.engine.plain_tasks:
                self.context.run(self.engine.start, self, nxt)
            else:  # the app's task factory may run the first step at once (eager): then
                # never inside this request's step, where the context is entered already
                self.engine.loop.call_soon(self.engine.start, self, nxt, context=self.context)
            self.update_reading()
            return
        if self.bad:
            self._bad_request()
            return
        if self.stopping:
            self.transport.close()
            return
        if self.reading_paused:
            self.update_reading()
        if self.parsing is None and not self.in_head:
            self.deadline = self.engine.now + self.engine.idle_timeout
        elif self.deadline == 0.0:
            self.deadline = self.engine.now + self.engine.head_timeout

    def app_failed(self, cycle: _Cycle, exc: BaseException | None) -> None:
        """The app raised, or returned without finishing its response."""
        if (cycle.disconnected or self.transport.is_closing()  # the client went away first
                or (self.eof and exc is None and not cycle.response_started)):  # or said so
            self.transport.close()
            return
        if exc is not None:
            logger.error("Exception in ASGI application", exc_info=exc)
        elif not cycle.response_started:
            logger.error("ASGI callable returned without starting a response")
        if cycle.response_complete and not cycle.written:
            # Answered in one step (`_answer`), not written yet: it goes out on the loop's next
            # pass, and the connection closes after it.
            cycle.keep_alive = False
            return
        if not cycle.written:
            self.transport.write(_SERVER_ERROR)
        cycle.response_complete = True
        self.transport.close()

    def update_reading(self) -> None:
        parsing = self.parsing
        cycle = self.cycle
        pause = not self.lingering and (
            bool(self.queue) or self.bad or (parsing is not None and len(parsing.body) > _BODY_HIGH_WATER)
            or (self.write_paused and cycle is not None and cycle.response_complete))
        if pause != self.reading_paused and not self.transport.is_closing():
            self.reading_paused = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def _bad_request(self) -> None:
        self.bad = True
        if self.transport.is_closing():
            return
        broken = self.parsing  # a request whose body was malformed: it is never answered
        if broken is not None:
            self.parsing = None
            broken.disconnected = True
            broken.wake()
            if broken is self.cycle:
                if not broken.written:
                    self.transport.write(_BAD_REQUEST)
                    self._shut()
                else:
                    self.transport.close()  # mid-response: the client cannot read it whole anyway
                return
            if broken in self.queue:
                self.queue.remove(broken)
        if self.cycle is None and not self.queue:
            self.transport.write(_BAD_REQUEST)
            self._shut()
        else:  # answer what came before first (response_done comes back here)
            self.update_reading()

    def _shut(self) -> None:
        """Close after the answers written when the client may have sent more than was
        read: a close with unread input is a reset, and a reset can destroy answers the
        client has not read yet. So end our side (FIN) first, then read and drop what
        still comes until the client closes too, for at most the head deadline."""
        transport = self.transport
        if self.eof or not transport.can_write_eof():  # TLS: a close_notify, then the close
            transport.close()
            return
        transport.write_eof()
        self.bad = self.lingering = True  # every read is dropped; the client's EOF closes
        self.cycle = None
        self.queue.clear()
        self.deadline = self.engine.now + self.engine.head_timeout
        self.update_reading()

    # -- timers and shutdown (called by the engine) ----------------------------------

    def expire(self) -> None:
        """The head deadline or the idle keep-alive timeout has passed."""
        self.deadline = 0.0
        if self.cycle is None and not self.transport.is_closing():
            self.transport.close()

    def shutdown(self) -> None:
        """Stop serving: close now if idle, else after the response in flight."""
        self.stopping = True
        if self.cycle is None:
            if not self.transport.is_closing():
                self.transport.close()
            return
        for cycle in (self.cycle, *self.queue):
            cycle.keep_alive = False
