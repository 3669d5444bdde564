"""Issue 12, part B: every input on the wire gets the spec's answer and nothing hangs.

JSON nesting (parse-time cap, unencodable results), the HTTP app's last resort, and the
stdio server facing malformed, deep and huge lines and an import-time `print()`.
Real processes: uvicorn on loopback and `python -m nimblemcp run` subprocesses. The
connection limits under `run_http` (slow heads, idle connections) are in
test_http1_blackbox, on both engines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any

import httpx
import orjson
import pydantic
import pytest
from _serving import serving

import nimblemcp as m
from nimblemcp.errors import InvalidRequest
from nimblemcp.jsonrpc import MAX_DEPTH, classify, decode, decode_request, encode_reply
from nimblemcp.transports.auth.bearer import AccessToken, StaticTokens
from nimblemcp.transports.http._asgi import SUBJECT
from nimblemcp.transports.http._exchange import Exchange, _ping
from nimblemcp.transports.http.app import McpHttpApp
from nimblemcp.transports.http.security import HttpSecurity, secure_app

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
ACCEPT = "application/json, text/event-stream"
HANG = 30.0


def dumps(value: Any) -> bytes:
    """JSON that orjson would refuse to write (deeper than 254 levels)."""
    return json.dumps(value).encode()


def nested(depth: int) -> dict[str, Any]:
    """A JSON object `depth` levels deep (itself included)."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def build_server() -> m.Server:
    server = m.Server("hardening", "0.1")

    @server.tool()
    async def ask(ctx: m.Context) -> str:
        answer = await ctx.elicit("q", "Name?", schema={"type": "object", "properties": {"a": {"type": "string"}}})
        return str(answer)[:20]

    @server.tool()
    async def echo(message: str) -> str:
        return message

    @server.tool()
    async def deep_result(levels: int) -> dict[str, Any]:
        return nested(levels)

    @server.tool()
    async def steps(ctx: m.Context) -> str:
        await ctx.report_progress(1, 2)
        return "stepped"

    return server


def call(name: str, rid: int | str = 1, **arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": META}}


def headers_for(body: dict[str, Any]) -> dict[str, str]:
    return {"accept": ACCEPT, "content-type": "application/json", "mcp-protocol-version": V,
            "mcp-method": body["method"], "mcp-name": body["params"]["name"]}


# -- the codec -----------------------------------------------------------------------------

def _request_with(value: Any) -> bytes:
    return dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": value}})


def test_depth_cap_is_exact() -> None:
    # The message and its params are two levels: the value may add MAX_DEPTH - 2.
    assert classify(decode_request(_request_with(nested(MAX_DEPTH - 2)))) == "request"
    with pytest.raises(InvalidRequest, match="nested deeper"):
        classify(decode_request(_request_with(nested(MAX_DEPTH - 1))))
    arrays = [[]]
    for _ in range(MAX_DEPTH):
        arrays = [arrays]
    with pytest.raises(InvalidRequest):
        classify(decode_request(_request_with(arrays)))
    # Many brackets side by side are not depth.
    wide = _request_with([[{}] for _ in range(5 * MAX_DEPTH)])
    assert classify(decode_request(wide)) == "request"
    # `decode` (what clients use) has no cap: a deep answer from a server is still read.
    assert decode(dumps(nested(3 * MAX_DEPTH)))


def test_decode_request_keeps_the_id_of_a_too_deep_request() -> None:
    message = decode_request(dumps({**call("echo", rid="r7"), "x": nested(300)}))
    with pytest.raises(InvalidRequest, match="nested deeper") as caught:
        classify(message)
    assert caught.value.code == -32600
    assert message["id"] == "r7"


def test_encode_reply_answers_an_unencodable_response() -> None:
    data = orjson.loads(encode_reply({"jsonrpc": "2.0", "id": 3, "result": nested(300)}))
    assert data["id"] == 3 and data["error"]["code"] == -32603
    with pytest.raises(TypeError):  # a notification is the caller's problem
        encode_reply({"jsonrpc": "2.0", "method": "x", "params": nested(300)})


# -- HTTP over uvicorn ---------------------------------------------------------------------

async def test_http_deep_input_responses_get_a_json_rpc_error() -> None:
    """300-deep `inputResponses` used to reach the handler and break the encode: a
    plain-text 500. Now -32600 for the request's id, and the server keeps serving."""
    app = secure_app(build_server())
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=HANG) as c:
        for key in ("q", "other"):
            body = call("ask", rid=f"deep-{key}")
            body["params"]["inputResponses"] = {key: {"action": "accept", "content": nested(300)}}
            r = await c.post("/mcp", content=dumps(body), headers=headers_for(body))
            assert r.status_code == 400 and r.headers["content-type"] == "application/json"
            assert r.json()["id"] == f"deep-{key}" and r.json()["error"]["code"] == -32600
        body = call("echo", message="alive")
        r = await c.post("/mcp", content=dumps(body), headers=headers_for(body))
        assert r.json()["result"]["content"][0]["text"] == "alive"


