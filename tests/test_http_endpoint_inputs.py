"""What the HTTP endpoint reads of a request, and where it reads it from:

- nimblemcp's engine names its event loop in its `scope["extensions"]` entry
  (`_asgi.ENGINE`, issue 31); the endpoint takes it from there and looks it up
  (`nimblemcp._loop`) only where no server named it;
- `Server.tool_header_rules` follows every change of the tools (add, remove, a mount's
  sync), () for an unknown name, the same tuple every call;
- the guard remembers allowed Host and Origin values (a refused value is refused every
  time); a body message without `more_body`, a request without Content-Type or a version
  header get the answers ASGI and the spec say.

The endpoint is driven in-process where no server is needed, and served on a real
`Engine` on loopback where the engine's part is tested.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import pydantic
import pytest

import nimblemcp as m
from nimblemcp import HttpSecurity
from nimblemcp.serving import asgi_app
from nimblemcp.transports.h1 import engine as _engine
from nimblemcp.transports.h1.engine import Connection
from nimblemcp.transports.h1.engine_server import Engine, EngineConfig
from nimblemcp.transports.http import _asgi
from nimblemcp.transports.http.security import SecurityMiddleware

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}


def build_server() -> m.Server:
    server = m.Server("round7", "1")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    return server


def call(name: str, arguments: dict[str, Any], rid: int = 1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"_meta": META, "name": name, "arguments": arguments}}).encode()


def headers_for(body: bytes, name: str = "echo", **changes: bytes | None) -> list[tuple[bytes, bytes]]:
    base: dict[str, bytes | None] = {
        "host": b"127.0.0.1:8000", "content-type": b"application/json",
        "accept": b"application/json, text/event-stream", "mcp-protocol-version": V.encode(),
        "mcp-method": b"tools/call", "mcp-name": name.encode(), "content-length": str(len(body)).encode(),
    }
    base.update({k.replace("_", "-"): v for k, v in changes.items()})
    return [(k.encode(), v) for k, v in base.items() if v is not None]


async def drive(app: Any, headers: list[tuple[bytes, bytes]], messages: list[dict[str, Any]],
                method: str = "POST") -> tuple[int, bytes]:
    """One request through `app` in-process (no server: no scope key of the engine's)."""
    sent: list[Any] = []
    pending = list(reversed(messages))

    async def receive() -> Any:
        if pending:
            return pending.pop()
        await asyncio.Event().wait()

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": "/mcp", "root_path": "", "headers": headers,
             "query_string": b"", "http_version": "1.1", "scheme": "http"}
    await app(scope, receive, send)
    return sent[0]["status"], b"".join(x.get("body", b"") for x in sent[1:])


def result_text(body: bytes) -> Any:
    return json.loads(body)["result"]["content"][0]["text"]


# -- the engine names its loop ---------------------------------------------------------------


def test_the_engine_and_the_app_name_the_same_extension() -> None:
    assert _engine.EXTENSION == _asgi.ENGINE == "nimblemcp.engine"


