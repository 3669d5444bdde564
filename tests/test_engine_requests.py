"""nimblemcp's own HTTP engine (issue 18, round two): what each request gets.

The engine's per-request path was cut down (a scope copied from one per connection,
plain request tasks, `Expect` read only when a body is awaited, no done callbacks);
these pin what a request must still see. Each test serves a small raw ASGI app on a
real `Engine` listening on loopback in the test's own loop, and talks to it over a
real socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from nimblemcp.transports.h1.engine import Connection
from nimblemcp.transports.h1.engine_server import Engine, EngineConfig

App = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]],
                Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[None]]
GUARD = 10.0


class Served:
    def __init__(self, engine: Engine, server: asyncio.AbstractServer, port: int) -> None:
        self.engine, self.server, self.port = engine, server, port


async def serving(app: App, **config: Any) -> Served:
    loop = asyncio.get_running_loop()
    engine = Engine(app, EngineConfig(port=0, **config), loop)
    engine.use_plain_tasks()
    server = await loop.create_server(lambda: Connection(engine), "127.0.0.1", 0)
    engine.start_sweeping()
    return Served(engine, server, server.sockets[0].getsockname()[1])


async def close(served: Served) -> None:
    served.engine.stop_sweeping()
    for conn in list(served.engine.connections):
        conn.transport.close()
    served.server.close()
    await served.server.wait_closed()


async def answers(reader: asyncio.StreamReader, count: int) -> list[tuple[bytes, dict[str, str], bytes]]:
    out = []
    for _ in range(count):
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD)
        lines = head.decode("latin-1").split("\r\n")
        fields = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        data = await asyncio.wait_for(reader.readexactly(int(fields.get("content-length", "0"))), GUARD)
        out.append((lines[0].encode(), fields, data))
    return out


async def finish(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def read_body(receive: Callable[[], Awaitable[dict[str, Any]]]) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def reply(send: Callable[[dict[str, Any]], Awaitable[None]], data: object) -> None:
    body = json.dumps(data).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


async def scope_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    body = await read_body(receive)
    state = sorted(scope["state"])
    scope["state"]["seen"] = True  # must not reach the next request's state
    await reply(send, {
        "http_version": scope["http_version"], "method": scope["method"], "path": scope["path"],
        "raw_path": scope["raw_path"].decode("latin-1"), "query": scope["query_string"].decode("latin-1"),
        "root_path": scope["root_path"], "scheme": scope["scheme"], "client": scope["client"],
        "server": scope["server"], "state": state, "body": body.decode(),
        "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
    })


@pytest.fixture
async def scoped() -> AsyncIterator[Served]:
    served = await serving(scope_app, forwarded_allow_ips="127.0.0.1")
    try:
        yield served
    finally:
        await close(served)


async def test_each_request_on_a_connection_gets_its_own_version_path_query_and_state(scoped: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", scoped.port)
    writer.write(b"GET /a%20b?x=1&y=%41 HTTP/1.0\r\nConnection: keep-alive\r\nX-One: 1\r\n\r\n"
                 b"POST /c HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi"
                 b"GET http://h/abs?q HTTP/1.1\r\nHost: h\r\n\r\n")
    (s1, f1, a), (s2, _, b), (s3, _, c) = await answers(reader, 3)
    assert s2.startswith(b"HTTP/1.1 200") and s3.startswith(b"HTTP/1.1 200")
    one, two, three = json.loads(a), json.loads(b), json.loads(c)
    assert s1.startswith(b"HTTP/1.1 200") and f1["connection"] == "keep-alive"
    assert (one["http_version"], one["method"], one["path"], one["raw_path"], one["query"]) == (
        "1.0", "GET", "/a b", "/a%20b", "x=1&y=%41")
    assert one["headers"] == [["connection", "keep-alive"], ["x-one", "1"]]  # names lowercased
    assert (two["http_version"], two["method"], two["path"], two["raw_path"], two["query"], two["body"]) == (
        "1.1", "POST", "/c", "/c", "", "hi")
    assert two["headers"] == [["host", "h"], ["content-length", "2"]]
    assert (three["path"], three["raw_path"], three["query"]) == ("/abs", "/abs", "q")
    assert one["state"] == two["state"] == three["state"] == []  # a fresh copy each time
    assert one["server"] == ["127.0.0.1", scoped.port] and one["scheme"] == "http"
    await finish(writer)


async def test_forwarded_headers_apply_to_their_own_request_only(scoped: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", scoped.port)
    writer.write(b"GET /f HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 203.0.113.7\r\nX-Forwarded-Proto: https\r\n\r\n"
                 b"GET /g HTTP/1.1\r\nHost: h\r\n\r\n")
    (_, _, a), (_, _, b) = await answers(reader, 2)
    forwarded, plain = json.loads(a), json.loads(b)
    assert forwarded["scheme"] == "https" and forwarded["client"] == ["203.0.113.7", 0]
    assert plain["scheme"] == "http" and plain["client"][0] == "127.0.0.1" and plain["client"][1] != 0
    await finish(writer)


async def test_root_path_prefixes_path_and_raw_path() -> None:
    served = await serving(scope_app, root_path="/base")
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(b"GET /x%2Fy?z HTTP/1.1\r\nHost: h\r\n\r\n")
        [(_, _, data)] = await answers(reader, 1)
        got = json.loads(data)
        assert (got["root_path"], got["path"], got["raw_path"], got["query"]) == ("/base", "/base/x/y", "/base/x%2Fy", "z")
        await finish(writer)
    finally:
        await close(served)


async def test_expect_100_continue_is_sent_only_while_the_body_is_held_back(scoped: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", scoped.port)
    # The body came with the head: nothing to continue, the answer is the first thing back.
    writer.write(b"POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc")
    [(status, _, data)] = await answers(reader, 1)
    assert status.startswith(b"HTTP/1.1 200") and json.loads(data)["body"] == "abc"
    # The client waits for the 100 before it sends the body.
    writer.write(b"POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n")
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"xyz")
    [(status, _, data)] = await answers(reader, 1)
    assert status.startswith(b"HTTP/1.1 200") and json.loads(data)["body"] == "xyz"
    await finish(writer)


async def test_expect_100_continue_from_http_1_0_is_ignored(scoped: Served) -> None:
    # RFC 9110 10.1.1: the expectation is HTTP/1.1's; a 1.0 client never gets an interim answer.
    reader, writer = await asyncio.open_connection("127.0.0.1", scoped.port)
    writer.write(b"POST /e HTTP/1.0\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
    await asyncio.sleep(0.2)  # time enough for a wrongly sent interim answer to arrive first
    writer.write(b"xyz")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD)
    assert not head.startswith(b"HTTP/1.1 100"), head
    assert b" 200 " in head.split(b"\r\n", 1)[0]
    writer.close()


REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


async def task_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await read_body(receive)
    before = REQUEST_ID.get()
    REQUEST_ID.set(scope["path"])  # never seen by a later request on the connection
    task = asyncio.current_task()
    await asyncio.sleep(0)  # suspends: the rest runs as a task step, in the same context
    await reply(send, {"before": before, "after": REQUEST_ID.get(), "task": id(task),
                       "same_task": asyncio.current_task() is task, "name": task.get_name() if task else None})


async def test_every_request_runs_in_its_own_task_and_context() -> None:
    served = await serving(task_app)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(b"GET /one HTTP/1.1\r\nHost: h\r\n\r\nGET /two HTTP/1.1\r\nHost: h\r\n\r\n")
        (_, _, a), (_, _, b) = await answers(reader, 2)
        one, two = json.loads(a), json.loads(b)
        assert one["before"] == two["before"] == "unset"
        assert (one["after"], two["after"]) == ("/one", "/two")
        assert one["same_task"] and two["same_task"] and one["task"] != two["task"]
        await finish(writer)
        await asyncio.sleep(0.05)
        assert served.engine.tasks == set()  # each request dropped itself when it ended
    finally:
        await close(served)


async def test_a_task_factory_installed_at_startup_makes_the_request_tasks() -> None:
    loop = asyncio.get_running_loop()
    made: list[str] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(type(coro).__name__)
        return asyncio.Task(coro, loop=loop, **kwargs)

    previous = loop.get_task_factory()
    loop.set_task_factory(factory)  # as an app's lifespan startup might
    try:
        served = await serving(scope_app)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.write(b"GET /t HTTP/1.1\r\nHost: h\r\n\r\n")
            [(status, _, _)] = await answers(reader, 1)
            assert status.startswith(b"HTTP/1.1 200")
            assert made.count("coroutine") >= 1
            await finish(writer)
        finally:
            await close(served)
    finally:
        loop.set_task_factory(previous)


async def failing_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await read_body(receive)
    if scope["path"] == "/boom":
        raise ValueError("boom")
    await reply(send, {"ok": True})


async def test_a_failing_request_answers_500_and_leaves_no_task_behind(caplog: pytest.LogCaptureFixture) -> None:
    served = await serving(failing_app)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(b"GET /boom HTTP/1.1\r\nHost: h\r\n\r\n")
        [(status, fields, _)] = await answers(reader, 1)
        assert status.startswith(b"HTTP/1.1 500") and fields["connection"] == "close"
        assert await asyncio.wait_for(reader.read(), GUARD) == b""
        await finish(writer)
        await asyncio.sleep(0.05)
        assert served.engine.tasks == set()
        assert any("Exception in ASGI application" in r.getMessage() for r in caplog.records)
    finally:
        await close(served)


async def splitting_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await read_body(receive)
    value = b"a\r\nset-cookie: stolen=1" if scope["path"] == "/split" else b"fine"
    if scope["path"] == "/lf":
        value = b"a\nset-cookie: stolen=1"
    headers = ((b"x-echo", value), (b"transfer-encoding", b"chunked"))  # an iterable, not a list
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok", "more_body": False})


async def test_a_cr_or_lf_in_a_response_header_is_refused_not_written() -> None:
    served = await serving(splitting_app)
    try:
        for path in (b"/split", b"/lf"):
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: h\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD)
            assert head.startswith(b"HTTP/1.1 500"), head
            assert b"stolen" not in head + await asyncio.wait_for(reader.read(), GUARD)
            await finish(writer)
        # The same app with a clean value, its own transfer-encoding header included, is served.
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(b"GET /ok HTTP/1.1\r\nHost: h\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD)
        assert head.startswith(b"HTTP/1.1 200") and b"x-echo: fine\r\n" in head
        assert head.lower().count(b"transfer-encoding: chunked") == 1
        await finish(writer)
    finally:
        await close(served)
