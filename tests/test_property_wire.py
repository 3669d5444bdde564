"""Property-based tests (issue 12): whatever arrives on the wire gets a JSON-RPC answer
or a status the spec names — never an exception out of our code, never a hang.

The codec, `_meta` validation (`Core.prepare`), header parsing, the stdio line reader
and the guarded ASGI endpoint (called in-process). Examples are bounded so the whole
file runs in a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Annotated, Any

import orjson
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nimblemcp as m
from nimblemcp.errors import HeaderMismatch, InvalidRequest, ParseError, ProtocolError
from nimblemcp.jsonrpc import MAX_DEPTH, classify, decode_request, encode_reply
from nimblemcp.transports.http._asgi import accepted, accepts_json_and_sse
from nimblemcp.transports.http._headers import ParamRules, RequestHeaders, check_standard
from nimblemcp.transports.http.security import secure_app
from nimblemcp.transports.stdio._lines import LineSplitter

V = "2026-07-28"
PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(
    allow_nan=False, allow_infinity=False) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
ids = st.none() | st.integers(-5, 5) | st.text(max_size=4) | st.floats(allow_nan=False) | st.booleans()
methods = st.sampled_from(["tools/call", "tools/list", "ping", "initialize", "server/discover",
                           "resources/read", "prompts/get", "subscriptions/listen", "nope", ""]) | st.text(max_size=10)
metas = st.one_of(
    json_values,
    st.fixed_dictionaries({PV: st.sampled_from([V, "2025-11-25", "1900-01-01", ""]) | json_values},
                          optional={CAPS: st.just({}) | json_values,
                                    "io.modelcontextprotocol/clientInfo": json_values,
                                    "progressToken": json_values}),
)


def build_server() -> m.Server:
    server = m.Server("prop", "0.1")

    @server.tool()
    async def echo(message: str) -> str:
        return message

    @server.tool()
    def limited(limit: Annotated[int, pydantic.Field(json_schema_extra={"x-mcp-header": "Limit"})]) -> int:
        return limit

    @server.resource("docs://a")
    def doc() -> str:
        return "a"

    return server


SERVER = build_server()


@st.composite
def messages(draw: st.DrawFn) -> Any:
    """Request-shaped JSON, mostly nearly right (the interesting part), sometimes anything."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    message: dict[str, Any] = {"jsonrpc": draw(st.sampled_from(["2.0", "2.0", "1.0"]) | json_scalars)}
    if draw(st.booleans()):
        message["id"] = draw(ids)
    message["method"] = draw(methods | json_scalars)
    params = draw(st.none() | st.dictionaries(st.sampled_from(
        ["name", "arguments", "uri", "cursor", "inputResponses", "requestState", "filter"]), json_values, max_size=4))
    if params is not None:
        if draw(st.booleans()):
            params["_meta"] = draw(metas)
        message["params"] = params
    return message


# -- the codec -------------------------------------------------------------------------------

@FAST
@given(st.binary(max_size=300) | messages().map(lambda v: json.dumps(v).encode()))
def test_any_bytes_decode_and_classify_or_raise_a_protocol_error(data: bytes) -> None:
    try:
        message = decode_request(data)
        kind = classify(message)
    except (ParseError, InvalidRequest) as exc:
        assert exc.code in (-32700, -32600)
        return
    assert kind in ("request", "notification", "response")


@FAST
@given(st.integers(1, 3 * MAX_DEPTH), st.sampled_from(["[", '{"a":']))
def test_depth_is_capped_exactly(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    inner = opener * (depth - 1) + ("[]" if opener == "[" else "{}") + closer * (depth - 1)
    data = ('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":' + inner + "}}").encode()
    message = decode_request(data)
    if depth + 2 > MAX_DEPTH:  # the message and its params add two levels
        with pytest.raises(InvalidRequest):
            classify(message)
        assert message["id"] == 1
    else:
        assert classify(message) == "request"


@FAST
@given(json_values, ids)
def test_every_response_encodes(result: Any, rid: Any) -> None:
    data = encode_reply({"jsonrpc": "2.0", "id": rid, "result": result})
    assert isinstance(orjson.loads(data), dict)


# -- `_meta` validation ----------------------------------------------------------------------

@FAST
@given(messages())
def test_prepare_returns_or_raises_a_protocol_error(message: Any) -> None:
    try:
        if classify(message) != "request":
            return
    except ProtocolError:
        return
    try:
        prepared = SERVER.prepare(message)
    except ProtocolError as exc:
        assert isinstance(exc.code, int)
        return
    assert prepared.id == message["id"]


# -- headers ---------------------------------------------------------------------------------

header_names = st.sampled_from([b"content-type", b"accept", b"mcp-protocol-version", b"mcp-method",
                                b"mcp-name", b"mcp-session-id", b"mcp-param-limit", b"host"]) | st.binary(max_size=12)
header_lists = st.lists(st.tuples(header_names, st.binary(max_size=40)), max_size=12)


@FAST
@given(header_lists, methods, json_values)
def test_header_checks_raise_only_header_mismatch(raw: list[tuple[bytes, bytes]], method: str, limit: Any) -> None:
    h = RequestHeaders(raw)
    params = {"name": "limited", "arguments": {"limit": limit}, "uri": "docs://a"}
    with contextlib.suppress(HeaderMismatch):
        check_standard(h, method, params, V)
    with contextlib.suppress(HeaderMismatch):
        ParamRules(SERVER.tool_header_rules).check(h, params)


@FAST
@given(st.binary(max_size=80) | st.lists(st.sampled_from(
    ["application/json", "text/event-stream", "*/*", "text/*", "application/*", ";q=0", ";q=0.5", ";Q=0.0",
     ";q=x", ", ", ";", "="]), max_size=8).map(lambda parts: "".join(parts).encode()))
def test_accept_parsing_never_raises(value: bytes) -> None:
    kinds = accepted(value)
    both = accepts_json_and_sse(value)
    assert isinstance(kinds, frozenset) and isinstance(both, bool)
    # Whatever else is listed, refusing JSON by name with q=0 refuses the request.
    assert not accepts_json_and_sse(b"application/json;q=0, " + value)


LOOP = asyncio.new_event_loop()  # futures only; never run


# -- the stdio line reader -------------------------------------------------------------------

@FAST
@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=8),
       st.lists(st.integers(1, 30), min_size=1, max_size=10), st.integers(4, 32), st.booleans())