async def test_the_engine_hands_the_loop_the_app_runs_on() -> None:
    seen: list[Any] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append((scope["extensions"][_asgi.ENGINE].loop, asyncio.get_running_loop()))
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    loop = asyncio.get_running_loop()
    engine = Engine(app, EngineConfig(port=0), loop)
    engine.use_plain_tasks()
    server = await loop.create_server(lambda: Connection(engine), "127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        for _ in range(2):  # two requests on one connection: each scope has it
            writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            await asyncio.wait_for(reader.readuntil(b"ok"), 10)
        writer.close()
    finally:
        for conn in list(engine.connections):
            conn.transport.close()
        server.close()
    assert len(seen) == 2
    assert all(named is running for named, running in seen)


async def test_the_guarded_endpoint_serves_on_the_engine_with_the_named_loop() -> None:
    app = asgi_app(build_server())
    loop = asyncio.get_running_loop()
    engine = Engine(app, EngineConfig(port=0), loop)
    engine.use_plain_tasks()
    server = await loop.create_server(lambda: Connection(engine), "127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        body = call("echo", {"text": "on the engine"})
        head = b"".join(b"%s: %s\r\n" % pair for pair in headers_for(body))
        writer.write(b"POST /mcp HTTP/1.1\r\n" + head + b"\r\n" + body)
        status_line = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        length = int(status_line.split(b"content-length: ")[1].split(b"\r\n")[0])
        answer = await asyncio.wait_for(reader.readexactly(length), 10)
        writer.close()
    finally:
        for conn in list(engine.connections):
            conn.transport.close()
        server.close()
    assert status_line.startswith(b"HTTP/1.1 200")
    assert result_text(answer) == "on the engine"


async def test_without_a_named_loop_the_endpoint_looks_it_up() -> None:
    body = call("echo", {"text": "in-process"})
    status, out = await drive(asgi_app(build_server()), headers_for(body),
                              [{"type": "http.request", "body": body, "more_body": False}])
    assert status == 200 and result_text(out) == "in-process"


# -- tool_header_rules follows the tools -----------------------------------------------------------


def test_tool_header_rules_follow_add_remove_and_mount() -> None:
    server = build_server()
    assert server.tool_header_rules("echo") == ()
    assert server.tool_header_rules("nope") == ()

    @server.tool()
    def regional(region: Annotated[str, pydantic.Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        return region

    rules = server.tool_header_rules("regional")
    assert rules and rules is server.tools["regional"].header_rules  # the same tuple every call
    assert server.tool_header_rules("regional") is rules
    server.remove_tool("regional")
    assert server.tool_header_rules("regional") == ()

    child = m.Server("child", "1")

    @child.tool()
    def zoned(zone: Annotated[str, pydantic.Field(json_schema_extra={"x-mcp-header": "Zone"})]) -> str:
        return zone

    server.mount(child, "kid")
    assert server.tool_header_rules("kid_zoned") == server.tools["kid_zoned"].header_rules != ()

    @child.tool()
    def later(zone: Annotated[str, pydantic.Field(json_schema_extra={"x-mcp-header": "Zone"})]) -> str:
        return zone

    assert server.tool_header_rules("kid_later") != ()  # a child's later tool, synced
    child.remove_tool("later")
    assert server.tool_header_rules("kid_later") == ()


async def test_a_tool_with_header_rules_added_after_the_app_is_still_checked() -> None:
    server = build_server()
    app = asgi_app(server)

    @server.tool()
    def regional(region: Annotated[str, pydantic.Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        return region

    body = call("regional", {"region": "eu"})
    message = [{"type": "http.request", "body": body, "more_body": False}]
    status, out = await drive(app, headers_for(body, "regional", mcp_param_region=b"us"), message)
    assert status == 400 and json.loads(out)["error"]["code"] == -32020
    status, out = await drive(app, headers_for(body, "regional"), message)
    assert status == 400 and "Mcp-Param-Region" in json.loads(out)["error"]["message"]
    status, out = await drive(app, headers_for(body, "regional", mcp_param_region=b"eu"), message)
    assert status == 200 and result_text(out) == "eu"


# -- headers and the body message read by subscript ----------------------------------------------


async def test_a_body_message_without_more_body_or_body_is_read_as_asgi_says() -> None:
    app = asgi_app(build_server())
    body = call("echo", {"text": "no more_body key"})
    status, out = await drive(app, headers_for(body), [{"type": "http.request", "body": body}])
    assert status == 200 and result_text(out) == "no more_body key"
    # the body in two messages, the last without `more_body`; an empty one without `body`
    status, out = await drive(app, headers_for(body), [
        {"type": "http.request", "body": body[:10], "more_body": True},
        {"type": "http.request", "more_body": True},
        {"type": "http.request", "body": body[10:]},
    ])
    assert status == 200 and result_text(out) == "no more_body key"


@pytest.mark.parametrize(("changes", "status"), [
    ({"content_type": None}, 415),
    ({"content_type": b"text/plain"}, 415),
    ({"content_type": b"Application/JSON; charset=utf-8"}, 200),
    ({"accept": None}, 406),
    ({"mcp_protocol_version": None}, 400),  # a POST with no version header: the headers vs body check
    ({"mcp_name": b"other"}, 400),
])
async def test_missing_or_odd_headers_get_the_answers_they_got(changes: dict[str, bytes | None], status: int) -> None:
    app = asgi_app(build_server(), legacy_sessions=False)
    body = call("echo", {"text": "x"})
    got, _ = await drive(app, headers_for(body, **changes), [{"type": "http.request", "body": body}])
    assert got == status


async def test_a_request_without_length_passes_the_guard_and_one_without_host_is_400() -> None:
    app = asgi_app(build_server())
    body = call("echo", {"text": "chunked"})
    status, out = await drive(app, headers_for(body, content_length=None), [{"type": "http.request", "body": body}])
    assert status == 200 and result_text(out) == "chunked"
    # HTTP/1.1 without Host: 400 (RFC 9112 §3.2; issue 31), with or without a length
    for length in (None, str(len(body)).encode()):
        status, out = await drive(app, headers_for(body, host=None, content_length=length),
                                  [{"type": "http.request", "body": body}])
        assert status == 400 and b"Host" in out
    # past the body limit without a Content-Length: counted as it arrives, 413
    small = asgi_app(build_server(), security=HttpSecurity(max_body=20))
    status, _ = await drive(small, headers_for(body, content_length=None), [{"type": "http.request", "body": body}])
    assert status == 413
    status, _ = await drive(small, headers_for(body), [{"type": "http.request", "body": body}])
    assert status == 413
    status, _ = await drive(app, headers_for(body, content_length=b"-1"), [{"type": "http.request", "body": body}])
    assert status == 400


async def test_allowed_values_are_remembered_and_refused_ones_refused_every_time() -> None:
    app = asgi_app(build_server())
    assert isinstance(app, SecurityMiddleware)
    body = call("echo", {"text": "x"})
    message = [{"type": "http.request", "body": body}]
    for _ in range(2):
        assert (await drive(app, headers_for(body, host=b"evil.example"), message))[0] == 403
        assert (await drive(app, headers_for(body, origin=b"http://evil.example"), message))[0] == 403
        assert (await drive(app, headers_for(body, origin=b"http://localhost:3000"), message))[0] == 200
        assert (await drive(app, headers_for(body, host=b"localhost:8000"), message))[0] == 200
    assert app.host_ok(b"localhost:8000") is True and app.origin_ok(b"http://localhost:3000") is True
    assert app.host_ok(b"evil.example") is False and app.origin_ok(b"http://evil.example") is False
