"""The served HTTP path of `nimblemcp run`: what a client receives is the same on
nimblemcp's own engine and under uvicorn.

One real server per engine runs in a background thread on a loopback port, built as
`serving.run_http` builds it (the guarded app wrapped in `ListenDrain`; under uvicorn
with the same head limits), and every test sends the same bytes to both and compares
status, headers (except `date`) and body. Raw sockets, so that pipelining, HTTP/1.0,
HEAD and `connection: close` reach the server as written.

Also here: a listen stream whose reader stops reading is cut off with its closing
note (SUB-09) and a clean end of the stream, on both engines.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import orjson
import pytest
import uvicorn

import nimblemcp as m
from nimblemcp.backends.bus import Event
from nimblemcp.server._options import ListenOptions
from nimblemcp.serving import asgi_app
from nimblemcp.transports.h1.engine_server import EngineConfig, serve
from nimblemcp.transports.http._drain import ListenDrain
from nimblemcp.transports.http._exchange import Exchange
from nimblemcp.transports.http._uvicorn import head_limit, uvicorn_limits

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}
ACCEPT = b"application/json, text/event-stream"
ENGINES = ("nimblemcp", "uvicorn")
QUIET = 0.5  # seconds of silence that end a read on a connection the server keeps open
SLOW_READ_GUARD = 120.0  # seconds: only so a failure cannot hang the run


def make_server() -> m.Server:
    server = m.Server("round4", "1.0", listen=ListenOptions(queue=100_000))

    @server.tool
    def echo(text: str) -> str:
        return text

    @server.tool
    async def aecho(text: str) -> str:
        return text

    @server.tool
    async def counting(ctx: m.Context) -> str:
        for i in range(1, 4):
            ctx.report_progress(i, 3)
            await asyncio.sleep(0.01)
        return "counted"

    @server.tool
    async def boom() -> str:
        raise m.ToolError("no")

    @server.resource("docs://big")
    def big() -> str:
        return "big"

    return server


class Running:
    """One engine serving one server in a background thread."""

    def __init__(self, engine: str, wrap: Any = None, **options: Any) -> None:
        self.engine = engine
        self.server = make_server()
        self.app = asgi_app(self.server, **options)
        self.drain = ListenDrain(self.app)
        self.served: Any = self.drain.entry if wrap is None else wrap(self.drain.entry)
        self.port = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._uvicorn: uvicorn.Server | None = None
        ready = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(30), f"{engine} did not start"

    def _main(self, ready: threading.Event) -> None:
        async def go() -> None:
            self.loop = asyncio.get_running_loop()
            security = self.app.security
            if self.engine == "nimblemcp":
                self._stop = asyncio.Event()

                def started(address: tuple[str, int]) -> None:
                    self.port = address[1]
                    ready.set()

                config = EngineConfig(port=0, head_timeout=security.head_timeout, max_head=head_limit(security),
                                      idle_timeout=security.idle_timeout)
                await serve(self.served, config, stop_event=self._stop, started=started)
                return
            config_u = uvicorn.Config(self.served, host="127.0.0.1", port=0, lifespan="on", log_level="warning",
                                      access_log=False, server_header=False, **uvicorn_limits(security))
            server = self._uvicorn = uvicorn.Server(config_u)
            task = asyncio.create_task(server.serve())
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
            self.port = server.servers[0].sockets[0].getsockname()[1]
            ready.set()
            await task

        asyncio.run(go())

    def call(self, coro: Any) -> Any:
        """Run `coro` on the server's loop; its result."""
        assert self.loop is not None
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(30)

    def stop(self) -> None:
        assert self.loop is not None
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        elif self._uvicorn is not None:
            server = self._uvicorn
            self.loop.call_soon_threadsafe(setattr, server, "should_exit", True)
        self.thread.join(30)


@pytest.fixture(scope="module")
def pair() -> Iterator[dict[str, Running]]:
    running = {engine: Running(engine) for engine in ENGINES}
    try:
        yield running
    finally:
        for r in running.values():
            r.stop()


@pytest.fixture(scope="module")
def cors_pair() -> Iterator[dict[str, Running]]:
    running = {engine: Running(engine, security=m.HttpSecurity(cors=True, allowed_origins=["https://app.example"], max_body=4096))
               for engine in ENGINES}
    try:
        yield running
    finally:
        for r in running.values():
            r.stop()


# -- requests ------------------------------------------------------------------------