async def test_http_unencodable_result_is_an_internal_error_not_text_500() -> None:
    app = secure_app(build_server())
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=HANG) as c:
        body = call("deep_result", rid=9, levels=300)
        r = await c.post("/mcp", content=dumps(body), headers=headers_for(body))
        assert r.headers["content-type"] == "application/json"
        assert r.json()["id"] == 9 and r.json()["error"]["code"] == -32603


class _Broken:
    """A core whose `prepare` fails unexpectedly (a bug): the app's last resort answers."""

    def __init__(self, server: m.Server) -> None:
        self._server = server

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)

    def prepare(self, message: Any) -> Any:
        raise RuntimeError("boom")


async def test_http_last_resort_answers_json_rpc_with_the_id() -> None:
    app = McpHttpApp(_Broken(build_server()))  # type: ignore[arg-type]
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=HANG) as c:
        body = call("echo", rid="x1", message="hi")
        r = await c.post("/mcp", content=dumps(body), headers=headers_for(body))
        assert r.status_code == 500 and r.headers["content-type"] == "application/json"
        assert r.json() == {"jsonrpc": "2.0", "id": "x1", "error": {"code": -32603, "message": "Internal error"}}


# -- stdio ---------------------------------------------------------------------------------

STDIO_SERVER = textwrap.dedent('''
    import nimblemcp as m
    print("IMPORT-TIME NOISE")
    server = m.Server("stdio-hardening", "1.0")

    @server.tool()
    async def echo(message: str) -> str:
        return message

    @server.tool()
    async def deep_result(levels: int) -> dict:
        value = {}
        for _ in range(levels - 1):
            value = {"a": value}
        return value
''')


class Stdio:
    def __init__(self, tmp: Path) -> None:
        (tmp / "server.py").write_text(STDIO_SERVER)
        self.p = subprocess.Popen(
            [sys.executable, "-m", "nimblemcp", "run", "server.py"], cwd=tmp,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def send(self, data: bytes) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(data + b"\n")
        self.p.stdin.flush()

    def recv(self) -> dict[str, Any]:
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        assert line, "the server closed stdout"
        message: dict[str, Any] = json.loads(line)  # stdout carries protocol messages only
        return message

    def close(self) -> bytes:
        assert self.p.stdin is not None and self.p.stderr is not None
        self.p.stdin.close()
        self.p.wait(HANG)
        return self.p.stderr.read()


@pytest.fixture
def stdio(tmp_path: Path) -> Any:
    proc = Stdio(tmp_path)
    yield proc
    if proc.p.poll() is None:
        proc.p.kill()
        proc.p.wait()
    for pipe in (proc.p.stdin, proc.p.stdout, proc.p.stderr):
        if pipe is not None:
            pipe.close()


def test_stdio_import_time_print_goes_to_stderr(stdio: Stdio) -> None:
    stdio.send(dumps(call("echo", message="first")))
    assert stdio.recv()["result"]["content"][0]["text"] == "first"
    assert b"IMPORT-TIME NOISE" in stdio.close()


def test_stdio_bad_lines_each_get_an_error_and_serving_goes_on(stdio: Stdio) -> None:
    stdio.send(b"{not json")
    assert stdio.recv()["error"]["code"] == -32700
    stdio.send(dumps({**call("echo", rid=41, message="x"), "deep": nested(300)}))
    answer = stdio.recv()
    assert answer["id"] == 41 and answer["error"]["code"] == -32600
    stdio.send(b"[" * 2000 + b"]" * 2000)  # deeper than orjson reads at all
    assert stdio.recv()["error"]["code"] in (-32700, -32600)
    stdio.send(b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"x": "' + b"y" * (17 << 20) + b'"}}')
    assert stdio.recv()["error"]["code"] == -32700  # over the 16 MiB line limit
    stdio.send(dumps(call("deep_result", rid=42, levels=300)))
    answer = stdio.recv()
    assert answer["id"] == 42 and answer["error"]["code"] == -32603
    stdio.send(dumps(call("echo", rid=43, message="still here")))
    answer = stdio.recv()
    assert answer["id"] == 43 and answer["result"]["content"][0]["text"] == "still here"
    stdio.close()


