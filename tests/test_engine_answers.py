"""How an MCP request is answered on nimblemcp's engine, and the engine's request cycles.

- A quick request gets a plain JSON answer; one that emits gets its SSE stream (also
  after its disconnect watch started); one that runs past the keep-alive interval goes
  SSE with a keep-alive comment; a client that hangs up during a slow tool cancels it
  (HTTP-10); a cancellation before the watch starts propagates and sends nothing.
- Pipelined requests (split anywhere, with trailers between them) each get their own
  headers and version; a head that stalls after a finished request is cut at the head
  deadline; what is read between requests counts against the head size cap; a cycle
  answered 204 completes.

Served on a real `Engine` on loopback in the test's own loop, talked to over real sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from _sse_parser import SSEParser

import nimblemcp as m
from nimblemcp.serving import asgi_app
from nimblemcp.transports.h1.engine import Connection, _Cycle
from nimblemcp.transports.h1.engine_server import Engine, EngineConfig

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}
GUARD = 10.0

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class Served:
    def __init__(self, engine: Engine, server: asyncio.AbstractServer) -> None:
        self.engine, self.server = engine, server
        self.port: int = server.sockets[0].getsockname()[1]


async def serving(app: Any, lifespan: bool = False, **config: Any) -> Served:
    loop = asyncio.get_running_loop()
    engine = Engine(app, EngineConfig(port=0, **config), loop)
    if lifespan:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await queue.put({"type": "lifespan.startup"})
        task = loop.create_task(app({"type": "lifespan", "state": {}}, queue.get, send))
        while not sent:
            await asyncio.sleep(0.01)
        assert sent[0]["type"] == "lifespan.startup.complete"
        task.cancel()
    engine.use_plain_tasks()
    server = await loop.create_server(lambda: Connection(engine), "127.0.0.1", 0)
    engine.start_sweeping()
    return Served(engine, server)


async def close(served: Served) -> None:
    served.engine.stop_sweeping()
    for conn in list(served.engine.connections):
        conn.transport.close()
    served.server.close()
    await served.server.wait_closed()


async def finish(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


# -- the MCP endpoint on the engine --------------------------------------------------

seen: dict[str, Any] = {}


def build_server() -> m.Server:
    server = m.Server("engine-answers", "1")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    @server.tool()
    async def look(ctx: m.Context) -> str:
        return "looked"

    @server.tool()
    async def progress(steps: int, ctx: m.Context) -> str:
        for i in range(1, steps + 1):
            await ctx.report_progress(i, steps)
            await asyncio.sleep(0)
        return "done"

    @server.tool()
    async def late_progress(ctx: m.Context) -> str:
        await asyncio.sleep(0.1)  # past WATCH_DELAY: the watch armed it first
        await ctx.report_progress(1, 1)
        return "late"

    @server.tool()
    async def slow(seconds: float) -> str:
        seen["slow started"] = True
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            seen["slow cancelled"] = True
            raise
        return "slept"

    return server


def post(name: str, arguments: dict[str, Any], rid: int = 1, progress: bool = False) -> bytes:
    meta = {**META, "progressToken": "p"} if progress else META
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments, "_meta": meta}}).encode()
    head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {V}\r\n"
            f"Mcp-Method: tools/call\r\nMcp-Name: {name}\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response: a content-length body or a chunked one (an SSE stream)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD)
    lines = head.decode("latin-1").split("\r\n")
    fields = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
    if "content-length" in fields:
        return int(lines[0].split()[1]), fields, await reader.readexactly(int(fields["content-length"]))
    data = b""
    while True:
        size = int((await asyncio.wait_for(reader.readuntil(b"\r\n"), GUARD)).strip(), 16)
        chunk = await reader.readexactly(size + 2)
        if not size:
            return int(lines[0].split()[1]), fields, data
        data += chunk[:-2]


@pytest.fixture
async def endpoint() -> AsyncIterator[Served]:
    seen.clear()
    served = await serving(asgi_app(build_server(), keepalive=0.3), lifespan=True)
    try:
        yield served
    finally:
        await close(served)


async def test_a_quick_request_gets_a_plain_json_answer(endpoint: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port)
    writer.write(post("look", {}) + post("echo", {"text": "hi"}, rid=2))
    (s1, f1, b1), (s2, _, b2) = [await read_response(reader) for _ in range(2)]
    assert (s1, s2) == (200, 200) and f1["content-type"] == "application/json"
    assert json.loads(b1)["result"]["content"][0]["text"] == "looked"
    assert json.loads(b2)["result"]["content"][0]["text"] == "hi"
    await finish(writer)


async def test_a_request_that_emits_gets_its_sse_stream_as_before(endpoint: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port)
    writer.write(post("progress", {"steps": 3}, progress=True))
    status, fields, data = await read_response(reader)
    assert status == 200 and fields["content-type"] == "text/event-stream"
    events = [json.loads(e) for e in SSEParser().feed(data)]
    assert [e["params"]["progress"] for e in events[:-1]] == [1, 2, 3]
    assert events[-1]["result"]["content"][0]["text"] == "done"
    # The connection is still good for a plain answer.
    writer.write(post("echo", {"text": "after"}, rid=2))
    status, fields, data = await read_response(reader)
    assert status == 200 and json.loads(data)["result"]["content"][0]["text"] == "after"
    await finish(writer)


async def test_a_request_that_emits_after_its_watch_started_streams_too(endpoint: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port)
    writer.write(post("late_progress", {}, progress=True))
    status, fields, data = await read_response(reader)
    assert status == 200 and fields["content-type"] == "text/event-stream"
    events = [json.loads(e) for e in SSEParser().feed(data)]
    assert events[0]["method"] == "notifications/progress"
    assert events[-1]["result"]["content"][0]["text"] == "late"
    await finish(writer)


async def test_a_request_past_the_keepalive_interval_goes_sse_with_a_comment(endpoint: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port)
    writer.write(post("slow", {"seconds": 0.8}))
    status, fields, data = await read_response(reader)
    assert status == 200 and fields["content-type"] == "text/event-stream"
    parser = SSEParser()
    [result] = [json.loads(e) for e in parser.feed(data)]
    assert parser.comments >= 1 and result["result"]["content"][0]["text"] == "slept"
    await finish(writer)


async def test_a_disconnect_during_a_slow_tool_still_cancels_it(endpoint: Served) -> None:
    _reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port)
    writer.write(post("slow", {"seconds": 30}))
    for _ in range(200):
        if seen.get("slow started"):
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # past WATCH_DELAY: the watch is on
    await finish(writer)
    for _ in range(500):
        if seen.get("slow cancelled"):
            break
        await asyncio.sleep(0.01)
    assert seen.get("slow cancelled") is True  # HTTP-10
    for _ in range(200):
        if not endpoint.engine.tasks:
            break
        await asyncio.sleep(0.01)
    assert not endpoint.engine.tasks


async def test_a_cancellation_before_the_watch_starts_propagates_and_sends_nothing() -> None:
    """A lean Exchange that never armed: the request's task is cancelled (a shutdown,
    say) while the tool runs, within WATCH_DELAY; nothing is sent and the task ends
    cancelled, as before."""
    seen.clear()
    app = asgi_app(build_server(), keepalive=0, legacy_sessions=False)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "slow", "arguments": {"seconds": 30}, "_meta": META}}).encode()
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
               (b"accept", b"application/json, text/event-stream"), (b"mcp-protocol-version", V.encode()),
               (b"mcp-method", b"tools/call"), (b"mcp-name", b"slow")]
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers, "state": {}}
    sent: list[Any] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        raise AssertionError

    async def send(message: Any) -> None:
        sent.append(message)

    task = asyncio.get_running_loop().create_task(app(scope, receive, send))
    for _ in range(1000):
        if seen.get("slow started"):
            break
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen.get("slow cancelled") is True and sent == []

# -- the engine's request cycle ------------------------------------------------------


async def record_app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    data = json.dumps({
        "version": scope["http_version"], "path": scope["path"], "body": body.decode(),
        "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
    }).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]})
    await send({"type": "http.response.body", "body": data})


@pytest.fixture
async def recorder() -> AsyncIterator[Served]:
    served = await serving(record_app, head_timeout=0.6, idle_timeout=5.0, max_head=4096)
    try:
        yield served
    finally:
        await close(served)


def request(path: str, version: str = "1.1", body: bytes = b"", extra: str = "") -> bytes:
    return (f"POST {path} HTTP/{version}\r\nHost: h\r\nX-Path: {path}\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def test_pipelined_requests_split_inside_the_method_keep_their_own_head(recorder: Served) -> None:
    """A read that ends inside the next request's method (or its spaces): that request
    still gets its own version and its own headers."""
    one = request("/one", body=b"a")
    two = request("/two", "1.0", b"bb", extra="Connection: keep-alive\r\n")
    three = request("/three", body=b"ccc")
    cuts = [
        [one + two[:2], two[2:] + three],  # "PO" | "ST /two ..."
        [one + two[:5], two[5:] + three],  # "POST " | "/two ..."
        [one + two + three[:4], three[4:]],  # "POST" | " /three ..."
        [one[:3], one[3:] + two[:1], two[1:] + three],
    ]
    for pieces in cuts:
        reader, writer = await asyncio.open_connection("127.0.0.1", recorder.port)
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.05)  # separate reads at the server
        got = [json.loads((await read_response(reader))[2]) for _ in range(3)]
        assert [g["path"] for g in got] == ["/one", "/two", "/three"], pieces
        assert [g["version"] for g in got] == ["1.1", "1.0", "1.1"], pieces
        assert [g["body"] for g in got] == ["a", "bb", "ccc"]
        for g, raw in zip(got, (one, two, three), strict=True):
            assert [h[0] for h in g["headers"]][:2] == ["host", "x-path"]
            assert g["headers"][1][1] == g["path"]  # no header of another request
            assert len(g["headers"]) == raw.split(b"\r\n\r\n")[0].count(b"\r\n")
        await finish(writer)


async def test_trailers_do_not_reach_the_next_request(recorder: Served) -> None:
    chunked = (b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n")
    reader, writer = await asyncio.open_connection("127.0.0.1", recorder.port)
    writer.write(chunked + request("/after"))
    first = json.loads((await read_response(reader))[2])
    second = json.loads((await read_response(reader))[2])
    assert first["body"] == "abc"
    assert second["headers"] == [["host", "h"], ["x-path", "/after"], ["content-length", "0"]]
    await finish(writer)


async def closed_within(port: int, first: bytes, then: bytes = b"") -> float:
    """Seconds from sending `then` (after `first` was answered) until the server closes."""
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if first:
            writer.write(first)
            await read_response(reader)
        began = loop.time()
        writer.write(then)
        with contextlib.suppress(ConnectionError):
            while await asyncio.wait_for(reader.read(65536), GUARD):
                pass
        return loop.time() - began
    finally:
        await finish(writer)


async def test_a_head_that_stalls_after_a_finished_request_is_cut_at_the_head_deadline(
        recorder: Served) -> None:
    # head_timeout 0.6 s, idle_timeout 5 s: the head's target began, so its deadline runs.
    took = await closed_within(recorder.port, request("/a"), b"POST /b HTTP/1.1\r\nHost: h\r\n")
    assert took < 3.0
    took = await closed_within(recorder.port, request("/a"), b"POST /b")
    assert took < 3.0


async def test_a_method_alone_is_under_the_idle_timeout() -> None:
    served = await serving(record_app, head_timeout=30.0, idle_timeout=0.6, max_head=4096)
    try:
        took = await closed_within(served.port, request("/a"), b"POS")
        assert took < 3.0  # no target yet: the keep-alive idle timeout closes it
    finally:
        await close(served)


async def test_what_is_read_between_requests_counts_against_the_head_size_cap() -> None:
    served = await serving(record_app, head_timeout=30.0, idle_timeout=30.0, max_head=4096)
    try:
        took = await closed_within(served.port, request("/a"), b"POST" + b" " * 8192)
        assert took < 3.0  # past the size cap at once, whatever the parser makes of it
        took = await closed_within(served.port, request("/a"), b"\r\n" * 4096)
        assert took < 3.0
        took = await closed_within(served.port, b"", b"\r\n" * 4096)
        assert took < 3.0
    finally:
        await close(served)


async def test_a_cycle_answered_204_completes() -> None:
    cycles: list[_Cycle] = []

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        cycle = send.__self__  # type: ignore[attr-defined]
        cycles.append(cycle)
        await receive()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    served = await serving(app)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD)
        assert head.startswith(b"HTTP/1.1 204")
        [cycle] = cycles
        assert (cycle.keep_alive, cycle.head_only, cycle.check_continue, cycle.status) == (True, False, False, 204)
        assert cycle.response_complete and cycle.written and cycle.headers == []
        await finish(writer)
    finally:
        await close(served)
