"""nimblemcp's own HTTP engine (issue 18, round three): the per-request shortcuts.

Four things the engine now skips per request, and what each must still get right:
- the HTTP version is read from the request line of a request that began a read,
  instead of asking the parser (which formats a string per call); pipelined requests
  and heads split across reads still ask the parser;
- the decoded path of a plain request target (no query, no escapes) is remembered per
  engine, up to a bound;
- the common response head (a known content type and a digits-only content-length on
  a keep-alive HTTP/1.1 request read whole) is built without the per-header loop and
  the CR/LF scan: it must be byte for byte what the general path writes;
- a trusted connection notes X-Forwarded-* headers as they are parsed and walks the
  header list for them only when a request has one.
Each test serves a small raw ASGI app on a real `Engine` on loopback and talks to it
over a real socket (the helpers are `test_engine_requests`'s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httptools
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.test_engine_requests import Served, answers, close, finish, read_body, reply, serving

from nimblemcp.transports.h1 import engine as _engine

GUARD = 10.0


async def version_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await read_body(receive)
    await reply(send, {"version": scope["http_version"], "path": scope["path"],
                       "raw_path": scope["raw_path"].decode("latin-1"), "query": scope["query_string"].decode()})


async def versions_of(served: Served, writes: list[bytes], count: int) -> list[dict[str, Any]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    for data in writes:
        writer.write(data)
        await writer.drain()
        await asyncio.sleep(0.05)  # separate reads on the server's side (as far as TCP lets us)
    got = await answers(reader, count)
    await finish(writer)
    return [json.loads(body) for _, _, body in got]


async def test_the_version_of_each_request_whether_it_began_a_read_or_not() -> None:
    served = await serving(version_app)
    try:
        one = b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\n"
        old = b"GET /0 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
        post = b"POST /p HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabc"
        # One read per request, alternating versions on one connection.
        assert [a["version"] for a in await versions_of(served, [one, old, one, post, one], 5)] == [
            "1.1", "1.0", "1.1", "1.0", "1.1"]
        # Pipelined in one read: only the first began the read; the others ask the parser.
        assert [a["version"] for a in await versions_of(served, [one + old + post + one], 4)] == [
            "1.1", "1.0", "1.0", "1.1"]
        # A head split inside the request line, and inside the version itself.
        assert [a["version"] for a in await versions_of(served, [b"GET /s HT", b"TP/1.0\r\nConnection: "
                                                                 b"keep-alive\r\n\r\n", one], 2)] == ["1.0", "1.1"]
        assert [a["version"] for a in await versions_of(served, [b"GET /s HTTP/1.", b"0\r\n\r\n"], 1)] == ["1.0"]
        # Empty lines before a request line (the parser skips them), then a pipelined tail.
        assert [a["version"] for a in await versions_of(served, [b"\r\n\r\n" + old + b"\r\n" + one], 2)] == [
            "1.0", "1.1"]
        assert [a["version"] for a in await versions_of(served, [b"\n" + old, one], 2)] == ["1.0", "1.1"]
        # A body split across reads: the next request begins a read of its own.
        assert [a["version"] for a in await versions_of(
            served, [post[:-2], post[-2:], old], 2)] == ["1.0", "1.0"]
    finally:
        await close(served)


async def test_remembered_paths_stay_per_target_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_engine, "_MAX_PATHS", 4)
    served = await serving(version_app)
    try:
        targets = [b"/a", b"/b", b"/a", b"/c?x=1", b"/d%20e", b"/f", b"/g", b"/h", b"/a", b"/h", b"http://h/i"]
        got = await versions_of(served, [b"".join(b"GET %s HTTP/1.1\r\nHost: h\r\n\r\n" % t for t in targets)],
                                len(targets))
        assert [(a["path"], a["raw_path"], a["query"]) for a in got] == [
            ("/a", "/a", ""), ("/b", "/b", ""), ("/a", "/a", ""), ("/c", "/c", "x=1"), ("/d e", "/d%20e", ""),
            ("/f", "/f", ""), ("/g", "/g", ""), ("/h", "/h", ""), ("/a", "/a", ""), ("/h", "/h", ""),
            ("/i", "/i", "")]
        assert len(served.engine.paths) == 4  # the bound holds; targets past it still work
        assert set(served.engine.paths) == {b"/a", b"/b", b"/f", b"/g"}  # plain targets only
    finally:
        await close(served)
    served = await serving(version_app)
    try:
        long = b"/" + b"l" * 300
        got = await versions_of(served, [b"GET %s HTTP/1.1\r\nHost: h\r\n\r\n" % long * 2], 2)
        assert [a["path"] for a in got] == [long.decode()] * 2
        assert served.engine.paths == {}  # long targets are decoded each time, not kept
    finally:
        await close(served)
    rooted = await serving(version_app, root_path="/base")
    try:
        got = await versions_of(rooted, [b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n" * 2], 2)
        assert [(a["path"], a["raw_path"]) for a in got] == [("/base/x", "/base/x")] * 2
    finally:
        await close(rooted)


def headers_app(status: int, headers: list[Any], body: bytes, read: bool = True) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if read:
            await read_body(receive)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    return app


async def raw_answer(port: int, request: bytes) -> bytes:
    """The server's whole answer to `request`, and whatever follows it within 50 ms."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD)
    length = next((int(line[15:]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")), 0)
    if request.startswith(b"HEAD") or head[9:12] in (b"204", b"304"):
        length = 0
    out = head + await asyncio.wait_for(reader.readexactly(length), GUARD)
    with contextlib.suppress(TimeoutError):
        out += await asyncio.wait_for(reader.read(65536), 0.05)
    await finish(writer)
    return out


def without_date(raw: bytes) -> bytes:
    return b"".join(line for line in raw.splitlines(keepends=True) if not line.lower().startswith(b"date: "))


REQUESTS = [
    b"POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}",
    b"POST /mcp HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}",
    b"POST /mcp HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}",
    b"POST /mcp HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}",
    b"GET /mcp HTTP/1.1\r\nHost: h\r\n\r\n",
    b"HEAD /mcp HTTP/1.1\r\nHost: h\r\n\r\n",
]
CASES = [  # status, content type, content-length value, app reads the body first
    (200, b"application/json", b"%d", True),
    (202, b"application/json", b"0", True),  # a body past its content-length: 500 on both paths
    (404, b"text/event-stream", b"%d", True),
    (204, b"application/json", b"%d", True),
    (304, b"application/json", b"%d", True),
    (599, b"application/json", b"%d", True),  # no standard phrase
    (200, b"application/json", b"%d", False),  # answered before the body was read
    (200, b"application/json; charset=utf-8", b"%d", True),  # not a known line: general path both times
    (200, b"application/json", b" %d", True),  # not digits only: general path both times
]


@pytest.mark.parametrize(("status", "kind", "length", "read"), CASES)
async def test_the_short_response_head_is_what_the_general_path_writes(
        status: int, kind: bytes, length: bytes, read: bool) -> None:
    """Tuples take the short path, the same headers as lists the general one (a list
    is never looked up): the bytes on the wire must be the same."""
    body = b'{"ok":true}'
    value = length % len(body) if b"%d" in length else length
    short = await serving(headers_app(status, [(b"content-type", kind), (b"content-length", value)], body, read))
    general = await serving(headers_app(status, [[b"content-type", kind], [b"content-length", value]], body, read))
    # A body longer than its content-length is the app's error (issue 31), except where
    # the status or the method sends no body.
    too_long = value == b"0" and status not in (204, 304)
    try:
        for request in REQUESTS:
            one, two = await raw_answer(short.port, request), await raw_answer(general.port, request)
            answered = 500 if too_long and not request.startswith(b"HEAD") else status
            assert one.startswith(b"HTTP/1.1 %d" % answered), (request, one)
            assert without_date(one) == without_date(two), (request, one, two)
            assert one.count(b"date: ") == (answered != 500)  # the engine's own 500 has none
    finally:
        await close(short)
        await close(general)


async def test_a_response_with_other_headers_still_goes_through_every_check() -> None:
    # Three headers, or a header list that is not a list: the general path, whose CR/LF
    # refusal still holds (the short path never sees an app's own lines).
    bad = await serving(headers_app(200, [(b"content-type", b"application/json"), (b"content-length", b"2"),
                                          (b"x-bad", b"a\r\nset-cookie: x")], b"{}"))
    odd = await serving(headers_app(200, ((b"content-type", b"application/json"), (b"content-length", b"2")), b"{}"))
    mutable = await serving(headers_app(200, [(b"content-type", bytearray(b"application/json")),
                                              (b"content-length", bytearray(b"2"))], b"{}"))
    try:
        answer = await raw_answer(mutable.port, REQUESTS[0])  # bytearrays, as the general path took them
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\r\n\r\n{}")
        assert b"content-length: 2\r\n" in answer and b"content-type: application/json\r\n" in answer
        answer = await raw_answer(bad.port, REQUESTS[0])
        assert answer.startswith(b"HTTP/1.1 500") and b"set-cookie" not in answer
        answer = await raw_answer(odd.port, REQUESTS[0])
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\r\n\r\n{}")
        assert b"content-length: 2\r\n" in answer and b"content-type: application/json\r\n" in answer
    finally:
        await close(bad)
        await close(odd)
        await close(mutable)


async def forwarded_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await read_body(receive)
    await reply(send, {"scheme": scope["scheme"], "client": scope["client"]})


async def test_forwarding_headers_are_noticed_in_any_case_and_only_where_they_are() -> None:
    """A trusted connection notes X-Forwarded-* while it reads the headers, and walks
    them only for a request that has one; an untrusted one never applies them."""
    trusted = await serving(forwarded_app, forwarded_allow_ips="127.0.0.1")
    untrusted = await serving(forwarded_app, forwarded_allow_ips="192.0.2.1")
    plain = b"GET / HTTP/1.1\r\nHost: h\r\nX-Other: 1\r\n\r\n"
    shouting = b"GET / HTTP/1.1\r\nHost: h\r\nX-FORWARDED-PROTO: https\r\nx-Forwarded-For: 203.0.113.9:7\r\n\r\n"
    try:
        got = await versions_of(trusted, [plain + shouting + plain, shouting, plain], 5)
        assert [(a["scheme"], a["client"][0]) for a in got] == [
            ("http", "127.0.0.1"), ("https", "203.0.113.9"), ("http", "127.0.0.1"), ("https", "203.0.113.9"),
            ("http", "127.0.0.1")]
        assert got[1]["client"] == ["203.0.113.9", 7]
        got = await versions_of(untrusted, [shouting, plain], 2)
        assert [(a["scheme"], a["client"][0]) for a in got] == [("http", "127.0.0.1")] * 2
    finally:
        await close(trusted)
        await close(untrusted)


class _Seen:
    """A parser protocol that only notes that a head was accepted."""

    def __init__(self) -> None:
        self.accepted = False

    def on_headers_complete(self) -> None:
        self.accepted = True


def _agrees_with_llhttp(chunk: bytes) -> None:
    """The engine's rule for a request that begins a read (`on_headers_complete`) must
    give llhttp's own version whenever it gives one, on any head llhttp accepts."""
    seen = _Seen()
    parser = httptools.HttpRequestParser(seen)
    try:
        parser.feed_data(chunk)
    except httptools.HttpParserError:
        return
    if not seen.accepted:
        return
    end = chunk.find(b"\r\n")
    ours = _engine._VERSIONS.get(chunk[end - 9:end]) if end >= 9 else None
    assert ours is None or ours == parser.get_http_version(), (chunk, ours, parser.get_http_version())


_LINE_PARTS = [b"GET", b"POST", b"HEAD", b" ", b"  ", b"\t", b"/", b"/x", b"*", b"http://h/p", b"?q=1", b"%20",
               b"HTTP/1.1", b"HTTP/1.0", b"HTTP/0.9", b"HTTP/2.0", b"HTTP/1.", b"1", b"\r\n", b"\n", b"\r", b"H",
               b"TTP/1.1", b"x: y\r\n", b"Host: h\r\n"]


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_LINE_PARTS), min_size=1, max_size=12), st.sampled_from([b"", b"\r\n", b"\n"]))
def test_the_version_rule_agrees_with_llhttp_on_fuzzed_request_lines(parts: list[bytes], lead: bytes) -> None:
    _agrees_with_llhttp(lead + b"".join(parts) + b"\r\n\r\n")


def test_the_version_rule_agrees_with_llhttp_on_known_traps() -> None:
    for chunk in [b"GET /HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\n\r\n", b"GET /x HTTP/1.0\r\n\r\n",
                  b"\r\nGET / HTTP/1.0\r\n\r\n", b"\n\n\n\n\n\n\n\n\nGET / HTTP/1.0\r\n\r\n", b"GET  HTTP/1.1\r\n\r\n",
                  b"GET HTTP/1.1 HTTP/1.0\r\n\r\n", b"GET /a HTTP/1.1\r\nX: HTTP/1.0\r\n\r\n"]:
        _agrees_with_llhttp(chunk)


async def test_an_http_0_9_request_line_that_ends_like_a_version_keeps_its_own() -> None:
    served = await serving(version_app)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(b"GET /HTTP/1.1\r\n\r\n")  # llhttp: HTTP/0.9, target /HTTP/1.1
        (_, _, body), = await answers(reader, 1)
        assert json.loads(body)["version"] == "0.9" and json.loads(body)["path"] == "/HTTP/1.1"
        await finish(writer)
    finally:
        await close(served)