def body(name: str = "echo", arguments: dict[str, Any] | None = None, rid: Any = 1,
         method: str = "tools/call", meta: dict[str, Any] | None = None) -> bytes:
    params: dict[str, Any] = {"_meta": {**META, **(meta or {})}}
    if method == "tools/call":
        params.update(name=name, arguments={"text": "hi"} if arguments is None else arguments)
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


def post(data: bytes, name: str | None = "echo", *, method: str = "tools/call", extra: bytes = b"",
         version: bytes = b"HTTP/1.1", verb: bytes = b"POST", path: bytes = b"/mcp",
         content_type: bytes = b"application/json", accept: bytes = ACCEPT, length: bool = True) -> bytes:
    head = (verb + b" " + path + b" " + version + b"\r\nhost: 127.0.0.1\r\ncontent-type: " + content_type +
            b"\r\naccept: " + accept + b"\r\nmcp-protocol-version: " + V.encode() +
            b"\r\nmcp-method: " + method.encode() + b"\r\n")
    if name is not None:
        head += b"mcp-name: " + name.encode() + b"\r\n"
    head += extra
    if length:
        head += b"content-length: %d\r\n" % len(data)
    return head + b"\r\n" + data


def call(name: str = "echo", arguments: dict[str, Any] | None = None, **kw: Any) -> bytes:
    return post(body(name, arguments), name, **kw)


# -- reading answers -----------------------------------------------------------------