def test_line_splitter_gives_every_line_once(lines: list[bytes], cuts: list[int], max_line: int,
                                             final_newline: bool) -> None:
    data = b"".join(line + b"\n" for line in lines)
    if lines and not final_newline:
        data = data[:-1]
    got: list[bytes | None] = []
    closed: asyncio.Future[None] = LOOP.create_future()
    splitter = LineSplitter(got.append, closed, max_line)
    pos, i = 0, 0
    while pos < len(data):
        step = cuts[i % len(cuts)]
        splitter.data_received(data[pos:pos + step])
        pos, i = pos + step, i + 1
    splitter.eof_received()
    assert closed.done()
    expected: list[bytes | None] = []
    for n, line in enumerate(lines):
        last = n == len(lines) - 1
        if last and not final_newline:
            if line.strip():
                expected.append(None if len(line) > max_line else line)
            continue
        expected.append(None if len(line) > max_line else line + b"\n")
    # A too-long last line without its newline is reported once, as None.
    assert got == expected


# -- the ASGI endpoint -----------------------------------------------------------------------

APP = secure_app(build_server(), keepalive=0)
SPEC_STATUSES = {200, 202, 400, 403, 404, 405, 406, 408, 413, 415, 431, 500}


async def _call(method: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    scope = {"type": "http", "method": method.decode("latin-1"), "path": "/mcp", "headers": headers,
             "query_string": b"", "http_version": "1.1", "scheme": "http"}
    sent: list[dict[str, Any]] = []
    chunks = [body]

    async def receive() -> dict[str, Any]:
        if chunks:
            return {"type": "http.request", "body": chunks.pop(), "more_body": False}
        await asyncio.sleep(3600)  # a disconnect watch waits here; the request ends first
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(APP(scope, receive, send), 10)
    start = next(s for s in sent if s["type"] == "http.response.start")
    payload = b"".join(s.get("body", b"") for s in sent if s["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), payload


GOOD_HEADERS = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                (b"accept", b"application/json, text/event-stream"), (b"mcp-protocol-version", V.encode())]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages(), st.lists(st.tuples(header_names, st.binary(max_size=30)), max_size=4), st.booleans(),
       st.sampled_from([b"POST", b"POST", b"POST", b"GET", b"DELETE", b"OPTIONS"]))
def test_endpoint_answers_every_request_with_json_rpc_or_a_spec_status(
    message: Any, extra: list[tuple[bytes, bytes]], mirror: bool, verb: bytes,
) -> None:
    headers = list(GOOD_HEADERS)
    if mirror and isinstance(message, dict) and isinstance(message.get("method"), str):
        headers.append((b"mcp-method", message["method"].encode("utf-8", "replace")))
        params = message.get("params")
        if isinstance(params, dict) and isinstance(params.get("name"), str):
            headers.append((b"mcp-name", params["name"].encode("utf-8", "replace")))
    headers += extra
    body = json.dumps(message).encode()
    status, got, payload = asyncio.run(_call(verb, headers, body))
    assert status in SPEC_STATUSES, (status, payload)
    if got.get(b"content-type") == b"application/json":
        answer = orjson.loads(payload)
        assert answer["jsonrpc"] == "2.0" and ("result" in answer or "error" in answer)
        rid = message.get("id") if isinstance(message, dict) else None
        if "error" in answer and type(rid) in (int, str) and answer.get("id") is not None:
            assert answer["id"] == rid
    elif got.get(b"content-type") == b"text/event-stream":
        assert payload.rstrip().endswith(b"}")  # the stream ends with the response
    else:
        assert status in (202, 403, 405, 406, 415) or (status == 404 and verb != b"POST"), (status, payload)