# -- slow bodies ---------------------------------------------------------------------------

async def _raw_exchange(base: str, head: bytes, drip: bytes, every: float) -> tuple[bytes, float]:
    """Send `head`, then `drip` one byte at a time; return what came back and when."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    loop = asyncio.get_running_loop()
    began = loop.time()
    writer.write(head)
    await writer.drain()

    async def dripping() -> None:
        for byte in drip:
            await asyncio.sleep(every)
            writer.write(bytes([byte]))
            await writer.drain()

    dripper = asyncio.create_task(dripping())
    try:
        answer = await asyncio.wait_for(reader.read(65536), HANG)
    finally:
        dripper.cancel()
        with contextlib.suppress(BaseException):
            await dripper
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return answer, loop.time() - began


async def test_dripped_body_is_timed_out_with_408() -> None:
    app = secure_app(build_server(), security=HttpSecurity(body_timeout=1.0))
    body = dumps(call("echo", message="x" * 200))
    head = (b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"accept: " + ACCEPT.encode() + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n")
    async with serving(app) as base:
        answer, took = await _raw_exchange(base, head + body[:5], body[5:], every=0.2)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"connection: close" in answer.lower()
        assert 1.0 <= took < 4.0
        # A body that never starts is timed out the same way.
        answer, took = await _raw_exchange(base, head, b"", every=0.0)
        assert answer.startswith(b"HTTP/1.1 408") and took < 4.0
        async with httpx.AsyncClient(base_url=base, timeout=HANG) as c:  # still serving
            good = call("echo", message="alive")
            r = await c.post("/mcp", content=dumps(good), headers=headers_for(good))
            assert r.json()["result"]["content"][0]["text"] == "alive"


# -- process-wide side effects -------------------------------------------------------------

async def test_cors_headers_do_not_grow_across_requests() -> None:
    """Every response carries exactly one `Vary` and one allow-origin header, however
    many requests the process served: nothing shared is mutated."""
    app = secure_app(build_server(), security=HttpSecurity(cors=True))
    origin = "http://localhost:3000"
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=HANG) as c:
        for i in range(60):
            body = call("echo", rid=i, message="x") if i % 3 else {"jsonrpc": "2.0", "id": i, "method": "nope"}
            h = {"accept": ACCEPT, "content-type": "application/json", "origin": origin}
            if i % 3:
                h.update(headers_for(body))
            r = await c.post("/mcp", content=dumps(body), headers=h)
            assert r.headers.get_list("vary") == ["origin"], (i, r.headers)
            assert r.headers.get_list("access-control-allow-origin") == [origin]
            sse = call("steps", rid=f"s{i}")
            sse["params"]["_meta"] = {**META, "progressToken": i}
            r = await c.post("/mcp", content=dumps(sse), headers={**headers_for(sse), "origin": origin})
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers.get_list("vary") == ["origin"]
            r = await c.get("/mcp", headers={"origin": origin, "accept": "text/event-stream"})
            assert r.headers.get_list("vary") == ["origin"]


class StarletteLikeAuth:
    """What Starlette's AuthenticationMiddleware does to a scope: `user` becomes a
    fresh user object on every request, `auth` a credentials object."""

    class User:
        is_authenticated = False

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope["user"] = self.User()
            scope["auth"] = object()
        await self.app(scope, receive, send)


@pytest.mark.parametrize("bearer", [False, True])
async def test_subject_is_namespaced_and_legacy_sessions_work_behind_starlette_auth(bearer: bool) -> None:
    tokens = StaticTokens({"t1": AccessToken(subject="alice", audience=("http://127.0.0.1/mcp",))})
    inner = secure_app(build_server(), auth={
        "verifier": tokens, "resource": "http://127.0.0.1/mcp", "authorization_servers": ["https://as.example"],
    } if bearer else None)
    seen: list[Any] = []

    async def peek(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append(scope)
        await inner(scope, receive, send)

    app = StarletteLikeAuth(peek)
    auth = {"authorization": "Bearer t1", "accept": ACCEPT, "content-type": "application/json"}
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=HANG) as c:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        r = await c.post("/mcp", content=dumps(init), headers=auth)
        assert r.status_code == 200, r.text
        sid = r.headers["mcp-session-id"]
        legacy = {**auth, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        r = await c.post("/mcp", content=dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                         headers=legacy)
        assert r.status_code == 202
        for rid in (2, 3):
            r = await c.post("/mcp", content=dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                                    "params": {"name": "echo", "arguments": {"message": "hi"}}}),
                             headers=legacy)
            assert r.status_code == 200, r.text
            text = r.text if r.headers["content-type"].startswith("text/event-stream") else r.json()
            assert "hi" in str(text)
    assert all(isinstance(s["user"], StarletteLikeAuth.User) for s in seen)  # left alone
    assert all(SUBJECT not in s for s in seen)  # ours is set further in, on our own copy


# -- headers -------------------------------------------------------------------------------

def header_server() -> m.Server:
    server = build_server()

    @server.tool()
    def limited(limit: Annotated[int, pydantic.Field(json_schema_extra={"x-mcp-header": "Limit"})]) -> int:
        return limit

    return server


async def test_legacy_version_header_on_a_modern_body_is_a_header_mismatch() -> None:
    app = secure_app(build_server())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1") as c:
        body = call("echo", rid=4, message="x")
        r = await c.post("/mcp", content=dumps(body),
                         headers={**headers_for(body), "mcp-protocol-version": "2025-11-25"})
        assert r.status_code == 400
        assert r.json()["id"] == 4 and r.json()["error"]["code"] == -32020


@pytest.mark.parametrize("sent", ["4_2", "\u0664\u0662", "42 x", "inf", "0x2a", "+42"])
async def test_integer_param_headers_accept_ascii_digits_only(sent: str) -> None:
    app = secure_app(header_server())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1") as c:
        body = call("limited", limit=42)
        h = {**headers_for(body), "mcp-param-limit": sent}
        r = await c.post("/mcp", content=dumps(body), headers={k: v.encode() for k, v in h.items()})
        assert r.status_code == 400 and r.json()["error"]["code"] == -32020, sent
        for good in ("42", "42.0"):
            r = await c.post("/mcp", content=dumps(body), headers={**headers_for(body), "mcp-param-limit": good})
            assert r.status_code == 200 and r.json()["result"]["structuredContent"] == {"result": 42}


@pytest.mark.parametrize("accept", [
    "application/json;q=0, text/event-stream;q=0",
    "application/json;q=0, text/event-stream",
    "application/json, text/event-stream;Q=0.0",
    "application/json;q=0, */*",
])
async def test_accept_refusing_a_type_with_q0_is_406(accept: str) -> None:
    app = secure_app(build_server())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1") as c:
        body = call("echo", message="x")
        r = await c.post("/mcp", content=dumps(body), headers={**headers_for(body), "accept": accept})
        assert r.status_code == 406
        r = await c.post("/mcp", content=dumps(body), headers={**headers_for(body), "accept": "*/*;q=0.1"})
        assert r.status_code == 200


async def test_two_host_headers_are_a_400() -> None:
    app = secure_app(build_server())
    body = dumps(call("echo", message="x"))
    head = (b"POST /mcp HTTP/1.1\r\nhost: evil.example\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"accept: " + ACCEPT.encode() + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n")
    async with serving(app) as base:
        answer, _ = await _raw_exchange(base, head + body, b"", every=0.0)
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]


async def test_a_cancelled_sse_pump_leaves_no_timer_behind() -> None:
    """Found by benchmarks/soak.py: every listen stream that ended left its keep-alive
    timer (and the future it holds) in the loop for up to an hour (keepalive=0)."""
    loop = asyncio.get_running_loop()
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        await asyncio.sleep(3600)

    ex = Exchange(loop, receive, send, keepalive=0)
    ex.frames.append(b": hi\n\n")
    ex.pump = loop.create_task(ex._pump())
    while ex.waiter is None:
        await asyncio.sleep(0)
    ex.pump.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await ex.pump
    pending = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
    assert not [h for h in pending if getattr(h, "_callback", None) is _ping]