def exchange(port: int, data: bytes, *, quiet: float = QUIET) -> bytes:
    """Send `data`; everything read until the server closes or stays quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(data)
        return read_all(sock, quiet)


def read_all(sock: socket.socket, quiet: float = QUIET) -> bytes:
    sock.settimeout(quiet)
    out = bytearray()
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        out += chunk
    return bytes(out)


Answer = tuple[int, list[tuple[str, str]], bytes]


def parse(raw: bytes, head_only: bool = False) -> list[Answer]:
    """The responses in `raw`, in order: (status, headers but `date`, body decoded)."""
    answers: list[Answer] = []
    pos = 0
    while pos < len(raw):
        end = raw.index(b"\r\n\r\n", pos)
        lines = raw[pos:end].decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        fields = [(k.lower(), v.strip()) for k, _, v in (ln.partition(":") for ln in lines[1:])]
        pos = end + 4
        named = dict(fields)
        if head_only or status in (204, 304) or 100 <= status < 200:
            data = b""
        elif "content-length" in named:
            size = int(named["content-length"])
            data = raw[pos:pos + size]
            pos += size
        elif named.get("transfer-encoding") == "chunked":
            parts = []
            while True:
                line_end = raw.index(b"\r\n", pos)
                size = int(raw[pos:line_end], 16)
                pos = line_end + 2
                if size == 0:
                    pos += 2
                    break
                parts.append(raw[pos:pos + size])
                pos += size + 2
            data = b"".join(parts)
        else:  # to the close
            data = raw[pos:]
            pos = len(raw)
        if 100 <= status < 200:
            continue
        kept = [(k, v) for k, v in fields if k != "date"]
        if not data and ("transfer-encoding", "chunked") in kept:
            # An empty body the app sent without a length: uvicorn frames it as one
            # empty chunked body, the engine as `content-length: 0` (both exact).
            kept = [("content-length", "0") if f == ("transfer-encoding", "chunked") else f for f in kept]
        answers.append((status, kept, data))
    return answers


def same(pair: dict[str, Running], data: bytes, *, head_only: bool = False) -> list[Answer]:
    """`data` sent to both engines: the answers, which must be equal."""
    ours = parse(exchange(pair["nimblemcp"].port, data), head_only)
    theirs = parse(exchange(pair["uvicorn"].port, data), head_only)
    assert ours == theirs
    assert ours, "no answer"
    return ours


def result_text(data: bytes) -> str:
    text: str = orjson.loads(data)["result"]["content"][0]["text"]
    return text


# -- plain answers -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["echo", "aecho"])
def test_a_plain_json_answer_is_the_same_on_both_engines(pair: dict[str, Running], name: str) -> None:
    [(status, headers, data)] = same(pair, call(name, {"text": "same"}))
    assert status == 200 and ("content-type", "application/json") in headers
    assert result_text(data) == "same"


def test_a_tool_error_and_json_rpc_errors_are_the_same(pair: dict[str, Running]) -> None:
    [(status, _, data)] = same(pair, call("boom", {}))
    assert status == 200 and orjson.loads(data)["result"]["isError"] is True
    [(status, _, data)] = same(pair, call("missing", {}))
    assert orjson.loads(data)["error"]["code"] in (-32602, -32601)
    [(status, _, data)] = same(pair, post(b"{nope", "echo"))
    assert status == 400 and orjson.loads(data)["error"]["code"] == -32700


@pytest.mark.parametrize(("request_bytes", "status"), [
    (post(body(), "other"), 400),  # Mcp-Name against the body: -32020
    (call(path=b"/nowhere"), 404),
    (call(accept=b"text/html"), 406),
    (call(content_type=b"text/plain"), 415),
    (post(b"", verb=b"GET", length=False), 405),
    (call(extra=b"x-filler: " + b"a" * 33_000 + b"\r\n"), 431),
    (call(extra=b"origin: https://evil.example\r\n"), 403),
    (call(extra=b"host: 127.0.0.1\r\n"), 400),  # a second Host
])
def test_refusals_are_the_same(pair: dict[str, Running], request_bytes: bytes, status: int) -> None:
    answers = same(pair, request_bytes)
    assert answers[0][0] == status


def test_a_body_over_the_limit_is_413_on_both(cors_pair: dict[str, Running]) -> None:
    big = body("echo", {"text": "x" * 5000})
    [(status, _, _)] = same(cors_pair, post(big, "echo"))
    assert status == 413


def test_http_1_0_head_and_connection_close_are_the_same(pair: dict[str, Running]) -> None:
    [(status, headers, data)] = same(pair, call("echo", {"text": "old"}, version=b"HTTP/1.0"))
    assert status == 200 and result_text(data) == "old"
    [(status, headers, _)] = same(pair, call("echo", {"text": "bye"}, extra=b"connection: close\r\n"))
    assert status == 200 and ("connection", "close") in headers
    [(status, headers, data)] = same(pair, b"HEAD /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n", head_only=True)
    assert status == 200 and data == b""
    [(status, _, data)] = same(pair, b"GET /healthz HTTP/1.0\r\nhost: 127.0.0.1\r\n\r\n")
    assert status == 200


def test_pipelined_requests_are_answered_in_order_on_both(pair: dict[str, Running]) -> None:
    health = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
    data = (call("echo", {"text": "one"}) + health + call("aecho", {"text": "three"}) +
            call("echo", {"text": "four"}, extra=b"connection: close\r\n"))
    answers = same(pair, data)
    assert [a[0] for a in answers] == [200, 200, 200, 200]
    assert result_text(answers[0][2]) == "one" and result_text(answers[3][2]) == "four"


def test_an_sse_answer_with_progress_is_the_same(pair: dict[str, Running]) -> None:
    [(status, headers, data)] = same(pair, post(body("counting", {}, rid=7, meta={"progressToken": "p"}), "counting"))
    assert status == 200 and ("content-type", "text/event-stream") in headers
    events = [orjson.loads(line[6:]) for line in data.split(b"\n") if line.startswith(b"data: ")]
    assert [e.get("method") for e in events[:3]] == ["notifications/progress"] * 3
    assert events[-1]["id"] == 7 and events[-1]["result"]["content"][0]["text"] == "counted"


# -- CORS ----------------------------------------------------------------------------


def test_cors_preflight_and_post_are_the_same(cors_pair: dict[str, Running]) -> None:
    preflight = (b"OPTIONS /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\norigin: https://app.example\r\n"
                 b"access-control-request-method: POST\r\n\r\n")
    [(status, headers, _)] = same(cors_pair, preflight)
    assert status == 204 and ("access-control-allow-origin", "https://app.example") in headers
    [(status, headers, data)] = same(cors_pair, call("echo", {"text": "cors"}, extra=b"origin: https://app.example\r\n"))
    assert status == 200 and ("access-control-allow-origin", "https://app.example") in headers
    assert result_text(data) == "cors"
    [(status, headers, _)] = same(cors_pair, post(body("counting", {}, meta={"progressToken": "p"}), "counting", extra=b"origin: https://app.example\r\n"))
    assert status == 200 and ("access-control-allow-origin", "https://app.example") in headers
    [(status, headers, _)] = same(cors_pair, call("echo", extra=b"origin: https://evil.example\r\n"))
    assert status == 403


# -- the legacy leg ------------------------------------------------------------------


def test_the_2025_11_25_leg_is_the_same(pair: dict[str, Running]) -> None:
    init = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}})
    data = (b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\naccept: " + ACCEPT +
            b"\r\ncontent-length: %d\r\n\r\n" % len(init) + init)
    answers = {}
    for engine, r in pair.items():
        [(status, headers, raw)] = parse(exchange(r.port, data))
        named = dict(headers)
        assert status == 200 and "mcp-session-id" in named
        answers[engine] = (status, [(k, v) for k, v in headers if k != "mcp-session-id"], raw)
    assert answers["nimblemcp"] == answers["uvicorn"]


# -- listen streams, drain and a reader too slow -------------------------------------

LISTEN = body(method="subscriptions/listen", rid="L1")


def listen_request(filter_: dict[str, Any], rid: str = "L1") -> bytes:
    data = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": "subscriptions/listen",
                         "params": {"_meta": META, "notifications": filter_}})
    return post(data, None, method="subscriptions/listen")


def read_until(sock: socket.socket, marker: bytes, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    out = bytearray()
    while marker not in out:
        chunk = sock.recv(65536)
        if not chunk:
            break
        out += chunk
    return bytes(out)


def chunked(request: bytes) -> bytes:
    """`request` (with a content-length) with its body sent chunked instead."""
    head, _, data = request.partition(b"\r\n\r\n")
    head = b"\r\n".join(ln for ln in head.split(b"\r\n") if not ln.startswith(b"content-length"))
    return head + b"\r\ntransfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("form", ["plain", "repeated-header", "chunked"])
def test_drain_ends_an_open_listen_stream_cleanly(pair: dict[str, Running], engine: str, form: str) -> None:
    """The guard keeps the listen for the drain: with the header dict (plain), after its
    scan of a list with a repeated name, and for a chunked body (no content-length)."""
    r = pair[engine]
    request = listen_request({"toolsListChanged": True})
    if form == "repeated-header":
        request = request.replace(b"\r\n\r\n", b"\r\nx-dup: 1\r\nx-dup: 2\r\n\r\n", 1)
    elif form == "chunked":
        request = chunked(request)
    with socket.create_connection(("127.0.0.1", r.port), timeout=10) as sock:
        sock.sendall(request)
        head = read_until(sock, b"acknowledged")
        assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
        r.server.bus.publish(Event("tools"))
        head += read_until(sock, b"list_changed")
        was = r.drain.draining
        try:
            ended = r.call(r.drain.drain())
        finally:
            r.drain.draining = was
        assert ended >= 1
        rest = head + read_until(sock, b"0\r\n\r\n")
        assert rest.endswith(b"0\r\n\r\n")  # a clean end, no closing result (SUB-10)
        assert b'"id":"L1"' not in rest
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")  # still usable
        assert read_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_listener_too_slow_gets_the_closing_note_and_a_clean_end(
        pair: dict[str, Running], engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """SUB-09: a listen whose reader stops reading is cut off once `max_buffer` bytes
    pile up; it reads `notifications/cancelled` naming the listen and the stream's end,
    and the connection stays usable (it was closed instead before)."""
    monkeypatch.setattr(Exchange, "max_buffer", 64 * 1024)
    r = pair[engine]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the server feels it
    sock.connect(("127.0.0.1", r.port))
    with sock:
        sock.sendall(listen_request({"resourceSubscriptions": ["docs://big"]}, rid="slow-1"))
        got = read_until(sock, b"acknowledged")
        # Rounds of ~48 KiB (under the cap): the stream writes each round, until the
        # socket buffers are full and its `send` waits for the reader; then the
        # frames pile up past the cap while the pump is blocked.
        uri = "docs://big/" + "x" * 16_000
        for _ in range(150):
            r.server.bus.publish_many([Event("updated", uri)] * 3)
            time.sleep(0.01)
        # Read until the stream's end (or the connection's), however slowly a loaded
        # machine delivers it: a quiet spell is no verdict, only the deadline bounds the
        # wait. Some 3 MB arrive in 4 KiB reads: gathered in a bytearray (linear).
        deadline = time.monotonic() + SLOW_READ_GUARD
        sock.settimeout(1)
        received = bytearray(got)
        while not received.endswith(b"0\r\n\r\n") and time.monotonic() < deadline:
            try:
                chunk = sock.recv(1 << 20)
            except TimeoutError:
                continue
            if not chunk:
                break
            received += chunk
        got = bytes(received)
        assert got.endswith(b"0\r\n\r\n"), got[-200:]  # the stream ended; the connection was not cut
        [(status, _, data)] = parse(got)
        assert status == 200
        events = [orjson.loads(line[6:]) for line in data.split(b"\n") if line.startswith(b"data: ")]
        cancelled = [e for e in events if e.get("method") == "notifications/cancelled"]
        assert cancelled, f"{len(events)} events, the last: {events[-1:]}"
        assert cancelled[-1]["params"]["requestId"] == "slow-1"
        assert "too slow" in cancelled[-1]["params"]["reason"]
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        assert read_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 200")


# -- the engine's one-step answer, and what wraps `send` -------------------------------


class Tagging:
    """A user's middleware that wraps `send`: adds a header to every response."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.starts = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tagged(message: Any) -> None:
            if message["type"] == "http.response.start":
                self.starts += 1
                message = {**message, "headers": [*message.get("headers", ()), (b"x-tag", b"mine")]}
            await send(message)

        await self.app(scope, receive, tagged)


