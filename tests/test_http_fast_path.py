"""The guarded app's fast path keeps every answer (issue 18; HTTP-02/03/04/12/17/19).

`SecurityMiddleware` builds one dict of the header list and hands it to the MCP
endpoint, which reads it instead of the list; a list in which a name repeats (or
headers that are not a list) takes the per-header scan in both. These tests drive the
real guarded app (`nimblemcp.serving.asgi_app`) with raw ASGI messages: each unusual
request gets its own answer, and the same request with its headers as a tuple (the
scan path everywhere) gets the very same answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nimblemcp as m
from nimblemcp import HttpSecurity
from nimblemcp.serving import asgi_app

V = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": V,
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _server() -> m.Server:
    server = m.Server("fast", "1")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    return server


APP = asgi_app(_server(), security=HttpSecurity(max_body=1000, max_headers=12, max_header_bytes=600))
BODY = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"_meta": META, "name": "echo", "arguments": {"text": "hi"}}}).encode()


def _headers(body: bytes = BODY, **changes: bytes | None) -> list[tuple[bytes, bytes]]:
    base: dict[str, bytes | None] = {
        "host": b"127.0.0.1:8000", "content-type": b"application/json",
        "accept": b"application/json, text/event-stream", "mcp-protocol-version": V.encode(),
        "mcp-method": b"tools/call", "mcp-name": b"echo", "content-length": str(len(body)).encode(),
    }
    base.update({k.replace("_", "-"): v for k, v in changes.items()})
    return [(k.encode(), v) for k, v in base.items() if v is not None]


async def _serve(app: Any, headers: Sequence[tuple[bytes, bytes]], chunks: Sequence[bytes],
                 method: str = "POST") -> tuple[int, dict[bytes, bytes], bytes]:
    """One request through `app`: its status, response headers and body."""
    pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[Any] = []

    async def receive() -> Any:
        if pending:
            return pending.pop(0)
        await asyncio.Event().wait()  # parked until the request ends (no disconnect)

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": "/mcp", "root_path": "", "headers": headers,
             "query_string": b"", "http_version": "1.1", "scheme": "http"}
    await app(scope, receive, send)
    start = sent[0]
    return start["status"], dict(start["headers"]), b"".join(x.get("body", b"") for x in sent[1:])


def serve(headers: list[tuple[bytes, bytes]], chunks: Sequence[bytes] = (BODY,), app: Any = APP,
          method: str = "POST") -> tuple[int, bytes]:
    """The answer to the request, checked to be the same through the scan path."""
    fast = asyncio.run(_serve(app, list(headers), chunks, method))
    slow = asyncio.run(_serve(app, tuple(headers), chunks, method))
    assert (fast[0], fast[2]) == (slow[0], slow[2])
    return fast[0], fast[2]


def error_code(body: bytes) -> int:
    return json.loads(body)["error"]["code"]  # type: ignore[no-any-return]


def test_the_usual_request_is_answered() -> None:
    status, body = serve(_headers())
    assert status == 200 and json.loads(body)["result"]["content"][0]["text"] == "hi"


def test_a_second_host_is_refused() -> None:
    assert serve([*_headers(), (b"host", b"127.0.0.1:8000")])[0] == 400


def test_a_foreign_host_and_a_foreign_origin_are_refused() -> None:  # HTTP-02
    assert serve(_headers(host=b"evil.example"))[0] == 403
    assert serve(_headers(origin=b"http://evil.example"))[0] == 403
    assert serve([*_headers(origin=b"http://localhost"), (b"origin", b"http://evil.example")])[0] == 403
    assert serve(_headers(origin=b"http://localhost:3000"))[0] == 200


def test_a_routing_header_sent_twice_is_a_mismatch() -> None:  # HTTP-19
    status, body = serve([*_headers(), (b"mcp-method", b"tools/call")])
    assert status == 400 and error_code(body) == -32020 and b"more than once" in body


def test_a_repeated_plain_header_takes_the_scan_and_is_served() -> None:
    status, body = serve([*_headers(), (b"x-trace", b"1"), (b"x-trace", b"2")])
    assert status == 200 and b'"hi"' in body


def test_a_body_in_several_messages_without_length() -> None:
    half = len(BODY) // 3
    parts = [BODY[:half], BODY[half:2 * half], b"", BODY[2 * half:]]
    status, body = serve(_headers(content_length=None), parts)
    assert status == 200 and b'"hi"' in body


def test_a_chunked_body_past_the_limit_is_413() -> None:
    assert serve(_headers(content_length=None), [b"x" * 600, b"x" * 600])[0] == 413


@pytest.mark.parametrize(("accept", "status"), [
    (None, 406), (b"application/json", 406), (b"text/event-stream", 406), (b"", 406),
    (b"application/json;q=0, */*", 406), (b"*/*", 200), (b"application/*, text/*", 200),
    (b"  application/json ,text/event-stream  ", 200), (b"TEXT/EVENT-STREAM, Application/JSON", 200),
])
def test_accept(accept: bytes | None, status: int) -> None:  # HTTP-04
    assert serve(_headers(accept=accept))[0] == status


@pytest.mark.parametrize(("content_type", "status"), [
    (None, 415), (b"text/plain", 415), (b"application/jsonx", 415), (b"", 415),
    (b"application/json; charset=utf-8", 200), (b" Application/JSON ", 200),
])
def test_content_type(content_type: bytes | None, status: int) -> None:  # HTTP-03
    assert serve(_headers(content_type=content_type))[0] == status


@pytest.mark.parametrize(("length", "status"), [
    (b"abc", 400), (b"-1", 400), (b"", 400), (b"1001", 413), (b"99999999999", 413),
    (b"1000", 200), (b"0999", 200), (b" 999", 200),
])
def test_content_length_against_the_limit(length: bytes, status: int) -> None:
    # Only the status: what the endpoint reads is the body sent, whatever the header says.
    assert serve(_headers(content_length=length))[0] == status


def test_too_many_or_too_large_headers_are_431() -> None:
    assert serve([*_headers(), *[(f"x-{i}".encode(), b"1") for i in range(6)]])[0] == 431
    assert serve(_headers(x_big=b"y" * 500))[0] == 431
    assert serve(_headers(x_big=b"y" * 300))[0] == 200


def test_header_whitespace_and_mismatches() -> None:  # HTTP-17, SEP-2243
    ok = _headers(mcp_protocol_version=b" 2026-07-28\t", mcp_method=b"tools/call ", mcp_name=b"\techo")
    assert serve(ok)[0] == 200
    for change in ({"mcp_name": b"other"}, {"mcp_method": b"tools/list"}, {"mcp_protocol_version": b"2099-01-01"},
                   {"mcp_name": None}, {"mcp_method": None}, {"mcp_protocol_version": None}):
        status, body = serve(_headers(**change))
        assert status == 400 and error_code(body) == -32020, change


def test_legacy_version_with_whitespace_still_goes_to_the_legacy_leg() -> None:
    modern = serve(_headers(mcp_protocol_version=b"2025-11-25"))
    spaced = serve(_headers(mcp_protocol_version=b" 2025-11-25 "))
    assert modern == spaced and modern[0] != 200


def test_an_unsupported_version_with_mismatched_headers_answers_the_mismatch_first() -> None:  # HTTP-19
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"_meta": meta, "name": "echo", "arguments": {"text": "hi"}}}).encode()
    status, answer = serve(_headers(body), [body])
    assert status == 400 and error_code(answer) == -32020
    status, answer = serve(_headers(body, mcp_protocol_version=b"2099-01-01"), [body])
    assert error_code(answer) == -32022


def test_cors_and_the_hand_off_together() -> None:
    app = asgi_app(_server(), security=HttpSecurity(cors=True))
    headers = _headers(origin=b"http://localhost:5173")
    fast = asyncio.run(_serve(app, list(headers), [BODY]))
    slow = asyncio.run(_serve(app, tuple(headers), [BODY]))
    assert fast[0] == slow[0] == 200 and fast[2] == slow[2]
    assert fast[1][b"access-control-allow-origin"] == b"http://localhost:5173"


def test_get_and_other_paths_are_unchanged() -> None:
    assert serve(_headers(), method="GET")[0] in (400, 405, 406)
    status, _, _ = asyncio.run(_serve(APP, _headers(), [BODY], "DELETE"))
    assert status in (400, 404, 405)


names = st.sampled_from([b"host", b"origin", b"content-type", b"accept", b"mcp-protocol-version",
                         b"mcp-method", b"mcp-name", b"mcp-session-id", b"content-length", b"x-other"])
values = st.sampled_from([b"127.0.0.1:8000", b"evil.example", b"http://localhost", b"application/json",
                          b"application/json, text/event-stream", V.encode(), b" 2025-11-25", b"tools/call",
                          b"echo", b"abc", b"", b"12", b"y" * 90])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(names, values), max_size=4), st.booleans())
def test_any_header_list_gets_the_same_answer_both_ways(extra: list[tuple[bytes, bytes]], replace: bool) -> None:
    headers = _headers()
    if replace:  # the extras replace the usual values (no repeat), else they add to them
        drop = {k for k, _ in extra}
        headers = [h for h in headers if h[0] not in drop]
    status, _ = serve([*headers, *extra])
    assert 200 <= status < 500
