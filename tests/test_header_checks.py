"""The header checks of the HTTP endpoint and its guard give the answers of the full
checks (HTTP-02, HTTP-17/19).

`RequestHeaders` and `SecurityMiddleware` read a header list through one dict build
when no name repeats, and fall back to a per-header scan otherwise; the `Accept` check
caches its verdict per value; the endpoint passes headers that agree with the body on
table look-ups and sends every other request to `check_standard`; the guard bounds the
header bytes with one marshal call, whichever server runs it (issue 31: nothing in the
scope lets a server skip the check). These tests hold each shortcut to the long way and
drive the real guarded app for the very answers the full checks give.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nimblemcp as m
from nimblemcp import HttpSecurity
from nimblemcp.errors import HeaderMismatch
from nimblemcp.serving import asgi_app
from nimblemcp.transports.http import _asgi
from nimblemcp.transports.http import _headers as _http_headers
from nimblemcp.transports.http._headers import RequestHeaders, check_standard
from nimblemcp.transports.http.security import SecurityMiddleware

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.sampled_from([
    b"content-type", b"accept", b"mcp-protocol-version", b"mcp-method", b"mcp-name", b"mcp-session-id",
    b"mcp-param-limit", b"host", b"origin", b"content-length",
]) | st.binary(max_size=10)
values = st.sampled_from([b"application/json", b" 2026-07-28 ", b"tools/call", b"\t7", b"", b"localhost:8000",
                          b"http://evil.example", b"12"]) | st.binary(max_size=20)
header_lists = st.lists(st.tuples(names, values), max_size=10)


def _long_way(raw: list[tuple[bytes, bytes]]) -> RequestHeaders:
    h = RequestHeaders.__new__(RequestHeaders)
    h._scan(raw)
    return h


@FAST
@given(header_lists)
def test_request_headers_shortcut_matches_the_scan(raw: list[tuple[bytes, bytes]]) -> None:
    quick, slow = RequestHeaders(raw), _long_way(raw)
    assert quick.values == slow.values
    assert quick.dup == slow.dup
    # Mcp-Param-* values as the check reads them (stripped), or the same duplicate marker.
    for key, _ in raw:
        if key.startswith(b"mcp-param-"):
            a = (quick.params or {}).get(key)
            b = (slow.params or {}).get(key)
            assert a is b or (a is not None and b is not None and a.strip(b" \t") == b.strip(b" \t"))


def _verdict(raw: list[tuple[bytes, bytes]], as_tuple: bool) -> tuple[int | None, bool]:
    """Status the guard answers (None: passed to the app) for this header list."""
    reached: list[bool] = []
    sent: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(True)

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    guard = SecurityMiddleware(app, security=HttpSecurity(max_headers=6, max_header_bytes=120))
    # A tuple of headers takes the scan; a list takes the dict build when no name repeats.
    headers: Any = tuple(raw) if as_tuple else list(raw)
    scope = {"type": "http", "method": "GET", "path": "/mcp", "headers": headers}
    asyncio.run(guard(scope, receive, send))
    return (sent[0]["status"] if sent else None), bool(reached)


@FAST
@given(header_lists)
def test_security_shortcut_matches_the_scan(raw: list[tuple[bytes, bytes]]) -> None:
    assert _verdict(raw, as_tuple=False) == _verdict(raw, as_tuple=True)


@FAST
@given(st.binary(max_size=60) | st.lists(st.sampled_from(
    ["application/json", "text/event-stream", "*/*", "text/*", ";q=0", ";q=0.5", ", ", ";"]), max_size=6)
    .map(lambda parts: "".join(parts).encode()))
def test_cached_accept_verdicts_match_the_parser(value: bytes) -> None:
    kinds = _asgi.accepted(value)
    expected = _asgi.accepts_json(kinds) and _asgi.accepts_sse(kinds)
    assert _asgi.accepts_json_and_sse(value) is expected
    assert _asgi.accepts_json_and_sse(value) is expected  # the cached verdict


def test_a_repeated_host_is_still_refused_with_the_shortcut_in_place() -> None:
    raw = [(b"host", b"localhost"), (b"host", b"evil.example")]
    assert _verdict(raw, as_tuple=False) == (400, False)


# -- the endpoint and the guard, served ---------------------------------------------------

V = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": V,
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _server() -> m.Server:
    server = m.Server("round6", "1")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    return server


APP = asgi_app(_server(), security=HttpSecurity(max_header_bytes=600))
BODY = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"_meta": META, "name": "echo", "arguments": {"text": "hi"}}}).encode()


def _headers(**changes: bytes | None) -> list[tuple[bytes, bytes]]:
    base: dict[str, bytes | None] = {
        "host": b"127.0.0.1:8000", "content-type": b"application/json",
        "accept": b"application/json, text/event-stream", "mcp-protocol-version": V.encode(),
        "mcp-method": b"tools/call", "mcp-name": b"echo", "content-length": str(len(BODY)).encode(),
    }
    base.update({k.replace("_", "-"): v for k, v in changes.items()})
    return [(k.encode(), v) for k, v in base.items() if v is not None]


async def _serve(headers: Any, extra: dict[str, Any] | None = None) -> tuple[int, bytes]:
    sent: list[Any] = []
    pending = [{"type": "http.request", "body": BODY, "more_body": False}]

    async def receive() -> Any:
        if pending:
            return pending.pop()
        await asyncio.Event().wait()

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/mcp", "root_path": "", "headers": headers,
             "query_string": b"", "http_version": "1.1", "scheme": "http", **(extra or {})}
    await APP(scope, receive, send)
    return sent[0]["status"], b"".join(x.get("body", b"") for x in sent[1:])


def serve(headers: list[tuple[bytes, bytes]], extra: dict[str, Any] | None = None) -> tuple[int, bytes]:
    return asyncio.run(_serve(headers, extra))


def _expected(headers: list[tuple[bytes, bytes]]) -> str | None:
    """What the full check says of these headers for BODY (None: they pass)."""
    params = json.loads(BODY)["params"]
    try:
        check_standard(RequestHeaders(headers), "tools/call", params, V)
    except HeaderMismatch as exc:
        return str(exc)
    return None


CASES = [
    {}, {"mcp_protocol_version": None}, {"mcp_protocol_version": b" 2026-07-28 "},
    {"mcp_protocol_version": b"2025-11-25"}, {"mcp_protocol_version": b"1999-01-01"},
    {"mcp_method": None}, {"mcp_method": b"tools/list"}, {"mcp_method": b"tools/call\t"},
    {"mcp_name": None}, {"mcp_name": b"other"}, {"mcp_name": b" echo"},
    {"mcp_name": b"=?base64?ZWNobw==?="}, {"mcp_name": b"=?base64?b3RoZXI=?="}, {"mcp_name": b"ec\x01ho"},
]


@pytest.mark.parametrize("changes", CASES)
@pytest.mark.parametrize("cold", [True, False])
def test_every_header_answer_is_the_full_checks(changes: dict[str, bytes | None], cold: bool) -> None:
    """The look-up path agrees exactly with check_standard, with the decoded-name cache
    empty or warm, with the headers handed over as a dict (a list) or scanned (a tuple)."""
    headers = _headers(**changes)
    if changes.get("mcp_protocol_version") == b"2025-11-25":
        return  # the legacy leg's (its own tests)
    if cold:
        _http_headers.NAME_TEXT.clear()
    expected = _expected(headers)
    for sent in (headers, tuple(headers)):
        status, body = serve(sent)  # type: ignore[arg-type]
        if expected is None:
            assert status == 200 and b'"hi"' in body
        else:
            answer = json.loads(body)
            assert status == 400 and answer["error"]["code"] == -32020
            assert answer["error"]["message"] == expected


def test_a_repeated_routing_header_is_still_a_mismatch() -> None:
    status, body = serve([*_headers(), (b"mcp-name", b"echo")])
    assert status == 400 and b"more than once" in body


# What nimblemcp's engine once put in the scope to skip the check (a head bound), and
# what it offers now (its extension): neither changes the verdict.
@pytest.mark.parametrize("extra", [{}, {"nimblemcp.head_bytes": 500}, {"extensions": {}}])
def test_the_header_limit_is_exact_whatever_the_server_says(extra: dict[str, Any]) -> None:
    """600 bytes of names and values pass and 601 are a 431 (marshal's bound overshoots:
    the exact sum decides near the limit)."""
    base = _headers()
    used = sum(len(k) + len(v) for k, v in base)
    fill = 600 - used - len(b"x-pad")
    assert serve([*base, (b"x-pad", b"a" * fill)], extra)[0] == 200
    assert serve([*base, (b"x-pad", b"a" * (fill + 1))], extra)[0] == 431
    many = [*base, *((b"x-%d" % i, b"") for i in range(3))]
    assert serve(many, extra)[0] == 200  # empty values: counted as their names only


class _Sized:
    """A header value marshal cannot write: counted as over, then added up with len."""

    def __len__(self) -> int:
        return 3


def test_a_value_marshal_cannot_write_is_added_up() -> None:
    assert serve([*_headers(), (b"x-odd", _Sized())])[0] == 200  # type: ignore[list-item]


@pytest.mark.parametrize("repeated", [False, True])
def test_an_http_1_1_request_without_host_is_400_on_any_server(repeated: bool) -> None:
    """RFC 9112 §3.2 (issue 31): the guard answers it, so both engines do; HTTP/1.0 has no
    Host to require. `repeated` takes the guard's path for a header named twice."""
    headers = _headers(host=None)
    if repeated:
        headers += [(b"x-twice", b"1"), (b"x-twice", b"2")]
    status, body = serve(headers)
    assert status == 400 and b"must have a Host header" in body
    assert serve(headers, {"http_version": "1.0"})[0] == 200
    assert serve(_headers())[0] == 200