class PassThrough:
    """A user's middleware that hands the server's own `send` on (and copies the scope)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app({**scope, "x-seen": True}, receive, send)


@pytest.fixture(scope="module")
def wrapped() -> Iterator[dict[str, Running]]:
    running = {engine: Running(engine, wrap=Tagging) for engine in ENGINES}
    running.update({f"pass-{engine}": Running(engine, wrap=PassThrough) for engine in ENGINES})
    try:
        yield running
    finally:
        for r in running.values():
            r.stop()


def test_a_middleware_that_wraps_send_sees_every_answer(wrapped: dict[str, Running],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from nimblemcp.transports.h1.engine import _Cycle

    # `deliver` writes the one-step answers only (`send` writes the rest itself).
    calls: list[int] = []
    original = _Cycle.deliver
    monkeypatch.setattr(_Cycle, "deliver", lambda self, body: (calls.append(self.status), original(self, body)))
    data = call("echo", {"text": "one"}) + call("aecho", {"text": "two"})
    answers = same({"nimblemcp": wrapped["nimblemcp"], "uvicorn": wrapped["uvicorn"]}, data)
    assert [a[0] for a in answers] == [200, 200]
    assert all(("x-tag", "mine") in headers for _, headers, _ in answers)
    assert result_text(answers[1][2]) == "two"
    assert wrapped["nimblemcp"].served.starts == 2
    assert calls == []  # `send` was wrapped: the one-step answer was not taken
    answers = same({"nimblemcp": wrapped["pass-nimblemcp"], "uvicorn": wrapped["pass-uvicorn"]}, data)
    assert [result_text(a[2]) for a in answers] == ["one", "two"]
    assert calls == [200, 200]  # the engine's own `send`: answered in one step


def test_one_step_answers_keep_pipelining_close_and_http_1_0(pair: dict[str, Running]) -> None:
    """Answers that take the engine's one step, in the framings where it must fall back
    to the general head: HTTP/1.0 keep-alive, `connection: close` mid-pipeline."""
    data = (call("aecho", {"text": "a"}, version=b"HTTP/1.0") +
            call("aecho", {"text": "b"}, version=b"HTTP/1.0"))
    answers = same(pair, data)
    assert [result_text(a[2]) for a in answers] == ["a"]  # HTTP/1.0 without keep-alive: closed after
    data = (call("aecho", {"text": "a"}) + call("aecho", {"text": "b"}) +
            call("echo", {"text": "c"}, extra=b"connection: close\r\n") + call("echo", {"text": "never"}))
    answers = same(pair, data)
    assert [result_text(a[2]) for a in answers] == ["a", "b", "c"]
    assert ("connection", "close") in answers[2][1]
    # HTTP/1.0 keep-alive: kept by the engine (uvicorn closes), in the general head.
    data = (call("aecho", {"text": "a"}, version=b"HTTP/1.0", extra=b"connection: keep-alive\r\n") +
            call("aecho", {"text": "b"}))
    answers = parse(exchange(pair["nimblemcp"].port, data))
    assert [result_text(a[2]) for a in answers] == ["a", "b"]
    assert answers[0][1] == [("content-type", "application/json"), ("content-length", str(len(answers[0][2]))),
                             ("connection", "keep-alive")]
    # Garbage after a request: the engine answers the request, then 400 (uvicorn
    # answers only the 400).
    bad = parse(exchange(pair["nimblemcp"].port, call("aecho", {"text": "x"}) + b"NOT HTTP\r\n\r\n"))
    assert [a[0] for a in bad] == [200, 400] and result_text(bad[0][2]) == "x"


# -- the header-size limit with the engine's bound on the head -------------------------


@pytest.fixture(scope="module")
def small_heads() -> Iterator[dict[str, Running]]:
    running = {engine: Running(engine, security=m.HttpSecurity(max_header_bytes=1000)) for engine in ENGINES}
    try:
        yield running
    finally:
        for r in running.values():
            r.stop()


def exchange_pieces(port: int, pieces: list[bytes]) -> bytes:
    """`pieces` in separate writes (a pause between them: separate reads at the server)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for piece in pieces:
            sock.sendall(piece)
            time.sleep(0.05)
        return read_all(sock)


