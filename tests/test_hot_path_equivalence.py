"""The request hot path's shortcuts give the same verdicts as the full scans (issue 18).

`RequestHeaders` and `SecurityMiddleware` read a header list through one dict build
when no name repeats, and fall back to a per-header scan otherwise; the `Accept`
check caches its verdict per value. These tests hold the shortcuts to the long way.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nimblemcp.transports import _asgi
from nimblemcp.transports._http_headers import RequestHeaders
from nimblemcp.transports.http_security import SecurityMiddleware

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

    guard = SecurityMiddleware(app, max_headers=6, max_header_bytes=120)
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