def filler(size: int) -> bytes:
    return b"x-filler: " + b"a" * size + b"\r\n"


@pytest.mark.parametrize("size", [600, 700, 750, 800, 900])
def test_the_header_limit_holds_whatever_the_reads(small_heads: dict[str, Running], size: int) -> None:
    """The guard's header limit reads only the scope (issue 31): the verdicts are the same
    on both engines for a head in one read, a head after another request in the same
    read (pipelined), a head split across reads, and a small head whose read is large
    (its body)."""
    big = call("echo", {"text": "big"}, extra=filler(size))
    small = call("echo", {"text": "small"})
    lines = big.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]
    total = sum(len(name) + len(value.lstrip()) for name, _, value in (ln.partition(b":") for ln in lines))
    expected = 431 if total > 1000 else 200
    cases = [
        [big],
        [small + big],
        [big[:40], big[40:]],
        [big[:len(big) // 2], big[len(big) // 2:]],
        [small[:30], small[30:] + big],
    ]
    for pieces in cases:
        answers = {engine: parse(exchange_pieces(r.port, pieces)) for engine, r in small_heads.items()}
        assert answers["nimblemcp"] == answers["uvicorn"], pieces
        assert answers["nimblemcp"][-1][0] == expected, pieces
    body_big = post(body("echo", {"text": "y" * 3000}), "echo")  # a small head, a read past the limit
    [(status, _, data)] = same(small_heads, body_big)
    assert status == 200 and result_text(data) == "y" * 3000


# -- the one-step answer seen from a plain ASGI app on the engine -----------------------


def serve_raw(app: Any) -> tuple[int, Any]:
    """`app` on the engine in a background thread: (port, stop)."""
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def main() -> None:
        async def go() -> None:
            holder["loop"], holder["stop"] = asyncio.get_running_loop(), asyncio.Event()

            def started(address: tuple[str, int]) -> None:
                holder["port"] = address[1]
                ready.set()

            await serve(app, EngineConfig(port=0), stop_event=holder["stop"], started=started)

        asyncio.run(go())

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert ready.wait(30)

    def stop() -> None:
        holder["loop"].call_soon_threadsafe(holder["stop"].set)
        thread.join(30)

    return holder["port"], stop


def test_an_app_that_fails_after_answering_still_delivers_the_answer_then_closes() -> None:
    from nimblemcp.transports.http._asgi import ENGINE

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        assert scope["extensions"][ENGINE].answer(send, 201 if scope["path"] == "/ok" else 202, b'{"a":1}')
        if scope["path"] == "/fail":
            raise RuntimeError("after the answer")

    port, stop = serve_raw(app)
    try:
        get = b"GET /ok HTTP/1.1\r\nhost: x\r\n\r\n"
        answers = parse(exchange(port, get + get))  # pipelined: both, in order
        assert [(a[0], a[2]) for a in answers] == [(201, b'{"a":1}'), (201, b'{"a":1}')]
        assert answers[0][1] == [("content-type", "application/json"), ("content-length", "7")]
        head = parse(exchange(port, b"HEAD /ok HTTP/1.1\r\nhost: x\r\n\r\n"), head_only=True)
        assert head == [(201, [("content-type", "application/json"), ("content-length", "7")], b"")]
        failed = parse(exchange(port, b"GET /fail HTTP/1.1\r\nhost: x\r\n\r\n" + get))
        assert failed == [(202, [("content-type", "application/json"), ("content-length", "7"),
                                 ("connection", "close")], b'{"a":1}')]
    finally:
        stop()
